"""quickq-guard's own custom resources (NodeTemplate and PolicyException, group quickq.io) as
the API server hands them to a webhook: decoded by their CustomResourceDefinition's
structural schema (webhook/engine/crd_schemas.py, which webhook.export.crd writes from the
models beside the chart's copy).

apiextensions-apiserver drops a null where the schema does not allow one (nor has a default
for it) and sets each `default:` of the schema on an object that lacks the field, deep into
lists and maps; nothing else changes (a custom resource keeps its empty values). It refuses
a null where the schema allows one but lists the values allowed (`protocol: null`: an enum
has no null), which the models take. Pure: the object passed in is never changed.
tests/cluster/test_offline_model.py proves it against a real API server with the chart's CRDs
installed.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from webhook.engine.crd_schemas import NODE_TEMPLATE, POLICY_EXCEPTION
from webhook.engine.patch import Path
from webhook.engine.schema import is_mapping

Schema = Mapping[str, Any]
GROUP = "quickq.io"
# Kind -> the openAPIV3Schema the chart installs for it (every served version of the group
# has the same one).
_SCHEMAS: dict[str, Schema] = {"NodeTemplate": NODE_TEMPLATE, "PolicyException": POLICY_EXCEPTION}


def schema_of(obj: Any) -> Schema | None:
    """The structural schema the API server decodes `obj` by, if it is one of ours."""
    if not is_mapping(obj):
        return None
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str) or api_version.partition("/")[0] != GROUP:
        return None
    return _SCHEMAS.get(str(obj.get("kind")))


def as_served(obj: Any) -> tuple[Any, list[tuple[Path, str]]]:
    """(the object as the API server hands it over, what the API server refuses in it):
    `obj` itself when it is none of ours, else a copy decoded by its schema, made in the
    walk that decodes it."""
    schema = schema_of(obj)
    if schema is None:
        return obj, []
    refused: list[tuple[Path, str]] = []
    return _served(obj if type(obj) is dict else dict(obj), schema, (), refused), refused


def _property(schema: Schema, key: Any) -> Schema | None:
    properties = schema.get("properties")
    if is_mapping(properties) and key in properties:
        found: Schema = properties[key]
        return found
    extra = schema.get("additionalProperties")
    return extra if is_mapping(extra) else None


def _served(value: Any, schema: Schema, path: Path, refused: list[tuple[Path, str]]) -> Any:
    """A copy of `value` as its schema decodes it. PruneNonNullableNullsWithoutDefaults: a null
    the schema allows no null for, and has no default for, is dropped (a null list item
    stays); a null an enum leaves out is refused. Then structuraldefaulting.Default: a field
    that is missing (or a null the schema allows no null for) gets its default."""
    if isinstance(value, dict):
        served: dict[Any, Any] = {}
        for key, item in value.items():
            inner = _property(schema, key)
            if inner is None:
                served[key] = _copy(item)
            elif item is not None:
                served[key] = _served(item, inner, (*path, key), refused)
            elif inner.get("nullable") or "default" in inner:
                if "enum" in inner and None not in inner["enum"]:
                    allowed = ", ".join(f'"{v}"' for v in inner["enum"])
                    refused.append(((*path, key), "Unsupported value: null: "
                                    f"supported values: {allowed}"))
                served[key] = None
        _default(served, schema)
        return served
    items = schema.get("items")
    if isinstance(value, list) and is_mapping(items):
        return [_served(item, items, (*path, index), refused) for index, item in enumerate(value)]
    return _copy(value)


def _default(value: dict[Any, Any], schema: Schema) -> None:
    """The defaults of one mapping's missing fields (and of its nulls the schema allows no null
    for), each defaulted inside in turn; the rest of the mapping is defaulted already."""
    properties = schema.get("properties")
    for key, inner in (properties.items() if is_mapping(properties) else ()):
        if "default" in inner and (key not in value or (
                value[key] is None and not inner.get("nullable"))):
            value[key] = _defaulted(_copy(inner["default"]), inner)


def _defaulted(value: Any, schema: Schema) -> Any:
    """A default value with the defaults inside it set (it holds no null to drop)."""
    if isinstance(value, dict):
        for key, item in value.items():
            inner = _property(schema, key)
            if inner is not None:
                _defaulted(item, inner)
        _default(value, schema)
    elif isinstance(value, list) and is_mapping(items := schema.get("items")):
        for item in value:
            _defaulted(item, items)
    return value


def _copy(value: Any) -> Any:
    """A deep copy of decoded data: its dicts and lists copied, its scalars (immutable) shared."""
    kind = type(value)
    if kind is dict:
        return {key: _copy(item) for key, item in value.items()}
    if kind is list:
        return [_copy(item) for item in value]
    if kind in _SCALARS:
        return value
    return copy.deepcopy(value)


_SCALARS = frozenset({str, int, float, bool, type(None)})
