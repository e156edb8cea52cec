"""The HTTP/1.1 connection of the webhook: uvicorn's h11 protocol, guarded and made leaner.

uvicorn bounds only the idle time between requests, and writes each answer in two TLS records;
GuardedH11 adds a deadline for reading each request, writes an answer in one record, keeps one
timer per event loop for every connection's deadlines, and offers the review endpoints a way to
write their whole answer past h11's response machinery (WHOLE_RESPONSE).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from functools import lru_cache
from http import HTTPStatus
from operator import itemgetter
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from webhook.server import admission, metrics

# A request (line, headers and body) must arrive whole within this many seconds of its first
# byte, or of the connection being opened; a slow client (slowloris) is disconnected. The API
# server sends a review at once and gives up after its timeoutSeconds (at most 30 s) anyway.
READ_TIMEOUT = 10
# The request line and headers together: at most this many bytes (h11 answers 400 beyond).
MAX_HEADER = 16 * 1024
# The ASGI scope extension GuardedH11 offers with each request: its "send" is
# `send_whole(status, headers, body) -> bool`, which writes a whole answer at once, or returns
# False when the app must use ASGI send as usual.
WHOLE_RESPONSE = "quickq.whole_response"

log = logging.getLogger("quickq_guard.server")


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with a deadline for reading each request (READ_TIMEOUT) and
    JSON bodies on its own 400 answers. uvicorn bounds only the idle time between requests;
    without this a client that sends a byte now and then holds its connection for ever."""

    # loop.time() by which the request being read must be in whole; None while idle.
    _deadline: float | None = None
    # loop.time() at which an idle kept-alive connection is closed; None while in use.
    _idle_until: float | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # asyncio turns Nagle off only for sockets whose proto is IPPROTO_TCP; the socket that
        # --workers N shares is made with proto 0, and Nagle against the client's delayed ACK
        # then holds every answer's second TLS record back by 40 ms.
        sock = transport.get_extra_info("socket")
        with contextlib.suppress(OSError, AttributeError):
            if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Every request cycle writes through this (uvicorn hands self.transport to each).
        self.transport = _OneWritePerResponse(transport, self)  # type: ignore[assignment]
        self._deadline = self.loop.time() + READ_TIMEOUT
        _Deadlines.of(self.loop).watch(self)
        self._extensions: dict[str, dict[object, object]] = {
            WHOLE_RESPONSE: {"send": self.send_whole}}

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle and self.cycle is not None and _can_write_whole(self.cycle):
            self.cycle.scope["extensions"] = self._extensions  # a request has been read

    def send_whole(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bool:
        """Write a whole answer at once: what uvicorn and h11 write for an ASGI response start
        and one body message, byte for byte, in a fraction of the work (h11 builds, checks and
        frames each event: some 2,400 bytecodes per answer, as much as judging the review).
        Only for the common case, a kept-alive HTTP/1.1 request read whole with the answer not
        begun and nothing waiting to drain; otherwise False, and the app sends as usual.

        h11 read this request but does not see the answer, so the next request is read by a
        fresh h11 connection, handed whatever the client has already sent after this one."""
        cycle, conn = self.cycle, self.conn
        if (cycle is None or cycle.response_started or cycle.disconnected
                or not cycle.keep_alive or self.flow.write_paused
                or conn.our_state is not h11.SEND_RESPONSE or conn.their_state is not h11.DONE
                or conn.their_http_version != b"1.1"
                or b"connection" in map(_NAME, cycle.scope["headers"])):
            return False
        lines = [b"HTTP/1.1 %d %s\r\n" % (status, _phrase(status))]
        lines += [b"%s: %s\r\n" % header for header in cycle.default_headers]
        lines += [b"%s: %s\r\n" % header for header in headers]
        lines.append(b"\r\n")
        lines.append(body)
        self.transport.write(b"".join(lines))
        cycle.response_started = cycle.response_complete = True
        cycle.message_event.set()
        pending, closed = conn.trailing_data
        self.conn = cycle.conn = h11.Connection(
            h11.SERVER, self.config.h11_max_incomplete_event_size or MAX_HEADER)
        if closed:
            self.conn.receive_data(b"")
        cycle.on_response()
        if pending:  # a pipelined request
            self.data_received(pending)
        return True

    def data_received(self, data: bytes) -> None:
        self._idle_until = None
        if self._deadline is None and self.conn.their_state is h11.IDLE:
            # the first bytes of the next request on a kept-alive connection
            self._deadline = self.loop.time() + READ_TIMEOUT
        super().data_received(data)
        if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
            self._deadline = None  # the whole request is in (or the connection is done)

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline = None
        _Deadlines.of(self.loop).forget(self)
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        """uvicorn's, except that the keep-alive timeout is a deadline for _Deadlines to check
        rather than a timer armed here and cancelled by the next request's first bytes."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self._idle_until = self.loop.time() + self.timeout_keep_alive
        self.flow.resume_reading()
        # Unblock any pipelined events.
        if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
            self.conn.start_next_cycle()
            self.handle_events()

    def send_400_response(self, msg: str) -> None:
        body = admission.dumps({"error": msg})
        headers = [(b"content-type", b"application/json"), (b"connection", b"close"),
                   (b"content-length", str(len(body)).encode())]
        with contextlib.suppress(h11.LocalProtocolError):
            self.transport.write(self.conn.send(h11.Response(status_code=400, headers=headers)))
            self.transport.write(self.conn.send(h11.Data(data=body)))
            self.transport.write(self.conn.send(h11.EndOfMessage()))
        self.transport.close()

    def _too_slow(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        metrics.BAD_REQUESTS.labels("any", "408").inc()
        log.info("closed a connection that did not send its request in time",
                 extra={"fields": {"event": "read-timeout", "seconds": READ_TIMEOUT}})
        self.transport.close()


class _Deadlines:
    """The deadlines of one event loop's connections, checked by one timer every SWEEP
    seconds instead of timers armed and cancelled for every request (each a TimerHandle, a
    heap push and a cancelled entry for the loop to skip): READ_TIMEOUT for a request being
    read, and uvicorn's keep-alive timeout for an idle connection. A slow client is cut off
    between READ_TIMEOUT and READ_TIMEOUT + SWEEP seconds after its first byte."""

    SWEEP = 0.5
    _loops: dict[asyncio.AbstractEventLoop, _Deadlines] = {}

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.connections: set[GuardedH11] = set()
        self.timer: asyncio.TimerHandle | None = None

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> _Deadlines:
        found = cls._loops.get(loop)
        if found is None:
            found = cls._loops[loop] = cls(loop)
        return found

    def watch(self, connection: GuardedH11) -> None:
        self.connections.add(connection)
        if self.timer is None:
            self.timer = self.loop.call_later(self.SWEEP, self.sweep)

    def forget(self, connection: GuardedH11) -> None:
        self.connections.discard(connection)
        if not self.connections:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            self._loops.pop(self.loop, None)  # a closed loop is not kept alive here

    def sweep(self) -> None:
        self.timer = None
        now = self.loop.time()
        for connection in list(self.connections):
            if connection._deadline is not None and connection._deadline <= now:
                connection._too_slow()
            elif connection._idle_until is not None and connection._idle_until <= now:
                connection._idle_until = None
                connection.timeout_keep_alive_handler()
        if self.connections:
            self.timer = self.loop.call_later(self.SWEEP, self.sweep)


class _OneWritePerResponse:
    """The connection's TLS transport, except that a response's status line and headers are
    held back until its first body write and go out with it: one TLS record and one send()
    per answer instead of two. uvicorn writes the two separately, and on loopback or a LAN
    each send() costs this process some 25-30 us of kernel time (the answer's whole TCP path),
    a tenth of a review's cost. Everything but write() and close() is the transport's own."""

    def __init__(self, transport: asyncio.Transport, protocol: H11Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._head = b""
        self._held = False  # this response's head was held (reset when the response ends)

    def write(self, data: bytes) -> None:
        if self._protocol.conn.our_state is not h11.SEND_BODY:
            self._held = False  # the end of a response (or not a response's bytes at all)
        elif not self._held:  # the status line and headers, just sent to h11
            self._held = True
            self._head = data
            return
        if self._head:
            data, self._head = self._head + data, b""
        if data:
            self._transport.write(data)

    def close(self) -> None:
        if self._head:
            self._transport.write(self._head)
            self._head = b""
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


_NAME = itemgetter(0)


# What send_whole reads and sets on uvicorn's request cycle (uvicorn 0.29 and 0.54 have them
# all). These are uvicorn's internals: a uvicorn without one of them gets no whole answers,
# only its own send, rather than a failed request.
_CYCLE_FIELDS = ("scope", "conn", "default_headers", "keep_alive", "disconnected",
                 "response_started", "response_complete", "message_event", "on_response")
_cycle_checked: dict[type, bool] = {}


def _can_write_whole(cycle: Any) -> bool:
    kind = type(cycle)
    found = _cycle_checked.get(kind)
    if found is None:
        found = _cycle_checked[kind] = all(hasattr(cycle, name) for name in _CYCLE_FIELDS)
        if not found:
            log.warning("this uvicorn's request cycle lacks what whole answers need; answers "
                        "go through uvicorn's send", extra={"fields": {"uvicorn": kind.__module__}})
    return found


@lru_cache(maxsize=64)
def _phrase(status: int) -> bytes:
    """The reason phrase uvicorn sends with a status code."""
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""

