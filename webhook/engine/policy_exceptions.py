"""PolicyException: a granted, expiring exception to named policies for named objects.

A PolicyException (quickq.io, namespaced) says which policies (by id; for container-scope
policies, optionally which containers) do not deny which objects (kinds, namespaces, names,
a label selector), until when and why. Only exceptions from the config's
`exceptionNamespaces` are honoured, whatever API version they were written through: who may
create objects there decides who grants exceptions, so no team grants itself one.

Pure: objects, policies and the evaluation time in, decisions out; no clock is read here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from pydantic import AwareDatetime, Field, ValidationError

from webhook.engine.globs import matches_any
from webhook.engine.patch import Path, dotted
from webhook.engine.policy import Config, LabelSelector, Model, PolicySet, _explain
from webhook.engine.results import Decision, Finding, Resource, Result, outcome_of, verdict_of
from webhook.engine.schema import is_mapping

GROUP = "quickq.io"
KIND = "PolicyException"
VERSION = "v1"  # the CRD's storage version, and the one the webhook watches
# Still served and read, with a deprecation note: the version PolicyExceptions had before the
# project's own kinds came under one API group and version (quickq.io/v1).
DEPRECATED_VERSIONS = ("v1alpha1",)
PLURAL = "policyexceptions"
# The result a PolicyException object gets: the checks below, under one name.
RESULT_ID = "policy-exception"
_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
# A policy id (as policy.py's), or a glob of them (`*`, `pod-security-*`) where the config
# allows wildcards.
_POLICY_PATTERN = r"^[a-z0-9*]([-a-z0-9*]{0,61}[a-z0-9*])?$"


class ExceptionError(ValueError):
    """A PolicyException that cannot be read; the message names the field and the fix."""


class ExceptedPolicy(Model):
    """One policy the exception covers; `containers` (globs) narrows a container-scope
    policy to those containers (a finding about the whole object is then not covered)."""

    id: str = Field(pattern=_POLICY_PATTERN, description="policy id, e.g. disallow-root-user")
    containers: tuple[str, ...] = Field(
        default=(), description="container names (globs); empty: every container")


class ExceptionMatch(Model):
    """Which objects the exception covers: all of kinds, namespaces, names and selector."""

    kinds: tuple[str, ...] = Field(default=(), description="kinds, e.g. DaemonSet and Pod; "
                                   "empty: every kind judged")
    namespaces: tuple[str, ...] = Field(min_length=1, description="namespaces (globs) of "
                                        "the objects covered")
    names: tuple[str, ...] = Field(default=(), description="object names (globs); empty: "
                                   "every name")
    selector: LabelSelector | None = Field(default=None, description="label selector on "
                                           "the object's labels")


class ExceptionSpec(Model):
    """A PolicyException's spec, as the CRD's schema has it."""

    policies: tuple[ExceptedPolicy, ...] = Field(min_length=1, max_length=64)
    match: ExceptionMatch
    expires: AwareDatetime = Field(description="RFC 3339 time (with its offset, e.g. "
                                   "2026-03-01T00:00:00Z) the exception stops applying at")
    reason: str = Field(min_length=1, max_length=1024, description="why the objects may "
                        "break the policies")
    ticket: str | None = Field(default=None, max_length=256)
    owner: str | None = Field(default=None, max_length=256)


class Metadata(Model):
    """What an exception reads of its metadata (the API server owns the rest)."""

    model_config = Model.model_config | {"extra": "ignore"}
    name: str = Field(min_length=1, max_length=253, pattern=_NAME)
    namespace: str = Field(min_length=1, max_length=63)


class PolicyException(Model):
    """A PolicyException resource as the engine reads it."""

    model_config = Model.model_config | {"extra": "ignore"}
    metadata: Metadata
    spec: ExceptionSpec

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def note(self) -> str:
        """What a warning says of the exception: name, expiry and reason."""
        return (f"PolicyException {self.key}, until {_rfc3339(self.spec.expires)}: "
                f"{self.spec.reason}")


def is_exception(obj: Any) -> bool:
    """A PolicyException of quickq.io, in any API version: the version it was written
    through changes nothing about where it may be honoured from."""
    if not is_mapping(obj) or obj.get("kind") != KIND:
        return False
    api_version = obj.get("apiVersion")
    return isinstance(api_version, str) and api_version.partition("/")[0] == GROUP


def read_exception(obj: Any, namespace: str | None = None) -> PolicyException:
    """The exception an object holds; `namespace` is the request's (or the file's default)
    when metadata has none. Raises ExceptionError naming each bad field."""
    if not is_exception(obj):
        raise ExceptionError(f"not a {KIND} of {GROUP}: apiVersion must be "
                             f"{GROUP}/{VERSION} and kind {KIND}")
    metadata = obj.get("metadata")
    if namespace and isinstance(metadata, Mapping) and not metadata.get("namespace"):
        obj = {**obj, "metadata": {**metadata, "namespace": namespace}}
    try:
        return PolicyException.model_validate(obj)
    except ValidationError as error:
        raise ExceptionError(_explain(error)) from None


def problems(exception: PolicyException, policies: PolicySet,
             now: datetime | None) -> list[str]:
    """What the webhook refuses in a PolicyException, each with what to change. Without
    `now` the time checks are left out (the engine reads no clock)."""
    return [problem for _, problem in located_problems(exception, policies, now)]


def located_problems(exception: PolicyException, policies: PolicySet,
                     now: datetime | None) -> list[tuple[Path, str]]:
    """`problems`, each with the field it is about."""
    config = policies.config
    found: list[tuple[Path, str]] = []
    known = {policy.id: policy for policy in policies.policies}
    for index, entry in enumerate(exception.spec.policies):
        at: Path = ("spec", "policies", index, "id")
        where = dotted(at)
        if "*" in entry.id:
            if not config.exceptionWildcards:
                found.append((at, f"{where}: {entry.id!r} is a wildcard; name each policy (the "
                                  "config's exceptionWildcards is false)"))
            elif not matches_any_policy(entry.id, known):
                found.append((at, f"{where}: {entry.id!r} matches no loaded policy"))
            continue
        policy = known.get(entry.id)
        if policy is None:
            found.append((at, f"{where}: no policy {entry.id!r}; write one of: "
                              f"{', '.join(sorted(known))}"))
        elif policy.type != "validate":
            found.append((at, f"{where}: {entry.id!r} is a mutate policy, which never denies; "
                              "remove it"))
        elif entry.containers and policy.cel is not None and policy.cel.scope == "object":
            found.append(((*at[:-1], "containers"),
                          f"spec.policies[{index}].containers: {entry.id!r} judges the whole "
                          "object, not containers; remove containers"))
    expires = exception.spec.expires
    longest = timedelta(days=config.exceptionMaxDays)
    if now is None:
        return found
    if expires <= now:
        found.append((_EXPIRES, f"spec.expires: {_rfc3339(expires)} is in the past; set a "
                                f"time after {_rfc3339(now)}"))
    elif expires - now > longest:
        found.append((_EXPIRES, f"spec.expires: {_rfc3339(expires)} is more than "
                                f"{config.exceptionMaxDays} days away (the config's "
                                f"exceptionMaxDays); set it to {_rfc3339(now + longest)} or "
                                "earlier"))
    return found


_EXPIRES: Path = ("spec", "expires")


def unheard(exception: PolicyException, config: Config) -> str:
    """Why an exception that may be created is never honoured, or ''."""
    if exception.metadata.namespace in config.exceptionNamespaces:
        return ""
    listed = ", ".join(config.exceptionNamespaces) or "none"
    return (f"{KIND} {exception.key} has no effect: exceptions are honoured only from the "
            f"config's exceptionNamespaces ({listed}); create it in one of them")


def matches_any_policy(pattern: str, known: Iterable[str]) -> bool:
    return any(matches_any(policy_id, (pattern,)) for policy_id in known)


def judge(obj: Any, policies: PolicySet, resource: Resource, now: datetime | None,
          dry_run: bool = False) -> Decision:
    """The verdict on a PolicyException object itself: denied with every problem and its
    fix, or admitted (with a warning when it is in a namespace no exception is honoured
    from). In dry-run mode the problems are warnings."""
    warnings: tuple[str, ...] = ()
    located: list[tuple[Path, str]]
    try:
        exception = read_exception(obj, resource.namespace or None)
    except ExceptionError as error:
        located = [((), f"{KIND} cannot be read: {error}")]
    else:
        located = located_problems(exception, policies, now)
        ignored = unheard(exception, policies.config)
        warnings = (f"[{RESULT_ID}] {ignored}",) if ignored else ()
    found = [problem for _, problem in located]
    result = Result(RESULT_ID, "validate", "enforce", "fail" if found else "pass",
                    tuple(Finding(problem, at) for at, problem in located))
    outcome = outcome_of({verdict_of(result, finding, dry_run) for finding in result.findings},
                         False)
    if outcome == "allowed":
        return Decision(resource, (result,), allowed=True, outcome=outcome, warnings=warnings)
    if outcome == "would-deny":
        return Decision(resource, (result,), allowed=True, outcome=outcome, warnings=(
            *warnings, *(f"[{RESULT_ID}] would deny: {problem}" for problem in found)),
            dry_run=True)
    message = f"{resource} is denied by quickq-guard:\n" + "\n".join(
        f"- [{RESULT_ID}] {problem}" for problem in found)
    return Decision(resource, (result,), allowed=False, outcome=outcome, message=message,
                    warnings=warnings)


Entry = tuple[PolicyException, ExceptedPolicy]
_GLOB = frozenset("*?[")


@dataclass(frozen=True, slots=True)
class Exceptions:
    """Exceptions indexed by policy id and the namespace they cover, so a failed result looks
    only at those that may cover it: a thousand exceptions for other namespaces cost a
    dictionary look-up."""

    # (policy id, namespace) -> entries, for exceptions that name their namespaces
    exact: Mapping[tuple[str, str], tuple[Entry, ...]] = field(default_factory=dict)
    # policy id -> entries whose namespaces are globs (`team-*`)
    globbed: Mapping[str, tuple[Entry, ...]] = field(default_factory=dict)
    wildcards: tuple[Entry, ...] = ()  # entries whose policy id is a glob
    count: int = 0

    def __bool__(self) -> bool:
        return self.count > 0

    def __len__(self) -> int:
        return self.count

    def candidates(self, policy_id: str, namespace: str | None = None) -> Iterable[Entry]:
        """The entries that may cover a finding of `policy_id` in `namespace` (None: in any
        namespace); `covers` decides."""
        if namespace is None:
            yield from (entry for (policy, _), group in self.exact.items()
                        if policy == policy_id for entry in group)
        else:
            yield from self.exact.get((policy_id, namespace), ())
        yield from self.globbed.get(policy_id, ())
        for exception, entry in self.wildcards:
            if matches_any(policy_id, (entry.id,)):
                yield exception, entry


def index(exceptions: Iterable[PolicyException]) -> Exceptions:
    """The exceptions as evaluate() takes them."""
    # Entries keyed by identity (a label selector's dict makes them unhashable), each once.
    exact: dict[tuple[str, str], dict[tuple[int, int], Entry]] = {}
    globbed: dict[str, dict[tuple[int, int], Entry]] = {}
    wildcards: dict[tuple[int, int], Entry] = {}
    count = 0
    for exception in exceptions:
        count += 1
        namespaces = exception.spec.match.namespaces
        literal = not any(_GLOB & set(namespace) for namespace in namespaces)
        for entry in exception.spec.policies:
            key = (id(exception), id(entry))
            if "*" in entry.id:
                wildcards[key] = (exception, entry)
            elif literal:
                for namespace in namespaces:
                    exact.setdefault((entry.id, namespace), {})[key] = (exception, entry)
            else:
                globbed.setdefault(entry.id, {})[key] = (exception, entry)
    return Exceptions({key: tuple(group.values()) for key, group in exact.items()},
                      {key: tuple(group.values()) for key, group in globbed.items()},
                      tuple(wildcards.values()), count)


NONE = Exceptions()


def honoured(exception: PolicyException, config: Config, now: datetime,
             wildcard: bool) -> bool:
    """Whether the exception applies at `now`: from an exception namespace, not expired,
    within the longest lifetime, and a wildcard only where the config allows them. The
    webhook checks these when the exception is created; they are checked again here since
    the config (or the clock) may have moved on since."""
    expires = exception.spec.expires
    return (exception.metadata.namespace in config.exceptionNamespaces
            and now < expires <= now + timedelta(days=config.exceptionMaxDays)
            and (config.exceptionWildcards or not wildcard))


def covers(exception: PolicyException, entry: ExceptedPolicy, finding: Finding, kind: str,
           namespace: str, name: str, labels: Mapping[str, Any]) -> bool:
    match = exception.spec.match
    if match.kinds and kind not in match.kinds:
        return False
    if not matches_any(namespace, match.namespaces):
        return False
    if match.names and not matches_any(name, match.names):
        return False
    if match.selector is not None and not match.selector.matches(labels):
        return False
    if entry.containers:
        if finding.container is None:
            return False
        container = finding.container.partition(" in ")[0]
        return matches_any(container, entry.containers)
    return True


def apply(results: list[Result], exceptions: Exceptions, config: Config, now: datetime,
          kind: str, namespace: str, name: str, labels: Mapping[str, Any]) -> list[Result]:
    """Mark each finding of a failed validate result that an honoured exception covers with
    that exception: it then warns and is audited instead of denying."""
    marked = []
    for result in results:
        if result.status == "fail" and result.policy is not None:
            found = tuple(_excepted(f, exceptions, result.policy, config, now, kind,
                                    namespace, name, labels) for f in result.findings)
            if found != result.findings:
                result = replace(result, findings=found)
        marked.append(result)
    return marked


def _excepted(finding: Finding, exceptions: Exceptions, policy_id: str, config: Config,
              now: datetime, kind: str, namespace: str, name: str,
              labels: Mapping[str, Any]) -> Finding:
    if finding.preexisting:
        return finding  # a warning already
    for exception, entry in exceptions.candidates(policy_id, namespace):
        if honoured(exception, config, now, "*" in entry.id) and covers(
                exception, entry, finding, kind, namespace, name, labels):
            return replace(finding, exception=exception.note)
    return finding


def _rfc3339(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a PolicyException (the spec the model reads), for the CRD."""
    spec = ExceptionSpec.model_json_schema()
    defs = spec.pop("$defs", {})
    return {"type": "object", "title": KIND,
            "description": "Exceptions to quickq-guard policies for named objects, until "
                           "`expires`; honoured only from the config's exceptionNamespaces.",
            "properties": {"spec": spec}, "required": ["spec"], "$defs": defs}
