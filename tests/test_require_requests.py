"""require-requests: every container and initContainer asks for cpu and memory."""

from __future__ import annotations

from builders import container, judge, messages, paths, pod, result, workload


def test_container_without_requests_is_denied_naming_each_missing_resource():
    decision = judge(pod(container(resources=None)))
    assert not decision.allowed
    assert messages(decision, "require-requests") == [
        "container 'app': add resources.requests.cpu",
        "container 'app': add resources.requests.memory",
    ]
    assert paths(decision, "require-requests") == [
        "spec.containers[0].resources.requests.cpu",
        "spec.containers[0].resources.requests.memory",
    ]
    assert "(field: spec.containers[0].resources.requests.cpu)" in decision.message


def test_only_the_missing_request_is_reported():
    decision = judge(pod(container(resources={"requests": {"cpu": "1"}})))
    assert paths(decision, "require-requests") == ["spec.containers[0].resources.requests.memory"]


def test_a_limit_without_a_request_counts_as_the_request():
    # The API server defaults a missing request to its limit before admission.
    decision = judge(pod(container(resources={"limits": {"cpu": "1", "memory": "1Gi"}})))
    assert result(decision, "require-requests").status == "pass"
    assert decision.allowed


def test_init_containers_need_requests_too():
    decision = judge(pod(container(), initContainers=[container("migrate", resources=None)]))
    assert paths(decision, "require-requests") == [
        "spec.initContainers[0].resources.requests.cpu",
        "spec.initContainers[0].resources.requests.memory",
    ]
    assert messages(decision, "require-requests")[0].startswith("initContainer 'migrate': ")


def test_ephemeral_containers_are_not_asked_for_requests():
    debug = {"name": "debug", "image": "busybox:1.36"}
    decision = judge(pod(container(), ephemeralContainers=[debug]))
    assert result(decision, "require-requests").status == "pass"


def test_second_container_is_reported_under_its_own_index_and_name():
    decision = judge(pod(container("a"), container("b", resources={"requests": {"cpu": "1"}})))
    result_ = result(decision, "require-requests")
    assert [(f.container, f.path) for f in result_.findings] == [
        ("b", "spec.containers[1].resources.requests.memory")]


def test_controller_messages_use_the_pod_template_path():
    decision = judge(workload("CronJob", container(resources=None)))
    assert paths(decision, "require-requests")[0] == (
        "spec.jobTemplate.spec.template.spec.containers[0].resources.requests.cpu")


def test_a_zero_request_is_a_missing_request_and_says_so():
    """The API server makes a pod whose requests are all zero BestEffort: `"0"`, `0m`,
    `0Mi`, `0.0` and a zero limit (which the request defaults to) request nothing."""
    for cpu, memory in (("0", "0"), ("0m", "0Mi"), ("0.0", "0Gi"), (0, "0k")):
        decision = judge(pod(container(resources={"requests": {"cpu": cpu, "memory": memory}})))
        assert not decision.allowed
        assert messages(decision, "require-requests") == [
            f"container 'app': resources.requests.{name} is zero, which requests nothing (a "
            "pod whose requests are all zero is BestEffort); set resources.requests."
            f"{name} to what the container needs" for name in ("cpu", "memory")]
        assert paths(decision, "require-requests") == [
            "spec.containers[0].resources.requests.cpu",
            "spec.containers[0].resources.requests.memory"]
    limited = judge(pod(container(resources={"limits": {"cpu": "0", "memory": "1Gi"}})))
    assert paths(limited, "require-requests") == ["spec.containers[0].resources.requests.cpu"]
    small = judge(pod(container(resources={"requests": {"cpu": "1m", "memory": "1"}})))
    assert result(small, "require-requests").status == "pass"
