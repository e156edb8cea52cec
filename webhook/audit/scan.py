"""One object from the API server in, its verdict and the few results a report keeps out.

The verdict is the one `check` gives for a dump of the object (webhook.cli.judge.judge:
decode, then evaluate for a CREATE of the run's Review), so a report and `check` agree
result for result. What a report keeps of it is small and immutable (Entry), one per policy
that did not pass silently; the object itself is dropped once judged. Pure: no I/O.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from webhook.cli.formats.policyreport import report_result
from webhook.cli.judge import Judged, judge
from webhook.engine.policy import PolicySet
from webhook.engine.results import Decision, Result
from webhook.engine.review import Review
from webhook.manifests import Document

# A report's severity for a result, from the worst verdict among its findings: what the
# webhook does about it today (deny, warn, audit), or would do once enforced (would-deny).
_SEVERITY = {"deny": "high", "would-deny": "high", "error": "medium", "warn": "medium",
             "audit": "low", "excepted": "info", "patch": "info", "would-patch": "info"}
_RANK = ("deny", "would-deny", "error", "warn", "audit", "excepted", "patch", "would-patch")


@dataclass(frozen=True, slots=True)
class Subject:
    """The object a result is about, as a report's `resources` entry names it."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str

    def reference(self) -> dict[str, str]:
        reference = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name,
                     "uid": self.uid}
        if self.namespace:
            reference["namespace"] = self.namespace
        return reference


@dataclass(frozen=True, slots=True)
class Entry:
    """One policy's result on one object, as a report lists it: `result` is the report's
    (fail, warn, error, skip for an excepted violation, pass for a patch a mutate policy
    would make), `message` the one every other output shows (hidden values hidden)."""

    policy: str
    result: str
    message: str
    severity: str
    category: str
    action: str
    verdict: str  # the worst finding's (webhook.engine.results.Verdict)
    exception: str = ""  # the PolicyException(s) that excepted it
    patch: str = ""  # the JSON patch a mutate policy would make, as JSON text


def subject(obj: Mapping[str, Any]) -> Subject:
    metadata = obj.get("metadata") or {}
    return Subject(sys.intern(str(obj.get("apiVersion") or "")),
                   sys.intern(str(obj.get("kind") or "")),
                   sys.intern(str(metadata.get("namespace") or "")),
                   str(metadata.get("name") or ""), str(metadata.get("uid") or ""))


def address(obj: Mapping[str, Any], plural: str) -> str:
    """Where the object is read from, as its API path (`kubectl get --raw` takes it): the
    location every output names for it, as `file:line` for a manifest."""
    api_version = str(obj.get("apiVersion") or "")
    metadata = obj.get("metadata") or {}
    root = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    namespace = metadata.get("namespace")
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"{root}{where}/{plural}/{metadata.get('name', '')}"


def judged(obj: Mapping[str, Any], plural: str, policies: PolicySet, review: Review) -> Judged:
    """The verdict on a stored object, as `check` gives it on a dump of the object."""
    document = Document(address(obj, plural), obj)
    return Judged(document, judge(document, policies, review))


def entries(decision: Decision) -> tuple[Entry, ...]:
    """What a report keeps of a verdict: a result per policy that failed, warned, errored,
    was excepted or would patch; nothing for an object not judged or that passed."""
    if decision.skipped:
        return ()
    kept = []
    for result in decision.results:
        if result.status not in ("fail", "error", "patch"):
            continue
        outcome, message = report_result(decision, result)
        verdict = _worst(decision, result)
        exception = "; ".join(dict.fromkeys(f.exception for f in result.findings
                                            if f.exception))
        patch = orjson.dumps(result.shown_patch).decode() if result.status == "patch" else ""
        # Many objects say the same (a container named `web` with a `latest` image): the
        # audit keeps one copy of each text, however many objects it holds it for.
        kept.append(Entry(result.policy or "readable", outcome, sys.intern(message),
                          _SEVERITY[verdict], result.type, result.action, verdict,
                          sys.intern(exception), sys.intern(patch)))
    return tuple(kept)


def _worst(decision: Decision, result: Result) -> str:
    said = set(decision.verdicts(result))
    return next(verdict for verdict in _RANK if verdict in said)
