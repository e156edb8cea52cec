"""`quickq-guard serve`: the app under stock uvicorn (httptools and uvloop), over TLS.

Each worker process builds its own Guard (policies, TLS context, reload watcher) when
uvicorn loads its config, so every worker can reload both without a restart.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.supervisors import Multiprocess

from webhook.engine.policy import PolicyError
from webhook.server import certs, deadlines, drain, metrics
from webhook.server.app import (
    MAX_BODY,
    MAX_CONNECTIONS,
    RELOAD_INTERVAL,
    Guard,
    Settings,
    build_app,
    build_probe_app,
)
from webhook.server.logs import log_config

# The API server keeps connections open between calls (Go's idle timeout is 90 s); closing
# an idle one first races with a request being sent on it, so outwait the client.
KEEP_ALIVE = 100
# SIGTERM, once the drain is over (drain.py): requests in flight get this long to finish
# (an API server waits at most 30 s).
GRACEFUL_SHUTDOWN = 25
# The probe port serves the kubelet and one Prometheus: a few connections, short keep-alive.
PROBE_CONNECTIONS = 16
PROBE_KEEP_ALIVE = 15
# uvicorn's exit status for a server that could not start.
STARTUP_FAILURE = 3

log = logging.getLogger("quickq_guard.server")


class WorkerConfig(uvicorn.Config):
    """A uvicorn Config whose app and TLS context are built in the worker process that
    loads it: each worker has its own policies, watcher and context to reload.

    `probe_socket`, bound by the parent (and passed to every worker with the config, as
    uvicorn passes its own sockets), gets the probe listener: see ProbeServer."""

    def __init__(self, settings: Settings, probe_socket: socket.socket | None = None,
                 **kwargs: Any) -> None:
        self.settings = settings
        self.probe_socket = probe_socket
        super().__init__(_not_loaded, ssl_context_factory=_no_context, **kwargs)

    def get_loop_factory(self) -> Callable[[], asyncio.AbstractEventLoop]:
        # Connections a listener holds from accept to close, whatever their stage: those
        # uvicorn serves (503 past max_connections) and as many again in a handshake or
        # in their headers, each dropped within seconds (webhook/server/deadlines.py).
        return deadlines.loop_factory(2 * self.settings.max_connections,
                                      self.settings.request_timeout)

    def load(self) -> None:
        # SIGHUP means "reload" here; until the app installs its handler, ignore it rather
        # than die of it.
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
        quiet_log_records()
        try:
            guard = Guard(self.settings)
        except (PolicyError, OSError, ValueError) as error:
            log.error("worker cannot start", extra={"fields": {"problem": str(error)}})
            sys.exit(STARTUP_FAILURE)
        probe_socket = self.probe_socket
        # deadlines.watched: each request's header deadline (webhook/server/deadlines.py);
        # drain.closing: `Connection: close` on every answer once SIGTERM came (drain.py)
        self.app = deadlines.watched(drain.closing(
            build_app(guard, lambda: alongside(guard, probe_socket)), guard))
        self.ssl_context_factory = _serving_context(guard)
        super().load()
        freeze_loaded()


def quiet_log_records() -> None:
    """Log lines name no thread, process, file or line: spare every record looking them up
    (the logging HOWTO's "Optimization" advice; the caller's file and line alone walked the
    stack for each review's line, ~2% of a review's instructions)."""
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging._srcfile = None


def freeze_loaded() -> None:
    """Move what the worker loaded (modules, policies, compiled programs: ~60,000 objects)
    out of the garbage collector's sight: they live as long as the worker, and a full
    collection that walked them stopped every request for 15-20 ms of CPU. Objects made
    later (a reloaded policy set among them) are collected as usual; whatever of the start-up
    set is held in reference cycles stays once a reload replaced it (once, not per reload)."""
    gc.collect()
    gc.freeze()


class Supervisor(Multiprocess):
    """uvicorn's worker supervisor, except that SIGHUP reloads policies in every worker
    (each keeps serving) instead of replacing the workers: a replaced worker whose new
    policies do not load would not start, and a reload must never take the webhook down."""

    def handle_hup(self) -> None:
        for process in self.processes:
            if process.pid is not None and process.exitcode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGHUP)


class ProbeServer(uvicorn.Server):
    """A second stock uvicorn server in the worker's event loop, for the probe port. The
    worker's own server owns the signals (it stops this one when its lifespan ends), so this
    one leaves them alone."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def alongside(guard: Guard, probe_socket: socket.socket | None) -> AsyncIterator[None]:
    """What runs for the app's lifetime: the drain SIGTERM starts, and the probe listener
    when there is a probe port."""
    with drain.on_sigterm(guard, guard.settings.drain):
        async with (contextlib.nullcontext() if probe_socket is None
                    else probe_listener(guard, probe_socket)):
            yield


@contextlib.asynccontextmanager
async def probe_listener(guard: Guard, sock: socket.socket) -> AsyncIterator[None]:
    """Serve the probe app on `sock` for as long as the worker's app runs; fail the worker's
    start when it cannot."""
    config = uvicorn.Config(
        deadlines.watched(build_probe_app(guard)),
        ssl_context_factory=lambda config, default: guard.tls.probe_context,
        lifespan="off", log_config=None, access_log=False,
        server_header=False, proxy_headers=False, timeout_keep_alive=PROBE_KEEP_ALIVE,
        limit_concurrency=PROBE_CONNECTIONS + 1, timeout_graceful_shutdown=1)
    server = ProbeServer(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not serving.done():
        await asyncio.sleep(0.01)
    if serving.done():
        serving.result()  # raises what stopped it
        raise RuntimeError("the probe listener stopped at start")
    try:
        yield
    finally:
        server.should_exit = True
        await serving


async def _not_loaded(scope: Any, receive: Any, send: Any) -> None:
    raise RuntimeError("the app is built in WorkerConfig.load()")


def _no_context(config: uvicorn.Config, default: Callable[[], Any]) -> Any:
    raise RuntimeError("the TLS context is built in WorkerConfig.load()")


def _serving_context(guard: Guard) -> Callable[[uvicorn.Config, Callable[[], Any]], Any]:
    def factory(config: uvicorn.Config, default: Callable[[], Any]) -> Any:
        return guard.tls.context
    return factory


def bind(host: str, port: int) -> socket.socket:
    """A bound TCP socket the workers inherit, as uvicorn's Config.bind_socket makes."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def settings_from(args: argparse.Namespace) -> Settings:
    return Settings(
        cert=args.cert, key=args.key, policies=args.policies, config=args.config,
        mode=getattr(args, "mode", None), client_ca=getattr(args, "client_ca", None),
        host=args.host, port=args.port, probe_port=getattr(args, "probe_port", None),
        workers=args.workers,
        instance=getattr(args, "instance", "") or "",
        max_body=getattr(args, "max_body", None) or MAX_BODY,
        max_connections=getattr(args, "max_connections", None) or MAX_CONNECTIONS,
        request_timeout=getattr(args, "request_timeout", None) or deadlines.REQUEST_SECONDS,
        reload_interval=getattr(args, "reload_interval", None) or RELOAD_INTERVAL,
        drain=drain.DRAIN_SECONDS if getattr(args, "drain", None) is None else args.drain,
        watch_exceptions=getattr(args, "watch_exceptions", False),
        watch_claims=getattr(args, "watch_claims", False),
        kubeconfig=getattr(args, "kubeconfig", None),
    )


def missing_file(settings: Settings) -> str:
    """What is wrong with the certificate, key or client CA file named, or ''."""
    for option, name in (("--cert", settings.cert), ("--key", settings.key),
                         ("--client-ca", settings.client_ca)):
        if name is None:
            continue
        path = Path(name)
        if not path.exists():
            hint = "" if option == "--client-ca" else (
                "; `quickq-guard certs` writes a development pair to certs/, where serve "
                "looks by default, or pass --self-signed to make one here (for a try only: "
                "nothing trusts it)")
            return f"{option} {name}: no such file{hint}"
        if not path.is_file():
            return f"{option} {name}: not a file"
    return ""


def run(args: argparse.Namespace) -> int:
    """`quickq-guard serve`: check everything loads, then serve until SIGTERM; 0 on a clean
    stop, 2 when policies or certificates do not load, 3 when the server cannot start."""
    settings = settings_from(args)
    if settings.workers < 1:
        print("quickq-guard serve: --workers must be at least 1", file=sys.stderr)
        return 2
    try:  # before anything is made: a config or policy that does not load changes nothing
        settings.source.load()
    except PolicyError as error:
        print(f"quickq-guard serve: {error}", file=sys.stderr)
        return 2
    if getattr(args, "self_signed", False):
        out = Path(settings.cert).parent
        try:
            files = certs.ensure_certs(out, "quickq-guard", "quickq-guard")
        except OSError as error:
            print(f"quickq-guard serve: cannot create certificates in {out}: {error}",
                  file=sys.stderr)
            return 2
        settings = replace(settings, cert=str(files.cert), key=str(files.key))
        print(f"quickq-guard: self-signed serving certificate {files.cert}; trust the CA "
              f"{files.ca_cert} (caBundle: quickq-guard certs --out {out})", file=sys.stderr)
    else:
        # A mistyped path or an unmounted Secret must stop the server, not give it a
        # certificate nobody trusts: a self-signed pair is made only with --self-signed.
        problem = missing_file(settings)
        if problem:
            print(f"quickq-guard serve: {problem}", file=sys.stderr)
            return 2
    try:
        certs.server_context(settings.cert, settings.key, settings.client_ca)
    except (OSError, ValueError) as error:
        print(f"quickq-guard serve: TLS: {error}", file=sys.stderr)
        return 2
    own_metrics_dir = None
    if settings.workers > 1 and not os.environ.get(metrics.MULTIPROC_ENV):
        own_metrics_dir = tempfile.mkdtemp(prefix="quickq-guard-metrics-")
        os.environ[metrics.MULTIPROC_ENV] = own_metrics_dir
    probe_socket = None
    if settings.probe_port is not None:
        try:
            probe_socket = bind(settings.host, settings.probe_port)
        except OSError as error:
            print(f"quickq-guard serve: cannot listen on {settings.host}:{settings.probe_port} "
                  f"(--probe-port): {error.strerror or error}", file=sys.stderr)
            return 2
    config = WorkerConfig(
        settings, probe_socket, host=settings.host, port=settings.port, workers=settings.workers,
        log_config=log_config(), access_log=False, server_header=False, proxy_headers=False,
        lifespan="on", timeout_keep_alive=KEEP_ALIVE,
        # Handshake and request deadlines, a header size cap and the connection bound come
        # with the loop (get_loop_factory): see webhook/server/deadlines.py.
        # uvicorn counts the new connection itself: N + 1 lets N be served at once
        limit_concurrency=settings.max_connections + 1,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN)
    try:
        sock = config.bind_socket()
    except OSError as error:  # before anything says it started
        print(f"quickq-guard serve: cannot listen on {settings.host}:{settings.port}: "
              f"{error.strerror or error}", file=sys.stderr)
        return 2
    server = uvicorn.Server(config)
    if settings.workers == 1:
        # uvicorn re-raises SIGTERM once it has shut down gracefully; with this handler in
        # place that ends here and the process exits 0, as a clean stop should.
        signal.signal(signal.SIGTERM, lambda signum, frame: None)
        server.run(sockets=[sock])
        return 0 if server.started else STARTUP_FAILURE
    supervisor = Supervisor(config, sockets=[sock])
    try:
        supervisor.run()
    finally:
        if own_metrics_dir:
            shutil.rmtree(own_metrics_dir, ignore_errors=True)
    failed = any(p.exitcode == STARTUP_FAILURE for p in supervisor.processes)
    return STARTUP_FAILURE if failed else 0
