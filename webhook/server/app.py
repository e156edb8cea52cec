"""The admission webhook: a starlette app under uvicorn over TLS.

`/validate` and `/mutate` answer AdmissionReviews; `/healthz`, `/readyz` and `/metrics` are
for the kubelet and Prometheus. Each worker process holds its own policies and TLS context
and reloads both when their files change, so no restart is ever needed to rotate either.
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
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from itertools import chain
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors.multiprocess import Multiprocess

from webhook.engine.evaluate import error_decision, evaluate
from webhook.engine.policy import PolicyError, PolicySet
from webhook.engine.results import Decision, Resource
from webhook.server import admission, certs, metrics
from webhook.server.admission import AdmissionError, Review
from webhook.server.logs import REVIEW_LOGGER, line_writer, log_config
from webhook.server.protocol import MAX_HEADER, WHOLE_RESPONSE, GuardedH11
from webhook.server.reload import PolicySets, PolicySource, ServingCert

MAX_BODY = 3 * 1024 * 1024
RELOAD_INTERVAL = 2.0
# The API server keeps connections open between calls (Go's idle timeout is 90 s); closing
# an idle one first races with a request being sent on it, so outwait the client.
KEEP_ALIVE = 100
# SIGTERM: requests in flight get this long to finish (an API server waits at most 30 s).
GRACEFUL_SHUTDOWN = 25

log = logging.getLogger("quickq_guard.server")
review_log = logging.getLogger(REVIEW_LOGGER)
review_line = line_writer(review_log, "review")


@dataclass(frozen=True, slots=True)
class Settings:
    """What `quickq-guard serve` was asked for; pickled to every worker process."""

    cert: str
    key: str
    policies: str | None
    config: str | None
    mode: str | None = None
    client_ca: str | None = None
    host: str = "0.0.0.0"
    port: int = 8443
    workers: int = 1
    max_body: int = MAX_BODY
    reload_interval: float = RELOAD_INTERVAL

    @property
    def source(self) -> PolicySource:
        return PolicySource(self.policies, self.config, self.mode)


class Guard:
    """One worker's state: the policies in force and the live serving certificate."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.policies: PolicySets = settings.source.load()
        self.tls = ServingCert(settings.cert, settings.key, settings.client_ca)
        metrics.CERT_EXPIRY.set(self.tls.expiry)
        self.ready = True
        self.wake: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None  # the server's, while it runs

    async def reload_policies(self, force: bool = False) -> None:
        """Swap in changed policies; a set that fails to load is logged, counted and ignored."""
        source = self.settings.source
        fingerprint = await asyncio.to_thread(source.fingerprint)
        if fingerprint == self.policies.fingerprint and not force:
            return
        try:
            loaded = await asyncio.to_thread(source.load)
        except PolicyError as error:
            metrics.RELOAD_FAILURES.labels("policies").inc()
            log.error("policy reload rejected; the previous policies stay in force",
                      extra={"fields": {"event": "reload-failed", "what": "policies",
                                        "problem": str(error)}})
            # Remember the broken files, so the failure is reported once, not every poll.
            self.policies = PolicySets(self.policies.full, self.policies.validate,
                                       self.policies.mutate, fingerprint)
            return
        self.policies = loaded
        metrics.RELOADS.labels("policies").inc()
        log.info("policies reloaded", extra={"fields": {
            "event": "reloaded", "what": "policies", "mode": loaded.mode,
            "policies": [p.id for p in loaded.full.policies]}})

    def reload_cert(self) -> None:
        """Swap in a changed certificate and key, in the event loop's thread (see reload)."""
        try:
            changed = self.tls.changed()
            if changed is None:
                return
            self.tls.reload(*changed)
        except (OSError, ValueError) as error:  # ssl.SSLError is an OSError
            metrics.RELOAD_FAILURES.labels("certificate").inc()
            log.error("certificate reload rejected; the previous certificate stays in use",
                      extra={"fields": {"event": "reload-failed", "what": "certificate",
                                        "problem": f"{type(error).__name__}: {error}"}})
            return
        metrics.CERT_EXPIRY.set(self.tls.expiry)
        metrics.RELOADS.labels("certificate").inc()
        log.info("certificate reloaded", extra={"fields": {
            "event": "reloaded", "what": "certificate", "notAfter": self.tls.expiry}})

    async def watch(self) -> None:
        """Poll the files every few seconds; SIGHUP polls at once and reloads policies."""
        assert self.wake is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self.settings.reload_interval)
            forced = self.wake.is_set()
            self.wake.clear()
            try:
                await self.reload_policies(force=forced)
                self.reload_cert()
            except Exception:  # the watcher must outlive any surprise
                log.exception("reload check failed")


def build_app(guard: Guard) -> Starlette:
    """The ASGI app of one worker."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        guard.wake = asyncio.Event()
        loop = guard.loop = asyncio.get_running_loop()
        with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
            loop.add_signal_handler(signal.SIGHUP, guard.wake.set)  # main thread only
        watcher = asyncio.create_task(guard.watch())
        # Everything loaded so far (policies, pydantic models, libraries) lives as long as
        # the worker: keep it out of the collector's full passes, which would otherwise walk
        # it again every few hundred requests.
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            guard.ready = False
            guard.loop = None
            watcher.cancel()
            metrics.worker_exited(os.getpid())

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(request: Request) -> Response:
        if guard.ready:
            return PlainTextResponse("ready")
        return PlainTextResponse("shutting down", status_code=503)

    async def metrics_page(request: Request) -> Response:
        return Response(metrics.render(), media_type=metrics.CONTENT_TYPE)

    async def http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        return JSONResponse({"error": error.detail}, error.status_code, error.headers)

    reviews = {"/validate": _ReviewEndpoint(guard, "validate"),
               "/mutate": _ReviewEndpoint(guard, "mutate")}
    return _App(
        reviews,
        routes=[
            Route("/validate", reviews["/validate"], methods=["POST"]),
            Route("/mutate", reviews["/mutate"], methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics_page, methods=["GET"]),
        ],
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )


class _App(Starlette):
    """Starlette, except that a POST to /validate or /mutate goes straight to its endpoint,
    past the middleware stack, the router and the Request and Response objects: some 15 us of
    a review's CPU. The answers are the same (the two routes are in the router too, for every
    other method and path); an exception escaping the endpoint, which _review never lets
    happen, would get uvicorn's 500 instead of starlette's."""

    def __init__(self, reviews: dict[str, _ReviewEndpoint], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reviews = reviews

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            endpoint = self.reviews.get(scope["path"])
            if endpoint is not None:
                scope["app"] = self
                await _review(scope, receive, send, endpoint.guard, endpoint.endpoint)
                return
        await super().__call__(scope, receive, send)


class _ReviewEndpoint:
    """POST /validate or /mutate as a bare ASGI app."""

    def __init__(self, guard: Guard, endpoint: str) -> None:
        self.guard = guard
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _review(scope, receive, send, self.guard, self.endpoint)


_JSON_TYPE = (b"content-type", b"application/json")
_NO_EXTENSIONS: dict[str, Any] = {}


async def _review(scope: Scope, receive: Receive, send: Send, guard: Guard,
                  endpoint: str) -> None:
    started = time.perf_counter()
    try:
        # h11 refuses a header block over MAX_HEADER while it is incomplete; one that arrives
        # whole in a single read is parsed first, and refused here.
        raw: list[tuple[bytes, bytes]] = scope["headers"]
        if sum(map(len, chain.from_iterable(raw))) + 4 * len(raw) > MAX_HEADER:
            raise AdmissionError(431, f"request headers exceed {MAX_HEADER} bytes")
        content_type = content_length = None  # the first of each, as starlette's Headers
        for name, value in raw:
            if name == b"content-type":
                content_type = value.decode("latin-1") if content_type is None \
                    else content_type
            elif name == b"content-length":
                content_length = value.decode("latin-1") if content_length is None \
                    else content_length
        admission.check_content_type(content_type)
        body = await read_body(receive, content_length, guard.settings.max_body)
        review = admission.parse_review(body)
    except ClientDisconnect:  # gone (or cut off as too slow): nobody to answer
        await Response(status_code=400)(scope, receive, send)
        return
    except AdmissionError as error:
        metrics.BAD_REQUESTS.labels(endpoint, str(error.status)).inc()
        # After a 413 the rest of the body is still on the wire: close the connection.
        headers = {"connection": "close"} if error.status in (413, 431) else None
        await JSONResponse({"error": error.problem}, error.status, headers)(scope, receive, send)
        return
    sets = guard.policies
    policies = sets.mutate if endpoint == "mutate" else sets.validate
    decision = judge(review, policies) if review.operation in admission.JUDGED_OPERATIONS \
        else None
    answer = admission.respond(review, decision, mutating=endpoint == "mutate")
    content = admission.dumps(answer)
    _record(endpoint, review, decision, policies.config.mode, time.perf_counter() - started,
            guard.loop)
    # What starlette's Response(content, media_type="application/json") sends.
    head = [(b"content-length", b"%d" % len(content)), _JSON_TYPE]
    whole = scope.get("extensions", _NO_EXTENSIONS).get(WHOLE_RESPONSE)
    if whole is None or not whole["send"](200, head, content):
        await send({"type": "http.response.start", "status": 200, "headers": head})
        await send({"type": "http.response.body", "body": content})


def judge(review: Review, policies: PolicySet) -> Decision:
    """evaluate() for a review; an engine failure is an error verdict, never a 500."""
    try:
        return evaluate(review.object, policies, operation=review.operation,
                        old_object=review.old_object, namespace=review.namespace,
                        username=review.username, groups=review.groups)
    except Exception as error:  # the engine catches rule bugs; this is the last resort
        log.exception("evaluation failed", extra={"fields": {"uid": review.uid}})
        problem = f"quickq-guard could not judge this object ({type(error).__name__})"
        resource = Resource("", review.kind, review.namespace or "", review.name)
        return error_decision(resource, problem, problem, policies.config.mode == "dry-run")


async def read_body(receive: Receive, declared: str | None, limit: int) -> bytes:
    """The body, refused with 413 as soon as it is known to exceed `limit` bytes: from
    Content-Length (`declared`) before reading, and by counting while it streams (chunked
    bodies). ClientDisconnect if the client goes (or is cut off) first."""
    if declared is not None:
        if not declared.isdigit():
            raise AdmissionError(400, f"Content-Length is not a number: {declared[:40]!r}")
        if int(declared) > limit:
            raise AdmissionError(413, f"body of {declared} bytes exceeds the limit of "
                                      f"{limit} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise AdmissionError(413, f"body exceeds the limit of {limit} bytes")
        if not message.get("more_body", False):
            if not chunks:
                return bytes(chunk)
            chunks.append(chunk)
            return b"".join(chunks)
        chunks.append(chunk)


def _record(endpoint: str, review: Review, decision: Decision | None, mode: str,
            latency: float, loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Metrics and the review's log line: policy ids and actions, never field values."""
    label = decision.outcome if decision is not None else "allowed"
    metrics.child(metrics.REVIEWS, endpoint, review.kind or "unknown", review.operation,
                  label).inc()
    metrics.child(metrics.LATENCY, endpoint).observe(latency)
    findings: list[dict[str, Any]] = []
    for result in decision.results if decision is not None else ():
        if result.status in ("fail", "patch", "error"):
            action = "error" if result.status == "error" else result.action
            count = max(1, len(result.findings))
            metrics.child(metrics.FINDINGS, result.policy or "none", action, mode).inc(count)
            findings.append({"policy": result.policy, "action": action, "count": count})
    review_line({
        "endpoint": endpoint,
        "uid": review.uid,
        "kind": review.kind,
        "namespace": review.namespace or "",
        "name": review.name or (decision.resource.name if decision else ""),
        "operation": review.operation,
        "user": review.username or "",
        "dryRun": review.dry_run,
        "mode": mode,
        "decision": label,
        "findings": findings,
        "latency_ms": round(latency * 1000, 3),
    }, loop)


# Running under uvicorn --------------------------------------------------------------------


class _Config(uvicorn.Config):
    """A uvicorn Config that builds the app and TLS context inside each worker process, so
    every worker has its own policies, watcher and context to reload."""

    def __init__(self, settings: Settings, **kwargs: Any) -> None:
        self.settings = settings
        super().__init__(_not_loaded, ssl_context_factory=_no_context, **kwargs)

    def load(self) -> None:
        # SIGHUP means "reload" here; until the app installs its handler, ignore it rather
        # than die of it.
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
        try:
            guard = Guard(self.settings)
        except (PolicyError, OSError, ValueError) as error:
            log.error("worker cannot start", extra={"fields": {"problem": str(error)}})
            sys.exit(STARTUP_FAILURE)
        self.app = build_app(guard)
        self.ssl_context_factory = _fixed_context(guard)
        super().load()


class _Supervisor(Multiprocess):
    """uvicorn's worker supervisor, except that SIGHUP reloads policies in every worker
    (each keeps serving) instead of replacing the workers."""

    def handle_hup(self) -> None:
        for process in self.processes:
            if process.pid is not None and process.exitcode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGHUP)


async def _not_loaded(scope: Any, receive: Any, send: Any) -> None:
    raise RuntimeError("the app is built in _Config.load()")


def _no_context(config: uvicorn.Config, default: Callable[[], Any]) -> Any:
    raise RuntimeError("the TLS context is built in _Config.load()")


def _fixed_context(guard: Guard) -> Callable[[uvicorn.Config, Callable[[], Any]], Any]:
    def factory(config: uvicorn.Config, default: Callable[[], Any]) -> Any:
        return guard.tls.context
    return factory


def settings_from(args: argparse.Namespace) -> Settings:
    return Settings(
        cert=args.cert, key=args.key, policies=args.policies, config=args.config,
        mode=getattr(args, "mode", None), client_ca=getattr(args, "client_ca", None),
        host=args.host, port=args.port, workers=args.workers,
        max_body=getattr(args, "max_body", None) or MAX_BODY,
        reload_interval=getattr(args, "reload_interval", None) or RELOAD_INTERVAL,
    )


def run(args: argparse.Namespace) -> int:
    """`quickq-guard serve`: check everything loads, then serve until SIGTERM; 0 on a clean
    stop, 2 when policies or certificates do not load, 3 when the server cannot start."""
    settings = settings_from(args)
    if settings.workers < 1:
        print("quickq-guard serve: --workers must be at least 1", file=sys.stderr)
        return 2
    if getattr(args, "self_signed", False) or not Path(settings.cert).exists():
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
    config = _Config(
        settings, host=settings.host, port=settings.port, workers=settings.workers,
        log_config=log_config(), access_log=False, server_header=False, proxy_headers=False,
        lifespan="on", timeout_keep_alive=KEEP_ALIVE, http=GuardedH11,
        h11_max_incomplete_event_size=MAX_HEADER,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN)
    if settings.workers == 1:
        # uvicorn re-raises SIGTERM once it has shut down gracefully; with this handler in
        # place that ends here and the process exits 0, as a clean stop should.
        signal.signal(signal.SIGTERM, lambda signum, frame: None)
        server = uvicorn.Server(config)
        server.run()
        return 0 if server.started else STARTUP_FAILURE
    supervisor = _Supervisor(config, sockets=[config.bind_socket()])
    try:
        supervisor.run()
    finally:
        if own_metrics_dir:
            shutil.rmtree(own_metrics_dir, ignore_errors=True)
    failed = any(p.exitcode == STARTUP_FAILURE for p in supervisor.processes)
    return STARTUP_FAILURE if failed else 0

