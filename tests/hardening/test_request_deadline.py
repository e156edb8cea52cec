"""A deadline for each request's headers and body (`serve --request-timeout`): a client
that sends its headers and then stalls its body is dropped, and whatever it held is freed.

Before it, two TLS connections that sent `Content-Length: 2000000` and one byte held both
large-review turns for ever (every review over 64 KiB waited: the API server answered
"context deadline exceeded" for a valid 140 KB Pod), and 256 of them made every request,
/healthz included, 503 for as long as they were held. Real TLS sockets, a real server.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from server_helpers import Server, pod, review

from webhook.server.app import LARGE_AT_ONCE, MAX_CONNECTIONS

TIMEOUT = 2.0  # the server's --request-timeout here
SLACK = 6.0  # for a loaded machine


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, certs_dir: Path) -> Iterator[Server]:
    running = Server(tmp_path_factory.mktemp("deadline"), certs_dir,
                     "--request-timeout", str(TIMEOUT))
    yield running
    assert running.stop() == 0


def stalled(server: Server, size: int = 2_000_000, path: str = "/validate") -> ssl.SSLSocket:
    """A connection that sent its headers and the first byte of a `size`-byte body."""
    tls = server.tls(timeout=30)
    tls.sendall(f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json"
                f"\r\nContent-Length: {size}\r\n\r\n{{".encode())
    return tls


def closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except (ConnectionError, ssl.SSLError, OSError):
        pass
    return True


def large_pod_review() -> bytes:
    """A valid Pod of about 140 KB: judged in the large-review turns."""
    obj = pod("big")
    obj["metadata"]["annotations"] = {"example.com/notes": "x" * 140_000}
    return json.dumps(review(obj)).encode()


def test_a_stalled_body_is_dropped_at_the_deadline(server: Server) -> None:
    started = time.monotonic()
    with stalled(server) as tls:
        assert closed_within(tls, TIMEOUT + SLACK)
    assert time.monotonic() - started >= TIMEOUT * 0.75  # the deadline, not something else


def test_stalled_bodies_do_not_keep_a_valid_large_review_waiting(server: Server) -> None:
    holders = [stalled(server) for _ in range(LARGE_AT_ONCE)]
    try:
        time.sleep(0.5)  # both turns taken
        with server.client() as client:
            client.timeout = httpx.Timeout(TIMEOUT + SLACK)
            started = time.monotonic()
            answer = client.post("/validate", content=large_pod_review(),
                                 headers={"content-type": "application/json"})
            waited = time.monotonic() - started
        assert answer.status_code == 200, answer.text[:200]
        assert answer.json()["response"]["allowed"] is True
        assert waited < TIMEOUT + SLACK
    finally:
        for tls in holders:
            tls.close()


def test_a_connection_flood_of_stalled_bodies_lets_go_within_the_deadline(
        server: Server) -> None:
    socks: list[ssl.SSLSocket] = []
    lock = threading.Lock()

    def open_some(count: int) -> None:
        for _ in range(count):
            try:
                tls = stalled(server, size=1000)
            except (OSError, ssl.SSLError):
                continue  # past the server's bounds: refused, as it should be
            with lock:
                socks.append(tls)

    threads = [threading.Thread(target=open_some, args=(MAX_CONNECTIONS // 8,))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    opened = time.monotonic()
    try:
        assert len(socks) > MAX_CONNECTIONS // 2
        deadline = opened + TIMEOUT + SLACK
        served = False
        while time.monotonic() < deadline and not served:
            try:
                with server.client() as client:
                    served = client.get("/healthz").status_code == 200
            except httpx.HTTPError:
                pass
            if not served:
                time.sleep(0.1)
        assert served, "/healthz not answered within the deadline of the stalled requests"
        still_open = [tls for tls in socks if not closed_within(tls, 0.5)]
        assert not still_open, f"{len(still_open)} stalled connections still open"
    finally:
        for tls in socks:
            tls.close()


@pytest.mark.parametrize("value", ["0", "-1", "31", "nan", "soon"])
def test_a_request_timeout_out_of_range_is_refused_clearly(value: str) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "webhook.cli", "serve", "--request-timeout",
                           value], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--request-timeout" in done.stderr and "Traceback" not in done.stderr
