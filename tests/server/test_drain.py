"""SIGTERM drains before the server stops: a client's pooled keep-alive connection gets a
full answer to its next request, marked `Connection: close`, instead of EOF (what the API
server got when the listener and every idle connection closed at SIGTERM).

Both HTTP parsers uvicorn may run (httptools, installed with uvicorn[standard]; h11 where it
is not) and both ends of the declared uvicorn range (tests/server/test_uvicorn_range.py).
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from server_helpers import REPO, Server, pod, review

from webhook.testing import wait_until

MIN_DIR = REPO / ".tools" / "uvicorn-min"
DRAIN = 2.0


def ask(tls: ssl.SSLSocket, body: dict[str, object]) -> tuple[str, dict[str, object]]:
    """POST `body` to /validate on the open connection `tls`, keep-alive as the API server
    asks; the answer's head (lower case) and its JSON body, read to its Content-Length."""
    data = json.dumps(body).encode()
    tls.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\n"
                b"Content-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(data) + data)
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = tls.recv(65536)
        assert chunk, f"the connection closed before an answer: {answer!r}"
        answer += chunk
    head, _, payload = answer.partition(b"\r\n\r\n")
    text = head.decode().lower()
    length = next(int(line.split(":", 1)[1]) for line in text.splitlines()
                  if line.startswith("content-length:"))
    while len(payload) < length:
        chunk = tls.recv(65536)
        assert chunk, "the connection closed in the middle of an answer"
        payload += chunk
    return text, json.loads(payload)


def readyz_status(server: Server) -> int:
    """/readyz on a new connection; 0 when none is accepted."""
    try:
        with server.client() as client:
            return client.get("/readyz").status_code
    except (httpx.TransportError, OSError):
        return 0


def mapped(pid: int, name: str) -> bool:
    """Whether process `pid` has a file whose path holds `name` mapped (a C extension)."""
    return name in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.parametrize(("parser", "uvicorn_at", "workers"), [
    ("httptools", "newest", 1), ("h11", "newest", 1),
    ("httptools", "lowest", 1), ("h11", "lowest", 1), ("httptools", "newest", 2)])
def test_a_pooled_connection_gets_a_closing_answer_during_the_drain(
        parser: str, uvicorn_at: str, workers: int, tmp_path: Path, certs_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = [str(REPO)]
    if uvicorn_at == "lowest":
        if not (MIN_DIR / "uvicorn").is_dir():
            if os.environ.get("CI"):
                pytest.fail(f"{MIN_DIR} is missing: scripts/setup installs the lowest uvicorn")
            pytest.skip(f"run scripts/setup to install the lowest uvicorn into {MIN_DIR}")
        path.insert(0, str(MIN_DIR))
    if parser == "h11":  # uvicorn's "auto" takes h11 where httptools does not import
        hidden = tmp_path / "no-httptools" / "httptools"
        hidden.mkdir(parents=True)
        (hidden / "__init__.py").write_text('raise ImportError("hidden: serve with h11")\n')
        path.insert(0, str(hidden.parent))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path))
    server = Server(tmp_path, certs_dir, "--drain", str(DRAIN), workers=workers)
    try:
        if workers == 1:
            assert mapped(server.process.pid, "httptools") is (parser == "httptools")
        tls = server.tls()
        head, answer = ask(tls, review(pod()))
        assert head.startswith("http/1.1 200") and "connection: close" not in head
        server.signal(signal.SIGTERM)
        signalled = time.monotonic()
        # Draining: still accepting and answering, no longer ready.
        wait_until(lambda: readyz_status(server) == 503, timeout=DRAIN,
                   what="/readyz to answer 503", interval=0.05)
        if workers > 1:  # the other worker gets its SIGTERM from the parent just after
            time.sleep(0.5)
        body = review(pod())
        head, answer = ask(tls, body)  # the pooled connection, after SIGTERM
        assert head.startswith("http/1.1 200"), head
        assert "connection: close" in head.splitlines()
        response = answer["response"]
        assert isinstance(response, dict)
        assert response["uid"] == body["request"]["uid"] and response["allowed"] is True
        assert tls.recv(1) == b""  # closed after that answer: the client drops it
        tls.close()
        assert server.process.wait(DRAIN + 10) == 0
        assert time.monotonic() - signalled >= DRAIN - 0.2  # it drained, then stopped
    finally:
        server.stop()
    assert any(line.get("event") == "draining" for line in server.logs())


def test_drain_0_closes_pooled_connections_at_sigterm(tmp_path: Path, certs_dir: Path) -> None:
    server = Server(tmp_path, certs_dir, "--drain", "0")
    try:
        tls = server.tls()
        ask(tls, review(pod()))
        server.signal(signal.SIGTERM)
        assert tls.recv(1) == b""  # closed at once: no answer to come on it
        tls.close()
        assert server.process.wait(10) == 0
    finally:
        server.stop()
    assert not any(line.get("event") == "draining" for line in server.logs())


@pytest.mark.parametrize("value", ["-1", "61", "soon", "nan"])
def test_a_drain_out_of_range_is_refused(value: str) -> None:
    done = subprocess.run([sys.executable, "-m", "webhook.cli", "serve", "--drain", value],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2
    assert "--drain" in done.stderr and "Traceback" not in done.stderr
