"""SIGTERM: a drain before uvicorn's shutdown, so no admission races a closing connection.

The API server keeps its connections to a webhook pod open between calls, and goes on
using them after the pod left the Service (an endpoint's removal only steers new
connections). uvicorn's shutdown closes every idle connection at once; a review the API
server sends on one at that moment gets EOF, and Go does not retry a POST: one failed
admission. So on SIGTERM a worker first drains for `serve --drain` seconds: it keeps
listening and answering, /readyz says not ready, and every answer carries `Connection:
close` (after which uvicorn closes the connection and the client drops it from its pool),
so each pooled connection is used once more and then gone. Then uvicorn's own handler runs:
the listener closes and requests in flight finish, as without a drain.

Only the signal module, asyncio's documented API and ASGI: the handler uvicorn installed
(whatever it is) is called as it would have been, a drain later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Iterator
from typing import Any, Protocol

log = logging.getLogger("quickq_guard.server")

# A few seconds: the API server reuses a pooled connection within milliseconds under load,
# and the chart's preStop sleep plus this must fit in the pod's grace period.
DRAIN_SECONDS = 3.0


class Readiness(Protocol):
    """What a drain changes: whether the worker is ready (a `Guard` is one)."""

    ready: bool


@contextlib.contextmanager
def on_sigterm(worker: Readiness, seconds: float) -> Iterator[None]:
    """While inside, the first SIGTERM starts a drain of `seconds`, after which the handler
    uvicorn installed gets it; a second SIGTERM ends the drain at once. Call it in the
    running event loop, after uvicorn installed its handler (the app's lifespan is)."""
    shutdown = signal.getsignal(signal.SIGTERM)
    if seconds <= 0 or not callable(shutdown):  # no drain, or no handler to hand it to
        yield
        return
    loop = asyncio.get_running_loop()
    stop: Callable[[int, Any], Any] = shutdown

    def begin() -> None:
        if not worker.ready:  # a drain (or the shutdown) already under way
            stop(signal.SIGTERM, None)
            return
        worker.ready = False
        log.info("SIGTERM: draining", extra={"fields": {"event": "draining",
                                                          "seconds": seconds}})
        loop.call_later(seconds, stop, signal.SIGTERM, None)

    try:
        loop.add_signal_handler(signal.SIGTERM, begin)
    except (ValueError, RuntimeError, NotImplementedError):  # not the main thread
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        signal.signal(signal.SIGTERM, shutdown)


def closing(app: Any, worker: Readiness) -> Any:
    """The ASGI app, its answers carrying `Connection: close` once the worker is not ready
    (draining or stopping): the client then uses that connection for nothing more."""

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await app(scope, receive, send)
            return

        async def sending(message: Any) -> None:
            if message.get("type") == "http.response.start" and not worker.ready:
                headers = list(message.get("headers", []))
                if not any(name.lower() == b"connection" for name, _ in headers):
                    message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await app(scope, receive, sending)

    return asgi
