"""The audit's results as report objects: OpenReports `openreports.io/v1alpha1` (default) or
the wgpolicyk8s.io/v1alpha2 PolicyReport, one per namespace named `quickq-guard`, and one
cluster report for cluster-scoped objects.

Both APIs share the result's shape (source, policy, result, message, severity, resources,
properties, timestamp) and the summary's; OpenReports adds a `source` for the whole report.
A report is bounded: at most `max_results` results and REPORT_BYTES of them, the worst
first, then one more result saying how many were left out and the command that shows them
all. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from webhook.audit.scan import Entry, Subject
from webhook.audit.state import Held

SOURCE = "quickq-guard"
NAME = "quickq-guard"
LABELS = {"app.kubernetes.io/managed-by": "quickq-guard"}
RESULTS = ("pass", "fail", "warn", "error", "skip")
MAX_RESULTS = 1000
# What a report's results may take, serialized: etcd refuses an object over 1.5 MiB, and a
# report that size is slow for every reader; messages and patches vary, so the count alone
# does not bound it.
REPORT_BYTES = 768 * 1024
TRUNCATED = "quickq-guard-report-limit"
_ORDER = {"fail": 0, "error": 1, "warn": 2, "skip": 3, "pass": 4}


@dataclass(frozen=True, slots=True)
class ReportApi:
    """Where reports of one API live: the namespaced kind and the cluster-scoped one."""

    name: str
    group: str
    version: str
    kind: str
    plural: str
    cluster_kind: str
    cluster_plural: str
    report_source: bool  # a `source` field on the report itself (OpenReports)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


OPENREPORTS = ReportApi("openreports", "openreports.io", "v1alpha1", "Report", "reports",
                        "ClusterReport", "clusterreports", True)
WGPOLICYK8S = ReportApi("wgpolicyk8s", "wgpolicyk8s.io", "v1alpha2", "PolicyReport",
                        "policyreports", "ClusterPolicyReport", "clusterpolicyreports", False)
APIS = {api.name: api for api in (OPENREPORTS, WGPOLICYK8S)}


def result(subject: Subject, entry: Entry, since: int) -> dict[str, Any]:
    """One result of a report."""
    properties = {"action": entry.action, "verdict": entry.verdict}
    if entry.exception:
        properties["exception"] = entry.exception
    if entry.patch:
        properties["patch"] = entry.patch
    return {"source": SOURCE, "policy": entry.policy, "rule": entry.policy,
            "category": entry.category, "severity": entry.severity, "result": entry.result,
            "scored": True, "message": entry.message, "resources": [subject.reference()],
            "properties": properties, "timestamp": {"seconds": since, "nanos": 0}}


def report(api: ReportApi, namespace: str, held: Iterable[Held],
           max_results: int = MAX_RESULTS) -> dict[str, Any]:
    """The report of a namespace ("" for the cluster report): its results the worst first,
    at most `max_results` and REPORT_BYTES of them, and a summary that counts every result,
    those left out too."""
    return fingerprinted(api, namespace, held, max_results)[0]


def fingerprinted(api: ReportApi, namespace: str, held: Iterable[Held],
                  max_results: int = MAX_RESULTS) -> tuple[dict[str, Any], bytes]:
    """The report and its fingerprint in one pass: each result is encoded once, for the
    size cap and the fingerprint both (a write makes a report of up to 1,000 objects)."""
    rows = sorted(((entry, item.subject, item.since) for item in held for entry in item.entries),
                  key=_order)
    summary: Counter[str] = Counter(entry.result for entry, _, _ in rows)
    results: list[dict[str, Any]] = []
    encoded: list[bytes] = []
    size = 0
    for entry, subject, since in rows:
        if len(results) >= max_results:
            break
        row = result(subject, entry, since)
        stamp = row.pop("timestamp")
        text = orjson.dumps(row, option=orjson.OPT_SORT_KEYS)
        size += len(text) + len(_STAMP_KEY) + len(orjson.dumps(stamp))  # as serialized
        if size > REPORT_BYTES:
            break
        row["timestamp"] = stamp
        results.append(row)
        encoded.append(text)
    left_out = len(rows) - len(results)
    if left_out:
        newest = max(since for _, _, since in rows)
        row = _left_out(left_out, namespace, max_results, newest)
        results.append(row)
        encoded.append(_encoded(row))
    metadata: dict[str, Any] = {"name": NAME, "labels": dict(LABELS)}
    if namespace:
        metadata["namespace"] = namespace
    body: dict[str, Any] = {"apiVersion": api.api_version,
                            "kind": api.kind if namespace else api.cluster_kind,
                            "metadata": metadata}
    if api.report_source:
        body["source"] = SOURCE
    body["summary"] = {key: summary[key] for key in RESULTS}
    body["results"] = results
    return body, _digest(body, encoded)


def fingerprint(report: dict[str, Any]) -> bytes:
    """What a write changes, timestamps aside: two replicas that judged the same objects at
    different times make reports with the same fingerprint, so a new leader rewrites none
    that are right already. A report read from the cluster has the fingerprint of the one
    `fingerprinted` made."""
    return _digest(report, [_encoded(row) for row in report.get("results") or ()])


_STAMP_KEY = b',"timestamp":'


def _encoded(row: dict[str, Any]) -> bytes:
    return orjson.dumps({key: value for key, value in row.items() if key != "timestamp"},
                        option=orjson.OPT_SORT_KEYS)


def _digest(report: dict[str, Any], encoded: list[bytes]) -> bytes:
    head = {"summary": report.get("summary"), "kind": report.get("kind"),
            "apiVersion": report.get("apiVersion")}
    digest = hashlib.blake2b(orjson.dumps(head, option=orjson.OPT_SORT_KEYS), digest_size=16)
    digest.update(b"\n".join(encoded))
    return digest.digest()


def see_all(namespace: str) -> str:
    """The command that shows every result a report had to leave out."""
    return (f"quickq-guard audit --once --namespace {namespace}" if namespace
            else "quickq-guard audit --once")


def _left_out(count: int, namespace: str, max_results: int, since: int) -> dict[str, Any]:
    return {"source": SOURCE, "policy": TRUNCATED, "rule": TRUNCATED, "result": "warn",
            "severity": "info", "scored": False,
            "message": (f"{count} more result{'s' * (count != 1)} left out of this report "
                        f"(at most {max_results} results, {REPORT_BYTES // 1024} KiB); "
                        f"see them all with: {see_all(namespace)}"),
            "properties": {"leftOut": str(count)}, "timestamp": {"seconds": since, "nanos": 0}}


def _order(row: tuple[Entry, Subject, int]) -> tuple[Any, ...]:
    entry, subject, _ = row
    return (_ORDER.get(entry.result, 5), subject.kind, subject.name, subject.uid, entry.policy)
