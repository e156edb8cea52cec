"""Edge cases of the engine: other mappings than dicts, numbers among strings, GPUs in any
container, and kinds lists in a policy's match.

Objects read from JSON or YAML hold dicts, lists and strings; users' scripts may hand in other
mappings (a MappingProxyType) or numbers.
"""

from __future__ import annotations

import copy
from types import MappingProxyType
from typing import Any

import pytest
from builders import (
    container,
    gpu_container,
    judge,
    messages,
    node_template,
    pod,
    result,
    statuses,
    with_config,
    workload,
)

from webhook import Finding, Resource, Result, decode, evaluate, load_policies
from webhook.engine.policy import PolicySet


def proxied(value: Any) -> Any:
    """The same object with every mapping a read-only MappingProxyType."""
    if isinstance(value, dict):
        return MappingProxyType({key: proxied(item) for key, item in value.items()})
    if isinstance(value, list):
        return [proxied(item) for item in value]
    return value


# --- results ----------------------------------------------------------------------------------


def test_results_compare_and_hash_by_value():
    at = ("spec", "containers", 0, "x")
    finding = Finding("container 'app': add x", at, "app")
    assert finding == Finding("container 'app': add x", at, "app")
    assert len({finding, Finding("container 'app': add x", at, "app")}) == 1
    assert hash(Result("p", "validate", "enforce", "fail", (finding,))) == \
        hash(Result("p", "validate", "enforce", "fail", (finding,)))
    assert len({Resource("v1", "Pod", "ns", "a"), Resource("v1", "Pod", "ns", "a")}) == 1


def test_results_are_in_policy_order_though_mutate_policies_run_first():
    decision = judge(pod(container(livenessProbe={"httpGet": {"port": 80}})))
    assert [r.policy for r in decision.results] == sorted(r.policy for r in decision.results)
    assert statuses(decision)["inject-startup-probe"] == "patch"


# --- reading fields ---------------------------------------------------------------------------


def test_other_mappings_are_read_like_dicts():
    obj = pod(container(securityContext={"runAsUser": 0},
                        env=[{"name": "DB_PASSWORD", "value": "x"}],
                        livenessProbe={"httpGet": {"port": 80}, "periodSeconds": 1}),
              container("gpu", resources={"requests": {"nvidia.com/gpu": "1"}}))
    everything = load_policies()
    validating = PolicySet(everything.validating, everything.config)  # patches need dicts
    plain = evaluate(decode(copy.deepcopy(obj)), validating)
    other = evaluate(decode(proxied(obj)), validating)
    assert not other.allowed
    assert (other.message, other.warnings, other.audit_annotations) == (
        plain.message, plain.warnings, plain.audit_annotations)


@pytest.mark.parametrize(("fields", "problem"), [
    ({"livenessProbe": "x"}, "spec.containers[0].livenessProbe: expected a mapping, got a string"),
    ({"startupProbe": [], "securityContext": 1},
     "spec.containers[0].securityContext: expected a mapping, got a number"),
    ({"readinessProbe": True, "env": [{"name": "A"}, "B"]},
     "spec.containers[0].env[1]: expected a mapping, got a string"),
    ({"securityContext": [], "resources": {"requests": {}, "limits": "1"}},
     "spec.containers[0].resources.limits: expected a mapping, got a string"),
])
def test_every_wrong_field_is_named(fields, problem):
    decision = judge(pod(container(**fields)))
    [found] = decision.results
    assert found.status == "error"
    assert problem in found.reason.split("; ")
    assert len(found.reason.split("; ")) == len(fields)  # one wrong field each


def test_a_wrong_item_among_other_mappings_is_still_named():
    env = [MappingProxyType({"name": "A", "value": "1"}), 3]
    decision = evaluate(decode(pod(container(env=env))), load_policies())
    [found] = decision.results
    assert found.reason == "spec.containers[0].env[1]: expected a mapping, got a number"


# --- quantities -------------------------------------------------------------------------------


def test_numbers_and_strings_mix_in_one_mapping():
    resources = {"requests": {"cpu": 2, "memory": "1Gi"}, "limits": {"cpu": "1", "memory": 1.5}}
    decision = judge(pod(container(resources=resources)))
    assert messages(decision, "valid-resource-quantities") == [
        "container 'app': resources.requests.cpu (2) exceeds resources.limits.cpu (1); "
        "lower the request or raise the limit",
        # the API server's canonical form of 1.5, as the webhook sees it
        "container 'app': resources.requests.memory (1Gi) exceeds resources.limits.memory "
        "(1500m); lower the request or raise the limit",
    ]


def test_invalid_quantities_come_first_and_are_not_compared():
    # A null request is the 0 the API server stores (webhook.engine.normalize), not invalid.
    resources = {"requests": {"cpu": "2", "memory": None, "ephemeral-storage": True},
                 "limits": {"cpu": "1", "memory": "1GB"}}
    decision = judge(pod(container(resources=resources)))
    found = messages(decision, "valid-resource-quantities")
    assert found[0].startswith(
        "container 'app': resources.requests.ephemeral-storage True is not a ")
    assert found[1].startswith("container 'app': resources.limits.memory '1GB' is not a ")
    assert found[2].startswith("container 'app': resources.requests.cpu (2) exceeds")
    assert len(found) == 3


def test_missing_requests_are_named_in_the_configured_order():
    policies = with_config(policies={"require-requests": {
        "params": {"resources": ["memory", "nvidia.com/gpu", "cpu"]}}})
    decision = judge(pod(container(resources={"limits": {"cpu": "1"}})), policies)
    assert messages(decision, "require-requests") == [
        "container 'app': add resources.requests.memory",
        "container 'app': add resources.requests[nvidia.com/gpu]",
    ]


# --- GPUs -------------------------------------------------------------------------------------


def test_a_gpu_pattern_may_name_a_core_resource():
    policies = with_config(policies={"require-gpu-limits": {"params": {"gpuResources": ["cpu"]}}})
    decision = judge(pod(container()), policies)
    assert messages(decision, "require-gpu-limits") == [
        "container 'app': resources.requests.cpu must be a whole number of GPUs, "
        "not 100m",
        "container 'app': add resources.limits.cpu: 100m (equal to resources.requests.cpu)",
    ]


def test_an_extended_resource_that_is_no_gpu_changes_nothing():
    hugepages = container(resources={"requests": {"cpu": "1", "memory": "1Gi",
                                                  "hugepages-2Mi": "1Gi"},
                                     "limits": {"hugepages-2Mi": "1Gi", "memory": "1Gi"}})
    decision = judge(pod(hugepages))
    assert decision.allowed and not decision.patch
    assert result(decision, "gpu-priority-class").status == "pass"


def test_a_gpu_in_any_container_is_seen():
    decision = judge(pod(container(), gpu_container("model", count="0.5"),
                         priorityClassName=None))
    assert not decision.allowed
    assert "whole number of GPUs" in decision.message
    assert statuses(decision)["gpu-priority-class"] == "fail"
    assert statuses(decision)["inject-gpu-toleration"] == "patch"


# --- matching ---------------------------------------------------------------------------------

POD_KINDS = "[Pod, Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob]"


@pytest.mark.parametrize(("rule", "kinds", "kind", "status"), [
    # kinds naming every kind the rule judges: no filter, NodeTemplates still skipped
    ("gpu-priority-class", POD_KINDS, "Deployment", "fail"),
    ("gpu-priority-class", POD_KINDS, "NodeTemplate", "skip"),
    # a rule that judges NodeTemplates too is filtered by a list of pod kinds
    ("disallow-latest-tag", POD_KINDS, "NodeTemplate", "skip"),
    ("disallow-latest-tag", POD_KINDS, "Job", "fail"),
    ("disallow-latest-tag", "[Pod, NodeTemplate]", "CronJob", "skip"),
    ("disallow-latest-tag", "[Pod, NodeTemplate]", "NodeTemplate", "fail"),
])
def test_a_kinds_list_filters_only_the_kinds_it_leaves_out(tmp_path, rule, kinds, kind, status):
    (tmp_path / "p.yaml").write_text(
        f"id: probe\ndescription: x\ntype: validate\naction: enforce\nrule: {rule}\n"
        f"params: {{}}\nmatch: {{kinds: {kinds}}}\n")
    policies = load_policies(tmp_path)
    gpu = gpu_container(image="app:latest")
    obj = node_template(image="app:latest", resources=gpu["resources"]) \
        if kind == "NodeTemplate" else workload(kind, gpu)
    assert result(judge(obj, policies), "probe").status == status
