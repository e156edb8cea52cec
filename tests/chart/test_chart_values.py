"""A typo or a wrong type in values must fail `helm install`, with a message
that names the problem, instead of silently installing something else."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from chart_helpers import CHART, helm_lint, helm_template_raw

BAD_VALUES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("unknown mode", {"mode": "audit"}, ["/mode", "enforce", "dry-run"]),
    ("unknown cert mode", {"certs": {"mode": "vault"}}, ["/certs/mode", "cert-manager"]),
    ("wrong type", {"replicaCount": "two"}, ["/replicaCount", "want integer"]),
    ("wrong type nested", {"webhook": {"timeoutSeconds": "5s"}},
     ["/webhook/timeoutSeconds", "want integer"]),
    ("unknown top-level key", {"replicas": 3}, ["additional properties 'replicas'"]),
    ("unknown nested key", {"image": {"tags": "0.1.0"}},
     ["/image", "additional properties 'tags'"]),
    ("typo in probe", {"probes": {"liveness": {"periodSecond": 10}}},
     ["/probes/liveness", "'periodSecond'"]),
    ("bad failure policy", {"webhook": {"failurePolicy": "fail"}},
     ["/webhook/failurePolicy", "Ignore"]),
    ("timeout out of range", {"webhook": {"timeoutSeconds": 45}},
     ["/webhook/timeoutSeconds", "maximum"]),
    ("bad policy action", {"policies": {"require-labels": {"action": "block"}}},
     ["/policies/require-labels/action", "warn"]),
    ("unknown policy override key", {"policies": {"require-labels": {"level": "warn"}}},
     ["/policies/require-labels", "'level'"]),
    ("secret mode without secret", {"certs": {"mode": "secret"}},
     ["/certs/secret/name", "/certs/secret/caBundle"]),
    ("unknown pod security profile", {"config": {"podSecurity": {"enforce": "strict"}}},
     ["/config/podSecurity/enforce", "restricted"]),
]


def error_text(values: dict[str, Any]) -> str:
    proc = helm_template_raw(values)
    assert proc.returncode != 0, "helm accepted invalid values"
    return proc.stderr


@pytest.mark.parametrize(("values", "expected"), [(v, e) for _, v, e in BAD_VALUES],
                         ids=[name for name, _, _ in BAD_VALUES])
def test_template_rejects_bad_values(values: dict[str, Any], expected: list[str]) -> None:
    text = error_text(values)
    for fragment in expected:
        assert fragment in text, f"{fragment!r} not in helm's error:\n{text}"


def test_lint_rejects_bad_values() -> None:
    proc = helm_lint({"mode": "audit"})
    assert proc.returncode != 0
    assert "/mode" in proc.stdout + proc.stderr


@pytest.mark.parametrize(("values", "expected"), [
    ({"image": {"tag": "latest"}}, "image.tag must be a pinned version, not latest"),
    ({"probes": {"liveness": {"failureThreshold": 2, "periodSeconds": 10}}},
     "failureThreshold x periodSeconds is 20s"),
    ({"extraPolicies": {"require-labels.yaml": "id: require-labels\n"}},
     "extraPolicies.require-labels.yaml would replace a shipped policy file"),
])
def test_template_rejects_unsafe_settings(values: dict[str, Any], expected: str) -> None:
    assert expected in error_text(values)


def test_schema_closes_every_defined_object() -> None:
    """Every object with declared properties refuses unknown keys."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    open_objects: list[str] = []

    def walk(node: dict[str, Any], where: str) -> None:
        if "properties" in node and node.get("additionalProperties") is not False:
            open_objects.append(where)
        for name, sub in node.get("properties", {}).items():
            walk(sub, f"{where}.{name}")
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            walk(extra, f"{where}.*")

    walk(schema, "values")
    assert open_objects == []


def test_default_values_are_all_declared_in_schema() -> None:
    """values.yaml and the schema agree, so no default is an 'unknown key'."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(value: Any, node: dict[str, Any], where: str) -> None:
        if not isinstance(value, dict) or "properties" not in node:
            return
        for key, sub in value.items():
            assert key in node["properties"], f"{where}.{key} missing from the schema"
            walk(sub, node["properties"][key], f"{where}.{key}")

    walk(values, schema, "values")


def test_readme_documents_every_value() -> None:
    """Each leaf key of values.yaml appears in the chart README's table."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()

    def leaves(value: Any, prefix: str) -> list[str]:
        if isinstance(value, dict) and value:
            return [leaf for k, v in value.items() for leaf in leaves(v, f"{prefix}{k}.")]
        return [prefix.rstrip(".")]

    missing = [key for key in leaves(values, "") if f"`{key}`" not in readme]
    assert missing == []
