"""require-kueue-queue: opt-in; GPU workloads in the chosen namespaces name a Kueue queue."""

from __future__ import annotations

import pytest
from builders import container, gpu_container, judge, messages, pod, result, with_config, workload

from webhook import Review

QUEUED = with_config(policies={"require-kueue-queue": {"action": "enforce",
                                                      "params": {"namespaces": ["team-*"]}}})
MESSAGE = ("add the label metadata.labels[kueue.x-k8s.io/queue-name] (the name of a Kueue "
           "LocalQueue in namespace team-a) so this accelerator workload is admitted through "
           "quota")


def in_namespace(obj, namespace="team-a"):
    obj["metadata"]["namespace"] = namespace
    return obj


def test_it_is_off_until_switched_on_and_then_holds_in_every_namespace_by_default():
    found = result(judge(in_namespace(workload("Job", gpu_container()))), "require-kueue-queue")
    assert (found.status, found.reason) == ("skip", "the policy is off")
    everywhere = with_config(policies={"require-kueue-queue": {"action": "warn"}})
    decision = judge(in_namespace(workload("Job", gpu_container()), "research"), everywhere)
    assert result(decision, "require-kueue-queue").status == "fail" and decision.allowed


@pytest.mark.parametrize("kind", ["Job", "Deployment", "Pod"])
def test_a_gpu_workload_in_a_chosen_namespace_without_the_label_is_denied(kind):
    decision = judge(in_namespace(workload(kind, gpu_container())), QUEUED)
    assert messages(decision, "require-kueue-queue") == [MESSAGE]
    assert not decision.allowed


def test_the_label_a_cpu_workload_or_another_namespace_passes():
    labelled = in_namespace(workload("Job", gpu_container()))
    labelled["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "user-queue"
    for obj in (labelled, in_namespace(workload("Job", container())),
                in_namespace(workload("Job", gpu_container()), "research")):
        assert result(judge(obj, QUEUED), "require-kueue-queue").status == "pass"


def test_a_pod_its_job_controls_is_queued_through_the_job():
    obj = in_namespace(pod(gpu_container()))
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job",
                                           "name": "train", "uid": "1", "controller": True}]
    assert result(judge(obj, QUEUED), "require-kueue-queue").status == "pass"


def test_a_dra_gpu_workload_counts_too():
    from webhook.engine.claims import claims_from

    consumer = container("llm")
    consumer["resources"]["claims"] = [{"name": "gpu"}]
    obj = in_namespace(workload("Job", consumer))
    obj["spec"]["template"]["spec"]["resourceClaims"] = [
        {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "one-gpu", "namespace": "team-a"},
                "spec": {"spec": {"devices": {"requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}}
    decision = judge(obj, QUEUED, Review(claims=claims_from([template])))
    assert messages(decision, "require-kueue-queue") == [MESSAGE]
