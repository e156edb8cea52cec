"""What the Kubernetes API server would refuse before any policy runs: an apiVersion it no
longer serves, a field it does not know, a value of the wrong type.

`kubectl apply` asks for strict field validation, so `container:` instead of `containers:` is
refused, and `runAsUser: "1000"` never decodes. quickq-guard says so offline too, naming the
field, instead of judging an object that can never be created. The fields and types come from
the Kubernetes OpenAPI schemas (webhook/engine/kubernetes_fields.py, generated). Quantities
are left to the valid-resource-quantities policy. Values are never echoed: an env value may
be a secret.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, TypeGuard

from webhook.engine.kubernetes_fields import KINDS, TYPES
from webhook.engine.patch import Path

# At most this many problems are named; the rest are counted.
MAX_PROBLEMS = 10

# (apiVersion, kind) -> (the apiVersion to use, the Kubernetes release that stopped serving it)
REMOVED_API_VERSIONS: dict[tuple[str, str], tuple[str, str]] = {
    **{("extensions/v1beta1", kind): ("apps/v1", "1.16")
       for kind in ("Deployment", "DaemonSet", "ReplicaSet")},
    ("extensions/v1beta1", "Ingress"): ("networking.k8s.io/v1", "1.22"),
    ("extensions/v1beta1", "NetworkPolicy"): ("networking.k8s.io/v1", "1.16"),
    **{("apps/v1beta1", kind): ("apps/v1", "1.16")
       for kind in ("Deployment", "StatefulSet", "ControllerRevision")},
    **{("apps/v1beta2", kind): ("apps/v1", "1.16")
       for kind in ("Deployment", "DaemonSet", "ReplicaSet", "StatefulSet",
                    "ControllerRevision")},
    ("batch/v1beta1", "CronJob"): ("batch/v1", "1.25"),
    ("batch/v2alpha1", "CronJob"): ("batch/v1", "1.21"),
    ("networking.k8s.io/v1beta1", "Ingress"): ("networking.k8s.io/v1", "1.22"),
    ("networking.k8s.io/v1beta1", "IngressClass"): ("networking.k8s.io/v1", "1.22"),
    ("policy/v1beta1", "PodDisruptionBudget"): ("policy/v1", "1.25"),
    ("autoscaling/v2beta1", "HorizontalPodAutoscaler"): ("autoscaling/v2", "1.25"),
    ("autoscaling/v2beta2", "HorizontalPodAutoscaler"): ("autoscaling/v2", "1.26"),
    ("discovery.k8s.io/v1beta1", "EndpointSlice"): ("discovery.k8s.io/v1", "1.25"),
    ("events.k8s.io/v1beta1", "Event"): ("events.k8s.io/v1", "1.25"),
    ("node.k8s.io/v1beta1", "RuntimeClass"): ("node.k8s.io/v1", "1.25"),
    ("scheduling.k8s.io/v1beta1", "PriorityClass"): ("scheduling.k8s.io/v1", "1.22"),
    ("coordination.k8s.io/v1beta1", "Lease"): ("coordination.k8s.io/v1", "1.22"),
    ("storage.k8s.io/v1beta1", "CSIStorageCapacity"): ("storage.k8s.io/v1", "1.27"),
    **{("rbac.authorization.k8s.io/v1beta1", kind): ("rbac.authorization.k8s.io/v1", "1.22")
       for kind in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")},
    **{("admissionregistration.k8s.io/v1beta1", kind):
       ("admissionregistration.k8s.io/v1", "1.22")
       for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")},
    ("apiextensions.k8s.io/v1beta1", "CustomResourceDefinition"):
        ("apiextensions.k8s.io/v1", "1.22"),
}


def removed_api_version(api_version: str, kind: str) -> str:
    """Why Kubernetes no longer serves this apiVersion of the kind, or ''."""
    removed = REMOVED_API_VERSIONS.get((api_version, kind))
    if removed is None:
        return ""
    use, release = removed
    return (f"apiVersion {api_version} of {kind} is no longer served (removed in Kubernetes "
            f"{release}); use apiVersion {use}")


class _Object:
    """An object type: its fields, and whether fields it does not know are refused."""

    __slots__ = ("fields", "name", "strict")

    def __init__(self, name: str, strict: bool = True) -> None:
        self.name = name
        self.fields: dict[str, Any] = {}
        self.strict = strict


class _List:
    __slots__ = ("item",)

    def __init__(self, item: Any) -> None:
        self.item = item


class _Map:
    __slots__ = ("item",)

    def __init__(self, item: Any) -> None:
        self.item = item


# One object per scalar type, so the walk compares nodes by identity.
_STRING, _ANY = "string", "any"
_SCALARS = {kind: kind for kind in (_STRING, _ANY, "integer", "number", "boolean",
                                    "int-or-string")}


def _compile() -> dict[str, _Object]:
    objects = {name: _Object(name) for name in TYPES}

    def node(kind: str) -> Any:
        if kind in _SCALARS:
            return _SCALARS[kind]
        if kind.startswith("[]"):
            return _List(node(kind[2:]))
        if kind.startswith("{}"):
            return _Map(node(kind[2:]))
        return objects[kind]

    for name, fields in TYPES.items():
        objects[name].fields = {field: node(kind) for field, kind in fields.items()}
    return objects


_OBJECTS = _compile()
POD_SPEC = _OBJECTS["core.v1.PodSpec"]
POD_TEMPLATE = _OBJECTS["core.v1.PodTemplateSpec"]
CONTAINER = _OBJECTS["core.v1.Container"]


def lenient(node: _Object) -> _Object:
    """The same type with fields it does not know allowed: for objects that inline a pod spec
    or a container among their own fields (a KServe predictor)."""
    copy = _Object(node.name, strict=False)
    copy.fields = node.fields
    return copy


POD_SPEC_LENIENT = lenient(POD_SPEC)
CONTAINER_LENIENT = lenient(CONTAINER)


def object_type(api_version: str, kind: str) -> _Object | None:
    """The schema of a whole object of a built-in kind quickq-guard judges."""
    name = KINDS.get(f"{api_version} {kind}")
    return _OBJECTS[name] if name else None


# A problem: the field's path and what is wrong with it.
Problem = tuple[Path, str]


def check(value: Any, node: _Object, path: Path, problems: list[Problem]) -> None:
    """Add to `problems` what the API server would refuse in `value` (an object of type
    `node` at `path`): fields it does not know, values of the wrong type."""
    where: _Where = ()
    for key in path:
        where = (where, key)
    _object(value, node, where, problems)


# The walk passes a path as nested pairs, (parent, key), and builds the tuple only for a
# problem: most objects have none.
_Where = tuple[Any, ...]


def _object(value: Any, node: _Object, where: _Where, problems: list[Problem]) -> None:
    if not is_mapping(value):
        problems.append((_path(where), f"expected a mapping, got {type_name(value)}"))
        return
    if len(problems) > MAX_PROBLEMS:
        return
    fields = node.fields
    for key, item in value.items():
        child = fields.get(key)
        if child is None:
            if node.strict:
                problems.append(_unknown(where, key, fields))
        elif item is None or child is _ANY:
            continue
        elif child is _STRING:
            if item.__class__ is not str:
                problems.append(_wrong(where, key, child, item))
        elif child.__class__ is _Object:
            _object(item, child, (where, key), problems)
        elif child.__class__ is str:
            if not _scalar_ok(child, item):
                problems.append(_wrong(where, key, child, item))
        else:
            _collection(item, child, (where, key), problems)


def _collection(value: Any, node: _List | _Map, where: _Where, problems: list[Problem]) -> None:
    item_node = node.item
    if node.__class__ is _List:
        if value.__class__ is not list:
            problems.append((_path(where), f"expected a list, got {type_name(value)}"))
            return
        items: Any = enumerate(value)
    else:
        if not is_mapping(value):
            problems.append((_path(where), f"expected a mapping, got {type_name(value)}"))
            return
        items = value.items()
    if item_node is _ANY:
        return
    if item_node.__class__ is _Object:
        for key, item in items:  # a null item decodes to an empty object, which is no object
            _object(item, item_node, (where, key), problems)
    elif item_node.__class__ is str:
        for key, item in items:
            if item is not None and not _scalar_ok(item_node, item):
                problems.append(_wrong(where, key, item_node, item))
    else:
        for key, item in items:
            if item is not None:
                _collection(item, item_node, (where, key), problems)


def _path(where: _Where) -> Path:
    path: list[Any] = []
    while where:
        where, key = where
        path.append(key)
    return tuple(reversed(path))


_EXPECTED = {"string": "a string", "integer": "an integer", "number": "a number",
             "boolean": "a boolean (true or false)", "int-or-string": "an integer or a string"}


def _scalar_ok(kind: str, value: Any) -> bool:
    cls = value.__class__
    if kind == "string":
        return cls is str
    if kind == "boolean":
        return cls is bool
    # YAML 1.0 reaches the API server as 1 (kubectl writes whole floats as integers).
    whole = cls is int or (cls is float and value.is_integer())
    if kind == "integer":
        return whole
    if kind == "int-or-string":
        return whole or cls is str
    return cls is int or cls is float  # number


def _unknown(where: _Where, key: Any, fields: Mapping[str, Any]) -> Problem:
    guess = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.75)
    hint = f"; did you mean {guess[0]}?" if guess else ""
    return _path((where, str(key))), f"unknown field '{key}'{hint}"


def _wrong(where: _Where, key: Any, kind: str, value: Any) -> Problem:
    expected = _EXPECTED[kind]
    hint = ""
    if isinstance(value, str) and expected.startswith("an integer") and value.strip().isdigit():
        hint = " (write the number without quotes)"
    elif isinstance(value, str) and expected.startswith("a boolean"):
        hint = " (write true or false without quotes)"
    elif expected == "a string" and isinstance(value, bool | int | float):
        hint = " (quote the value)"
    return _path((where, key)), f"expected {expected}, got {type_name(value)}{hint}"


def is_mapping(value: object) -> TypeGuard[Mapping[Any, Any]]:
    """Whether `value` is a mapping. A decoded object's mappings are dicts, so that is asked
    first, and a missing field's None next: isinstance(value, Mapping) alone goes through the
    ABC machinery (a Python call) on every call."""
    return value.__class__ is dict or (value is not None and isinstance(value, Mapping))


def type_name(value: Any) -> str:
    """How a message names a value's type; the value itself is never shown."""
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    found = names.get(type(value))
    if found:
        return found
    return "a mapping" if isinstance(value, Mapping) else type(value).__name__



# For webhook.engine.normalize, which checks an object as it normalizes it (one walk): the
# same problems, named the same way, for a path given as a tuple.


def unknown_field(path: Path, key: Any, fields: Mapping[str, Any]) -> Problem:
    return _unknown(_nest(path), key, fields)


def wrong_type(path: Path, key: Any, kind: str, value: Any) -> Problem:
    return _wrong(_nest(path), key, kind, value)


def scalar_ok(kind: str, value: Any) -> bool:
    return _scalar_ok(kind, value)


def _nest(path: Path) -> _Where:
    where: _Where = ()
    for key in path:
        where = (where, key)
    return where
