"""The webhook configurations: what they intercept, and that they can never
lock an admin out (system namespaces and the release's own are left out)."""

from __future__ import annotations

from typing import Any

import pytest
from chart_helpers import find, helm_template

WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
SYSTEM_NAMESPACES = {"kube-system", "kube-public", "kube-node-lease"}


def hooks(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [hook for kind in WEBHOOK_KINDS for hook in find(docs, kind)["webhooks"]]


def excluded_namespaces(hook: dict[str, Any]) -> set[str]:
    """Namespaces the selector keeps out, from its kubernetes.io/metadata.name NotIn term."""
    terms = hook["namespaceSelector"]["matchExpressions"]
    (term,) = [t for t in terms if t["key"] == "kubernetes.io/metadata.name"]
    assert term["operator"] == "NotIn"
    assert "matchLabels" not in hook["namespaceSelector"]
    return set(term["values"])


def intercepted(hook: dict[str, Any]) -> set[tuple[str, str]]:
    """(group, resource) pairs the hook's rules match, for CREATE and UPDATE."""
    pairs = set()
    for rule in hook["rules"]:
        assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]
        pairs |= {(g, r) for g in rule["apiGroups"] for r in rule["resources"]}
    return pairs


@pytest.mark.parametrize("namespace", ["quickq-guard", "policy-system"])
def test_namespace_selector_spares_system_and_own_namespace(namespace: str) -> None:
    for hook in hooks(helm_template(namespace=namespace)):
        assert excluded_namespaces(hook) >= SYSTEM_NAMESPACES | {namespace}


def test_configured_exclusions_reach_selector_and_config() -> None:
    docs = helm_template({"config": {"excludeNamespaces": ["monitoring"]}})
    for hook in hooks(docs):
        assert excluded_namespaces(hook) == SYSTEM_NAMESPACES | {"monitoring", "quickq-guard"}


def test_rules_cover_pods_controllers_and_nodetemplates() -> None:
    expected = {("", "pods"), ("", "replicationcontrollers")} | {("apps", r) for r in (
        "deployments", "replicasets", "statefulsets", "daemonsets")} | \
        {("batch", "jobs"), ("batch", "cronjobs"), ("quickq.io", "nodetemplates")}
    for hook in hooks(helm_template()):
        assert intercepted(hook) == expected


def test_nodetemplate_groups_from_values() -> None:
    docs = helm_template({"nodeTemplate": {"groups": ["quickq", "quickq.io"]}})
    for hook in hooks(docs):
        groups = {g for g, r in intercepted(hook) if r == "nodetemplates"}
        assert groups == {"quickq", "quickq.io"}


def test_webhook_safety_settings() -> None:
    docs = helm_template()
    for kind, path in zip(WEBHOOK_KINDS, ("/validate", "/mutate"), strict=True):
        (hook,) = find(docs, kind)["webhooks"]
        assert hook["sideEffects"] == "None"
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["timeoutSeconds"] == 5
        assert hook["failurePolicy"] == "Fail"
        assert hook["clientConfig"]["service"]["path"] == path
        assert "matchConditions" not in hook
    assert find(docs, "MutatingWebhookConfiguration")["webhooks"][0][
        "reinvocationPolicy"] == "IfNeeded"


def test_failure_policy_timeout_and_match_conditions_from_values() -> None:
    conditions = [{"name": "skip-node-users",
                   "expression": "!request.userInfo.username.startsWith('system:node:')"}]
    docs = helm_template({"webhook": {"failurePolicy": "Ignore", "timeoutSeconds": 3,
                                      "matchConditions": conditions}})
    for hook in hooks(docs):
        assert (hook["failurePolicy"], hook["timeoutSeconds"]) == ("Ignore", 3)
        assert hook["matchConditions"] == conditions


def test_either_webhook_can_be_switched_off() -> None:
    kinds = {d["kind"] for d in helm_template({"webhook": {"mutating": False}})}
    assert "MutatingWebhookConfiguration" not in kinds
    assert "ValidatingWebhookConfiguration" in kinds
