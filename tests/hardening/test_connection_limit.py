"""A worker serves a bounded number of connections at once (--max-connections): the one past
it gets a 503 and is closed instead of holding memory, and is served once others leave."""

from __future__ import annotations

import contextlib
import json
import ssl
from pathlib import Path

from server_helpers import Server, pod, review

LIMIT = 4


def _request(sock: ssl.SSLSocket, path: str = "/healthz") -> bytes:
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(65536)
        if not chunk:
            break
        answer += chunk
    return answer


def test_connections_past_the_limit_get_503_and_are_closed(tmp_path: Path,
                                                           certs_dir: Path) -> None:
    server = Server(tmp_path, certs_dir, "--max-connections", str(LIMIT))
    try:
        with contextlib.ExitStack() as held:
            socks = [held.enter_context(server.tls(timeout=10)) for _ in range(LIMIT)]
            for sock in socks:  # each is open, kept alive, counted
                assert _request(sock).startswith(b"HTTP/1.1 200")
            with server.tls(timeout=10) as extra:
                answer = _request(extra)
                assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
                while extra.recv(65536):  # the rest of the 503, then the server closes
                    pass
        with server.client() as client:  # the held ones are gone: served again
            assert client.get("/healthz").status_code == 200
            body = json.dumps(review(pod())).encode()
            answer = client.post("/validate", content=body,
                                 headers={"content-type": "application/json"})
            assert answer.status_code == 200
    finally:
        assert server.stop() == 0


def test_max_connections_must_be_a_positive_count(tmp_path: Path, certs_dir: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "webhook.cli", "serve", "--max-connections",
                           "0", "--cert", str(certs_dir / "tls.crt"), "--key",
                           str(certs_dir / "tls.key")], capture_output=True, text=True,
                          check=False, timeout=60)
    assert done.returncode == 2 and "--max-connections: must be at least 1" in done.stderr
