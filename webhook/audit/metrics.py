"""Prometheus metrics of the audit, in a registry of their own (as the webhook's are, in
webhook/server/metrics.py), served on --metrics-port by prometheus-client's HTTP server.

Every label value comes from a fixed set: policy ids of the loaded policies, the five
report results, the few write operations.
"""

from __future__ import annotations

import time
from collections import Counter as Counts

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)

disable_created_metrics()  # type: ignore[no-untyped-call] # the *_created series only add noise
REGISTRY = CollectorRegistry(auto_describe=True)

SCAN_SECONDS = Histogram(
    "quickq_guard_audit_scan_duration_seconds", "Time a full scan took: every kind listed "
    "in pages and every object judged.", registry=REGISTRY,
    buckets=(0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600))
JUDGED = Counter(
    "quickq_guard_audit_objects_judged", "Objects judged, by full scans and by watch events.",
    ["by"], registry=REGISTRY)
RESULTS = Gauge(
    "quickq_guard_audit_results", "Results the reports hold now (before any cap), by policy "
    "and result (fail, warn, error, skip for excepted, pass for a patch a mutate policy "
    "would make).", ["policy", "result"], registry=REGISTRY)
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


def set_results(counts: Counts[tuple[str, str]]) -> None:
    """Make the results gauge say `counts` (a series that fell to 0 stays at 0)."""
    for (policy, result), value in counts.items():
        RESULTS.labels(policy, result).set(max(value, 0))


def serve(port: int) -> None:
    """Serve /metrics on `port` in a thread (0: not at all)."""
    if port:
        start_http_server(port, registry=REGISTRY)
