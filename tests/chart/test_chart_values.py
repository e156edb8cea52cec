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
    ("bad failure policy", {"webhook": {"failurePolicy": {"validating": "fail"}}},
     ["/webhook/failurePolicy/validating", "Ignore"]),
    ("one failure policy for both", {"webhook": {"failurePolicy": "Fail"}},
     ["/webhook/failurePolicy", "want object"]),
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
    # The holes a platform engineer found (issue 24, section 7).
    ("security context typo", {"securityContext": {"readOnlyRootFileSystem": True}},
     ["/securityContext", "'readOnlyRootFileSystem'"]),
    ("object selector typo", {"webhook": {"objectSelector": {"bogus": {}}}},
     ["/webhook/objectSelector", "'bogus'"]),
    ("env entry without a name", {"server": {"extraEnv": [{"value": "1"}]}},
     ["/server/extraEnv/0", "missing property 'name'"]),
    ("privileged container", {"securityContext": {"privileged": True}},
     ["/securityContext/privileged", "false"]),
    ("root container", {"securityContext": {"runAsUser": 0}},
     ["/securityContext/runAsUser", "minimum"]),
    ("root pod", {"podSecurityContext": {"runAsUser": 0}},
     ["/podSecurityContext/runAsUser", "minimum"]),
    ("root allowed", {"securityContext": {"runAsNonRoot": False}},
     ["/securityContext/runAsNonRoot", "true"]),
    ("writable root", {"securityContext": {"readOnlyRootFilesystem": False}},
     ["/securityContext/readOnlyRootFilesystem"]),
    ("escalation", {"securityContext": {"allowPrivilegeEscalation": True}},
     ["/securityContext/allowPrivilegeEscalation"]),
    ("added capability", {"securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}},
     ["/securityContext/capabilities/add", "maxItems"]),
    ("not a memory quantity", {"resources": {"limits": {"memory": "lots"}}},
     ["/resources/limits/memory", "does not match pattern"]),
    ("not a cpu quantity", {"resources": {"requests": {"cpu": "fast"}}},
     ["/resources/requests/cpu", "does not match pattern"]),
    ("resource typo", {"resources": {"limit": {"cpu": "1"}}}, ["/resources", "'limit'"]),
    ("a PDB of 100%", {"podDisruptionBudget": {"minAvailable": "100%"}},
     ["/podDisruptionBudget/minAvailable", "does not match pattern"]),
    ("a selector label in commonLabels", {"commonLabels": {"app.kubernetes.io/name": "x"}},
     ["/commonLabels/app.kubernetes.io~1name"]),
    ("a selector label in podLabels", {"podLabels": {"app.kubernetes.io/instance": "x"}},
     ["/podLabels/app.kubernetes.io~1instance"]),
    ("a label value that is not one", {"podLabels": {"team": "a b"}},
     ["/podLabels/team", "does not match pattern"]),
    ("a glob class in excludeUsers", {"config": {"excludeUsers": ["user[12]"]}},
     ["/config/excludeUsers/0", "does not match pattern"]),
    ("a match condition named like the chart's",
     {"webhook": {"matchConditions": [{"name": "quickq-guard-x", "expression": "true"}]}},
     ["/webhook/matchConditions/0/name"]),
    ("the old rotate switch", {"certs": {"helm": {"rotate": True}}},
     ["/certs/helm", "'rotate'"]),
    ("unknown dns policy", {"dnsPolicy": "ClusterLast"}, ["/dnsPolicy", "ClusterFirst"]),
    ("fail-safe typo", {"webhook": {"failSafe": {"enable": True}}},
     ["/webhook/failSafe", "'enable'"]),
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
    ({"autoscaling": {"enabled": True, "minReplicas": 4, "maxReplicas": 3}},
     "autoscaling.minReplicas (4) is more than autoscaling.maxReplicas (3)"),
    ({"replicaCount": 2, "podDisruptionBudget": {"minAvailable": 2}},
     "podDisruptionBudget.minAvailable 2 with 2 replicas blocks every node drain"),
    ({"autoscaling": {"enabled": True, "minReplicas": 3},
      "podDisruptionBudget": {"minAvailable": 3}},
     "podDisruptionBudget.minAvailable 3 with 3 replicas blocks every node drain"),
])
def test_template_rejects_unsafe_settings(values: dict[str, Any], expected: str) -> None:
    assert expected in error_text(values)


def test_schema_closes_every_defined_object() -> None:
    """Every object with declared properties refuses unknown keys, or is a map whose values
    have a schema of their own (labels: any key, string values, the selector keys refused)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    open_objects: list[str] = []

    def walk(node: dict[str, Any], where: str) -> None:
        if "properties" in node and node.get("additionalProperties", True) is True:
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
