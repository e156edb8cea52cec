"""The accelerators the NVIDIA, AMD and Intel device plugins publish get the GPU checks and
their vendor's toleration; look-alike resources that are no GPUs get neither."""

from __future__ import annotations

import jsonpatch
import kubernetes_validate
import pytest
from builders import container, gpu_container, judge, messages, pod, result, with_config

from webhook.engine.normalize import normalize

# resource name -> the taint key its nodes carry
ACCELERATORS = {
    "nvidia.com/gpu": "nvidia.com/gpu",
    "nvidia.com/gpu.shared": "nvidia.com/gpu",            # time-slicing / MPS, renamed
    "nvidia.com/mig-1g.5gb": "nvidia.com/gpu",            # MIG, mixed strategy
    "nvidia.com/mig-3g.40gb.shared": "nvidia.com/gpu",    # shared MIG slices
    "amd.com/gpu": "amd.com/gpu",
    "amd.com/cpx_nps4": "amd.com/gpu",                    # MI300X partitions, mixed naming
    "amd.com/spx_nps1": "amd.com/gpu",
    "amd.com/dpx_nps2": "amd.com/gpu",
    "amd.com/gpu_vf": "amd.com/gpu",                      # SR-IOV VF passthrough
    "amd.com/gpu_pf": "amd.com/gpu",
    "gpu.intel.com/i915": "gpu.intel.com/i915",
    "gpu.intel.com/xe": "gpu.intel.com/xe",
}
NOT_GPUS = [
    "gpu.intel.com/i915_monitoring", "gpu.intel.com/xe_monitoring",  # a monitoring handle
    "gpu.intel.com/millicores", "gpu.intel.com/memory.max", "gpu.intel.com/tiles",  # GAS
    "nvidia.com/rdma_shared_device_a", "nvidia.com/hostdev",  # NVIDIA network operator
    "amd.com/nic", "hugepages-2Mi", "example.com/gpu",
]


def _tolerations(decision):
    return [op for op in decision.patch if "/tolerations" in op["path"]]


def _added(decision):
    """The tolerations the patch adds: a Pod, as the API server hands it to the webhook, has
    DefaultTolerationSeconds' two tolerations already, so each is appended."""
    return [op["value"] for op in _tolerations(decision)]


@pytest.mark.parametrize(("resource", "key"), ACCELERATORS.items())
def test_each_accelerator_gets_its_vendors_toleration(resource, key):
    obj = pod(gpu_container(resource=resource), priorityClassName="gpu")
    decision = judge(obj)
    assert _tolerations(decision) == [{"op": "add", "path": "/spec/tolerations/-", "value":
                                       {"key": key, "operator": "Exists", "effect": "NoSchedule"}}]
    # A TPU pod is told of TPU nodes, in Google's word, not GPU ones.
    device = "TPU" if resource == "google.com/tpu" else "GPU"
    assert messages(decision, "inject-gpu-toleration") == [
        f"add a toleration for the {device} taint {key}:NoSchedule so the pod can schedule on "
        f"{device} nodes"]
    fixed = jsonpatch.apply_patch(normalize(obj)[0], list(decision.patch))
    kubernetes_validate.validate(fixed, kubernetes_validate.latest_version(), strict=True)
    assert judge(fixed).patch == ()


@pytest.mark.parametrize("resource", ACCELERATORS)
def test_each_accelerator_gets_the_gpu_checks(resource):
    unequal = container("model", resources={
        "requests": {"cpu": "1", "memory": "1Gi", resource: "2"},
        "limits": {"memory": "1Gi", resource: "1"}})
    decision = judge(pod(unequal))
    assert messages(decision, "require-gpu-limits") == [
        f"container 'model': set resources.limits[{resource}] equal to "
        f"resources.requests[{resource}] (1 != 2)"]
    assert result(decision, "gpu-priority-class").status == "fail"
    # 0.5 reaches the webhook in the API server's canonical form, 500m.
    fraction = judge(pod(gpu_container(resource=resource, count="0.5")))
    assert "must be a whole number of GPUs, not 500m" in " ".join(
        messages(fraction, "require-gpu-limits"))


@pytest.mark.parametrize("resource", NOT_GPUS)
def test_resources_that_are_no_gpus_get_neither_checks_nor_toleration(resource):
    obj = pod(container(resources={"requests": {"cpu": "1", "memory": "1Gi", resource: "1"},
                                   "limits": {"memory": "1Gi", resource: "1"}}))
    decision = judge(obj)
    assert _tolerations(decision) == []
    for policy in ("require-gpu-limits", "gpu-priority-class", "inject-gpu-toleration"):
        assert result(decision, policy).status == "pass", policy


def test_mixed_vendors_get_one_toleration_each_in_a_stable_order():
    obj = pod(gpu_container("a", resource="gpu.intel.com/xe"),
              gpu_container("b", resource="nvidia.com/gpu.shared"),
              gpu_container("c", resource="amd.com/cpx_nps4"),
              gpu_container("d", resource="nvidia.com/mig-1g.5gb"), priorityClassName="gpu")
    assert [t["key"] for t in _added(judge(obj))] == [
        "amd.com/gpu", "gpu.intel.com/xe", "nvidia.com/gpu"]


def test_an_added_accelerator_without_a_taint_key_is_tolerated_under_its_own_name():
    policies = with_config(policies={"inject-gpu-toleration": {"params": {
        "gpuResources": ["nvidia.com/gpu", "habana.ai/gaudi"]}}})
    decision = judge(pod(gpu_container(resource="habana.ai/gaudi")), policies)
    assert _added(decision) == [
        {"key": "habana.ai/gaudi", "operator": "Exists", "effect": "NoSchedule"}]


def test_an_intel_gpu_pod_that_tolerates_its_taint_is_left_alone():
    obj = pod(gpu_container(resource="gpu.intel.com/i915"), priorityClassName="gpu",
              tolerations=[{"key": "gpu.intel.com/i915", "operator": "Exists"}])
    decision = judge(obj)
    assert decision.patch == ()
    assert result(decision, "inject-gpu-toleration").status == "pass"


def test_the_three_gpu_policies_read_the_one_accelerators_setting():
    from webhook import load_policies
    from webhook.engine.accelerators import DEFAULT_RESOURCES, DEFAULT_TAINT_KEYS

    policies = load_policies()
    for policy_id in ("require-gpu-limits", "gpu-priority-class", "inject-gpu-toleration"):
        assert policies.get(policy_id).params.resources == DEFAULT_RESOURCES
    assert policies.get("inject-gpu-toleration").params.taint_keys == DEFAULT_TAINT_KEYS
    mine = with_config(accelerators={"resources": ["habana.ai/gaudi"],
                                     "taintKeys": {"habana.ai/*": "habana.ai/gaudi-node"}})
    for policy_id in ("require-gpu-limits", "gpu-priority-class", "inject-gpu-toleration"):
        assert mine.get(policy_id).params.resources == ("habana.ai/gaudi",)


def test_an_accelerator_added_in_one_place_gets_all_three_policies():
    policies = with_config(accelerators={"resources": ["habana.ai/gaudi"],
                                         "taintKeys": {"habana.ai/*": "habana.ai/gaudi-node"}})
    decision = judge(pod(gpu_container(resource="habana.ai/gaudi", count="0.5")), policies)
    assert result(decision, "require-gpu-limits").status == "fail"
    assert result(decision, "gpu-priority-class").status == "fail"
    assert _added(decision) == [
        {"key": "habana.ai/gaudi-node", "operator": "Exists", "effect": "NoSchedule"}]
    # nvidia.com/gpu is no accelerator of this config any more
    assert result(judge(pod(gpu_container()), policies), "gpu-priority-class").status == "pass"


def test_a_tpu_pod_gets_the_gpu_checks_and_gkes_tpu_taint_by_default():
    obj = pod(gpu_container(resource="google.com/tpu", count="4"))
    decision = judge(obj)
    assert _added(decision) == [
        {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert result(decision, "gpu-priority-class").status == "fail"
    fraction = judge(pod(gpu_container(resource="google.com/tpu", count="0.5")))
    assert result(fraction, "require-gpu-limits").status == "fail"


def test_an_unknown_accelerators_field_fails_the_load(tmp_path):
    from webhook.engine.policy import PolicyError
    from webhook.loader import load_config

    config = tmp_path / "config.yaml"
    config.write_text("accelerators:\n  gpuResource: [x]\n")
    with pytest.raises(PolicyError, match=r"accelerators\.gpuResource: unknown field"):
        load_config(config)
