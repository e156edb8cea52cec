"""Deadlines uvicorn does not set: for the TLS handshake and for the request headers.

Without them a client that opens TCP and never finishes the handshake holds its socket and
TLS state for asyncio's default 60 s, and one that finishes it but never the headers (a
slowloris) holds a connection, one of `--max-connections`, for ever. Both go through
uvicorn's documented extension points, not its internals: a custom event loop (`loop=` an
import string, uvicorn's "custom event loop"), whose `create_server` passes asyncio's own
`ssl_handshake_timeout`, and an `http=` protocol class, uvicorn's httptools protocol with a
timer from connection (or from a request's first byte) to the end of its headers. The
protocol also caps the header block, which httptools does not: 64 MiB of unfinished headers
took +197 MiB.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvloop
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# A client on the cluster network finishes a handshake in milliseconds; the API server
# dials, handshakes and sends its request at once.
HANDSHAKE_SECONDS = 5.0
HEADERS_SECONDS = 5.0
# The API server sends a few hundred bytes of headers; Go's net/http allows 1 MiB.
HEADERS_MAX = 64 * 1024


class Loop(uvloop.Loop):
    """uvloop, with a TLS handshake deadline on every server it starts."""

    async def create_server(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("ssl") is not None:
            kwargs.setdefault("ssl_handshake_timeout", HANDSHAKE_SECONDS)
        return await super().create_server(*args, **kwargs)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The loop factory uvicorn's `loop="webhook.server.deadlines:new_event_loop"` calls."""
    return Loop()


class DeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol; a request's headers must arrive whole within
    HEADERS_SECONDS of the connection (or of the request's first byte on a kept-alive one)
    and within HEADERS_MAX bytes, else the connection is closed (431 when too large)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._link = transport
        self._waiting = 0  # bytes of headers received so far; -1 once they are complete
        self._deadline: asyncio.TimerHandle | None = None
        self._start_deadline()

    def data_received(self, data: bytes) -> None:
        waiting = self._waiting >= 0
        super().data_received(data)
        if waiting and self._waiting >= 0:  # still in the headers after this chunk
            self._waiting += len(data)
            if self._waiting > HEADERS_MAX and not self._link.is_closing():
                self._link.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                                 b"content-length: 0\r\nconnection: close\r\n\r\n")
                self._link.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._waiting < 0:  # the next request on a kept-alive connection
            self._waiting = 0
            self._start_deadline()

    def on_headers_complete(self) -> None:
        self._waiting = -1
        self._cancel_deadline()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_deadline()
        super().connection_lost(exc)

    def _start_deadline(self) -> None:
        self._cancel_deadline()
        self._deadline = asyncio.get_running_loop().call_later(HEADERS_SECONDS, self._expired)

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self._waiting >= 0 and not self._link.is_closing():
            self._link.close()
