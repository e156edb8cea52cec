"""The webhook's answers on manifests shaped like public projects' own (tests/workloads/)
equal the engine's verdicts: offline == online."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest
from real_workloads import decide, load, names, patched, verdict
from server_helpers import post, review


def online_verdict(client: httpx.Client, obj: dict[str, Any]) -> dict[str, Any]:
    """What the API server would get: /mutate's patch, then /validate on the patched object."""
    namespace = obj["metadata"].get("namespace", "default")
    mutated = post(client, "/mutate", review(obj, namespace=namespace))
    patch = json.loads(base64.b64decode(mutated["patch"])) if "patch" in mutated else []
    validated = post(client, "/validate", review(patched(obj, patch), namespace=namespace))
    message = validated.get("status", {}).get("message", "")
    warnings = [w for w in validated.get("warnings", []) if w.startswith("[")]
    return {
        "allowed": validated["allowed"],
        "patch": patch,
        "denied": sorted({line.split("]")[0][3:] for line in message.splitlines()
                          if line.startswith("- [")}),
        "warned": sorted({warning[1:warning.index("]")] for warning in warnings}),
        "audited": sorted(validated.get("auditAnnotations", {})),
    }


@pytest.mark.parametrize("name", names())
def test_the_webhook_gives_the_engines_verdict(client: httpx.Client, name: str) -> None:
    assert online_verdict(client, load(name)) == verdict(decide(name))


def test_the_kserve_llm_startup_window_is_the_same_online(client: httpx.Client) -> None:
    response = post(client, "/mutate", review(load("kserve-llm-predictor.yaml"),
                                              namespace="ml-serving"))
    [operation] = json.loads(base64.b64decode(response["patch"]))
    assert operation["path"] == "/spec/template/spec/containers/0/startupProbe"
    assert operation["value"]["failureThreshold"] * operation["value"]["periodSeconds"] >= 4830


def test_a_token_from_a_config_map_is_denied_online_and_settings_pass(
        client: httpx.Client) -> None:
    denied = post(client, "/validate", review(load("vllm-token-from-configmap.yaml"),
                                              namespace="ml-serving"))
    assert denied["allowed"] is False
    assert "env HF_TOKEN is read from a ConfigMap" in denied["status"]["message"]
    assert "qwen-settings" not in json.dumps(denied)
    allowed = post(client, "/validate", review(load("keycloak-settings-env.yaml"),
                                               namespace="identity"))
    assert allowed["allowed"] is True


def test_labels_are_audited_where_the_pods_get_them_online(client: httpx.Client) -> None:
    response = post(client, "/validate", review(load("labels-on-controller-only.yaml"),
                                               namespace="shop"))
    assert response["allowed"] is True
    assert response["auditAnnotations"]["require-labels"].startswith(
        "add the label spec.template.metadata.labels.app or ")
    helm_style = post(client, "/validate", review(load("argocd-repo-server.yaml"),
                                                  namespace="argocd"))
    assert "require-labels" not in helm_style.get("auditAnnotations", {})
