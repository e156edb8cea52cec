"""What a review shows its CEL policies: one activation, converted once for all of them.

Every CEL evaluation of a review (each policy's matchConditions, validations, messages and
mutations, of each container) reads one activation (cel.review_activation), in which the
runtime converts `object`, `oldObject`, `request`, `podSpec` and the containers when an
evaluation first reads them, and then keeps them: an activation per policy (and pod spec)
converted the object again for each, most of the cost of a policy. A review's object
changes only when a mutate policy patches it: each state of it has a Review of its own,
kept in the review's Reviews (one per review). When a Review is made, the matchConditions
and validations of all the policies are evaluated on it ahead, in one library call
(cel.prefetch): a call per policy cost more than most of their evaluations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, NamedTuple

from webhook.engine.cel_errors import EvaluationError
from webhook.engine.hidden import redacted
from webhook.engine.workload import Workload, api_group

_EMPTY: Mapping[str, Any] = {}
NO_VARIABLES: Mapping[str, Any] = {}  # what a matchCondition sees as `variables`
# What can be left out of a variable no expression of a policy can see whole (see
# webhook.engine.cel.selects_only): an object's spec and status, a pod spec's containers.
BULK = {"object": frozenset({"spec", "status"}), "oldObject": frozenset({"spec", "status"}),
        "podSpec": frozenset({"containers", "initContainers", "ephemeralContainers"})}


class Request(NamedTuple):
    """What the API server says about the request, beyond the object: the `request`,
    `oldObject` and `namespaceObject` of an expression. (A tuple: one is built per
    evaluation, and a frozen dataclass costs several times as much to build.)"""

    operation: str = "CREATE"
    namespace: str = ""
    username: str | None = None
    groups: tuple[str, ...] = ()
    dry_run: bool = False
    old_object: Any = None
    namespace_object: Any = None
    # The review's activations (Reviews); None: a policy judged alone makes its own.
    reviews: Reviews | None = None

    def data(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """The `request` variable, in the fields of an AdmissionRequest."""
        api_version = obj.get("apiVersion")
        api_version = api_version if isinstance(api_version, str) else ""
        metadata = obj.get("metadata")
        metadata = metadata if isinstance(metadata, Mapping) else _EMPTY
        return {
            "operation": self.operation,
            "namespace": self.namespace,
            "name": metadata.get("name") or "",
            "kind": {"group": api_group(api_version),
                     "version": api_version.rpartition("/")[2],
                     "kind": obj.get("kind") or ""},
            "userInfo": {"username": self.username or "", "groups": list(self.groups)},
            "dryRun": self.dry_run,
        }


@dataclass(frozen=True, slots=True)
class Reader:
    """What one CEL policy reads of a review, known at load: `lean`, the variables among
    BULK's that it may read without their BULK."""

    key: str
    params: Mapping[str, Any]
    reads: frozenset[str]
    lean: frozenset[str]
    # What it evaluates first on every review, evaluated ahead for all policies in one call
    # (cel.prefetch): (expression, its budget, whether once per container).
    ahead: tuple[tuple[Any, int, bool], ...] = ()


@dataclass(frozen=True, slots=True)
class Shared:
    """What a set of CEL policies reads of every review, known at load: the variables, each
    one's params (by its key, see cel.with_params), and which of BULK's some policy reads
    whole (the others are held lean in the activation)."""

    reads: frozenset[str] = frozenset()
    params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    whole: frozenset[str] = frozenset()
    ahead: tuple[Reader, ...] = ()  # the readers with something to evaluate ahead

    @classmethod
    def of(cls, readers: Iterable[Reader]) -> Shared:
        readers = list(readers)
        return cls(frozenset().union(*(reader.reads for reader in readers)),
                   {reader.key: reader.params for reader in readers
                    if "params" in reader.reads},
                   frozenset(name for reader in readers for name in BULK.keys() & reader.reads
                             if name not in reader.lean),
                   tuple(reader for reader in readers if reader.ahead))


@dataclass(frozen=True, slots=True)
class Review:
    """One state of a review's object, for all its CEL policies: `bound`, the activation;
    `hidden`, the same with the object's secrets replaced (webhook.engine.hidden), made when
    a message first needs it (False when it cannot be). `lone`: the review's one container,
    in the first pod spec, is the activation's `container`; else containers are read from
    its lists (cel.PolicyProgram), those of each pod spec from its `offsets`."""

    bound: Any
    lone: bool
    offsets: tuple[int, ...]
    hidden: Callable[[], Any]


def review(workload: Workload, request: Request, shared: Shared) -> Review:
    """The Review of the workload's object. Raises EvaluationError when the object holds a
    value CEL cannot represent."""
    from webhook.engine.cel import (
        CONTAINERS,
        GROUPS,
        PARAMS,
        POD_OF,
        PODS,
        prefetch,
        review_activation,
    )

    obj, pod_specs = workload.obj, workload.pod_specs
    pods = tuple(_EMPTY if workload.is_node_template else pod.data for pod in pod_specs)
    lean = (shared.reads & BULK.keys()) - shared.whole
    if "podSpec" in lean:
        pods = tuple(without(pod, BULK["podSpec"]) for pod in pods)
    data: dict[str, Any] = {"object": obj, "oldObject": request.old_object,
                            "namespaceObject": request.namespace_object,
                            "podSpec": pods[0] if pods else _EMPTY,
                            "variables": NO_VARIABLES, PARAMS: shared.params}
    if "request" in shared.reads:
        data["request"] = request.data(obj)
    for name in lean - {"podSpec"}:
        if isinstance(data[name], Mapping):
            data[name] = without(data[name], BULK[name])
    containers = [container for pod in pod_specs for container in pod.containers]
    offsets, total = [], 0  # where each pod spec's containers start in the lists
    for pod in pod_specs:
        offsets.append(total)
        total += len(pod.containers)
    lone = len(containers) == 1 and bool(pod_specs[0].containers)
    if lone:
        data["container"], data["containerGroup"] = containers[0].data, containers[0].group
    elif containers:
        data[CONTAINERS] = [container.data for container in containers]
        data[GROUPS] = [container.group for container in containers]
        data[POD_OF] = [number for number, pod in enumerate(pod_specs) for _ in pod.containers]
        data[PODS] = [_EMPTY, *pods[1:]]  # the first is `podSpec`
    bound = review_activation(data)
    if shared.ahead:
        each = (-1,) if lone else tuple(range(len(containers)))
        prefetch(bound, [(expression, budget, each if per_container else (-1,))
                         for reader in shared.ahead
                         for expression, budget, per_container in reader.ahead
                         if containers or not per_container])
    return Review(bound, lone, tuple(offsets), cache(lambda: _hidden(data)))


@dataclass(slots=True)
class Reviews:
    """The Reviews of one review (evaluate() makes one per review):
    one per state of its object (and old object), made when a CEL policy first reads it."""

    shared: Shared
    made: dict[tuple[int, int], tuple[Workload, Any, Review]] = field(default_factory=dict)

    def of(self, workload: Workload, request: Request) -> Review:
        key = (id(workload), id(request.old_object))
        found = self.made.get(key)
        if found is not None and found[0] is workload and found[1] is request.old_object:
            return found[2]
        made = review(workload, request, self.shared)
        self.made[key] = (workload, request.old_object, made)
        return made


def without(value: Mapping[str, Any], left_out: frozenset[str]) -> dict[str, Any]:
    """`value` without the keys `left_out`, which no expression of the review reads: less
    for the library to parse."""
    return {key: item for key, item in value.items() if key not in left_out}


def _hidden(data: Mapping[str, Any]) -> Any:
    """The activation of the data with its secrets replaced, or False when it cannot be made
    (an object nested too deep to copy, one CEL cannot represent): a message then falls
    back. Each policy's params alone, as it sees them (a policy's key is no field name)."""
    from webhook.engine.cel import PARAMS, review_activation

    try:
        shown = {name: redacted(value) for name, value in data.items() if name != PARAMS}
        shown[PARAMS] = {key: redacted(params) for key, params in data[PARAMS].items()}
        return review_activation(shown)
    except (RecursionError, EvaluationError):
        return False
