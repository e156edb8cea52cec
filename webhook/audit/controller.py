"""`quickq-guard audit`, the controller: scan, watch, keep results, write reports.

A full scan lists every audited kind in pages and judges each object (webhook.audit.sweep),
then watches each kind from its list's resourceVersion and judges each change as it comes.
It scans again every --resync seconds, and at once when the policies or config on disk
change, when a PolicyException is created, changed, deleted or expires, when a judged kind
is installed or removed, or when a namespace is labelled quickq.io/ignore=true or loses it.
Only results are kept (webhook.audit.state). Every --write-interval the reports whose
results changed are written, at most WRITES_PER_SECOND, by the Lease holder only
(--leader-elect) or by this replica alone; an unchanged report is never written.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import logging
import logging.config
import signal
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

from lightkube import ALL_NS, AsyncClient
from lightkube.core.exceptions import ApiError

from webhook.audit import cluster, metrics, reports, scan, sweep, wire
from webhook.audit import page as audit_page
from webhook.audit.cluster import Kind, Namespaces
from webhook.audit.health import Health
from webhook.audit.lease import Lease, pod_namespace
from webhook.audit.state import Held, Results
from webhook.cli.exits import CliError
from webhook.engine.claims import CLAIM_KINDS, DRA_GROUP, NO_CLAIMS, ClaimLookup, claims_from
from webhook.engine.policy import PolicyError, PolicySet
from webhook.engine.review import Review
from webhook.server.claim_view import WHERE
from webhook.server.logs import log_config
from webhook.server.reload import PolicySource

log = logging.getLogger("quickq_guard.audit")

RELOAD_INTERVAL = 2.0  # how often the policy and config files are hashed
RETRY_SECONDS = 5.0  # after a scan that failed
WRITES_PER_SECOND = 20.0
WATCH_SECONDS = 300  # a watch request's server-side timeout; lightkube opens the next one
HEARTBEAT_SECONDS = 5.0


def run(args: argparse.Namespace, api: AsyncClient) -> int:
    logging.config.dictConfig(log_config())
    audit = Controller(args, api)
    try:
        metrics.serve(args.metrics_port, audit.health,
                      audit.page if args.serve_report else None)
    except OSError as problem:
        raise CliError(f"cannot serve metrics on port {args.metrics_port}: "
                       f"{problem.strerror or problem}; pass another --metrics-port, or 0 "
                       "for none") from None
    return asyncio.run(audit.main())


class Controller:
    def __init__(self, args: argparse.Namespace, api: AsyncClient) -> None:
        self.args = args
        self.api = api
        self.source = PolicySource(args.policies, args.config)
        loaded = self.source.load()  # PolicyError: the command fails, naming file and field
        self.policies: PolicySet = loaded.full
        self.fingerprint = loaded.fingerprint
        self.api_kind = reports.APIS[args.report_api]
        self.results = Results()
        metrics.count_results(self.results.counts)
        self.rescan = asyncio.Event()
        self.scanned = False  # a full scan ended: until then no report is written or deleted
        self.namespaces = Namespaces()
        self.in_force = sweep.InForce()
        # The DRA claims of the last scan, kept current by their watches: what pods judged
        # on a watch event resolve theirs against.
        self.claim_objects: dict[tuple[str, str, str], Any] = {}
        self.claims: ClaimLookup = NO_CLAIMS
        self.lease: Lease | None = None
        # What this replica knows the cluster holds: report namespace ("" for the cluster
        # report) -> (resourceVersion, fingerprint); None until read as the leader.
        self.written: dict[str, tuple[str, bytes]] | None = None
        self._said = ""  # the last write error logged, so a lasting one is logged once
        self.loop: asyncio.AbstractEventLoop | None = None  # where the results live
        self.health = Health()
        self.watching: list[asyncio.Task[None]] = []  # the watches of the current scan

    async def main(self) -> int:
        loop = self.loop = asyncio.get_running_loop()
        main = asyncio.current_task()
        assert main is not None
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, main.cancel)
        jobs: list[Callable[[], Coroutine[Any, Any, None]]] = [
            self.scans, self.writes, self.reloads]
        if self.args.leader_elect:
            self.lease = Lease(self.api, self.args.lease_namespace or pod_namespace(),
                               self.args.lease_name, self.args.lease_duration)
            lease = self.lease
            jobs.append(lambda: lease.run(self.leading_changed))
        else:
            metrics.LEADER.set(1)
        log.info("audit started", extra={"fields": {
            "event": "started", "reports": self.api_kind.api_version,
            "leaderElect": self.args.leader_elect}})
        tasks = [asyncio.create_task(job()) for job in jobs]
        tasks.append(asyncio.create_task(self.heartbeats(list(tasks))))
        try:
            await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            pass
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            with contextlib.suppress(Exception):
                await self.api.close()
        log.info("audit stopped", extra={"fields": {"event": "stopped"}})
        return 0

    # --- leading ------------------------------------------------------------------------

    def leading(self) -> bool:
        return self.lease is None or self.lease.leading

    def leading_changed(self, leading: bool) -> None:
        metrics.LEADER.set(1 if leading else 0)
        self.written = None  # read again what the cluster holds before writing

    # --- health -------------------------------------------------------------------------

    async def heartbeats(self, jobs: list[asyncio.Task[None]]) -> None:
        """Beat every HEARTBEAT_SECONDS, saying what has died: a job of the controller, or a
        watch of the current scan with no re-scan coming to replace it."""
        while True:
            dead = [task for task in jobs if task.done()]
            stale = [task for task in self.watching if task.done()]
            self.health.problem = (
                "a task of the controller ended" if dead
                else "a watch ended and no re-scan replaces it"
                if stale and not self.rescan.is_set() else "")
            self.health.beat = time.monotonic()
            await asyncio.sleep(HEARTBEAT_SECONDS)

    # --- scanning -----------------------------------------------------------------------

    async def scans(self) -> None:
        while True:
            self.rescan.clear()
            self.health.progress = time.monotonic()
            try:
                watches = await self.full_scan()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.error("scan failed; retrying", extra={"fields": {
                    "event": "scan-failed", "problem": _problem(error)}})
                self.health.progress = None
                await asyncio.sleep(RETRY_SECONDS)
                continue
            self.health.progress = None
            tasks = self.watching = [asyncio.create_task(watch) for watch in watches]
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.rescan.wait(), self.until_next_scan())
            finally:
                self.watching = []
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    def until_next_scan(self) -> float:
        """Seconds to the next full scan: the resync, or sooner when an exception expires."""
        wait = self.args.resync
        expires = self.in_force.expires
        if expires is not None:
            wait = min(wait, max(1.0, (expires - datetime.now(UTC)).total_seconds() + 1))
        return float(wait)

    async def full_scan(self) -> list[Coroutine[Any, Any, None]]:
        """One full scan; the watches that keep its results current until the next."""
        started = time.monotonic()
        policies = self.policies
        kinds, crds = await cluster.served_kinds(self.api, policies)
        self.namespaces, namespaces = await cluster.namespaces(self.api)
        self.in_force = await sweep.exceptions(self.api, policies)
        now = datetime.now(UTC)
        review = Review(exceptions=self.in_force.exceptions, now=now)
        found = sweep.Pass({})
        seen: set[str] = set()
        async for _, item in sweep.judge_all(self.api, policies, kinds, review,
                                             self.namespaces.skipped, found):
            subject = self._keep(item)
            seen.add(subject.uid)
            self.health.progress = time.monotonic()
        self.results.keep_only(seen)
        self.claim_objects, self.claims = found.claim_objects, found.claims
        self.scanned = self.health.ready = True
        self.written = None  # read the reports again: one edited or deleted by hand is mended
        metrics.JUDGED.labels("scan").inc(found.judged)
        metrics.SCAN_SECONDS.observe(time.monotonic() - started)
        metrics.scanned()
        log.info("full scan", extra={"fields": {
            "event": "scanned", "objects": found.judged, "kinds": len(found.versions),
            "withResults": len(self.results.objects),
            "seconds": round(time.monotonic() - started, 3)}})
        watches: list[Coroutine[Any, Any, None]] = [
            self.watch(of, version) for of, version in found.versions.items()
            if version]
        watches.append(self.watch_namespaces(namespaces))
        watches.append(self.watch_for_rescan(cluster.CRDS, None, crds, self._judged_crd))
        for namespace, version in self.in_force.versions.items():
            watches.append(self.watch_for_rescan(sweep.EXCEPTIONS.resource, namespace,
                                                 version))
        return watches

    def _judged_crd(self, crd: Any) -> bool:
        spec = crd.get("spec") or {}
        return cluster.judged_custom_kind(str(spec.get("group", "")),
                                          str((spec.get("names") or {}).get("kind", "")),
                                          self.policies.config)

    def _keep(self, item: Any) -> scan.Subject:
        decision = item.decision
        subject = scan.subject(item.document.obj)
        self.results.put(subject, scan.entries(decision), int(time.time()))
        return subject

    async def watch(self, of: Kind, version: str) -> None:
        """Judge each change of one kind as it comes; a watch that fails ends in a
        re-scan (a 410 Gone: the events since the list are no longer there). A DRA claim
        changed is looked up by the pods judged after it."""
        try:
            async for event, item in self.api.watch(
                    of.resource, namespace=ALL_NS if of.namespaced else None,
                    resource_version=version, server_timeout=WATCH_SECONDS):
                obj = cluster.plain(item, of)
                subject = scan.subject(obj)
                if of.group == DRA_GROUP and of.kind in CLAIM_KINDS:
                    self._claim_changed(event, obj)
                if event == "DELETED" or not cluster.judged_namespace(
                        subject.namespace, self.policies.config, self.namespaces.skipped):
                    self.results.drop(subject.uid)
                else:
                    moment = Review(exceptions=self.in_force.exceptions,
                                    claims=self.claims, now=datetime.now(UTC))
                    judged = scan.judged(obj, of.plural, self.policies, moment)
                    self.results.put(subject, scan.entries(judged.decision), int(time.time()))
                    metrics.JUDGED.labels("watch").inc()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.warning("watch ended; re-scanning", extra={"fields": {
                "event": "watch-failed", "kind": of.kind, "problem": _problem(error)}})
            self.rescan.set()

    def _claim_changed(self, event: str, obj: dict[str, Any]) -> None:
        key = sweep.claim_key(obj)
        if event == "DELETED":
            self.claim_objects.pop(key, None)
        else:
            self.claim_objects[key] = sweep.claim_view(obj)
        self.claims = claims_from(self.claim_objects.values(), WHERE)

    async def watch_namespaces(self, version: str) -> None:
        """Namespaces labelled quickq.io/ignore=true (or no longer) re-scan; a namespace
        being deleted takes its results, and so its report, with it at once."""
        try:
            async for event, item in self.api.watch(cluster.NAMESPACES,
                                                    resource_version=version,
                                                    server_timeout=WATCH_SECONDS):
                before = self.namespaces
                self.namespaces = before.seen(event, item)
                for gone in self.namespaces.terminating - before.terminating:
                    self.results.drop_namespace(gone)
                if event == "DELETED":
                    self.results.drop_namespace(str((item.get("metadata") or {}).get("name")))
                if self.namespaces.ignored != before.ignored:
                    self.rescan.set()
                    return
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.warning("namespace watch ended; re-scanning", extra={"fields": {
                "event": "watch-failed", "kind": "Namespace", "problem": _problem(error)}})
            self.rescan.set()

    async def watch_for_rescan(self, resource: Any, namespace: str | None, version: str,
                               matters: Callable[[Any], bool] = lambda _: True) -> None:
        """A change of these objects (PolicyExceptions; the CRDs of judged kinds, which are
        served only once established) re-scans."""
        try:
            async for _, item in self.api.watch(resource, namespace=namespace,
                                                resource_version=version,
                                                server_timeout=WATCH_SECONDS):
                if matters(item):
                    self.rescan.set()
                    return
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.warning("watch ended; re-scanning", extra={"fields": {
                "event": "watch-failed", "problem": _problem(error)}})
            await asyncio.sleep(RETRY_SECONDS)
            self.rescan.set()

    # --- policies and config --------------------------------------------------------------

    async def reloads(self) -> None:
        """Hash the policy and config files every RELOAD_INTERVAL; a set that loads whole
        replaces the one in force and re-scans, one that does not is logged and ignored."""
        while True:
            await asyncio.sleep(RELOAD_INTERVAL)
            fingerprint = await asyncio.to_thread(self.source.fingerprint)
            if fingerprint == self.fingerprint:
                continue
            self.fingerprint = fingerprint
            try:
                loaded = await asyncio.to_thread(self.source.load)
            except PolicyError as error:
                log.error("policy reload rejected; the previous policies stay in force",
                          extra={"fields": {"event": "reload-failed", "problem": str(error)}})
                continue
            self.policies = loaded.full
            log.info("policies reloaded; re-scanning", extra={"fields": {
                "event": "reloaded", "mode": loaded.mode}})
            self.rescan.set()

    # --- the page at /report ------------------------------------------------------------

    def page(self) -> str | None:
        """The HTML page of the results held now (called from the metrics server's threads);
        None before the first full scan ends. The results are taken in the event loop, which
        alone changes them, and the page is made here, off the loop."""
        loop = self.loop
        if loop is None or not self.scanned or loop.is_closed():
            return None
        try:
            held, policies = asyncio.run_coroutine_threadsafe(self._held(), loop).result(30)
        except (RuntimeError, TimeoutError, concurrent.futures.CancelledError):
            return None  # stopping
        return audit_page.page(self.api_kind, held, policies, self.args.max_results)

    async def _held(self) -> tuple[dict[str, list[Held]], PolicySet]:
        results = self.results
        return ({namespace: list(results.held(namespace)) for namespace in results.namespaces},
                self.policies)

    # --- writing ------------------------------------------------------------------------

    async def writes(self) -> None:
        while True:
            await asyncio.sleep(self.args.write_interval)
            if not self.scanned or not self.leading():
                continue
            try:
                if self.written is None:
                    self.written = await self.read_reports()
                    self.results.mark(self.written)
                    self.results.mark(self.results.namespaces)
                for namespace in sorted(self.results.take_dirty()):
                    if not self.leading():  # lost the Lease meanwhile: stop at once
                        self.results.mark([namespace])
                        continue
                    if await self.write_one(namespace):
                        await asyncio.sleep(1 / WRITES_PER_SECOND)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if _status(error) == 404:
                    error = RuntimeError(
                        f"the {self.api_kind.group} CRDs are not installed: install them "
                        f"(charts/quickq-guard/crds-optional/{self.api_kind.name}.yaml), or "
                        "pass the --report-api of those installed")
                self._failed("read", error)

    async def read_reports(self) -> dict[str, tuple[str, bytes]]:
        """The reports of ours the cluster holds, by namespace: what a write compares with."""
        found: dict[str, tuple[str, bytes]] = {}
        for namespaced in (True, False):
            of = self._report_kind(namespaced)
            listing = self.api.list(of.resource, namespace=ALL_NS if namespaced else None,
                                    labels=dict[str, Any](reports.LABELS), chunk_size=100)
            async for item in listing:
                metadata = item.get("metadata") or {}
                if metadata.get("name") != reports.NAME:
                    continue
                body = dict(item)
                body.setdefault("kind", of.kind)
                body.setdefault("apiVersion", of.api_version)
                found[str(metadata.get("namespace") or "")] = (
                    str(metadata.get("resourceVersion")), reports.fingerprint(body))
        return found

    async def write_one(self, namespace: str) -> bool:
        """Bring one report in line with the results: create, replace or delete it, or
        nothing when it says so already; whether a request was made. A failure leaves the
        namespace dirty."""
        assert self.written is not None
        of = self._report_kind(bool(namespace))
        held = list(self.results.held(namespace))
        known = self.written.get(namespace)
        operation = "delete" if not held else "replace" if known else "create"
        try:
            if not held:
                if known is None:
                    return False
                await self._delete(of, namespace)
                metrics.WRITES.labels("delete").inc()
                self.written.pop(namespace, None)
                return True
            body, fingerprint = reports.fingerprinted(self.api_kind, namespace, held,
                                                      self.args.max_results)
            if known is not None and known[1] == fingerprint:
                return False
            version = await self._put(of, body, known[0] if known else None)
            metrics.WRITES.labels(operation).inc()
            self.written[namespace] = (version, fingerprint)
        except Exception as error:
            if _gone(error, namespace):  # the namespace is being deleted: its report too
                self.written.pop(namespace, None)
                return True
            self.results.mark([namespace])
            metrics.WRITE_ERRORS.labels(operation).inc()
            self._failed(operation, error)
        return True

    async def _put(self, of: Kind, body: dict[str, Any], version: str | None) -> str:
        """Create the report, or replace it at `version`; on a conflict read it and replace
        it once more. The new resourceVersion."""
        if version is None:
            try:
                made = await self.api.create(wire.sent(body, of.resource))
                return wire.version(made)
            except ApiError as error:
                if error.status.code != 409:
                    raise
        for attempt in (1, 2):
            if version is None or attempt == 2:
                current = await self.api.get(of.resource, reports.NAME,
                                             namespace=body["metadata"].get("namespace"))
                version = str(current["metadata"]["resourceVersion"])
            body["metadata"]["resourceVersion"] = version
            try:
                made = await self.api.replace(wire.sent(body, of.resource))
                return wire.version(made)
            except ApiError as error:
                if error.status.code == 404:
                    body["metadata"].pop("resourceVersion", None)
                    made = await self.api.create(wire.sent(body, of.resource))
                    return wire.version(made)
                if error.status.code != 409 or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def _delete(self, of: Kind, namespace: str) -> None:
        try:
            await self.api.delete(of.resource, reports.NAME, namespace=namespace or None)
        except ApiError as error:
            if error.status.code != 404:
                raise

    def _report_kind(self, namespaced: bool) -> Kind:
        api = self.api_kind
        if namespaced:
            return cluster.kind(api.group, api.version, api.kind, api.plural)
        return cluster.kind(api.group, api.version, api.cluster_kind, api.cluster_plural,
                            namespaced=False)

    def _failed(self, operation: str, error: BaseException) -> None:
        problem = _problem(error)
        if problem != self._said:
            self._said = problem
            log.error("report write failed; retrying at the next interval", extra={
                "fields": {"event": "write-failed", "operation": operation,
                           "problem": problem}})


def _problem(error: BaseException) -> str:
    status = getattr(error, "status", None)
    message = getattr(status, "message", None)
    text = f"{getattr(status, 'code', '')} {message}" if message else \
        f"{type(error).__name__}: {error}"
    return text[:500]


def _status(error: BaseException) -> int | None:
    """The HTTP status of an API error (lightkube's ApiError, or httpx's for a body that is
    no Status), else None."""
    code = getattr(getattr(error, "status", None), "code", None)
    if code is None:
        code = getattr(getattr(error, "response", None), "status_code", None)
    return code if isinstance(code, int) else None


def _gone(error: BaseException, namespace: str) -> bool:
    """Whether a write failed because its namespace is gone or being deleted."""
    status = getattr(error, "status", None)
    code = getattr(status, "code", None)
    message = str(getattr(status, "message", ""))
    return bool(namespace) and (
        (code == 403 and "being terminated" in message)
        or (code == 404 and f'namespaces "{namespace}" not found' in message))
