"""A Pod, a pod controller or a NodeTemplate, seen as containers with their paths.

Rules never care which kind they judge: they get a `Workload` whose containers know where
they live (`spec.template.spec.containers[1]` in a Deployment, `spec` in a NodeTemplate),
so every message and patch uses the object's own paths.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from webhook.engine.patch import Path

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
CONTAINER_GROUPS = ("containers", "initContainers", "ephemeralContainers")
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
# A NodeTemplate keeps its probes under spec.health; the spec itself is the container.
NODE_TEMPLATE_PROBES = {"livenessProbe": "liveness", "readinessProbe": "readiness",
                        "startupProbe": "startup"}
# Resources any container may ask for; every other name (nvidia.com/gpu, hugepages-2Mi) is an
# extended resource, and only a container with one can use a GPU.
CORE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
_EMPTY: Mapping[str, Any] = {}
# isinstance(x, Mapping) is an ABC check, several times slower than the exact-type check that
# `dict | Mapping` tries first; objects read from YAML or JSON are always dicts.
_MAPPING = (dict, Mapping)


class InvalidObject(ValueError):
    """The object cannot be judged: not a mapping, no kind, a field of the wrong type."""


# Container and Workload are read-only views, but not frozen dataclasses: a frozen __init__
# sets each field through object.__setattr__, 3.5x the cost of a plain one, and one of each is
# built per object (and per patched container) on every evaluation. Nothing assigns to them
# but the memos of what rules derive (Container.memo, Workload.extended_resources).
@dataclass(slots=True)
class Container:
    """One container (or a NodeTemplate's spec) and where it lives in the object."""

    name: str
    group: str  # containers | initContainers | ephemeralContainers | nodeTemplate
    path: Path
    data: Mapping[str, Any]
    # resources.requests and resources.limits (empty when missing), looked up once while the
    # container is read: five rules ask for them.
    requests: Mapping[str, Any] = field(repr=False, compare=False)
    limits: Mapping[str, Any] = field(repr=False, compare=False)
    # What rules derive from this container, kept for the other policies of the same
    # evaluation (the GPU resources of a container, asked by three GPU policies).
    memo: dict[Any, Any] = field(init=False, repr=False, compare=False, default_factory=dict)

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


@dataclass(slots=True)
class Workload:
    """The parts of an object that rules judge."""

    obj: Mapping[str, Any]
    kind: str
    pod_spec: Mapping[str, Any]  # a NodeTemplate's spec stands in for it
    pod_spec_path: Path
    containers: tuple[Container, ...]
    labels: Mapping[str, Any]
    # See extended_resources: worked out when a GPU rule first asks, not for every object.
    _extended: bool | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def extended_resources(self) -> bool:
        """Whether some container's requests or limits name a resource outside
        CORE_RESOURCES; most pods ask for cpu and memory only, and cannot use a GPU."""
        if self._extended is None:
            self._extended = _any_extended(self.containers)
        return self._extended

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


def api_group(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def read_workload(obj: Any, node_template_groups: Sequence[str],
                  previous: Workload | None = None) -> Workload | None:
    """The workload view of an object, or None for a kind quickq-guard does not judge.

    Raises InvalidObject, naming the field, when a field rules rely on has the wrong type.
    `previous` is the view of the object before a patch: a patch copies only what it changes,
    so a container whose mapping is the very same object is already read and is reused.
    """
    if not isinstance(obj, _MAPPING):
        raise InvalidObject(f"expected a Kubernetes object (a mapping), got {_type(obj)}")
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if not isinstance(kind, str) or not kind:
        raise InvalidObject("the object has no 'kind'")
    if not isinstance(api_version, str) or not api_version:
        raise InvalidObject(f"the {kind} has no 'apiVersion'")
    group = api_group(api_version)
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
    known = _known_containers(previous, kind, spec_path)
    containers: list[Container] = []
    for container_group in CONTAINER_GROUPS:
        items = pod_spec.get(container_group)
        if items is None:
            continue
        list_path = (*spec_path, container_group)
        if not isinstance(items, list):
            raise InvalidObject(f"{dotted(list_path)}: expected a list, got {_type(items)}")
        for index, item in enumerate(items):
            same = known.get(id(item))
            if same is not None and same.data is item and same.path[-1] == index \
                    and same.group == container_group:
                containers.append(same)
                continue
            item_path = (*list_path, index)
            if not isinstance(item, _MAPPING):
                raise InvalidObject(f"{dotted(item_path)}: expected a mapping, got {_type(item)}")
            name = item.get("name")
            label = name if isinstance(name, str) and name else f"#{index}"
            containers.append(_container(item, container_group, item_path, label))
    security_context = pod_spec.get("securityContext")
    if security_context is not None and not isinstance(security_context, _MAPPING):
        _mapping(security_context, (*spec_path, "securityContext"))
    tolerations = pod_spec.get("tolerations")
    if tolerations is not None and not _is_list_of_mappings(tolerations):
        _list_of_mappings(tolerations, (*spec_path, "tolerations"))
    return Workload(obj, kind, pod_spec, spec_path, tuple(containers), labels)


def _any_extended(containers: Sequence[Container]) -> bool:
    for container in containers:
        if not (CORE_RESOURCES.issuperset(container.requests)
                and CORE_RESOURCES.issuperset(container.limits)):
            return True
    return False


def _known_containers(previous: Workload | None, kind: str,
                      spec_path: Path) -> dict[int, Container]:
    """The previous view's containers by the id of their mapping, when its paths still hold."""
    if previous is None or previous.kind != kind or previous.pod_spec_path != spec_path:
        return _NO_CONTAINERS
    return {id(container.data): container for container in previous.containers}


_NO_CONTAINERS: dict[int, Container] = {}


def _container(data: Mapping[str, Any], group: str, path: Path, name: str) -> Container:
    # The checks build a field's path only when it is wrong: this runs for every container of
    # every object (twice when a mutate policy patched it), and most fields are fine.
    get = data.get
    requests: Any = None
    limits: Any = None
    resources = get("resources")
    if resources is not None:
        if not isinstance(resources, _MAPPING):
            _mapping(resources, (*path, "resources"))
        requests = resources.get("requests")
        if requests is not None and not isinstance(requests, _MAPPING):
            _mapping(requests, (*path, "resources", "requests"))
        limits = resources.get("limits")
        if limits is not None and not isinstance(limits, _MAPPING):
            _mapping(limits, (*path, "resources", "limits"))
    env = get("env")
    if env is not None and not _is_list_of_mappings(env):
        _list_of_mappings(env, (*path, "env"))
    if group == "nodeTemplate":
        value = get("securityContext")
        if value is not None and not isinstance(value, _MAPPING):
            _mapping(value, (*path, "securityContext"))
        health = _mapping(get("health"), (*path, "health"))
        for probe in NODE_TEMPLATE_PROBES.values():
            value = health.get(probe)
            if value is not None and not isinstance(value, _MAPPING):
                _mapping(value, (*path, "health", probe))
        value = get("tolerations")
        if value is not None and not _is_list_of_mappings(value):
            _list_of_mappings(value, (*path, "tolerations"))
    else:
        for field_name in _CONTAINER_MAPPINGS:
            value = get(field_name)
            if value is not None and not isinstance(value, _MAPPING):
                _mapping(value, (*path, field_name))
    return Container(name, group, path, data, requests or _EMPTY, limits or _EMPTY)


_CONTAINER_MAPPINGS = ("securityContext", *PROBES)


def _dig(obj: Mapping[str, Any], path: Path) -> Mapping[str, Any]:
    current: Mapping[str, Any] = obj
    for depth, name in enumerate(path):
        value = current.get(str(name))
        if value is None:
            return _EMPTY  # a missing level: nothing below it either
        if not isinstance(value, _MAPPING):
            _mapping(value, path[: depth + 1])
        current = value
    return current


def _mapping(value: Any, path: Path) -> Mapping[str, Any]:
    if value is None:
        return _EMPTY
    if not isinstance(value, _MAPPING):
        raise InvalidObject(f"{dotted(path)}: expected a mapping, got {_type(value)}")
    return value


def _is_list_of_mappings(value: Any) -> bool:
    """What _list_of_mappings checks, without the path it needs only to say what is wrong."""
    if not isinstance(value, list):
        return False
    for item in value:  # noqa: SIM110 - all() over a generator costs twice this loop
        if not isinstance(item, _MAPPING):
            return False
    return True


def _list_of_mappings(value: Any, path: Path) -> None:
    if value is None:
        return
    if not isinstance(value, list):
        raise InvalidObject(f"{dotted(path)}: expected a list, got {_type(value)}")
    for index, item in enumerate(value):
        if not isinstance(item, _MAPPING):
            raise InvalidObject(f"{dotted((*path, index))}: expected a mapping, got {_type(item)}")


def _type(value: Any) -> str:
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


@lru_cache(maxsize=4096)
def dotted(path: Path) -> str:
    """A path as people read it: spec.containers[0].resources.limits[nvidia.com/gpu]."""
    text = ""
    for segment in path:
        if isinstance(segment, int):
            text += f"[{segment}]"
        elif _PLAIN.match(segment):
            text += f".{segment}" if text else segment
        else:
            text += f"[{segment}]"
    return text
