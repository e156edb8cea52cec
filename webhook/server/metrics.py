"""Prometheus metrics of the webhook, in one registry.

With several workers each process counts on its own, so a scrape (which lands on one worker)
would see a fraction. `quickq-guard serve --workers N` (N > 1) therefore runs
prometheus-client's multiprocess mode: each worker writes its values to files in
PROMETHEUS_MULTIPROC_DIR and `/metrics` on any worker adds them up. The variable must be set
before prometheus_client is imported, which the server does before starting its workers.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Collection

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client import multiprocess as _multiprocess

from webhook.engine.results import Decision
from webhook.engine.workload import NOT_JUDGED, WORKLOAD_KINDS
from webhook.server.admission import OPERATIONS

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = CONTENT_TYPE_LATEST

disable_created_metrics()  # type: ignore[no-untyped-call] # the *_created series only add noise to every scrape
REGISTRY = CollectorRegistry(auto_describe=True)

REVIEWS = Counter(
    "quickq_guard_reviews", "Admission reviews answered, by the decision's outcome "
    "(allowed, denied, patched, error; would-deny and would-patch in dry-run mode).",
    ["endpoint", "kind", "operation", "decision"], registry=REGISTRY)
FINDINGS = Counter(
    "quickq_guard_findings", "Policy findings, by policy and verdict, as the answer renders "
    "them: deny, warn (also a violation an UPDATE keeps), audit, patch, excepted, error (the "
    "object or rule could not be judged); would-deny and would-patch in mode dry-run.",
    ["policy", "verdict", "mode"], registry=REGISTRY)
LATENCY = Histogram(
    "quickq_guard_review_duration_seconds", "Time from the request's body to the answer.",
    ["endpoint"], registry=REGISTRY,
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5))
BAD_REQUESTS = Counter(
    "quickq_guard_rejected_requests", "Requests that are not an AdmissionReview we can "
    "answer (400) or are too large (413).", ["endpoint", "code"], registry=REGISTRY)
RELOADS = Counter(
    "quickq_guard_reloads", "Reloads of policies or certificate that took effect.",
    ["what"], registry=REGISTRY)
RELOAD_FAILURES = Counter(
    "quickq_guard_reload_failures", "Reloads rejected (the previous set stays in force): "
    "what is policies or certificate.", ["what"], registry=REGISTRY)
EXCEPTED = Counter(
    "quickq_guard_excepted_findings", "Findings a PolicyException turned into a warning, by "
    "policy.", ["policy"], registry=REGISTRY)
VIEW_AGE = Gauge(
    "quickq_guard_cluster_view_age_seconds", "Seconds since the webhook's view of cluster "
    "objects (by kind: PolicyException, ResourceClaim, ResourceClaimTemplate) was last known "
    "current: 0 while its watch is open, +Inf before it was ever listed (then no exception "
    "applies and no claim resolves).",
    ["kind"], registry=REGISTRY, multiprocess_mode="livemax")
CERT_EXPIRY = Gauge(
    "quickq_guard_certificate_expiry_timestamp_seconds",
    "notAfter of the serving certificate in use (Unix time); the soonest over live workers.",
    registry=REGISTRY, multiprocess_mode="livemin")


# Every label value comes from a fixed set: a series lives as long as the process, so a
# value taken from the request as sent (20,000 made-up kinds) would grow /metrics and the
# memory without bound. Kinds quickq-guard judges keep their name; any other is `other`.
KNOWN_KINDS = frozenset(kind for _, kind in (*WORKLOAD_KINDS, *NOT_JUDGED))


def kind_label(kind: str, custom_kinds: Collection[str] = ()) -> str:
    """The `kind` label: a judged kind (built in or the config's), `unknown` or `other`."""
    if not kind:
        return "unknown"
    return kind if kind in KNOWN_KINDS or kind in custom_kinds else "other"


def record_review(endpoint: str, kind: str, operation: str, decision: Decision | None,
                  mode: str, latency: float, custom_kinds: Collection[str] = ()) -> None:
    """Count one answered review by its outcome, and its findings by policy and verdict
    (Decision.verdicts: the engine's few, so the series stay bounded)."""
    outcome = decision.outcome if decision is not None else "allowed"
    REVIEWS.labels(endpoint, kind_label(kind, custom_kinds),
                   operation if operation in OPERATIONS else "other", outcome).inc()
    LATENCY.labels(endpoint).observe(latency)
    if decision is None:
        return
    for result in decision.results:
        if result.status not in ("fail", "patch", "error"):
            continue
        policy = result.policy or "none"
        for verdict, count in collections.Counter(decision.verdicts(result)).items():
            FINDINGS.labels(policy, verdict, mode).inc(count)
            if verdict == "excepted":
                EXCEPTED.labels(policy).inc(count)


def multiprocess() -> bool:
    return bool(os.environ.get(MULTIPROC_ENV))


def render() -> bytes:
    """The text exposition: this process's registry, or the sum over every worker's files."""
    if multiprocess():
        registry = CollectorRegistry()
        _multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return bytes(generate_latest(registry))
    return bytes(generate_latest(REGISTRY))


def worker_exited(pid: int) -> None:
    """Drop a finished worker's live gauges (its counters stay in the sums)."""
    if multiprocess():
        _multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
