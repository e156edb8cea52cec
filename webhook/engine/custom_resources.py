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

Schema = Mapping[str, Any]
GROUP = "quickq.io"
# Kind -> the openAPIV3Schema the chart installs for it (every served version of the group
# has the same one).
_SCHEMAS: dict[str, Schema] = {"NodeTemplate": NODE_TEMPLATE, "PolicyException": POLICY_EXCEPTION}


def schema_of(obj: Any) -> Schema | None:
    """The structural schema the API server decodes `obj` by, if it is one of ours."""
    if not isinstance(obj, Mapping):
        return None
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str) or api_version.partition("/")[0] != GROUP:
        return None
    return _SCHEMAS.get(str(obj.get("kind")))


def as_served(obj: Any) -> tuple[Any, list[tuple[Path, str]]]:
    """(the object as the API server hands it over, what the API server refuses in it):
    `obj` itself when it is none of ours, else a copy decoded by its schema."""
    schema = schema_of(obj)
    if schema is None:
        return obj, []
    served = copy.deepcopy(dict(obj))
    refused: list[tuple[Path, str]] = []
    _drop_nulls(served, schema, (), refused)
    _default(served, schema)
    return served, refused


def _property(schema: Schema, key: str) -> Schema | None:
    properties = schema.get("properties")
    if isinstance(properties, Mapping) and key in properties:
        found: Schema = properties[key]
        return found
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, Mapping) else None


def _drop_nulls(value: Any, schema: Schema, path: Path,
                refused: list[tuple[Path, str]]) -> None:
    """PruneNonNullableNullsWithoutDefaults: a null the schema allows no null for, and has
    no default for, is dropped (a null list item stays); a null an enum leaves out is
    refused."""
    if isinstance(value, dict):
        for key in list(value):
            inner = _property(schema, key)
            if inner is None:
                continue
            if value[key] is None:
                if not inner.get("nullable") and "default" not in inner:
                    del value[key]
                elif "enum" in inner and None not in inner["enum"]:
                    allowed = ", ".join(f'"{v}"' for v in inner["enum"])
                    refused.append(((*path, key), "Unsupported value: null: "
                                    f"supported values: {allowed}"))
            else:
                _drop_nulls(value[key], inner, (*path, key), refused)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for index, item in enumerate(value):
                _drop_nulls(item, items, (*path, index), refused)


def _default(value: Any, schema: Schema) -> None:
    """structuraldefaulting.Default: a field that is missing (or a null the schema allows no
    null for) gets its default, and defaulting goes on inside every value."""
    if isinstance(value, dict):
        properties = schema.get("properties")
        for key, inner in (properties.items() if isinstance(properties, Mapping) else ()):
            if "default" in inner and (key not in value or (
                    value[key] is None and not inner.get("nullable"))):
                value[key] = copy.deepcopy(inner["default"])
        for key, item in value.items():
            inner = _property(schema, key)
            if inner is not None:
                _default(item, inner)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for item in value:
                _default(item, items)
