"""CEL policies: validations (and mutations) written in a policy file, run like built-in rules.

A policy in `scope: container` evaluates its expressions once per container, initContainer
and ephemeral container of whatever kind the object is (a NodeTemplate's spec is its one
container), with `container` bound, so its findings name the container and field path as the
built-in rules' do. In `scope: object` the expressions see the whole object once. Every
evaluation of a review reads one activation (webhook.engine.rules.cel_review), so that the
object, the pod specs and the containers are converted once per review, not once per policy,
pod spec or container.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from webhook.engine.cel import (
    MATCH_CONDITIONS_BUDGET,
    POLICY_BUDGET,
    Budget,
    EvaluationError,
    Expression,
    Scope,
    evaluate,
    selects_only,
)
from webhook.engine.hidden import hidden_in, hidden_values, hiding
from webhook.engine.patch import PatchError, Path, apply_patch, pointer, split_pointer
from webhook.engine.results import Finding
from webhook.engine.rules._base import finding
from webhook.engine.rules.cel_review import (
    BULK,
    Reader,
    Review,
    Reviews,
    Shared,
)
from webhook.engine.rules.cel_review import Request as Request  # where it was, for callers
from webhook.engine.workload import Container, Workload, dotted, read_workload

_POD_CONTAINER_LISTS = BULK["podSpec"]
_OBJECT_BULK = BULK["object"]  # where an object's size is


@dataclass(frozen=True, slots=True)
class Variable:
    name: str
    expression: Expression


@dataclass(frozen=True, slots=True)
class MatchCondition:
    name: str
    expression: Expression


@dataclass(frozen=True, slots=True)
class Each:
    """A validation's forEach: the list or map whose items are judged one by one. The texts
    as written (`items`, `check`, `message`: the export writes them out), and, compiled in the
    policy's program, each item's key and verdict (see policy.for_each_sources). `at`: the
    step of the fieldPath that is the item's index or key."""

    items: str
    check: str
    message: str | None
    verdicts: Expression
    at: int | None = None


@dataclass(frozen=True, slots=True)
class Validation:
    """One check; `field_path` is relative to the container in container scope. With `each`,
    the check is judged for every item of a list or map, a finding per item that fails, and
    `message_expression` yields the message of each item. `per_container`: a finding at the
    pod spec's field still names the container (see _about)."""

    expression: Expression
    message: str | None = None
    message_expression: Expression | None = None
    reason: str | None = None
    field_path: Path = ()
    per_container: bool = False
    each: Each | None = None


@dataclass(frozen=True, slots=True)
class Mutation:
    """A JSONPatch mutation: an expression yielding a list of JSON Patch operations, whose
    paths are relative to the container in container scope. `source` is the expression as
    written (with its JSONPatch{...} literals), for the MutatingAdmissionPolicy export."""

    expression: Expression
    source: str = ""


@dataclass(frozen=True, slots=True)
class CelPolicy:
    """A CEL policy compiled at load: what evaluate() runs in place of a built-in rule.

    The variables, validations, messageExpressions and mutations are one program
    (`cel.compile_policy`), each compiled once, that binds the variables (and its params,
    at `key` in a review's activation: cel.with_params), so that a variable is evaluated
    only when an expression reads it and fails only the expressions that read it, as
    Kubernetes' lazy variables do.
    """

    scope: Scope
    params: Mapping[str, Any] = field(default_factory=dict, hash=False)
    variables: tuple[Variable, ...] = ()
    match_conditions: tuple[MatchCondition, ...] = ()
    validations: tuple[Validation, ...] = ()
    mutations: tuple[Mutation, ...] = ()
    # The batches of cel.compile_policy, when there are several of each: one evaluation per
    # container in place of one per expression, so that a variable they read is evaluated
    # once: the validations, the messageExpressions of those that fail (forEach's aside),
    # the mutations.
    together: Expression | None = None
    messages: Expression | None = None
    mutated: Expression | None = None
    key: str = ""

    def unmatched(self, workload: Workload, request: Request) -> str:
        """Why a matchCondition leaves the object alone, or '' when all of them hold.
        As in Kubernetes, a false condition wins over any error: EvaluationError (the first)
        is raised only when no condition is false."""
        if not self.match_conditions:
            return ""
        budget = Budget(MATCH_CONDITIONS_BUDGET)  # theirs, apart from the validations'
        bound = self.review(workload, request).bound
        failed: EvaluationError | None = None
        for condition in self.match_conditions:
            try:
                value = _run(condition.expression, bound, f"matchConditions[{condition.name}]",
                             budget)
            except EvaluationError as error:
                failed = failed or error
                continue
            if value is False:
                return f"matchCondition {condition.name!r} is false"
            if value is not True:
                failed = failed or EvaluationError(f"matchConditions[{condition.name}]: yields "
                                                   f"{_type(value)}, not a bool")
        if failed is not None:
            raise failed
        return ""

    def check(self, workload: Workload, request: Request) -> list[Finding]:
        """The findings of the validations, or of the mutations with their patches. Raises
        EvaluationError, naming the expression (TooCostly past the policy's budget: one per
        review, for all its containers, as an admission policy has one per review)."""
        budget = Budget()
        # The values a mutation's paths must not show, found once per check.
        secrets = cache(lambda: hiding(hidden_values(workload.obj)))
        if self.scope == "object":
            review = self.review(workload, request)
            if self.mutations:
                return self._mutate(review.bound, None, workload, None, secrets, budget)
            return self._validate(review.bound, None, _first_pod_path(workload), None,
                                  review.hidden, budget)
        findings = []
        for number in range(len(workload.pod_specs)):  # a container sees its own
            findings += self._each_container(workload, number, secrets, request, budget)
        # A finding about the pod (see _about) comes from every container alike: say it once.
        return list(dict.fromkeys(findings))

    def review(self, workload: Workload, request: Request) -> Review:
        """The review's activation, or one of this policy's own when judged alone."""
        reviews = request.reviews or Reviews(Shared.of([self.reader]))
        return reviews.of(workload, request)

    def _each_container(self, workload: Workload, number: int,
                        secrets: Callable[[], Callable[[str], str]],
                        request: Request, budget: Budget) -> list[Finding]:
        """The findings of the containers of the workload's pod spec `number`, in order,
        each container one evaluation of each expression: where it is in the review's lists
        (see cel_review.Review), or the review's lone container."""
        containers = workload.pod_specs[number].containers
        if not containers:
            return []
        review = self.review(workload, request)
        findings = []
        for index, container in enumerate(containers):
            at = None if review.lone else review.offsets[number] + index
            if self.mutations:
                findings += self._mutate(review.bound, at, workload, container, secrets,
                                         budget)
            else:
                findings += self._validate(review.bound, at, workload.pod_specs[number].path,
                                           container, review.hidden, budget)
        return findings

    def _mutate(self, bound: Any, at: int | None, workload: Workload,
                container: Container | None,
                secrets: Callable[[], Callable[[str], str]], budget: Budget) -> list[Finding]:
        """One finding holding the operations that change something: an `add` of the value a
        field already has is dropped, so that a patch stays minimal."""
        base = container.path if container is not None else ()
        document: Any = workload.obj
        kept: list[dict[str, Any]] = []
        first: Path = ()
        described: list[str] = []
        wheres = [f"mutations[{index}].jsonPatch.expression"
                  for index in range(len(self.mutations))]
        values = _batch(self.mutated, bound, at, budget)
        for index, mutation in enumerate(self.mutations):
            where = wheres[index]
            value = values[index] if values is not None else \
                _run(mutation.expression, bound, where, budget, at)
            for number, (operation, relative) in enumerate(_operations(value, base, where)):
                try:
                    changed = apply_patch(document, [operation])
                except PatchError as error:
                    raise EvaluationError(f"{where}: operation {number} ({operation['op']} "
                                          f"{operation['path']}) does not apply: {error}"
                                          ) from None
                if changed == document:
                    continue
                document = changed
                first = first if kept else (*base, *relative)
                kept.append(operation)
                described.append(f"{operation['op']} {dotted(relative) or 'the object'}")
        if not kept:
            return []
        found = finding(container, "; ".join(described), first, tuple(kept))
        # The paths are the expression's: one built from an env value must not show it.
        conceal = secrets()
        shown = hidden_in(found.patch, conceal)
        return [replace(found, message=conceal(found.message),
                        at=tuple(conceal(key) if isinstance(key, str) else key
                                 for key in found.at),
                        shown_patch=None if shown is found.patch else shown)]

    # The top-level names the expressions use, worked out once.
    reads: frozenset[str] = field(init=False, default=frozenset())
    # Whether any expression may see podSpec's container lists (see check).
    reads_pod_containers: bool = field(init=False, default=True)
    # object and oldObject, when read, if no expression may see their spec or status.
    objects_without_spec: tuple[str, ...] = field(init=False, default=())
    # The validations whose messageExpression is in the `messages` batch, in its order.
    told: tuple[int, ...] = field(init=False, default=())
    # What it reads of a review (see cel_review.Shared).
    reader: Reader = field(init=False, hash=False, compare=False)

    def __post_init__(self) -> None:
        expressions = [*(v.expression for v in self.variables),
                       *(c.expression for c in self.match_conditions),
                       *(v.expression for v in self.validations),
                       *(v.message_expression for v in self.validations
                         if v.message_expression is not None),
                       *(m.expression for m in self.mutations)]
        object.__setattr__(self, "reads", frozenset().union(*(e.names for e in expressions)))
        object.__setattr__(self, "reads_pod_containers", not all(
            selects_only(e.bound or e.text, "podSpec", _POD_CONTAINER_LISTS)
            for e in expressions))
        object.__setattr__(self, "objects_without_spec", tuple(
            name for name in ("object", "oldObject") if name in self.reads and all(
                selects_only(e.bound or e.text, name, _OBJECT_BULK) for e in expressions)))
        lean = {*self.objects_without_spec, *(() if self.reads_pod_containers else ("podSpec",))}
        object.__setattr__(self, "reader",
                           Reader(self.key, self.params, self.reads, frozenset(lean),
                                  self._ahead()))
        object.__setattr__(self, "told", tuple(
            index for index, v in enumerate(self.validations)
            if v.message_expression is not None and v.each is None))

    def _ahead(self) -> tuple[tuple[Expression, int, bool], ...]:
        """What check() and unmatched() evaluate first, with the budget each starts from:
        the matchConditions, and the validations (together when they are batched); a
        mutation changes the object, so a mutate policy's are left to it."""
        if self.mutations:
            return ()
        each = self.scope == "container"
        conditions = tuple((c.expression, MATCH_CONDITIONS_BUDGET, False)
                           for c in self.match_conditions)
        validations = (((self.together, POLICY_BUDGET, each),) if self.together is not None
                       else tuple((v.expression, POLICY_BUDGET, each)
                                  for v in self.validations))
        return conditions + validations

    def _validate(self, bound: Any, at: int | None, pod_spec_path: Path,
                  container: Container | None, shown: Callable[[], Any],
                  budget: Budget) -> list[Finding]:
        findings = []
        wheres = [f"validations[{index}].expression"
                  for index in range(len(self.validations))]
        values = _batch(self.together, bound, at, budget)
        # The messages of the failed validations, when known from one evaluation.
        said = {} if values is None else \
            self._messages([i for i in self.told if values[i] is False], shown, budget, at)
        for index, validation in enumerate(self.validations):
            where = wheres[index]
            value = values[index] if values is not None else \
                _run(validation.expression, bound, where, budget, at)
            if value is True:
                continue
            if value is not False:
                raise EvaluationError(f"{where}: yields {_type(value)}, not a bool")
            about = _about(validation, container)
            if validation.each is not None:
                failures = self._each(validation, index, bound, shown, budget, at)
            else:
                message = (said[index] or _fallback(validation)) if index in said else \
                    self._message(validation, shown, budget, at)
                failures = [(message, validation.field_path, "")]
            for message, path, item in failures:
                # Without a fieldPath every validation names the object (or the container),
                # and without a [*] step every item of a forEach the same field: then which
                # validation failed, and for which item, tells one finding from another.
                check = "" if path and not item else f"validations[{index}]{item}"
                findings.append(replace(
                    finding(about, message, _field(path, pod_spec_path, container)),
                    denial_reason=validation.reason or "", check=check))
        return findings

    def _each(self, validation: Validation, index: int, bound: Any, shown: Callable[[], Any],
              budget: Budget, at: int | None) -> list[tuple[str, Path, str]]:
        """(message, fieldPath, `[index or key]` unless the fieldPath names the item) of each
        item of a forEach that fails its check, in order."""
        each = validation.each
        assert each is not None
        where = f"validations[{index}].forEach"
        verdicts = _pairs(_run(each.verdicts, bound, where, budget, at))
        if verdicts is None:
            raise EvaluationError(f"{where}: yields no list or map")
        messages = self._item_messages(validation, [key for key, _ in verdicts], shown,
                                       budget, at)
        fallback = _one_line(validation.message) if validation.message \
            else f"failed expression: {_one_line(each.check)}"
        failed = []
        for position, (key, verdict) in enumerate(verdicts):
            if verdict is True:
                continue
            if verdict is not False:
                raise EvaluationError(f"validations[{index}].expression: yields "
                                      f"{_type(verdict)} for an item, not a bool")
            path, step = validation.field_path, position if key is None else key
            if each.at is None:
                failed.append((messages[position] or fallback, path, f"[{step}]"))
            else:
                path = (*path[:each.at], step, *path[each.at + 1:])
                failed.append((messages[position] or fallback, path, ""))
        return failed

    def _item_messages(self, validation: Validation, keys: list[Any],
                       shown: Callable[[], Any], budget: Budget,
                       at: int | None) -> list[str | None]:
        """Each item's messageExpression, seen on the object with its values hidden (as a
        messageExpression always is); None where it yields no string, for every item when
        the hidden object's items are not the same items."""
        none: list[str | None] = [None] * len(keys)
        if validation.message_expression is None:
            return none
        try:
            hidden = shown()
            if hidden is False:
                return none
            texts = _pairs(_run(validation.message_expression, hidden, "messageExpression",
                                budget, at))
        except EvaluationError:
            return none
        if texts is None or sorted(map(repr, (key for key, _ in texts))) != sorted(
                map(repr, keys)):
            return none
        if keys and keys[0] is not None:  # a map's items, in an order of their own
            by_key = dict(texts)
            texts = [(key, by_key[key]) for key in keys]
        return [_one_line(text) if isinstance(text, str) and text.strip() else None
                for _, text in texts]

    def _messages(self, failed: list[int], shown: Callable[[], Any], budget: Budget,
                  at: int | None) -> dict[int, str]:
        """The messageExpressions of these failed validations (of `told`), from one
        evaluation of the `messages` batch on the object with its values hidden: what each
        says ('' when nothing); none when there are fewer than two or that evaluation
        fails (then each is evaluated alone, as _message does)."""
        if len(failed) < 2 or self.messages is None:
            return {}
        hidden = shown()
        if hidden is False:
            return {}
        texts = _batch(self.messages, hidden, at, budget,
                       frozenset(self.told.index(index) for index in failed))
        if texts is None:
            return {}
        return {index: _said(texts[self.told.index(index)]) for index in failed}

    def _message(self, validation: Validation, shown: Callable[[], Any], budget: Budget,
                 at: int | None) -> str:
        """messageExpression's string when it yields one, else `message`, else the
        expression, as ValidatingAdmissionPolicy falls back. The messageExpression sees the
        object with its env values and secrets replaced (`shown`), never the values."""
        if validation.message_expression is not None:
            try:
                hidden = shown()
                text = _run(validation.message_expression, hidden, "messageExpression",
                            budget, at) if hidden is not False else None
            except EvaluationError:
                text = None
            if _said(text):
                return _said(text)
        return _fallback(validation)


def _fallback(validation: Validation) -> str:
    """`message`, else the expression, as ValidatingAdmissionPolicy falls back."""
    if validation.message:
        return _one_line(validation.message)
    return f"failed expression: {_one_line(validation.expression.text)}"


def _said(text: Any) -> str:
    """A messageExpression's value as the message, or '' when it says nothing."""
    return _one_line(text) if isinstance(text, str) and text.strip() else ""


def _batch(together: Expression | None, bound: Any, at: int | None, budget: Budget,
           wanted: frozenset[int] | None = None) -> list[Any] | None:
    """The values of the expressions of `together` (see cel.Batch) from their one
    evaluation; None when there is no such evaluation or it fails (an error in one of them,
    the budget): then each is evaluated alone, from the budget as it was, and the first that
    fails says why, as it would have."""
    if together is None:
        return None
    left = budget.left
    try:
        values = evaluate(together, bound, at, wanted, budget)
    except EvaluationError:
        budget.left = left
        return None
    return values if isinstance(values, list) else None


def shared_by(programs: Iterable[CelPolicy]) -> Shared | None:
    """What a set of CEL policies reads of a review (see cel_review); None without any."""
    readers = [program.reader for program in programs]
    return Shared.of(readers) if readers else None


def _pairs(value: Any) -> list[tuple[Any, Any]] | None:
    """A forEach's [whether the items are a map's keys, [item, value] of each item] as (key,
    value) of each item, the key None for a list's item (its index is its position); None
    when it is not that."""
    if not isinstance(value, list) or len(value) != 2 or not isinstance(value[1], list) \
            or not all(isinstance(pair, list) and len(pair) == 2 for pair in value[1]):
        return None
    if value[0] is not True:
        return [(None, pair[1]) for pair in value[1]]
    # A map's keys come in no order of Kubernetes' (Go's maps have none): in sorted order,
    # so that its findings come in the same order every time.
    return sorted(((pair[0], pair[1]) for pair in value[1]), key=lambda pair: repr(pair[0]))


_OPERATIONS = frozenset({"add", "replace", "remove"})
# Built for the load-time idempotence check: a Pod with one bare container.
PROBE_POD: Mapping[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "probe", "namespace": "default"},
    "spec": {"containers": [{"name": "probe", "image": "registry.example.com/probe:1.0"}]},
}


def idempotence_problem(program: CelPolicy) -> str:
    """What a second pass of the mutations patches again on a probe Pod, or '' when nothing
    (or when it cannot be told: a condition is false or an expression fails on the probe).
    The engine checks every patch it applies as well; this catches at load what it can."""
    if not program.mutations:
        return ""
    current: Any = PROBE_POD
    for second in (False, True):
        workload = read_workload(current, (), check=False)
        if workload is None:
            return ""
        try:
            if program.unmatched(workload, Request()):
                return ""
            findings = program.check(workload, Request())
            if not findings:
                return ""
            if second:
                return "; ".join(found.message for found in findings)
            current = apply_patch(current, [op for found in findings for op in found.patch])
        except (EvaluationError, PatchError):
            return ""
    return ""


def _operations(value: Any, base: Path, where: str) -> list[tuple[dict[str, Any], Path]]:
    """The JSON Patch operations a mutation yields, with paths made absolute (container
    scope: relative to the container), and each path relative as the policy wrote it."""
    if not isinstance(value, list):
        raise EvaluationError(f"{where}: yields {_type(value)}, not a list of JSON Patch "
                              "operations")
    found: list[tuple[dict[str, Any], Path]] = []
    for number, item in enumerate(value):
        problem = _operation_problem(item)
        if problem:
            raise EvaluationError(f"{where}: operation {number}: {problem}")
        relative = split_pointer(item["path"])
        operation = {"op": item["op"], "path": pointer((*base, *relative))}
        if "value" in item:
            operation["value"] = item["value"]
        found.append((operation, relative))
    return found


def _operation_problem(item: Any) -> str:
    if not isinstance(item, dict):
        return f"expected a map with op, path and value, got {_type(item)}"
    unknown = sorted(set(item) - {"op", "path", "value"})
    if unknown:
        return f"unknown field {unknown[0]!r} (op, path and value are allowed)"
    if item.get("op") not in _OPERATIONS:
        return "op must be add, replace or remove"
    path = item.get("path")
    if not isinstance(path, str) or not path.startswith("/"):
        return "path must be a JSON pointer such as /securityContext/runAsNonRoot"
    if item["op"] != "remove" and "value" not in item:
        return f"a {item['op']} operation needs a value"
    return ""


def _first_pod_path(workload: Workload) -> Path:
    return workload.pod_specs[0].path if workload.pod_specs else ("spec",)


def _field(path: Path, pod_spec_path: Path, container: Container | None) -> Path:
    """A validation's fieldPath in the object: relative to the container (container scope) or
    the object, unless it starts at `podSpec` (wherever the kind keeps it) or `object`."""
    if path[:1] == ("podSpec",):
        return (*pod_spec_path, *path[1:])
    if path[:1] == ("object",):
        return path[1:]
    return container.field_path(*path) if container is not None else path


def _about(validation: Validation, container: Container | None) -> Container | None:
    """The container a finding names: none when its fieldPath points at the pod spec or the
    object (a pod-level setting such as spec.securityContext.runAsUser), even in container
    scope, so that a pod-level violation is reported once and not once per container; unless
    the validation is `perContainer` (a pod-level runAsUser: 0 that each container inherits,
    each a finding of its own)."""
    if validation.per_container:
        return container
    return None if validation.field_path[:1] in (("podSpec",), ("object",)) else container


def _run(expression: Expression, bound: Any, where: str, budget: Budget,
         at: int | None = None) -> Any:
    try:
        return evaluate(expression, bound, at, None, budget)
    except EvaluationError as error:
        if expression.references:
            where += f" (or the variables it reads: {', '.join(sorted(expression.references))})"
        raise type(error)(f"{where}: {error}") from None


def _type(value: Any) -> str:
    names = {dict: "a map", list: "a list", str: "a string", int: "an int", float: "a double",
             type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _one_line(text: str) -> str:
    return " ".join(text.split())


_FIELD = re.compile(r"\.?([A-Za-z_$][A-Za-z0-9_$-]*)|\[(\d+)\]|\['([^']*)'\]|\[\"([^\"]*)\"\]"
                    r"|(\[\*\])")


def parse_field_path(text: str, each: bool = False) -> tuple[Path, int | None]:
    """`securityContext.privileged`, `ports[0].hostPort`, `limits['nvidia.com/gpu']` (a
    leading dot, as in ValidatingAdmissionPolicy's fieldPath, is allowed); with `each` (a
    forEach validation's), one `[*]` step, the item's index or key: (the path, where that
    step is, None without one). Raises ValueError."""
    path: list[str | int] = []
    at = None
    position = 0
    text = text.strip()
    while position < len(text):
        match = _FIELD.match(text, position)
        if match is None or (position > 0 and match.group(1) and text[position] != "."):
            raise ValueError(f"not a field path at character {position + 1}: "
                             f"{text[position:position + 20]!r}")
        name, index, single, double, star = match.groups()
        if star is not None:
            if not each or at is not None:
                raise ValueError(f"[*] at character {position + 1}: only a forEach "
                                 "validation's fieldPath has one, for the item's index or key")
            at = len(path)
            path.append("*")
        else:
            path.append(int(index) if index is not None else
                        next(part for part in (name, single, double) if part is not None))
        position = match.end()
    return tuple(path), at
