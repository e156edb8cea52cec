"""Prometheus metrics of the audit, in a registry of their own (as the webhook's are, in
webhook/server/metrics.py), served on --metrics-port by prometheus-client's WSGI app; with
--serve-report the same port serves the HTML page of the current results at /report. /healthz
and /readyz answer the chart's probes (webhook.audit.health).

Every label value comes from a fixed set: policy ids of the loaded policies, the five
report results, the few write operations.
"""

from __future__ import annotations

import threading
import time
from collections import Counter as Counts
from collections.abc import Callable, Iterable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    make_wsgi_app,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from webhook.audit.health import Health

disable_created_metrics()  # type: ignore[no-untyped-call] # the *_created series only add noise
REGISTRY = CollectorRegistry(auto_describe=True)

SCAN_SECONDS = Histogram(
    "quickq_guard_audit_scan_duration_seconds", "Time a full scan took: every kind listed "
    "in pages and every object judged.", registry=REGISTRY,
    buckets=(0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600))
JUDGED = Counter(
    "quickq_guard_audit_objects_judged", "Objects judged, by full scans and by watch events.",
    ["by"], registry=REGISTRY)
WRITES = Counter(
    "quickq_guard_audit_report_writes", "Reports written, by operation (create, replace, "
    "delete).", ["operation"], registry=REGISTRY)
WRITE_ERRORS = Counter(
    "quickq_guard_audit_report_write_errors", "Report writes the API server refused or that "
    "failed; the report is written again at the next interval.", ["operation"],
    registry=REGISTRY)
LAST_SCAN_AGE = Gauge(
    "quickq_guard_audit_last_full_scan_age_seconds", "Seconds since the last full scan "
    "ended; +Inf before the first.", registry=REGISTRY)
LEADER = Gauge(
    "quickq_guard_audit_leader", "1 while this replica holds the Lease and writes reports.",
    registry=REGISTRY)

_last_scan: list[float] = []


def scanned() -> None:
    """A full scan ended now."""
    _last_scan[:] = [time.monotonic()]


def _age() -> float:
    return time.monotonic() - _last_scan[0] if _last_scan else float("inf")


LAST_SCAN_AGE.set_function(_age)


_results: list[Counts[tuple[str, str]]] = []


def count_results(counts: Counts[tuple[str, str]]) -> None:
    """The results gauge says `counts` at each scrape (a series that fell to 0 stays at 0):
    read when asked, never recounted per change."""
    _results[:] = [counts]


class _Results(Collector):
    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "quickq_guard_audit_results", "Results the reports hold now (before any cap), "
            "by policy and result (fail, warn, error, skip for excepted, pass for a patch a "
            "mutate policy would make).", labels=["policy", "result"])
        # list() copies the items in one step under the GIL while the loop changes them.
        for (policy, result), value in sorted(list(_results[0].items()) if _results else ()):
            family.add_metric([policy, result], max(value, 0))
        yield family


REGISTRY.register(_Results())


def serve(port: int, health: Health, page: Callable[[], str | None] | None = None) -> None:
    """Serve /metrics on `port` in a thread (0: not at all), /healthz and /readyz from
    `health`, and `page()` at /report when given. Every other path answers the metrics, as
    prometheus-client's own server does."""
    if not port:
        return
    server = make_server("0.0.0.0", port, app(health, page), _Server,
                         handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()


Respond = Callable[..., Any]


def app(health: Health, page: Callable[[], str | None] | None
        ) -> Callable[[dict[str, Any], Respond], Iterable[bytes]]:
    """The WSGI app of the metrics port. /report renders one page at a time (a request
    that comes meanwhile waits): what a page costs grows with the results, not the
    requests."""
    metrics = make_wsgi_app(REGISTRY)
    rendering = threading.Lock()
    probes = {"/healthz": health.liveness, "/readyz": health.readiness}

    def serve_one(environ: dict[str, Any], respond: Respond) -> Iterable[bytes]:
        probe = probes.get(environ.get("PATH_INFO", ""))
        if probe is not None:
            problem = probe()
            respond("503 Service Unavailable" if problem else "200 OK",
                    [("Content-Type", "text/plain"), ("Cache-Control", "no-store")])
            return [f"{problem or 'ok'}\n".encode()]
        if page is None or environ.get("PATH_INFO") != "/report":
            return metrics(environ, respond)  # type: ignore[no-any-return]
        if environ.get("REQUEST_METHOD") != "GET":
            respond("405 Method Not Allowed", [("Allow", "GET"),
                                               ("Content-Type", "text/plain")])
            return [b"/report is read-only: GET it\n"]
        with rendering:
            html = page()
        if html is None:
            respond("503 Service Unavailable", [("Content-Type", "text/plain"),
                                                ("Retry-After", "5")])
            return [b"no full scan has ended yet: try again in a few seconds\n"]
        body = html.encode()
        respond("200 OK", [("Content-Type", "text/html; charset=utf-8"),
                           ("Content-Length", str(len(body))), ("Cache-Control", "no-store"),
                           ("X-Content-Type-Options", "nosniff")])
        return [body]

    return serve_one


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow reader never holds the process up at exit


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """A scrape every few seconds is no news: no access log."""
