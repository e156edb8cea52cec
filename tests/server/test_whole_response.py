"""A review's answer written whole (protocol.GuardedH11.send_whole) is the very answer uvicorn
and h11 write, and a connection goes on reading requests after it: kept alive, pipelined,
HTTP/1.0, `Connection: close`, and a bad request after good ones."""

from __future__ import annotations

import asyncio
import json
import re
import ssl
from typing import Any

import h11
import uvicorn
from server_helpers import Server, pod, review, with_probe
from uvicorn.server import ServerState

from webhook.server import protocol as protocol_module
from webhook.server.protocol import MAX_HEADER, GuardedH11


def request(path: str, body: dict[str, Any], *extra: bytes, version: bytes = b"1.1") -> bytes:
    data = json.dumps(body).encode()
    head = [b"POST %s HTTP/%s" % (path.encode(), version), b"Host: localhost",
            b"Content-Type: application/json", b"Content-Length: %d" % len(data), *extra]
    return b"\r\n".join(head) + b"\r\n\r\n" + data


class Answers:
    """Reads HTTP/1.1 answers off a TLS socket, one at a time, with their raw bytes."""

    def __init__(self, tls: ssl.SSLSocket) -> None:
        self.tls = tls
        self.buffer = b""

    def next(self) -> tuple[bytes, dict[bytes, bytes], bytes]:
        while b"\r\n\r\n" not in self.buffer:
            self.fill()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        headers = {name.lower(): value for name, value in
                   (line.split(b": ", 1) for line in head.split(b"\r\n")[1:])}
        length = int(headers[b"content-length"])
        while len(self.buffer) < length:
            self.fill()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return head + b"\r\n\r\n" + body, headers, body

    def fill(self) -> None:
        chunk = self.tls.recv(65536)
        if not chunk:
            raise ConnectionError("closed by the server")
        self.buffer += chunk

    def closed(self) -> bool:
        return not self.buffer and self.tls.recv(65536) == b""


def without_date(raw: bytes) -> bytes:
    return re.sub(rb"\r\ndate: [^\r]*", b"\r\ndate: -", raw)


def test_answer_is_byte_for_byte_what_h11_writes(server: Server) -> None:
    """A `Connection: keep-alive` header sends the same review the usual way, through
    uvicorn's and h11's response path; both answers are the same bytes (but for the date)."""
    for path, obj in (("/validate", pod()), ("/mutate", with_probe(pod()))):
        body = review(obj)
        with server.tls() as tls:
            answers = Answers(tls)
            tls.sendall(request(path, body))
            whole, headers, content = answers.next()
            tls.sendall(request(path, body, b"Connection: keep-alive"))
            usual, _, _ = answers.next()
        assert without_date(whole) == without_date(usual)
        assert whole.startswith(b"HTTP/1.1 200 OK\r\ndate: ")
        assert headers[b"content-type"] == b"application/json"
        assert json.loads(content)["response"]["uid"] == body["request"]["uid"]


def test_kept_alive_connection_answers_request_after_request(server: Server) -> None:
    with server.tls() as tls:
        answers = Answers(tls)
        for number in range(40):
            body = review(pod(f"web-{number}"))
            tls.sendall(request("/validate" if number % 2 else "/mutate", body))
            _, _, content = answers.next()
            assert json.loads(content)["response"]["uid"] == body["request"]["uid"]
        # h11 still reads (and refuses) what follows on the same connection
        tls.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: text/plain"
                    b"\r\nContent-Length: 2\r\n\r\nhi")
        raw, _, content = answers.next()
        assert raw.startswith(b"HTTP/1.1 400 ")
        assert "application/json" in json.loads(content)["error"]


def test_pipelined_requests_are_answered_in_order(server: Server) -> None:
    """Requests sent back to back before any answer: the bytes after the first request are
    handed on to read the next."""
    bodies = [review(pod(f"web-{number}")) for number in range(5)]
    with server.tls() as tls:
        answers = Answers(tls)
        tls.sendall(b"".join(request("/validate", body) for body in bodies))
        uids = [json.loads(answers.next()[2])["response"]["uid"] for _ in bodies]
    assert uids == [body["request"]["uid"] for body in bodies]


def test_http_1_0_and_connection_close_are_answered_then_closed(server: Server) -> None:
    for extra, version in (((), b"1.0"), ((b"Connection: close",), b"1.1")):
        body = review(pod())
        with server.tls() as tls:
            answers = Answers(tls)
            tls.sendall(request("/validate", body, *extra, version=version))
            raw, headers, content = answers.next()
            assert raw.startswith(b"HTTP/1.1 200 OK\r\n")
            assert headers.get(b"connection") == b"close"
            assert json.loads(content)["response"]["allowed"] is True
            assert answers.closed()


class Transport(asyncio.Transport):
    """Collects what the protocol writes."""

    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8443), "peername": ("127.0.0.1", 40000)}.get(name)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def test_the_review_answer_skips_h11s_response_path() -> None:
    """In process: after a review the connection reads with a fresh h11 state (the answer went
    past h11); with `Connection: keep-alive` h11 wrote it and its state goes on."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        whole = scope.get("extensions", {}).get("quickq.whole_response")
        if whole is None or not whole["send"](
                200, [(b"content-length", b"2"), (b"content-type", b"text/plain")], b"ok"):
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", b"2"), (b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"ok"})

    async def lacking_uvicorn() -> None:
        """A uvicorn whose request cycle lacks a field send_whole needs: no extension, and the
        app's answer goes through uvicorn's send."""
        fields = protocol_module._CYCLE_FIELDS
        protocol_module._CYCLE_FIELDS = (*fields, "field_of_another_uvicorn")
        protocol_module._cycle_checked.clear()
        try:
            before, after, _, written = await exchange(b"")
        finally:
            protocol_module._CYCLE_FIELDS = fields
            protocol_module._cycle_checked.clear()
        assert after is before
        assert written.startswith(b"HTTP/1.1 200 OK\r\n") and written.endswith(b"\r\n\r\nok")

    async def exchange(extra: bytes) -> tuple[h11.Connection, h11.Connection, Any, bytes]:
        config = uvicorn.Config(app, h11_max_incomplete_event_size=MAX_HEADER, lifespan="off",
                                log_level="warning")
        protocol = GuardedH11(config, ServerState(), {}, asyncio.get_running_loop())
        transport = Transport()
        protocol.connection_made(transport)
        before = protocol.conn
        protocol.data_received(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n" + extra
                               + b"\r\nhi")
        await asyncio.wait_for(asyncio.gather(*protocol.tasks), 5)
        after, state = protocol.conn, protocol.conn.our_state
        protocol.connection_lost(None)
        return before, after, state, transport.written

    async def main() -> None:
        await lacking_uvicorn()
        before, after, state, whole = await exchange(b"")
        assert after is not before and state is h11.IDLE
        kept, same, state, usual = await exchange(b"Connection: keep-alive\r\n")
        assert same is kept and state is h11.IDLE  # h11's own next cycle
        assert without_date(whole) == without_date(usual)
        assert whole.endswith(b"\r\ncontent-length: 2\r\ncontent-type: text/plain\r\n\r\nok")

    asyncio.run(main())
