"""disallow-root-user: the effective user (container's, else the pod's) is not root."""

from __future__ import annotations

import pytest
from builders import container, judge, messages, node_template, paths, pod, result, workload


def root_result(pod_context, container_context):
    changes = {} if container_context is None else {"securityContext": container_context}
    obj = pod(container(**changes), securityContext=pod_context)
    return result(judge(obj), "disallow-root-user")


@pytest.mark.parametrize(("pod_context", "container_context"), [
    ({"runAsNonRoot": True}, None),
    ({"runAsUser": 1000}, None),
    (None, {"runAsUser": 1000}),
    (None, {"runAsNonRoot": True}),
    ({"runAsUser": 0}, {"runAsUser": 1000}),          # the container's uid wins
    ({"runAsNonRoot": False}, {"runAsNonRoot": True}),
    ({"runAsNonRoot": False}, {"runAsUser": 1}),      # an explicit non-zero uid passes
])
def test_non_root_effective_user_passes(pod_context, container_context):
    assert root_result(pod_context, container_context).status == "pass"


def test_uid_zero_in_the_container_is_denied_at_the_container_field():
    found = root_result({}, {"runAsUser": 0})
    assert found.status == "fail"
    [finding] = found.findings
    assert finding.path == "spec.containers[0].securityContext.runAsUser"
    assert finding.message == ("container 'app': runs as root (runAsUser: 0); set "
                               "securityContext.runAsUser to a non-zero uid")


def test_uid_zero_inherited_from_the_pod_points_at_the_pod_field():
    found = root_result({"runAsUser": 0, "runAsNonRoot": True}, None)
    assert [f.path for f in found.findings] == ["spec.securityContext.runAsUser"]


@pytest.mark.parametrize(("pod_context", "container_context"), [
    (None, None),
    ({}, {}),
    ({"runAsNonRoot": False}, None),
    ({"runAsNonRoot": True}, {"runAsNonRoot": False}),  # the container's setting wins
])
def test_unset_uid_without_run_as_non_root_is_denied(pod_context, container_context):
    found = root_result(pod_context, container_context)
    assert found.status == "fail"
    [finding] = found.findings
    assert finding.path == "spec.containers[0].securityContext.runAsNonRoot"
    assert "may run as root; set securityContext.runAsNonRoot: true" in finding.message


def test_each_container_is_judged_with_its_own_context():
    obj = pod(container("ok", securityContext={"runAsUser": 5}), container("bad"),
              initContainers=[container("init", securityContext={"runAsUser": 0})],
              securityContext=None)
    decision = judge(obj)
    assert [(f.container, f.path) for f in result(decision, "disallow-root-user").findings] == [
        ("bad", "spec.containers[1].securityContext.runAsNonRoot"),
        ("init", "spec.initContainers[0].securityContext.runAsUser"),
    ]


def test_deployment_pod_level_context_applies_to_its_containers():
    obj = workload("Deployment", container(), securityContext={"runAsUser": 0})
    assert paths(judge(obj), "disallow-root-user") == [
        "spec.template.spec.securityContext.runAsUser"]


def test_node_template_without_security_context_is_denied():
    decision = judge(node_template(securityContext=None))
    assert messages(decision, "disallow-root-user") == [
        "spec: may run as root; set securityContext.runAsNonRoot: true or a non-zero "
        "securityContext.runAsUser"]
    assert paths(decision, "disallow-root-user") == ["spec.securityContext.runAsNonRoot"]
