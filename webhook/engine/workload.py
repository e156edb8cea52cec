"""A Pod, a pod controller or a NodeTemplate, seen as containers with their paths.

Rules never care which kind they judge: they get a `Workload` whose containers know where
they live (`spec.template.spec.containers[1]` in a Deployment, `spec` in a NodeTemplate),
so every message and patch uses the object's own paths.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.engine import schema
from webhook.engine.kubernetes_fields import KINDS
from webhook.engine.patch import Path
from webhook.engine.patch import dotted as dotted  # rules and messages name paths with it


def api_group(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


# Where each judged kind keeps its pod spec, by (API group, kind).
POD_SPEC_PATHS: dict[tuple[str, str], Path] = {
    ("", "Pod"): ("spec",),
    ("apps", "Deployment"): ("spec", "template", "spec"),
    ("apps", "ReplicaSet"): ("spec", "template", "spec"),
    ("apps", "StatefulSet"): ("spec", "template", "spec"),
    ("apps", "DaemonSet"): ("spec", "template", "spec"),
    ("batch", "Job"): ("spec", "template", "spec"),
    ("batch", "CronJob"): ("spec", "jobTemplate", "spec", "template", "spec"),
}
JUDGED_KINDS = frozenset(kind for _, kind in POD_SPEC_PATHS) | {"NodeTemplate"}
MAX_PROBLEMS = schema.MAX_PROBLEMS
# How a skip reason starts to say the kind looks like a typo of a judged one.
UNKNOWN_KIND = "quickq-guard knows no kind"
# The one apiVersion that serves each built-in kind judged, by (API group, kind).
SERVED_API_VERSIONS = {(api_group(key.split()[0]), key.split()[1]): key.split()[0]
                       for key in KINDS}
CONTAINER_GROUPS = ("containers", "initContainers", "ephemeralContainers")
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
# A NodeTemplate keeps its probes under spec.health; the spec itself is the container.
NODE_TEMPLATE_PROBES = {"livenessProbe": "liveness", "readinessProbe": "readiness",
                        "startupProbe": "startup"}
# Resources any container may ask for; every other name (nvidia.com/gpu, hugepages-2Mi) is an
# extended resource, and only a container with one can use a GPU.
CORE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
_EMPTY: Mapping[str, Any] = {}


class InvalidObject(ValueError):
    """The object cannot be judged: not a mapping, no kind, a field of the wrong type."""


class RefusedObject(InvalidObject):
    """The Kubernetes API server would refuse the object: an apiVersion it no longer serves,
    a field it does not know, a value of the wrong type. `problems` holds (field, problem)."""

    def __init__(self, problems: Sequence[schema.Problem]) -> None:
        self.problems = tuple(problems[:MAX_PROBLEMS])
        shown = [f"{path}: {problem}" for path, problem in self.problems]
        if len(problems) > MAX_PROBLEMS:
            shown.append("and more")
        super().__init__("; ".join(shown))


@dataclass(frozen=True, slots=True)
class Container:
    """One container (or a NodeTemplate's spec) and where it lives in the object."""

    name: str
    group: str  # containers | initContainers | ephemeralContainers | nodeTemplate
    path: Path
    data: Mapping[str, Any]
    # resources.requests and resources.limits (empty when missing), checked while the
    # container is read.
    requests: Mapping[str, Any] = field(repr=False, compare=False)
    limits: Mapping[str, Any] = field(repr=False, compare=False)

    @property
    def label(self) -> str:
        if self.group == "nodeTemplate":
            return "spec"
        return f"{self.group[:-1]} '{self.name}'"

    def field_path(self, *names: str | int) -> Path:
        """The path of a field of this container; a probe name maps to spec.health.* in a
        NodeTemplate."""
        if self.group == "nodeTemplate" and names and names[0] in NODE_TEMPLATE_PROBES:
            return (*self.path, "health", NODE_TEMPLATE_PROBES[str(names[0])], *names[1:])
        return (*self.path, *names)

    def probe(self, name: str) -> Mapping[str, Any] | None:
        """The probe, or None; read_workload made sure it is a mapping."""
        if self.group == "nodeTemplate":
            health = self.data.get("health") or _EMPTY
            return health.get(NODE_TEMPLATE_PROBES[name])
        return self.data.get(name)

    @property
    def security_context(self) -> Mapping[str, Any]:
        return self.data.get("securityContext") or _EMPTY


@dataclass(frozen=True, slots=True)
class Workload:
    """The parts of an object that rules judge."""

    obj: Mapping[str, Any]
    kind: str
    pod_spec: Mapping[str, Any]  # a NodeTemplate's spec stands in for it
    pod_spec_path: Path
    containers: tuple[Container, ...]
    labels: Mapping[str, Any]

    @property
    def is_node_template(self) -> bool:
        return self.kind == "NodeTemplate"

    @property
    def is_pod(self) -> bool:
        return self.kind == "Pod"

    @property
    def pod_security_context(self) -> Mapping[str, Any]:
        """Pod-level securityContext; a NodeTemplate has only the container-level one."""
        if self.is_node_template:
            return _EMPTY
        return self.pod_spec.get("securityContext") or _EMPTY


def read_workload(obj: Any, node_template_groups: Sequence[str], *,
                  check: bool = True) -> Workload | None:
    """The workload view of an object, or None for a kind quickq-guard does not judge.

    Raises RefusedObject when the API server would refuse the object (a removed apiVersion;
    in a judged kind, an unknown field or a value of the wrong type), and InvalidObject,
    naming the field, when a field rules rely on has the wrong type. `check=False` skips the
    API server's checks, for objects it has accepted already (an UPDATE's old object) or that
    only quickq-guard's own patches changed.
    """
    if not isinstance(obj, Mapping):
        raise InvalidObject(f"expected a Kubernetes object (a mapping), got {_type(obj)}")
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if not isinstance(kind, str) or not kind:
        raise InvalidObject("the object has no 'kind'")
    if not isinstance(api_version, str) or not api_version:
        raise InvalidObject(f"the {kind} has no 'apiVersion'")
    group = api_group(api_version)
    if check:
        _refusals(obj, kind, api_version, group)
    metadata = _mapping(obj.get("metadata"), ("metadata",))
    labels = _mapping(metadata.get("labels"), ("metadata", "labels"))
    if kind == "NodeTemplate":
        if group not in node_template_groups:
            return None
        spec = _mapping(obj.get("spec"), ("spec",))
        container = _container(spec, "nodeTemplate", ("spec",), "spec")
        return Workload(obj, kind, spec, ("spec",), (container,), labels)
    spec_path = POD_SPEC_PATHS.get((group, kind))
    if spec_path is None:
        return None
    pod_spec = _dig(obj, spec_path)
    containers: list[Container] = []
    for container_group in CONTAINER_GROUPS:
        items = pod_spec.get(container_group)
        if items is None:
            continue
        list_path = (*spec_path, container_group)
        if not isinstance(items, list):
            raise InvalidObject(f"{dotted(list_path)}: expected a list, got {_type(items)}")
        for index, item in enumerate(items):
            item_path = (*list_path, index)
            if not isinstance(item, Mapping):
                raise InvalidObject(f"{dotted(item_path)}: expected a mapping, got {_type(item)}")
            name = item.get("name")
            label = name if isinstance(name, str) and name else f"#{index}"
            containers.append(_container(item, container_group, item_path, label))
    security_context = pod_spec.get("securityContext")
    _mapping(security_context, (*spec_path, "securityContext"))
    _list_of_mappings(pod_spec.get("tolerations"), (*spec_path, "tolerations"))
    return Workload(obj, kind, pod_spec, spec_path, tuple(containers), labels)


def _refusals(obj: Mapping[str, Any], kind: str, api_version: str, group: str) -> None:
    """Raise RefusedObject for what the API server would refuse in a built-in kind."""
    removed = schema.removed_api_version(api_version, kind)
    if removed:
        raise RefusedObject([("apiVersion", removed)])
    node = schema.object_type(api_version, kind)
    if node is None:
        served = SERVED_API_VERSIONS.get((group, kind))
        if served:
            raise RefusedObject([("apiVersion", f"apiVersion {api_version} does not serve "
                                                f"{kind}; use apiVersion {served}")])
        return
    problems: list[schema.Problem] = []
    schema.check(obj, node, (), problems)
    if problems:
        raise RefusedObject(problems)


def not_judged(obj: Mapping[str, Any]) -> str:
    """Why quickq-guard does not judge an object of this kind; a near-miss of a judged kind
    (`Deploymnet`) is named."""
    kind = str(obj.get("kind"))
    guess = difflib.get_close_matches(kind, sorted(JUDGED_KINDS), n=1, cutoff=0.8)
    if guess and guess[0] != kind:
        return f"kind {kind} is not judged: {UNKNOWN_KIND} {kind}; did you mean {guess[0]}?"
    if kind in JUDGED_KINDS:
        return f"kind {kind} of apiVersion {obj.get('apiVersion')} is not judged"
    return f"kind {kind} is not judged"


def _container(data: Mapping[str, Any], group: str, path: Path, name: str) -> Container:
    get = data.get
    resources = _mapping(get("resources"), (*path, "resources"))
    requests = _mapping(resources.get("requests"), (*path, "resources", "requests"))
    limits = _mapping(resources.get("limits"), (*path, "resources", "limits"))
    _list_of_mappings(get("env"), (*path, "env"))
    if group == "nodeTemplate":
        _mapping(get("securityContext"), (*path, "securityContext"))
        health = _mapping(get("health"), (*path, "health"))
        for probe in NODE_TEMPLATE_PROBES.values():
            _mapping(health.get(probe), (*path, "health", probe))
        _list_of_mappings(get("tolerations"), (*path, "tolerations"))
    else:
        for field_name in _CONTAINER_FIELDS:
            _mapping(get(field_name), (*path, field_name))
    return Container(name, group, path, data, requests, limits)


_CONTAINER_FIELDS = ("securityContext", *PROBES)


def _dig(obj: Mapping[str, Any], path: Path) -> Mapping[str, Any]:
    current: Mapping[str, Any] = obj
    for depth, name in enumerate(path):
        value = current.get(str(name))
        if value is None:
            return _EMPTY  # a missing level: nothing below it either
        if not isinstance(value, Mapping):
            _mapping(value, path[: depth + 1])
        current = value
    return current


def _mapping(value: Any, path: Path) -> Mapping[str, Any]:
    if value is None:
        return _EMPTY
    if not isinstance(value, Mapping):
        raise InvalidObject(f"{dotted(path)}: expected a mapping, got {_type(value)}")
    return value


def _list_of_mappings(value: Any, path: Path) -> None:
    if value is None:
        return
    if not isinstance(value, list):
        raise InvalidObject(f"{dotted(path)}: expected a list, got {_type(value)}")
    for index, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise InvalidObject(f"{dotted((*path, index))}: expected a mapping, got {_type(item)}")


def _type(value: Any) -> str:
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)
