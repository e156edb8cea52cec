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

NVIDIA = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
AMD = {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def toleration_ops(obj, **kwargs):
    return [op for op in judge(obj, **kwargs).patch if "tolerations" in op["path"]]


def test_gpu_pod_without_tolerations_gets_the_list():
    obj = pod(gpu_container(), priorityClassName="gpu")
    decision = judge(obj)
    assert list(decision.patch) == [{"op": "add", "path": "/spec/tolerations", "value": [NVIDIA]}]
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
    assert toleration_ops(pod(gpu_container(resource="amd.com/gpu")))[0]["value"] == [AMD]
    both = pod(gpu_container("a"), gpu_container("b", resource="amd.com/gpu"))
    assert toleration_ops(both)[0]["value"] == [AMD, NVIDIA]


def test_mig_devices_need_the_nvidia_toleration():
    assert toleration_ops(pod(gpu_container(resource="nvidia.com/mig-1g.5gb")))[0]["value"] == [
        NVIDIA]


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
    assert toleration_ops(pod(limits_only))[0]["value"] == [NVIDIA]
    assert toleration_ops(pod(container(), initContainers=[gpu_container()]))[0]["value"] == [
        NVIDIA]


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
    decision = judge(obj, operation="UPDATE", old_object=obj)
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
    assert toleration_ops(pod(gpu_container()), policies=policies)[0]["value"] == [
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
