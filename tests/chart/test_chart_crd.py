"""The optional NodeTemplate CRD: its schema is generated from the same
pydantic model `quickq-guard validate-nodetemplates` uses, is structural (the API server would
refuse it otherwise), and accepts and rejects what lint does."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from chart_helpers import CHART, KUBE_VERSION, REPO, find, helm_template

from webhook.engine import nodetemplate
from webhook.export import crd

# Keywords a structural CRD schema may not carry (or that make no sense there).
FORBIDDEN = {"$ref", "$defs", "$schema", "$id", "definitions", "const", "title",
             "default", "examples", "prefixItems", "propertyNames", "patternProperties",
             "dependencies", "additionalItems"}
EXTENSIONS = ("x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields")


def structural_problems(node: Any, where: str = "") -> list[str]:
    """Violations of Kubernetes' structural-schema rules, as the API server states them."""
    if not isinstance(node, dict):
        return [f"{where}: not an object"]
    problems = [f"{where}: forbidden {key}" for key in FORBIDDEN & set(node)]
    if node.get("additionalProperties") is False:
        problems.append(f"{where}: additionalProperties false")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{where}: properties and additionalProperties together")
    if "type" not in node and not any(node.get(ext) for ext in EXTENSIONS):
        problems.append(f"{where}: no type")
    for bound in ("exclusiveMinimum", "exclusiveMaximum"):
        if bound in node and not isinstance(node[bound], bool):
            problems.append(f"{where}: {bound} must be a boolean")
    for junctor in ("anyOf", "oneOf", "allOf"):
        for branch in node.get(junctor, []):
            if "type" in branch or "properties" in branch:
                problems.append(f"{where}: {junctor} branch declares type/properties")
    for name, sub in node.get("properties", {}).items():
        problems += structural_problems(sub, f"{where}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        problems += structural_problems(node["additionalProperties"], f"{where}.*")
    if "items" in node:
        problems += structural_problems(node["items"], f"{where}[]")
    return problems


def as_json_schema(node: Any) -> Any:
    """Read the CRD dialect as plain JSON Schema (nullable, int-or-string) to test it."""
    if not isinstance(node, dict):
        return node
    out = {k: as_json_schema(v) if k in ("items", "additionalProperties") else v
           for k, v in node.items() if not k.startswith("x-kubernetes") and k != "nullable"}
    if "properties" in node:
        out["properties"] = {k: as_json_schema(v) for k, v in node["properties"].items()}
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    if node.get("nullable") and "type" in out:
        out["type"] = [*([out["type"]] if isinstance(out["type"], str) else out["type"]), "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if out.get(bound) is True:
            out[bound] = out.pop(plain)
        elif out.get(bound) is False:
            out.pop(bound)
    return out


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    generated: dict[str, Any] = crd.openapi_v3_schema()
    return generated


@pytest.fixture(scope="module")
def good() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO / "examples/good/nodetemplate.yaml").read_text())
    return loaded


def test_committed_schema_matches_model(schema: dict[str, Any]) -> None:
    committed = (CHART / "files" / "nodetemplate-schema.json").read_text()
    assert committed == crd.render(schema), "stale CRD schema: run `python -m webhook.export.crd`"
    assert crd.main(["--check"]) == 0


def test_schema_is_structural(schema: dict[str, Any]) -> None:
    assert structural_problems(schema) == []
    assert schema["properties"]["metadata"] == {"type": "object"}
    resources = schema["properties"]["spec"]["properties"]["resources"]["properties"]
    assert resources["limits"]["additionalProperties"]["x-kubernetes-int-or-string"] is True


def test_rendered_crd(schema: dict[str, Any]) -> None:
    docs = helm_template({"crd": {"install": True}})
    definition = find(docs, "CustomResourceDefinition", "nodetemplates.quickq.io")
    kubernetes_validate.validate(definition, KUBE_VERSION, strict=True)
    spec = definition["spec"]
    assert definition["metadata"]["name"] == "nodetemplates.quickq.io"
    assert (spec["group"], spec["scope"]) == ("quickq.io", "Namespaced")
    assert spec["names"]["kind"] == "NodeTemplate" and spec["names"]["plural"] == "nodetemplates"
    (version,) = spec["versions"]
    assert version["name"] == "v1" and version["storage"] and version["served"]
    assert version["schema"]["openAPIV3Schema"] == schema
    assert definition["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    dropped = find(helm_template({"crd": {"install": True, "keep": False}}),
                   "CustomResourceDefinition", "nodetemplates.quickq.io")
    assert "annotations" not in dropped["metadata"]


def test_crd_version_matches_model_api_version(good: dict[str, Any]) -> None:
    group, version = good["apiVersion"].split("/")
    assert group == "quickq.io"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["crd"]["versions"][0] == version


def test_schema_accepts_what_lint_accepts(schema: dict[str, Any], good: dict[str, Any]) -> None:
    assert nodetemplate.lint(good) == []
    jsonschema.validate(good, as_json_schema(schema))


def mutate(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of doc with the dotted path set to value (None deletes it)."""
    out = copy.deepcopy(doc)
    *parents, leaf = path.split(".")
    node = out
    for part in parents:
        node = node[part]
    if value is None:
        del node[leaf]
    else:
        node[leaf] = value
    return out


@pytest.mark.parametrize(("path", "value"), [
    ("spec.image", None),
    ("spec.image", ""),
    ("spec.resources", None),
    ("spec.resources.requests", {"memory": {"size": 4}}),
    ("spec.env", [{"value": "no-name"}]),
    ("spec.ports", [{"containerPort": 70000}]),
    ("spec.health", {"liveness": {"httpGet": {"path": "/healthz"}}}),
    ("spec.tolerations", [{"operator": "Sometimes"}]),
    ("spec.securityContext", {"runAsUser": -1}),
])
def test_schema_rejects_what_lint_rejects(schema: dict[str, Any], good: dict[str, Any],
                                          path: str, value: Any) -> None:
    bad = mutate(good, path, value)
    assert nodetemplate.lint(bad) != []
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, as_json_schema(schema))


def test_converter_handles_pydantic_shapes() -> None:
    """Unit check on constructs the NodeTemplate model may grow into."""
    source = {
        "type": "object", "title": "T", "additionalProperties": False,
        "$defs": {"Inner": {"type": "object", "title": "Inner", "additionalProperties": False,
                            "properties": {"n": {"type": "integer", "exclusiveMinimum": 0}}}},
        "properties": {
            "inner": {"$ref": "#/$defs/Inner", "description": "an inner model"},
            "opt": {"anyOf": [{"$ref": "#/$defs/Inner"}, {"type": "null"}], "default": None},
            "mode": {"const": "fast"},
            "anything": {},
            "free": {"type": "object", "additionalProperties": True},
            "qty": {"anyOf": [{"type": "string"}, {"type": "number"}]},
        },
        "required": ["inner"],
    }
    out = crd.structural(source)
    props = out["properties"]
    assert props["inner"] == {"type": "object", "description": "an inner model", "properties": {
        "n": {"type": "integer", "minimum": 0, "exclusiveMinimum": True}}}
    assert props["opt"]["nullable"] is True and props["opt"]["type"] == "object"
    assert props["mode"] == {"type": "string", "enum": ["fast"]}
    assert props["anything"] == {"x-kubernetes-preserve-unknown-fields": True}
    assert props["free"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert props["qty"] == {"x-kubernetes-int-or-string": True}
    assert out["required"] == ["inner"]
    assert structural_problems(out) == []
    recursive = {"$defs": {"N": {"type": "object", "properties": {"next": {"$ref": "#/$defs/N"}}}},
                 "$ref": "#/$defs/N"}
    with pytest.raises(ValueError, match="recursive"):
        crd.structural(recursive)


def test_schema_file_is_valid_json() -> None:
    json.loads((CHART / "files" / "nodetemplate-schema.json").read_text())
