"""The admission webhook: a plain Starlette application.

`/validate` and `/mutate` answer AdmissionReviews; `/healthz`, `/readyz` and `/metrics` are
for the kubelet and Prometheus. Each worker process holds its own `Guard`: the policies in
force and the serving certificate, both reloaded when their files change, so no restart is
ever needed to rotate either.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from webhook.engine.claims import ClaimLookup
from webhook.engine.evaluate import error_decision, evaluate
from webhook.engine.policy import PolicyError, PolicySet
from webhook.engine.policy_exceptions import NONE, Exceptions
from webhook.engine.results import Decision, Resource
from webhook.engine.review import Review
from webhook.engine.trainjobs import AT_ADMISSION
from webhook.server import admission, claim_view, deadlines, drain, exception_view, metrics
from webhook.server.admission import AdmissionError, AdmissionRequest
from webhook.server.logs import log_review
from webhook.server.reload import PolicySets, PolicySource, ServingCert

MAX_BODY = 3 * 1024 * 1024
RELOAD_INTERVAL = 2.0
# Open connections (and requests in progress) one worker serves at once; past it uvicorn
# answers 503 and closes. Each idle TLS connection holds about 45 KB, so 256 of them stay
# far inside the chart's memory limit, where 3,000 slow clients took +135 MiB unbounded.
MAX_CONNECTIONS = 256
# A review larger than this is judged in the worker's judging thread, one at a time, so the
# event loop goes on answering /healthz and reading requests while it runs (the CEL runtime
# holds the GIL for one evaluation only, each bounded by the cost budget's per-evaluation
# limit): 1,000 containers under the restricted profile took 0.4-0.7 s. A smaller one (a
# typical Pod's is 5 KiB, judged in well under a millisecond) is judged in the loop: handing
# it to a thread cost a third more CPU per review at saturation (benchmarks/webhook_ab.py).
INLINE_MAX = 64 * 1024
# Large reviews (over INLINE_MAX, or of no declared size) whose body is read at once: one
# judged in the judging thread, the next read and waiting for it. The others wait their turn
# with their body unread (uvicorn stops reading a request's body past 64 KiB until the app
# asks for it), so a worker holds at most this many large reviews whatever the number of
# connections: twelve 2.95 MiB reviews at once took it from 100 to 191 MiB when every body
# was read as it came.
LARGE_AT_ONCE = 2

log = logging.getLogger("quickq_guard.server")


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
    # With --client-ca the kubelet and Prometheus hold no client certificate: they get
    # /healthz, /readyz and /metrics on this port instead (TLS, no client certificate).
    probe_port: int | None = None
    workers: int = 1
    instance: str = ""  # named in the answer to a probe (PROBE_ANNOTATION)
    max_body: int = MAX_BODY
    max_connections: int = MAX_CONNECTIONS
    # Each request's headers and body arrive within this or its connection is aborted.
    request_timeout: float = deadlines.REQUEST_SECONDS
    reload_interval: float = RELOAD_INTERVAL
    # On SIGTERM, answer this long more, each answer closing its connection (drain.py).
    drain: float = drain.DRAIN_SECONDS
    # Watch the PolicyExceptions of the config's exceptionNamespaces (kubeconfig: the
    # in-cluster service account when None).
    watch_exceptions: bool = False
    kubeconfig: str | None = None
    # Resolve pods' DRA claims against a watch of every namespace's ResourceClaims and
    # ResourceClaimTemplates (the same kubeconfig).
    watch_claims: bool = False

    @property
    def source(self) -> PolicySource:
        return PolicySource(self.policies, self.config, self.mode)


class Guard:
    """One worker's state: the policies in force and the live serving certificate.

    Both are replaced whole (never changed in place) by the reload watcher, so a review
    judges with one consistent set from start to end.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.policies: PolicySets = settings.source.load()
        self.tls = ServingCert(settings.cert, settings.key, settings.client_ca)
        metrics.CERT_EXPIRY.set(self.tls.expiry)
        self.exceptions = exception_view.ExceptionView.start(
            settings.watch_exceptions, settings.kubeconfig, self.policies.validate.config)
        self.claims = claim_view.ClaimView.start(settings.watch_claims, settings.kubeconfig)
        self.ready = True
        # Large reviews are judged one at a time beside the event loop (see answer_review).
        self.judging = ThreadPoolExecutor(max_workers=1, thread_name_prefix="judge")
        self._large: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

    def large_reviews(self) -> asyncio.Semaphore:
        """The turns of large reviews (LARGE_AT_ONCE), for the event loop that serves them."""
        loop = asyncio.get_running_loop()
        if self._large is None or self._large[0] is not loop:
            self._large = (loop, asyncio.Semaphore(LARGE_AT_ONCE))
        return self._large[1]

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
        if self.settings.watch_exceptions and not self.exceptions.watches(
                loaded.validate.config):
            # Other exception namespaces: a new view, which applies no exception until it
            # has listed them all (never one from a namespace no longer listed).
            self.exceptions.stop()
            self.exceptions = exception_view.ExceptionView.start(
                True, self.settings.kubeconfig, loaded.validate.config)
            self.exceptions.begin()
        log.info("policies reloaded", extra={"fields": {
            "event": "reloaded", "what": "policies", "mode": loaded.mode,
            "policies": [p.id for p in loaded.full.policies]}})

    def reload_cert(self) -> None:
        """Swap in a changed certificate and key. Runs in the event loop's thread: OpenSSL
        must not see the context change while a handshake in that thread uses it."""
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

    async def watch(self, wake: asyncio.Event) -> None:
        """Poll the files every few seconds; `wake` (SIGHUP) polls at once and reloads
        the policies even if their files look unchanged."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), self.settings.reload_interval)
            forced = wake.is_set()
            wake.clear()
            try:
                await self.reload_policies(force=forced)
                self.reload_cert()
            except Exception:  # the watcher must outlive any surprise
                log.exception("reload check failed")


def build_app(guard: Guard,
              beside: Callable[[], contextlib.AbstractAsyncContextManager[None]] | None = None,
              ) -> Starlette:
    """The ASGI app of one worker; `beside` runs for the app's lifetime (the probe
    listener), entered after the watchers start and left before they stop."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
            loop.add_signal_handler(signal.SIGHUP, wake.set)  # main thread only
        watcher = asyncio.create_task(guard.watch(wake))
        guard.exceptions.begin()
        guard.claims.begin()
        try:
            async with beside() if beside else contextlib.nullcontext():
                yield
        finally:
            guard.ready = False
            watcher.cancel()
            guard.exceptions.stop()
            guard.claims.stop()
            guard.judging.shutdown(wait=False)
            metrics.worker_exited(os.getpid())

    async def validate(request: Request) -> Response:
        return await answer_review(request, guard, "validate")

    async def mutate(request: Request) -> Response:
        return await answer_review(request, guard, "mutate")

    return Starlette(
        routes=[
            Route("/validate", validate, methods=["POST"]),
            Route("/mutate", mutate, methods=["POST"]),
            *probe_routes(guard),
        ],
        exception_handlers={HTTPException: _http_error},
        lifespan=lifespan,
    )


def build_probe_app(guard: Guard) -> Starlette:
    """The app of the probe port: health, readiness and metrics, never a review. It runs in
    the same event loop as the worker's reviews, so it answers exactly when they could."""
    return Starlette(routes=probe_routes(guard), exception_handlers={HTTPException: _http_error})


def probe_routes(guard: Guard) -> list[Route]:
    """/healthz, /readyz and /metrics, for the kubelet and Prometheus."""

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(request: Request) -> Response:
        if guard.ready:
            return PlainTextResponse("ready")
        return PlainTextResponse("shutting down", status_code=503)

    async def metrics_page(request: Request) -> Response:
        return Response(metrics.render(), media_type=metrics.CONTENT_TYPE)

    return [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_page, methods=["GET"]),
    ]


async def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    return JSONResponse({"error": error.detail}, error.status_code, error.headers)


async def answer_review(request: Request, guard: Guard, endpoint: str) -> Response:
    """Read, judge and answer one AdmissionReview; record it in the metrics and the log."""
    started = time.perf_counter()
    try:
        admission.check_content_type(request.headers.get("content-type"))
        size = declared_size(request, guard.settings.max_body)
    except AdmissionError as error:
        return _refused(endpoint, error)
    if size is not None and size <= INLINE_MAX:
        return await _answer_read(request, guard, endpoint, started)
    async with guard.large_reviews():  # see LARGE_AT_ONCE
        return await _answer_read(request, guard, endpoint, started)


async def _answer_read(request: Request, guard: Guard, endpoint: str,
                       started: float) -> Response:
    try:
        body = await read_body(request, guard.settings.max_body)
    except ClientDisconnect:  # gone: nobody to answer
        return Response(status_code=400)
    except AdmissionError as error:
        return _refused(endpoint, error)
    sets = guard.policies
    policies = sets.mutate if endpoint == "mutate" else sets.validate
    # Exceptions except validate findings: /mutate has none to apply.
    exceptions = guard.exceptions.current(policies) if endpoint == "validate" else NONE
    claims = guard.claims.current()
    judged = (body, endpoint, policies, exceptions, claims, guard.settings.instance, started)
    if len(body) <= INLINE_MAX:
        return answer(*judged)
    # All of it there, from parsing to the answer's bytes: two large reviews' objects are
    # never in memory at once, as when the loop judged them one after the other.
    return await asyncio.get_running_loop().run_in_executor(guard.judging, answer, *judged)


def answer(body: bytes, endpoint: str, policies: PolicySet, exceptions: Exceptions,
           claims: ClaimLookup, instance: str, started: float) -> Response:
    """The answer to the review in `body`, recorded in the metrics and the log."""
    try:
        review = admission.parse_review(body)
    except AdmissionError as error:
        return _refused(endpoint, error)
    decision = judge(review, policies, exceptions, claims) if admission.judged(review) \
        else None
    answered = admission.respond(review, decision, mutating=endpoint == "mutate",
                                 instance=instance)
    latency = time.perf_counter() - started
    metrics.record_review(endpoint, review.kind, review.operation, decision,
                          policies.config.mode, latency,
                          [kind for _, kind in policies.config.workload_kinds])
    log_review(endpoint, review, decision, policies.config.mode, latency)
    return Response(admission.dumps(answered), media_type="application/json")


def _refused(endpoint: str, error: AdmissionError) -> Response:
    metrics.BAD_REQUESTS.labels(endpoint, str(error.status)).inc()
    # After a 413 the rest of the body may still be on the wire: close the connection.
    headers = {"connection": "close"} if error.status == 413 else None
    return JSONResponse({"error": error.problem}, error.status, headers)


def judge(review: AdmissionRequest, policies: PolicySet, exceptions: Exceptions = NONE,
          claims: ClaimLookup = claim_view.NOT_WATCHED) -> Decision:
    """evaluate() for a review, as of now, with the claims the webhook's view holds (as
    `check` passes those of its input); an engine failure is an error verdict, never a
    500."""
    try:
        # The API server has decoded the object already: judged as it is handed over.
        return evaluate(review.object, policies, Review(
            operation=review.operation, old_object=review.old_object,
            username=review.username, groups=review.groups, namespace=review.namespace,
            dry_run=review.dry_run, exceptions=exceptions, claims=claims,
            train_jobs=AT_ADMISSION, now=datetime.now(UTC)))
    except Exception as error:  # the engine catches rule bugs; this is the last resort
        log.exception("evaluation failed", extra={"fields": {"uid": review.uid}})
        problem = f"quickq-guard could not judge this object ({type(error).__name__})"
        resource = Resource("", review.kind, review.namespace or "", review.name)
        return error_decision(resource, problem, problem, policies.config.mode == "dry-run")


def declared_size(request: Request, limit: int) -> int | None:
    """The body's size from Content-Length (None for a chunked body), refused with 413 when
    it exceeds `limit` bytes, before anything is read."""
    declared = request.headers.get("content-length")
    if declared is None:
        return None
    if not (declared.isascii() and declared.isdigit()):  # "²".isdigit() is true
        raise AdmissionError(400, f"Content-Length is not a number: {declared[:40]!r}")
    if int(declared) > limit:
        raise AdmissionError(413, f"body of {declared} bytes exceeds the limit of "
                                  f"{limit} bytes")
    return int(declared)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it is known to exceed `limit` bytes: from
    Content-Length before reading, and by counting while it streams (chunked bodies)."""
    declared_size(request, limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise AdmissionError(413, f"body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
