"""The chart registers the ML workload kinds per API group (opt-in: their CRDs may be absent)
and custom kinds, and the kinds it registers are the ones the engine judges."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from chart_helpers import FULLNAME, find, helm_template, helm_template_raw

from webhook import decode, evaluate, load_policies
from webhook.engine.policy import Config
from webhook.engine.workload import WORKLOAD_KINDS

WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
SWITCHES = {
    "kserve": "serving.kserve.io",
    "kubeflowTraining": "kubeflow.org",
    "kubeflowTrainer": "trainer.kubeflow.org",
    "ray": "ray.io",
    "jobset": "jobset.x-k8s.io",
    "leaderWorkerSet": "leaderworkerset.x-k8s.io",
    "volcano": "batch.volcano.sh",
    "kaito": "kaito.sh",
    "appWrapper": "workload.codeflare.dev",
    "argo": "argoproj.io",
    "aibrix": "orchestration.aibrix.ai",
    "ome": "ome.io",
    "dynamo": "nvidia.com",
    "nim": "apps.nvidia.com",
    "kubeai": "kubeai.org",
    "llmd": "llm-d.ai",
}
CLUSTER_SCOPED = {"clusterservingruntimes", "clustertrainingruntimes",
                  "clusterworkflowtemplates"}
# The DRA claims: a built-in API every supported Kubernetes serves, so on by default, and
# validated only (nothing in them is patched).
CLAIMS = ("resourceClaims", "resource.k8s.io")


def rules(docs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The rules of each webhook that judges workloads (validating and mutating; not the
    namespaces webhook, nor the ConfigMaps' entry)."""
    return [hook["rules"] for kind in WEBHOOK_KINDS for hook in find(docs, kind)["webhooks"]
            if hook["name"] not in ("namespaces.quickq-guard.quickq.io",
                                    "configmaps.quickq-guard.quickq.io")]


def registered(hook_rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(group, resource, scope) of each rule."""
    return {(group, resource, rule["scope"]) for rule in hook_rules
            for group in rule["apiGroups"] for resource in rule["resources"]}


def test_no_ml_group_is_intercepted_by_default() -> None:
    for hook_rules in rules(helm_template()):
        groups = {group for group, _, _ in registered(hook_rules)}
        assert groups.isdisjoint(SWITCHES.values())
        assert ("", "replicationcontrollers", "Namespaced") in registered(hook_rules)


@pytest.mark.parametrize("switch", sorted(SWITCHES))
def test_each_switch_registers_every_kind_the_engine_judges_in_its_group(switch: str) -> None:
    group = SWITCHES[switch]
    docs = helm_template({"workloadKinds": {switch: True}})
    judged = {kind.lower() + "s" for known, kind in WORKLOAD_KINDS if known == group}
    for hook_rules in rules(docs):
        mine = {(resource, scope) for known, resource, scope in registered(hook_rules)
                if known == group}
        assert mine == {(resource, "Cluster" if resource in CLUSTER_SCOPED else "Namespaced")
                        for resource in judged}
        assert all(rule["apiVersions"] == ["*"] and rule["operations"] == ["CREATE", "UPDATE"]
                   for rule in hook_rules if group in rule["apiGroups"])


def test_every_ml_group_the_engine_judges_has_a_switch() -> None:
    groups = {group for group, _ in WORKLOAD_KINDS} - {"", "apps", "batch", CLAIMS[1]}
    assert groups == set(SWITCHES.values())


def test_dra_claims_are_validated_by_default_and_never_sent_to_the_mutating_webhook() -> None:
    switch, group = CLAIMS
    judged = {(kind.lower() + "s", "Namespaced") for known, kind in WORKLOAD_KINDS
              if known == group}
    assert judged == {("resourceclaims", "Namespaced"), ("resourceclaimtemplates", "Namespaced")}
    docs = helm_template()
    validating = find(docs, "ValidatingWebhookConfiguration")["webhooks"][0]["rules"]
    assert {(r, s) for g, r, s in registered(validating) if g == group} == judged
    mutating = find(docs, "MutatingWebhookConfiguration")["webhooks"][0]["rules"]
    assert not [g for g, _, _ in registered(mutating) if g == group]
    off = helm_template({"workloadKinds": {switch: False}})
    assert not [g for hook_rules in rules(off) for g, _, _ in registered(hook_rules)
                if g == group]


CUSTOM = [{"group": "serving.example.com", "kind": "ModelServer", "resource": "modelservers",
           "podTemplates": ["spec.template", "spec.shards[*].template"]},
          {"group": "batch.example.com", "kind": "GlobalRun", "resource": "globalruns",
           "scope": "Cluster", "podTemplates": ["spec.template"]}]


def test_custom_kinds_reach_the_rules_and_the_config_the_engine_loads() -> None:
    docs = helm_template({"customKinds": CUSTOM})
    for hook_rules in rules(docs):
        assert {("serving.example.com", "modelservers", "Namespaced"),
                ("batch.example.com", "globalruns", "Cluster")} <= registered(hook_rules)
    text = find(docs, "ConfigMap", f"{FULLNAME}-config")["data"]["config.yaml"]
    config = Config.model_validate(yaml.safe_load(text))
    assert [(c.group, c.kind, c.podTemplates) for c in config.customKinds] == [
        ("serving.example.com", "ModelServer", ("spec.template", "spec.shards[*].template")),
        ("batch.example.com", "GlobalRun", ("spec.template",))]
    server = {"apiVersion": "serving.example.com/v1", "kind": "ModelServer",
              "metadata": {"name": "m", "namespace": "ml", "labels": {"app": "m"}},
              "spec": {"template": {"spec": {"containers": [
                  {"name": "m", "image": "registry.example.com/m:latest"}]}}}}
    decision = evaluate(decode(server), load_policies(None, config))
    assert "spec.template.spec.containers[0].image" in decision.message


@pytest.mark.parametrize(("values", "expected"), [
    ({"workloadKinds": {"kserv": True}}, "kserv"),
    ({"workloadKinds": {"ray": "yes"}}, "ray"),
    ({"customKinds": [{"group": "example.com", "kind": "Thing",
                       "podTemplates": ["spec.template"]}]}, "resource"),
    ({"customKinds": [dict(CUSTOM[0], podTemplates=["spec..template"])]}, "podTemplates"),
    ({"customKinds": [dict(CUSTOM[0], scope="Global")]}, "scope"),
])
def test_the_values_schema_rejects_broken_entries(values: dict[str, Any], expected: str) -> None:
    proc = helm_template_raw(values)
    assert proc.returncode != 0
    assert expected in proc.stderr
