"""inject-gpu-toleration: a GPU workload tolerates its vendor's GPU-node taint; existing
tolerations are appended to, never replaced."""

from __future__ import annotations

import jsonpatch
import pytest
from builders import (
    CONTROLLERS,
    container,
    gpu_container,
    judge,
    node_template,
    pod,
    pointer_prefix,
    result,
    workload,
)

from webhook import Review, decode

NVIDIA = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
AMD = {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def toleration_ops(obj, policies=None):
    return [op for op in judge(obj, policies).patch if "tolerations" in op["path"]]


def added(obj, **kwargs):
    """The tolerations the patch adds, whether as a new list or appended one by one."""
    found = []
    for op in toleration_ops(obj, **kwargs):
        found += op["value"] if isinstance(op["value"], list) else [op["value"]]
    return found


def test_gpu_pod_written_without_tolerations_gets_one_appended():
    # The API server's DefaultTolerationSeconds gives every Pod two tolerations (not-ready,
    # unreachable) before the webhook sees it: the GPU toleration is appended to them.
    obj = pod(gpu_container(), priorityClassName="gpu")
    decision = judge(obj)
    assert list(decision.patch) == [{"op": "add", "path": "/spec/tolerations/-", "value": NVIDIA}]
    found = result(decision, "inject-gpu-toleration")
    assert found.findings[0].path == "spec.tolerations"
    assert found.findings[0].message == (
        "add a toleration for the GPU taint nvidia.com/gpu:NoSchedule so the pod can schedule "
        "on GPU nodes")


def test_existing_tolerations_are_appended_to():
    other = {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
    obj = pod(gpu_container(), tolerations=[other])
    assert toleration_ops(obj) == [{"op": "add", "path": "/spec/tolerations/-", "value": NVIDIA}]
    patched = jsonpatch.apply_patch(obj, toleration_ops(obj))
    assert patched["spec"]["tolerations"] == [other, NVIDIA]


def test_amd_gpus_get_the_amd_taint_and_both_vendors_get_both():
    assert added(pod(gpu_container(resource="amd.com/gpu"))) == [AMD]
    both = pod(gpu_container("a"), gpu_container("b", resource="amd.com/gpu"))
    assert added(both) == [AMD, NVIDIA]


def test_mig_devices_need_the_nvidia_toleration():
    assert added(pod(gpu_container(resource="nvidia.com/mig-1g.5gb"))) == [NVIDIA]


@pytest.mark.parametrize("existing", [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "nvidia.com/gpu", "operator": "Exists"},
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": ""},
    {"operator": "Exists"},
    {"operator": "Exists", "effect": "NoSchedule"},
])
def test_an_existing_toleration_that_tolerates_the_taint_means_no_patch(existing):
    obj = pod(gpu_container(), tolerations=[existing])
    decision = judge(obj)
    assert result(decision, "inject-gpu-toleration").status == "pass"
    assert decision.patch == ()


@pytest.mark.parametrize("existing", [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"},
    {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
    {"key": "amd.com/gpu", "operator": "Exists"},
    {"operator": "Exists", "effect": "PreferNoSchedule"},
])
def test_a_toleration_that_does_not_tolerate_the_taint_is_kept_and_one_is_added(existing):
    obj = pod(gpu_container(), tolerations=[existing])
    assert toleration_ops(obj) == [{"op": "add", "path": "/spec/tolerations/-", "value": NVIDIA}]


@pytest.mark.parametrize("count", [0, "0"])
def test_zero_gpus_need_no_toleration(count):
    assert toleration_ops(pod(gpu_container(count=count))) == []


def test_gpu_only_in_limits_or_in_an_init_container_counts():
    limits_only = container(resources={"requests": {"cpu": "1", "memory": "1Gi"},
                                       "limits": {"nvidia.com/gpu": 2}})
    assert added(pod(limits_only)) == [NVIDIA]
    assert added(pod(container(), initContainers=[gpu_container()])) == [NVIDIA]


@pytest.mark.parametrize("kind", CONTROLLERS)
def test_controllers_get_the_toleration_in_their_pod_template(kind):
    obj = workload(kind, gpu_container())
    ops = toleration_ops(obj)
    assert ops == [{"op": "add", "path": f"{pointer_prefix(kind)}/tolerations",
                    "value": [NVIDIA]}]
    patched = jsonpatch.apply_patch(obj, ops)
    assert judge(patched).patch == ()


def test_node_template_gets_spec_tolerations():
    resources = {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                 "limits": {"nvidia.com/gpu": "1"}}
    obj = node_template(resources=resources, tolerations=[{"key": "x", "operator": "Exists",
                                                           "effect": "NoExecute"}])
    assert toleration_ops(obj) == [{"op": "add", "path": "/spec/tolerations/-", "value": NVIDIA}]


def test_a_pod_is_not_mutated_on_update():
    obj = pod(gpu_container())
    decision = judge(obj, review=Review(operation="UPDATE", old_object=decode(obj)))
    assert decision.patch == ()
    assert decision.patched is None
    found = result(decision, "inject-gpu-toleration")
    assert (found.status, found.reason) == ("skip", "a Pod is mutated on CREATE only")


def test_patch_is_idempotent():
    obj = pod(gpu_container(), tolerations=[{"key": "a", "operator": "Exists"}])
    patched = jsonpatch.apply_patch(obj, list(judge(obj).patch))
    assert judge(patched).patch == ()


def test_taint_keys_and_effect_are_configurable():
    from builders import with_config

    policies = with_config(policies={"inject-gpu-toleration": {"params": {
        "effect": "NoExecute", "taintKeys": {"nvidia.com/*": "gpu.example.com/nvidia"}}}})
    assert added(pod(gpu_container()), policies=policies) == [
        {"key": "gpu.example.com/nvidia", "operator": "Exists", "effect": "NoExecute"}]


def replica_set(owner_kind: str | None) -> dict:
    obj = workload("ReplicaSet", gpu_container(), priorityClassName="gpu")
    if owner_kind:
        obj["metadata"]["ownerReferences"] = [{
            "apiVersion": "apps/v1", "kind": owner_kind, "name": "web", "uid": "u-1",
            "controller": True, "blockOwnerDeletion": True}]
    return obj


def test_a_replicaset_its_deployment_controls_is_not_mutated():
    """The chart does not send it to the mutating webhook; offline says the same."""
    decision = judge(replica_set("Deployment"))
    assert decision.patch == ()
    found = result(decision, "inject-gpu-toleration")
    assert (found.status, found.reason) == (
        "skip", "a ReplicaSet its Deployment controls is patched through the Deployment")


@pytest.mark.parametrize("owner", [None, "Rollout"])
def test_a_replicaset_of_its_own_or_another_owner_is_mutated(owner):
    assert toleration_ops(replica_set(owner)) == [
        {"op": "add", "path": "/spec/template/spec/tolerations", "value": [NVIDIA]}]
