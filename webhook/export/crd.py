"""Turn the NodeTemplate and PolicyException pydantic JSON Schemas into CRDs' structural schemas.

`quickq-guard validate-nodetemplates` validates NodeTemplates with a pydantic model; the
optional CustomResourceDefinition in the Helm chart carries the same rules
so the API server rejects a malformed NodeTemplate before the webhook is
even asked. Kubernetes accepts only a *structural* OpenAPI v3 subset: no
`$ref`, every node typed, no `additionalProperties: false`, booleans for
`exclusiveMinimum`, and so on. `openapi_v3_schema()` does that translation;
`main()` writes it into the chart and into webhook/engine/crd_schemas.py, the copy the engine
decodes our custom resources by (`python -m webhook.export.crd`), and a chart test checks the
committed files match.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

Schema = dict[str, Any]

FILES = Path(__file__).resolve().parents[2] / "charts" / "quickq-guard" / "files"
SCHEMA_FILE = FILES / "nodetemplate-schema.json"
EXCEPTION_SCHEMA_FILE = FILES / "policyexception-schema.json"
ENGINE_SCHEMAS_FILE = Path(__file__).resolve().parents[1] / "engine" / "crd_schemas.py"

# Keywords a CRD schema may carry unchanged (value validations and docs).
KEPT = frozenset({
    "description", "maximum", "minimum", "maxLength", "minLength", "pattern",
    "maxItems", "minItems", "multipleOf", "maxProperties", "minProperties",
})
# Formats the API server knows; others are dropped rather than warned about.
FORMATS = frozenset({
    "int32", "int64", "float", "double", "byte", "binary", "date", "date-time",
    "duration", "email", "hostname", "ipv4", "ipv6", "uri", "uuid", "password",
})
# Top-level fields the API server owns: their shape is fixed by Kubernetes.
SERVER_OWNED = {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"type": "object"}}
PRESERVE = "x-kubernetes-preserve-unknown-fields"
INT_OR_STRING = "x-kubernetes-int-or-string"


def resolve(node: Schema, defs: Mapping[str, Schema],
            seen: tuple[str, ...]) -> tuple[Schema, tuple[str, ...]]:
    """Inline a `$ref` to `#/$defs/X`, refusing recursive models CRDs cannot express.

    Returns the node and the chain of models it sits in, for the recursion check."""
    ref = node.get("$ref")
    if ref is None:
        return node, seen
    name = ref.rsplit("/", 1)[-1]
    if name in seen:
        raise ValueError(f"recursive schema through {name!r} cannot become a CRD schema")
    target = dict(defs[name])
    # Siblings of $ref (e.g. a field description) win over the referenced model's.
    target.update({k: v for k, v in node.items() if k != "$ref"})
    return resolve(target, defs, (*seen, name))


def split_null(variants: list[Schema]) -> tuple[list[Schema], bool]:
    """Separate `{"type": "null"}` (pydantic's Optional) from the real variants."""
    real = [v for v in variants if v.get("type") != "null"]
    return real, len(real) != len(variants)


def is_scalar_number_or_string(variant: Schema) -> bool:
    return variant.get("type") in ("integer", "number", "string")


def convert_union(node: Schema, variants: list[Schema], defs: Mapping[str, Schema],
                  seen: tuple[str, ...]) -> Schema:
    """anyOf/oneOf: Optional[X] -> nullable X; int|str (quantities) -> int-or-string;
    anything else -> an object or value that the API server keeps as sent."""
    real, nullable = split_null([resolve(v, defs, seen)[0] for v in variants])
    out: Schema
    if len(real) == 1:
        out = convert(variants[0] if len(variants) == 1 else
                      next(v for v in variants if v.get("type") != "null"), defs, seen)
    elif real and all(is_scalar_number_or_string(v) for v in real) and \
            any(v.get("type") == "string" for v in real):
        out = {INT_OR_STRING: True}
    elif real and all(v.get("type") == "object" for v in real):
        out = {"type": "object", PRESERVE: True}
    else:
        out = {PRESERVE: True}
    if "description" in node:
        out["description"] = node["description"]
    if nullable:
        out["nullable"] = True
    return out


def convert_enum(values: list[Any], out: Schema) -> None:
    """Keep an enum (or a const) minus null, which CRDs express as nullable."""
    kept = [v for v in values if v is not None]
    if len(kept) != len(values):
        out["nullable"] = True
    if kept:
        out["enum"] = kept


def convert_object(node: Schema, out: Schema, defs: Mapping[str, Schema],
                   seen: tuple[str, ...]) -> None:
    """properties/required/additionalProperties; `false` is implied by pruning."""
    properties = node.get("properties")
    extra = node.get("additionalProperties")
    if properties:
        out["properties"] = {name: convert(sub, defs, seen) for name, sub in properties.items()}
        if node.get("required"):
            out["required"] = list(node["required"])
        if extra is True or isinstance(extra, dict):
            out[PRESERVE] = True  # a model with extra="allow": keep unknown fields
    elif isinstance(extra, dict) and extra:
        out["additionalProperties"] = convert(extra, defs, seen)
    elif extra is not False:
        out[PRESERVE] = True  # dict[str, Any] or a free-form object


def convert(node: Schema, defs: Mapping[str, Schema], seen: tuple[str, ...] = ()) -> Schema:
    """Convert one JSON Schema node (pydantic flavour) to a structural CRD node."""
    node, seen = resolve(node, defs, seen)
    for union in ("anyOf", "oneOf"):
        if union in node:
            return convert_union(node, node[union], defs, seen)
    if "allOf" in node and len(node["allOf"]) == 1:
        merged = {**node["allOf"][0], **{k: v for k, v in node.items() if k != "allOf"}}
        return convert(merged, defs, seen)
    out: Schema = {k: v for k, v in node.items() if k in KEPT}
    if node.get("default") is not None:
        # The API server sets it on an object that lacks the field (a null default is no
        # default: the field is then absent, as the model reads it).
        out["default"] = node["default"]
    kind = node.get("type")
    if isinstance(kind, list):
        types = [t for t in kind if t != "null"]
        if len(types) != len(kind):
            out["nullable"] = True
        kind = types[0] if len(types) == 1 else None
    if "const" in node:
        convert_enum([node["const"]], out)
    if "enum" in node:
        convert_enum(list(node["enum"]), out)
    if node.get("format") in FORMATS:
        out["format"] = node["format"]
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(node.get(bound), int | float) and not isinstance(node[bound], bool):
            out[plain] = node[bound]
            out[bound] = True
    if kind is None and "enum" in out:
        kind = "string" if all(isinstance(v, str) for v in out["enum"]) else None
    if kind is None and ("properties" in node or "additionalProperties" in node):
        kind = "object"
    if kind is None:
        out.pop("enum", None)
        out[PRESERVE] = True
        return out
    out["type"] = kind
    if kind == "object":
        convert_object(node, out, defs, seen)
    elif kind == "array":
        out["items"] = convert(node.get("items") or {}, defs, seen)
    return out


def structural(schema: Schema) -> Schema:
    """The full CRD schema: the API server owns apiVersion, kind and metadata."""
    defs = schema.get("$defs", {})
    root = convert(schema, defs)
    if root.get("type") != "object":
        raise ValueError("a CRD schema must describe an object")
    root["properties"] = {**root.get("properties", {}), **SERVER_OWNED}
    root["required"] = [r for r in root.get("required", []) if r not in SERVER_OWNED]
    if not root["required"]:
        del root["required"]
    root.pop("nullable", None)
    return root


def openapi_v3_schema(source: Callable[[], Schema] | None = None) -> Schema:
    """The NodeTemplate CRD's openAPIV3Schema, from the model `validate-nodetemplates` checks
    with."""
    if source is None:
        from webhook.engine.nodetemplate import json_schema

        source = json_schema
    return structural(source())


def exception_schema() -> Schema:
    """The PolicyException CRD's openAPIV3Schema, from the model the engine reads them with."""
    from webhook.engine.policy_exceptions import json_schema

    return structural(json_schema())


def definition(kind: str, version: str, schema: Schema,
               deprecated: Sequence[str] = ()) -> Schema:
    """A CustomResourceDefinition of group quickq.io, as the chart renders it (without the
    chart's labels), for `quickq-guard crd`. `deprecated`: older versions still served, with
    the same schema (no conversion needed) and a warning to whoever uses them."""
    plural = kind.lower() + "s"
    older = [{"name": old, "served": True, "storage": False, "deprecated": True,
              "deprecationWarning": f"quickq.io/{old} {kind} is deprecated; use "
                                    f"quickq.io/{version}",
              "schema": {"openAPIV3Schema": schema}} for old in deprecated]
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.quickq.io"},
            "spec": {"group": "quickq.io", "scope": "Namespaced",
                     "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural,
                               "singular": kind.lower()},
                     "versions": [{"name": version, "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": schema}}, *older]}}


def render(schema: Schema) -> str:
    """Stable text, so the committed file diffs cleanly when the model changes."""
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def engine_module(node_template: Schema, policy_exception: Schema) -> str:
    """webhook/engine/crd_schemas.py: the same schemas as Python literals, so that the engine
    has them at import, without building the models' JSON Schemas in every process (about
    0.1 s, which each of check's workers and the webhook's paid at their first NodeTemplate)."""
    def literal(name: str, schema: Schema) -> str:
        return f"{name}: Schema = {_literal(schema, 0)}\n"

    return (
        '"""The openAPIV3Schema of each CustomResourceDefinition the chart installs for\n'
        "quickq-guard's own kinds, as webhook.engine.custom_resources decodes them.\n\n"
        "Generated by `python -m webhook.export.crd` from the models (webhook/export/crd.py);\n"
        'do not edit.\n"""\n\n'
        "from typing import Any\n\nSchema = dict[str, Any]\n\n"
        + literal("NODE_TEMPLATE", node_template) + "\n"
        + literal("POLICY_EXCEPTION", policy_exception))


def _literal(value: Any, indent: int) -> str:
    """A JSON value as a Python literal, a key or item per line, keys sorted (as `render`)."""
    inner = " " * (indent + 4)
    if isinstance(value, dict) and value:
        items = [f"{inner}{key!r}: {_literal(value[key], indent + 4)}," for key in sorted(value)]
    elif isinstance(value, list) and value:
        items = [f"{inner}{_literal(item, indent + 4)}," for item in value]
    else:
        return repr(value)
    opening, closing = ("{", "}") if isinstance(value, dict) else ("[", "]")
    return opening + "\n" + "\n".join(items) + "\n" + " " * indent + closing


def main(argv: list[str] | None = None) -> int:
    """Write the chart's CRD schemas and the engine's copy (or, with --check, fail if one is
    stale)."""
    args = sys.argv[1:] if argv is None else argv
    stale = 0
    node_template, policy_exception = openapi_v3_schema(), exception_schema()
    for path, text in ((SCHEMA_FILE, render(node_template)),
                       (EXCEPTION_SCHEMA_FILE, render(policy_exception)),
                       (ENGINE_SCHEMAS_FILE, engine_module(node_template, policy_exception))):
        if "--check" in args:
            if not path.is_file() or path.read_text() != text:
                print(f"{path} is stale: run `python -m webhook.export.crd`", file=sys.stderr)
                stale = 1
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    return stale


if __name__ == "__main__":
    sys.exit(main())
