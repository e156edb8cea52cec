"""The shape of a verdict: a Decision per resource, a Result per policy, a Finding per violation.

The webhook, the CLI and users' scripts all render this one shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["pass", "fail", "patch", "skip", "error"]

# These are read-only by convention, not frozen dataclasses: a frozen __init__ sets each field
# through object.__setattr__, about twice the cost of a plain one, and several are built on
# every evaluation. Nothing assigns to them (dataclasses.replace makes changed copies), and the
# engine shares pass and skip results between evaluations, so nothing may. unsafe_hash keeps
# them hashable by value, as they were when frozen.

@dataclass(slots=True, unsafe_hash=True)
class Resource:
    """Which object a decision is about, and where it was read from (file:document)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    source: str = ""

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where}" if where else self.kind or "object"


@dataclass(slots=True, unsafe_hash=True)
class Finding:
    """One thing to change: `message` says what to do, naming the container and field.

    `path` is the field in dotted form (spec.containers[0].resources.requests.cpu);
    `patch` holds the JSON-patch operations of a mutate rule.
    """

    message: str
    path: str
    container: str | None = None
    patch: tuple[dict[str, Any], ...] = ()
    preexisting: bool = False


@dataclass(slots=True, unsafe_hash=True)
class Result:
    """What one policy says about one resource."""

    policy: str | None
    type: str
    action: str
    status: Status
    findings: tuple[Finding, ...] = ()
    reason: str = ""

    @property
    def message(self) -> str:
        if self.findings:
            return "; ".join(f.message for f in self.findings)
        return self.reason

    @property
    def patch(self) -> list[dict[str, Any]]:
        return [op for f in self.findings for op in f.patch]


@dataclass(slots=True, unsafe_hash=True)
class Decision:
    """The verdict on one object: what the webhook answers and what the CLI prints.

    `patch` is the JSON patch to return (empty in dry-run mode) and `patched` the object after
    it; `warnings` and `audit_annotations` carry the findings that do not block.
    """

    resource: Resource
    results: tuple[Result, ...]
    allowed: bool
    message: str = ""
    warnings: tuple[str, ...] = ()
    audit_annotations: dict[str, str] = field(default_factory=dict)
    patch: tuple[dict[str, Any], ...] = ()
    patched: Any = None
