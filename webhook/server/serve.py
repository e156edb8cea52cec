"""`quickq-guard serve`: the app under stock uvicorn (httptools and uvloop), over TLS.

Each worker process builds its own Guard (policies, TLS context, reload watcher) when
uvicorn loads its config, so every worker can reload both without a restart.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.supervisors import Multiprocess

from webhook.engine.policy import PolicyError
from webhook.server import certs, metrics
from webhook.server.app import (
    MAX_BODY,
    MAX_CONNECTIONS,
    RELOAD_INTERVAL,
    Guard,
    Settings,
    build_app,
)
from webhook.server.logs import log_config

# The API server keeps connections open between calls (Go's idle timeout is 90 s); closing
# an idle one first races with a request being sent on it, so outwait the client.
KEEP_ALIVE = 100
# SIGTERM: requests in flight get this long to finish (an API server waits at most 30 s).
GRACEFUL_SHUTDOWN = 25
# uvicorn's exit status for a server that could not start.
STARTUP_FAILURE = 3

log = logging.getLogger("quickq_guard.server")


class WorkerConfig(uvicorn.Config):
    """A uvicorn Config whose app and TLS context are built in the worker process that
    loads it: each worker has its own policies, watcher and context to reload."""

    def __init__(self, settings: Settings, **kwargs: Any) -> None:
        self.settings = settings
        super().__init__(_not_loaded, ssl_context_factory=_no_context, **kwargs)

    def load(self) -> None:
        # SIGHUP means "reload" here; until the app installs its handler, ignore it rather
        # than die of it.
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
        # Log lines name no thread or process: spare every record looking them up (the
        # logging HOWTO's "Optimization" advice).
        logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
        try:
            guard = Guard(self.settings)
        except (PolicyError, OSError, ValueError) as error:
            log.error("worker cannot start", extra={"fields": {"problem": str(error)}})
            sys.exit(STARTUP_FAILURE)
        self.app = build_app(guard)
        self.ssl_context_factory = _serving_context(guard)
        super().load()


class Supervisor(Multiprocess):
    """uvicorn's worker supervisor, except that SIGHUP reloads policies in every worker
    (each keeps serving) instead of replacing the workers: a replaced worker whose new
    policies do not load would not start, and a reload must never take the webhook down."""

    def handle_hup(self) -> None:
        for process in self.processes:
            if process.pid is not None and process.exitcode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGHUP)


async def _not_loaded(scope: Any, receive: Any, send: Any) -> None:
    raise RuntimeError("the app is built in WorkerConfig.load()")


def _no_context(config: uvicorn.Config, default: Callable[[], Any]) -> Any:
    raise RuntimeError("the TLS context is built in WorkerConfig.load()")


def _serving_context(guard: Guard) -> Callable[[uvicorn.Config, Callable[[], Any]], Any]:
    def factory(config: uvicorn.Config, default: Callable[[], Any]) -> Any:
        return guard.tls.context
    return factory


def settings_from(args: argparse.Namespace) -> Settings:
    return Settings(
        cert=args.cert, key=args.key, policies=args.policies, config=args.config,
        mode=getattr(args, "mode", None), client_ca=getattr(args, "client_ca", None),
        host=args.host, port=args.port, workers=args.workers,
        instance=getattr(args, "instance", "") or "",
        max_body=getattr(args, "max_body", None) or MAX_BODY,
        max_connections=getattr(args, "max_connections", None) or MAX_CONNECTIONS,
        reload_interval=getattr(args, "reload_interval", None) or RELOAD_INTERVAL,
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
                "; pass --self-signed to make a self-signed pair there (for a try only: "
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
        settings.source.load()
        certs.server_context(settings.cert, settings.key, settings.client_ca)
    except PolicyError as error:
        print(f"quickq-guard serve: {error}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as error:
        print(f"quickq-guard serve: TLS: {error}", file=sys.stderr)
        return 2
    own_metrics_dir = None
    if settings.workers > 1 and not os.environ.get(metrics.MULTIPROC_ENV):
        own_metrics_dir = tempfile.mkdtemp(prefix="quickq-guard-metrics-")
        os.environ[metrics.MULTIPROC_ENV] = own_metrics_dir
    config = WorkerConfig(
        settings, host=settings.host, port=settings.port, workers=settings.workers,
        log_config=log_config(), access_log=False, server_header=False, proxy_headers=False,
        lifespan="on", timeout_keep_alive=KEEP_ALIVE,
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
