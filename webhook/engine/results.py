"""The shape of a verdict: a Decision per resource, a Result per policy, a Finding per violation.

The webhook, the CLI and users' scripts all render this one shape. Everything here is
immutable: each evaluation builds its own results, so no evaluation can see another's, and
a Decision can be hashed or kept as a set member. Change a copy with `dataclasses.replace`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from webhook.engine.patch import Path, dotted, pointer

Status = Literal["pass", "fail", "patch", "skip", "error"]
# What a decision means, worked out once by the engine; the webhook's answer, its metrics
# and logs, and the CLI's summaries and exit codes all read it.
Outcome = Literal["allowed", "denied", "patched", "would-deny", "would-patch", "error"]
OUTCOMES: tuple[Outcome, ...] = ("allowed", "denied", "patched", "would-deny", "would-patch",
                                 "error")
# What one finding means for the object, with the config's dry-run mode applied (see
# verdict_of): deny, would-deny (dry-run), warn (a warn policy, or a violation an UPDATE
# keeps), audit, patch, would-patch (dry-run), excepted (a PolicyException covers it) or error
# (the object cannot be judged). evaluate()'s answer and every output render it.
Verdict = Literal["deny", "would-deny", "warn", "audit", "patch", "would-patch", "excepted",
                  "error"]


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing to change: `message` says what to do, naming the container and field.

    `at` is the field as keys and indices (("spec", "containers", 0, "image")), so a key
    holding `.` or `]` survives; `path` renders it for people (spec.containers[0].image) and
    `pointer` as a JSON pointer (/spec/containers/0/image). `patch` holds the JSON-patch
    operations of a mutate rule. An excepted finding never denies: it warns, naming its
    `exception`. What it means for the object: Decision.verdict.
    """

    message: str
    at: Path
    container: str | None = None
    patch: tuple[dict[str, Any], ...] = field(default=(), hash=False)
    # The patch as a report shows it, when that differs: a CEL mutation that copies an env
    # value (or one under a secret-looking key) shows it as (hidden) (webhook.engine.hidden).
    shown_patch: tuple[dict[str, Any], ...] | None = field(default=None, hash=False,
                                                           compare=False)
    preexisting: bool = False
    # The PolicyException that excepts this finding (name, expiry, reason), or "".
    exception: str = ""
    # What a denial for this finding answers with: a CEL validation's `reason`
    # (Unauthorized, Forbidden, Invalid, RequestEntityTooLarge), "" for Forbidden.
    denial_reason: str = ""
    # Which check of the policy found it, when its field does not tell (a CEL validation
    # without a fieldPath: validations[1]): an UPDATE tells a new failure from an old one
    # by it.
    check: str = ""

    @property
    def path(self) -> str:
        return dotted(self.at)

    @property
    def pointer(self) -> str:
        return pointer(self.at)


@dataclass(frozen=True, slots=True)
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

    @property
    def shown_patch(self) -> list[dict[str, Any]]:
        """`patch` as a report shows it (see Finding.shown_patch)."""
        return [op for f in self.findings
                for op in (f.patch if f.shown_patch is None else f.shown_patch)]


def _frozen_annotations(value: Mapping[str, str] | None = None) -> Mapping[str, str]:
    return MappingProxyType(dict(value)) if value else _NO_ANNOTATIONS


_NO_ANNOTATIONS: Mapping[str, str] = MappingProxyType({})
_NO_FINDING = Finding("", ())  # what a result without findings is judged as (see verdicts)


@dataclass(frozen=True, slots=True)
class Decision:
    """The verdict on one object: what the webhook answers and what the CLI prints.

    `outcome` is what the decision means (see Outcome) and `verdict(result, finding)` what
    each finding means (see Verdict). `patch` is the JSON patch to return (empty in dry-run
    mode) and `patched` the object after it; `warnings` and `audit_annotations` carry the
    findings that do not block.
    """

    resource: Resource
    results: tuple[Result, ...]
    allowed: bool
    outcome: Outcome = "allowed"
    message: str = ""
    warnings: tuple[str, ...] = ()
    audit_annotations: Mapping[str, str] = field(default_factory=_frozen_annotations,
                                                 hash=False)
    patch: tuple[dict[str, Any], ...] = field(default=(), hash=False)
    patched: Any = field(default=None, hash=False, compare=False)
    # Why the object was not judged at all (a kind not judged, an excluded namespace or
    # user); "" when it was. Such a decision is allowed, and the CLI counts it as skipped.
    skipped: str = ""
    # The HTTP status reason of a denial: its first finding's denial_reason, else Forbidden.
    denial_reason: str = "Forbidden"
    # Judged in the config's dry-run mode: nothing denied or patched (see verdict).
    dry_run: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.audit_annotations, MappingProxyType):
            object.__setattr__(self, "audit_annotations",
                               _frozen_annotations(self.audit_annotations))

    def verdict(self, result: Result, finding: Finding) -> Verdict:
        """What one finding of one of this decision's results means for the object: what
        the webhook's answer, its metrics and logs, and every CLI format render."""
        return verdict_of(result, finding, self.dry_run)

    @property
    def unjudged(self) -> tuple[str, ...]:
        """The warnings of no policy: what quickq-guard does not judge of an object it judges
        (a KubeAI Model's resource profile, a podSpecPatch); a policy's warnings start with
        `[policy-id]`."""
        return tuple(warning for warning in self.warnings if not warning.startswith("["))

    def verdicts(self, result: Result) -> tuple[Verdict, ...]:
        """The verdict of each finding of a result that failed, patched or errored; one
        without findings (a policy that could not judge) has one, its own: what metrics,
        logs and the CLI's summary count."""
        if not result.findings:
            return (verdict_of(result, _NO_FINDING, self.dry_run),)
        return tuple(verdict_of(result, found, self.dry_run) for found in result.findings)


def verdict_of(result: Result, finding: Finding, dry_run: bool) -> Verdict:
    """The one place where a finding's verdict is worked out (see Verdict): evaluate() builds
    its answer from it, and Decision.verdict gives it to every output."""
    if result.status == "error":
        return "error"
    if finding.exception:
        return "excepted"
    if result.action == "audit":
        return "audit"
    if result.action == "warn":
        return "warn"
    if result.status == "patch":
        return "would-patch" if dry_run else "patch"
    if finding.preexisting:
        return "warn"  # an UPDATE keeps a violation the old object already had
    return "would-deny" if dry_run else "deny"


def outcome_of(verdicts: set[str], patched: bool) -> Outcome:
    """The one place where what a decision means is worked out, from its findings'
    verdicts: the first of error, deny, would-deny, would-patch present; then patched when
    a patch was made, else allowed."""
    for said, outcome in _OUTCOMES:
        if said in verdicts:
            return outcome
    return "patched" if patched else "allowed"


_OUTCOMES: tuple[tuple[str, Outcome], ...] = (
    ("error", "error"), ("deny", "denied"), ("would-deny", "would-deny"),
    ("would-patch", "would-patch"))
