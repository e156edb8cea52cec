"""require-gpu-limits and gpu-priority-class: whole GPUs, limits equal to requests, a priority."""

from __future__ import annotations

import pytest
from builders import (
    container,
    gpu_container,
    judge,
    messages,
    node_template,
    paths,
    pod,
    result,
    workload,
)


@pytest.mark.parametrize("resource", ["nvidia.com/gpu", "amd.com/gpu", "nvidia.com/mig-1g.5gb"])
def test_gpu_request_without_a_limit_is_denied(resource):
    resources = {"requests": {"cpu": "1", "memory": "1Gi", resource: "2"}}
    decision = judge(pod(container(resources=resources), priorityClassName="gpu"))
    assert not decision.allowed
    assert messages(decision, "require-gpu-limits") == [
        f"container 'app': add resources.limits[{resource}]: 2 (equal to "
        f"resources.requests[{resource}])"]
    assert paths(decision, "require-gpu-limits") == [
        f"spec.containers[0].resources.limits[{resource}]"]


def test_gpu_limit_different_from_request_is_denied():
    resources = {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"},
                 "limits": {"nvidia.com/gpu": "1"}}
    decision = judge(pod(container(resources=resources), priorityClassName="gpu"))
    assert messages(decision, "require-gpu-limits") == [
        "container 'app': set resources.limits[nvidia.com/gpu] equal to "
        "resources.requests[nvidia.com/gpu] (1 != 2)"]


def test_equal_amounts_written_differently_pass():
    resources = {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 1},
                 "limits": {"nvidia.com/gpu": "1"}}
    decision = judge(pod(container(resources=resources), priorityClassName="gpu"))
    assert result(decision, "require-gpu-limits").status == "pass"


def test_gpu_only_in_limits_passes():
    resources = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": 1}}
    decision = judge(pod(container(resources=resources), priorityClassName="gpu"))
    assert result(decision, "require-gpu-limits").status == "pass"


@pytest.mark.parametrize("count", ["0.5", 0.5, "500m", -1])
def test_gpu_counts_must_be_whole_numbers(count):
    decision = judge(pod(gpu_container(count=count), priorityClassName="gpu"))
    found = result(decision, "require-gpu-limits")
    if count == -1:
        # Not a quantity at all: valid-resource-quantities says so instead.
        assert found.status == "pass"
        assert result(decision, "valid-resource-quantities").status == "fail"
        return
    assert found.status == "fail"
    assert [f.path for f in found.findings] == [
        "spec.containers[0].resources.requests[nvidia.com/gpu]",
        "spec.containers[0].resources.limits[nvidia.com/gpu]",
    ]
    # A quantity reaches the webhook in the API server's canonical form: 0.5 is 500m.
    shown = "500m" if count in ("0.5", 0.5) else count
    assert f"must be a whole number of GPUs, not {shown}" in found.findings[0].message


def test_custom_gpu_resources_are_not_gpus_by_default():
    resources = {"requests": {"cpu": "1", "memory": "1Gi", "example.com/fpga": "0.5"}}
    decision = judge(pod(container(resources=resources)))
    assert result(decision, "require-gpu-limits").status == "pass"
    assert result(decision, "gpu-priority-class").status == "pass"


def test_gpu_pod_without_priority_class_is_audited_not_denied():
    decision = judge(pod(gpu_container()))
    found = result(decision, "gpu-priority-class")
    assert (found.status, found.action) == ("fail", "audit")
    assert decision.allowed
    assert paths(decision, "gpu-priority-class") == ["spec.priorityClassName"]
    assert decision.audit_annotations["gpu-priority-class"] == (
        "set spec.priorityClassName (a PriorityClass name) so this accelerator workload is "
        "not preempted by lower-priority work")
    assert not any("gpu-priority-class" in w for w in decision.warnings)


def test_gpu_pod_with_priority_class_passes():
    decision = judge(pod(gpu_container(), priorityClassName="gpu-inference"))
    assert result(decision, "gpu-priority-class").status == "pass"


def test_zero_gpus_do_not_need_a_priority_class():
    decision = judge(pod(container(resources={"requests": {"cpu": "1", "memory": "1Gi"},
                                              "limits": {"nvidia.com/gpu": 0}})))
    assert result(decision, "gpu-priority-class").status == "pass"


def test_priority_class_path_is_the_controllers_own():
    decision = judge(workload("CronJob", gpu_container()))
    assert paths(decision, "gpu-priority-class") == [
        "spec.jobTemplate.spec.template.spec.priorityClassName"]


def test_priority_class_is_skipped_for_node_templates():
    resources = {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 1},
                 "limits": {"nvidia.com/gpu": 1}}
    found = result(judge(node_template(resources=resources)), "gpu-priority-class")
    assert found.status == "skip"
