"""Deadlines and bounds uvicorn has no setting for: the TLS handshake, and each request's
headers and body.

Without them a client that opens TCP and never finishes the handshake holds its socket and
TLS state (about 50 KB) for asyncio's default 60 s, however many there are (3,000 of them:
+150 MiB, past the chart's memory limit), and one that finishes it but never its headers (a
slowloris) holds one of `--max-connections` for ever; 64 MiB of unfinished headers took
+197 MiB; one that sends its headers and then stalls its body held a connection, and with
a large Content-Length one of the two large-review turns (app.LARGE_AT_ONCE), for ever:
two such connections made every large review wait, 256 made every request 503.

What uvicorn's Config offers instead (0.51-0.54, the range pyproject allows), per part:
- handshake deadline: none (uvicorn calls create_server without ssl_handshake_timeout);
- handshakes in progress and connections per listener: none before a request's headers
  are in (`backlog` is the kernel's accept queue; `limit_concurrency` answers 503 only
  then, so a client that never sends them is never refused);
- request deadline, headers and body: none (`timeout_keep_alive` runs only between
  requests);
- header size: none with httptools (`h11_max_incomplete_event_size` is h11's only);
- TLS read-ahead of a paused connection: none.

All go through uvicorn's documented extension points and asyncio's documented API, not
uvicorn's internals:

- an event loop (the worker's uvicorn Config returns its factory) whose `create_server`
  accepts TLS connections as plain TCP, admits at most HANDSHAKES_MAX handshakes in
  progress and `connections_max` connections in all per listener (the next connection is
  reset at once), and upgrades each with `loop.start_tls` under a HANDSHAKE_SECONDS
  deadline before handing it to uvicorn's protocol;
- between the TLS transport and uvicorn's protocol, a _Watch that passes everything on
  (asyncio's Protocol interface only) and times each request, headers and body: from the
  connection, or the first byte after the previous answer, until the app has read the
  whole body or answered (told by `watched`, an ASGI wrapper of the app), within the
  request deadline (`serve --request-timeout`, REQUEST_SECONDS unless told), or the
  connection is aborted and whatever it held (a large-review turn among them) is freed; its
  headers within HEADERS_MAX bytes. Judging is not timed: it is linear in the object and
  within the CEL cost budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from typing import Any, cast

import uvloop

# A client on the cluster network finishes a handshake in milliseconds; the API server
# dials, handshakes and sends its request at once.
HANDSHAKE_SECONDS = 5.0
# A request's headers and body, from its first byte (or the connection) until the app has
# read it all: inside the API server's wait for an answer (the chart's
# webhook.timeoutSeconds, 5 s by default). A 3 MiB review arrives in milliseconds; one over
# 64 KiB may first wait for a large-review turn (app.LARGE_AT_ONCE) with its body unread.
REQUEST_SECONDS = 4.0
# Handshakes in progress per listener: the API server opens a few connections and keeps
# them; 256 at about 50 KB each stay far inside the memory limit.
HANDSHAKES_MAX = 256
# The API server sends a few hundred bytes of headers; Go's net/http allows 1 MiB.
HEADERS_MAX = 128 * 1024
# What a connection may deliver before it is handed to uvicorn's protocol, which then keeps
# at most 64 KiB of a body the app has not asked for: past it the connection stops reading
# until the hand-over. The hand-over waits for the event loop, which reads a ready socket
# many times over meanwhile: twelve connections at once each had their whole 3 MiB body
# read (and kept) before it (+90 MiB).
EARLY_MAX = 64 * 1024
# Encrypted bytes the TLS layer reads ahead for a connection whose reading is paused
# (uvicorn pauses one whose body the app has not asked for yet, see app.LARGE_AT_ONCE):
# with asyncio's default, 256 KiB, each such connection held 850 KiB, with this 540 KiB
# (most of the rest is the TLS layer's own read buffer).
TLS_READ_MAX = 32 * 1024


class Loop(uvloop.Loop):
    """uvloop, whose TLS servers accept through a _Gate (bounded, with a deadline)."""

    connections_max = 2 * HANDSHAKES_MAX
    request_seconds = REQUEST_SECONDS

    def __init__(self) -> None:
        super().__init__()
        # The open connections' watches, by the client's address (the ASGI scope's client).
        self.watches: dict[tuple[str, int], _Watch] = {}

    # The same parameters as the overloads of the base class, passed on as they are.
    async def create_server(  # type: ignore[override]
            self, protocol_factory: Callable[[], asyncio.BaseProtocol], *args: Any,
            ssl: ssl.SSLContext | None = None, **kwargs: Any) -> Any:
        if ssl is None:
            return await super().create_server(protocol_factory, *args, **kwargs)
        gate = _Gate(self, protocol_factory, ssl, self.connections_max, self.request_seconds)
        return await super().create_server(gate.protocol, *args, **kwargs)


def loop_factory(connections_max: int, request_seconds: float = REQUEST_SECONDS
                 ) -> Callable[[], asyncio.AbstractEventLoop]:
    """What uvicorn calls to make the worker's loop: one that serves at most
    `connections_max` connections per listener, each request within `request_seconds`."""

    def new_event_loop() -> asyncio.AbstractEventLoop:
        loop = Loop()
        loop.connections_max = connections_max
        loop.request_seconds = request_seconds
        return loop

    return new_event_loop


class _Gate:
    """One TLS listener's connections: those open, and the handshakes in progress."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 factory: Callable[[], asyncio.BaseProtocol], context: ssl.SSLContext,
                 connections_max: int, request_seconds: float) -> None:
        self.loop = loop
        self.factory = factory
        self.context = context
        self.connections_max = connections_max
        self.request_seconds = request_seconds
        self.open: set[Any] = set()
        self.handshakes = 0

    def admit(self, transport: Any) -> bool:
        """Count `transport` in, or say no when either bound is reached."""
        self.open = {t for t in self.open if not t.is_closing()}
        if len(self.open) >= self.connections_max or self.handshakes >= HANDSHAKES_MAX:
            return False
        self.open.add(transport)
        self.handshakes += 1
        return True

    def protocol(self) -> asyncio.Protocol:
        return _Handshake(self)


class _Handshake(asyncio.Protocol):
    """A connection until its TLS handshake is done: counted, upgraded with start_tls, then
    handed to uvicorn's protocol.

    uvloop starts reading only after connection_made returns, so the client's first flight
    (its ClientHello) may reach this protocol before start_tls has put its TLS protocol in
    place; it is kept and given to that protocol (BufferedProtocol's get_buffer and
    buffer_updated) once its connection_made has run, before the loop reads anything more.
    Bytes that arrive after the handshake and before the hand-over go to uvicorn's protocol
    first; past EARLY_MAX of them the connection stops reading until then."""

    def __init__(self, gate: _Gate) -> None:
        self.gate = gate
        self.early: list[bytes] = []
        self.held = 0  # bytes in `early`
        self.raw: Any = None
        self.paused = False  # by this protocol (see data_received)
        self.eof = False
        self.lost = False
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: Any) -> None:  # uvloop's is no asyncio.Transport
        if not self.gate.admit(transport):
            transport.abort()
            return
        self.raw = transport
        self.task = self.gate.loop.create_task(self._upgrade(transport))

    async def _upgrade(self, raw: Any) -> None:
        loop = self.gate.loop
        try:
            upgrading = loop.create_task(loop.start_tls(
                raw, self, self.gate.context, server_side=True,
                ssl_handshake_timeout=HANDSHAKE_SECONDS))
            # Runs after start_tls's first step, which schedules its protocol's
            # connection_made; one more hop runs after that.
            loop.call_soon(loop.call_soon, self._hand_early, raw)
            tls = await upgrading
        except Exception:  # a failed, refused or timed-out handshake: nothing to answer
            raw.abort()
            return
        finally:
            self.gate.handshakes -= 1
        if tls is None or self.lost:
            raw.abort()
            return
        # A paused connection's TLS layer keeps TLS_READ_MAX of encrypted bytes, not 256 KiB.
        cast(Any, tls).set_read_buffer_limits(high=TLS_READ_MAX)
        app: Any = self.gate.factory()
        watch = _Watch(app, tls, self.gate.loop, self.gate.request_seconds)
        tls.set_protocol(watch)
        app.connection_made(tls)
        for chunk in self.early:
            watch.data_received(chunk)
        self._release()
        if self.eof:
            with contextlib.suppress(Exception):
                watch.eof_received()

    def _release(self) -> None:
        """`early` is handed on: read again if data_received stopped reading."""
        self.early, self.held = [], 0
        if self.paused:
            self.paused = False
            if not self.raw.is_closing():
                self.raw.resume_reading()

    def _hand_early(self, raw: Any) -> None:
        """Give what this protocol read before start_tls to start_tls's protocol."""
        chunks = self.early
        tls_protocol = raw.get_protocol()
        if tls_protocol is self or raw.is_closing():
            return
        self._release()
        for chunk in chunks:
            view = memoryview(chunk)
            while view:
                buffer = tls_protocol.get_buffer(len(view))
                size = min(len(buffer), len(view))
                buffer[:size] = view[:size]
                tls_protocol.buffer_updated(size)
                view = view[size:]

    def data_received(self, data: bytes) -> None:
        self.early.append(data)
        self.held += len(data)
        if self.held > EARLY_MAX and not self.paused and not self.raw.is_closing():
            self.paused = True
            self.raw.pause_reading()

    def eof_received(self) -> bool:
        self.eof = True
        return True  # keep the transport open for uvicorn's protocol to decide

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True


class _Watch(asyncio.Protocol):
    """What the TLS transport calls, passed on to uvicorn's protocol; on the way, each
    request is timed until its body is read, and its headers counted up to the blank line
    that ends them."""

    def __init__(self, app: Any, transport: Any, loop: Any, seconds: float) -> None:
        self.app = app
        self.transport = transport
        self.loop = loop
        self.seconds = seconds
        self.waiting = True  # for the end of a request's headers
        self.idle = False  # answered: the next request's headers start with its first byte
        self.count = 0
        self.tail = b""
        self.deadline: asyncio.TimerHandle | None = None
        peer = transport.get_extra_info("peername")
        self.key = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else None
        if self.key is not None and isinstance(loop, Loop):
            loop.watches[self.key] = self
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.idle:
            self.idle, self.waiting, self.count, self.tail = False, True, 0, b""
            self._arm()
        if self.waiting:
            if b"\r\n\r\n" in data or b"\r\n\r\n" in self.tail + data[:3]:
                self.waiting = False  # the deadline runs on, to the end of the body
            else:
                self.count += len(data)
                self.tail = (self.tail + data)[-3:] if len(data) < 3 else data[-3:]
                if self.count > HEADERS_MAX:
                    self._disarm()
                    self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                                         b"content-length: 0\r\nconnection: close\r\n\r\n")
                    self.transport.close()
                    return
        self.app.data_received(data)

    def received(self) -> None:
        """The app has read the request's whole body: judging it is not timed here."""
        self._disarm()

    def answered(self) -> None:
        """The app answered this connection's request: the next one's clock starts with its
        first byte (until then uvicorn's keep-alive timeout applies)."""
        self.idle = True
        self._disarm()

    def eof_received(self) -> bool | None:
        result: bool | None = self.app.eof_received()
        return result

    def pause_writing(self) -> None:
        self.app.pause_writing()

    def resume_writing(self) -> None:
        self.app.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self.key is not None and isinstance(self.loop, Loop) and \
                self.loop.watches.get(self.key) is self:
            del self.loop.watches[self.key]
        self.app.connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self.deadline = self.loop.call_later(self.seconds, self._expired)

    def _disarm(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def _expired(self) -> None:
        """The request is not read in time: whatever it holds (a body half sent, a
        large-review turn) is let go. No TLS close_notify exchange: the client gets no more
        time; the app sees the client gone (Starlette's ClientDisconnect)."""
        self.deadline = None
        if not self.transport.is_closing():
            self.transport.abort()


def watched(app: Any) -> Any:
    """The ASGI app, telling the connection's _Watch when a request's body has been read and
    when the request has been answered."""

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        loop = asyncio.get_running_loop()
        client = scope.get("client")
        watch = None
        if scope.get("type") == "http" and isinstance(loop, Loop) and client:
            watch = loop.watches.get((str(client[0]), int(client[1])))
        if watch is None:
            await app(scope, receive, send)
            return

        async def receiving() -> Any:
            message = await receive()
            if message.get("type") == "http.request" and not message.get("more_body"):
                watch.received()
            return message

        try:
            await app(scope, receiving, send)
        finally:
            watch.answered()

    return asgi
