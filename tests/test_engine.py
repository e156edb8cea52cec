"""evaluate(): which objects are judged, UPDATE semantics, dry-run, exclusions, bad input."""

from __future__ import annotations

import jsonpatch
import pytest
from builders import (
    CONTROLLERS,
    container,
    dotted_prefix,
    gpu_container,
    judge,
    judge_given,
    node_template,
    pod,
    result,
    statuses,
    with_config,
    workload,
)

from webhook import Review, decode
from webhook.engine.normalize import normalize
from webhook.engine.patch import pointer

ROOT_CONTAINER = {"securityContext": {"runAsUser": 0}}

# --- kinds ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", CONTROLLERS)
def test_controllers_are_judged_through_their_pod_template_with_their_own_paths(kind):
    obj = workload(kind, container(image="app:latest", resources=None))
    decision = judge(obj)
    assert not decision.allowed
    prefix = dotted_prefix(kind)
    assert [f.path for f in result(decision, "disallow-latest-tag").findings] == [
        f"{prefix}.containers[0].image"]
    assert [f.path for f in result(decision, "require-requests").findings] == [
        f"{prefix}.containers[0].resources.requests.cpu",
        f"{prefix}.containers[0].resources.requests.memory"]
    assert decision.resource.kind == kind


@pytest.mark.parametrize("api_version", ["quickq/v1", "quickq.io/v1"])
def test_node_templates_of_both_groups_are_judged(api_version):
    decision = judge(node_template(api_version=api_version, image="model:latest"))
    assert [f.path for f in result(decision, "disallow-latest-tag").findings] == ["spec.image"]
    assert not decision.allowed


def test_node_template_groups_come_from_the_config():
    obj = node_template(api_version="nodes.example.com/v1", image="model:latest")
    assert set(statuses(judge(obj)).values()) == {"skip"}
    policies = with_config(nodeTemplateGroups=["nodes.example.com"])
    assert result(judge(obj, policies), "disallow-latest-tag").status == "fail"
    assert set(statuses(judge(node_template(), policies)).values()) == {"skip"}


@pytest.mark.parametrize("obj", [
    {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c"}, "data": {"a": "Yg=="}},
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": 5}},
    {"apiVersion": "example.com/v1", "kind": "Deployment", "metadata": {"name": "d"},
     "spec": {"template": "x"}},
    {"apiVersion": "v1", "kind": "Pod2", "spec": {"containers": "junk"}},
])
def test_other_kinds_are_skipped_by_every_policy_and_never_an_error(obj, policies):
    decision = judge(obj)
    assert decision.allowed
    assert len(decision.results) == len(policies.policies)
    assert {r.status for r in decision.results} == {"skip"}
    assert decision.results[0].reason.startswith("kind ")


def test_every_result_names_policy_path_container_and_what_to_do():
    obj = pod(container(image="app", resources=None, livenessProbe={"tcpSocket": {"port": 1}}),
              gpu_container("gpu", securityContext={"runAsUser": 0}), labels={})
    decision = judge(obj)
    seen = set()
    for found in decision.results:
        assert found.policy
        for finding in found.findings:
            assert finding.path.startswith(("spec.", "metadata.")), finding
            assert finding.message
            if finding.container is not None:
                assert finding.message.startswith(f"container '{finding.container}': ")
            seen.add(found.policy)
    assert seen == {"disallow-latest-tag", "require-requests", "disallow-root-user",
                    "liveness-probe-tolerance", "require-labels", "gpu-priority-class",
                    "inject-startup-probe", "inject-gpu-toleration"}


def test_unnamed_container_is_named_by_its_index():
    # The API server refuses a Pod's container without a name; judged as written (as a
    # custom kind's objects are), it is named by its index.
    decision = judge_given(pod(container(name=None, image="app")))
    assert result(decision, "disallow-latest-tag").findings[0].message.startswith(
        "container '#0': ")
    assert "spec.containers[0].name: required value" in judge(
        pod(container(name=None, image="app"))).message


# --- UPDATE ---------------------------------------------------------------------------------


def test_update_keeping_an_old_violation_warns_instead_of_denying():
    old = pod(container(image="app:latest"))
    new = pod(container(image="app:latest", env=[{"name": "A", "value": "1"}]))
    decision = judge(new, review=Review(operation="UPDATE", old_object=decode(old)))
    assert decision.allowed
    assert result(decision, "disallow-latest-tag").findings[0].preexisting
    assert any(w.startswith("[disallow-latest-tag] container 'app': image 'app:latest'")
               and w.endswith("(already violated before this update)")
               for w in decision.warnings)


def test_update_introducing_a_violation_is_denied():
    old = pod(container())
    new = pod(container(image="app:latest"))
    decision = judge(new, review=Review(operation="UPDATE", old_object=decode(old)))
    assert not decision.allowed
    assert "[disallow-latest-tag] container 'app'" in decision.message


def test_update_old_violation_in_another_policy_does_not_excuse_a_new_one():
    old = pod(container(securityContext={"runAsUser": 0}))
    new = pod(container(securityContext={"runAsUser": 0}, image="app:latest"))
    decision = judge(new, review=Review(operation="UPDATE", old_object=decode(old)))
    assert not decision.allowed
    assert "disallow-latest-tag" in decision.message
    assert "disallow-root-user" not in decision.message


def test_update_renamed_or_added_container_violations_are_new():
    old = pod(container("web", image="app:latest"))
    renamed = pod(container("web2", image="app:latest"))
    assert not judge(renamed, review=Review(operation="UPDATE", old_object=decode(old))).allowed
    added = pod(container("web", image="app:latest"), container("sidecar", image="proxy"))
    decision = judge(added, review=Review(operation="UPDATE", old_object=decode(old)))
    assert not decision.allowed
    assert "container 'sidecar'" in decision.message
    assert "container 'web'" not in decision.message


def test_update_object_level_violation_already_present_is_a_warning():
    policies = with_config(policies={"require-labels": {"action": "enforce"}})
    old = pod(labels={})
    assert not judge(old, policies).allowed
    decision = judge(pod(labels={"team": "a"}),
                     policies,
                     Review(operation="UPDATE", old_object=decode(old)))
    assert decision.allowed
    assert decision.warnings == (
        "[require-labels] add the label metadata.labels.app or "
        "metadata.labels[app.kubernetes.io/name] (already violated before this update)",)
    assert not judge(pod(labels={}),
                     policies,
                     Review(operation="UPDATE", old_object=decode(pod()))).allowed


def test_update_of_a_deployment_compares_containers_of_the_template():
    old = workload("Deployment", container(image="app:latest"))
    new = workload("Deployment", container(image="app:latest"))
    new["spec"]["replicas"] = 3
    assert judge(new, review=Review(operation="UPDATE", old_object=decode(old))).allowed


def test_pods_are_mutated_on_create_only_controllers_and_node_templates_on_update_too():
    live = {"livenessProbe": {"tcpSocket": {"port": 1}, "failureThreshold": 6}}
    the_pod = pod(container(**live))
    assert judge(the_pod).patch
    assert judge(the_pod, review=Review(operation="UPDATE", old_object=decode(the_pod))).patch == ()
    deployment = workload("Deployment", container(**live))
    changed = workload("Deployment", container(image="registry.example.com/app:2", **live))
    assert judge(changed, review=Review(operation="UPDATE", old_object=decode(deployment))).patch
    # An update that leaves the pod template alone is not patched (tests/test_update_template).
    unchanged = Review(operation="UPDATE", old_object=decode(deployment))
    assert judge(deployment, review=unchanged).patch == ()
    template = node_template(health={"liveness": live["livenessProbe"]})
    assert judge(template, review=Review(operation="UPDATE", old_object=decode(template))).patch


# --- dry-run --------------------------------------------------------------------------------


def test_dry_run_denies_nothing_patches_nothing_and_reports_everything():
    policies = with_config(mode="dry-run")
    obj = pod(gpu_container(image="app:latest", livenessProbe={"tcpSocket": {"port": 1}}),
              labels={})
    decision = judge(obj, policies)
    assert decision.allowed and decision.message == ""
    assert decision.patch == () and decision.patched is None
    warnings = "\n".join(decision.warnings)
    assert "[disallow-latest-tag] would deny: container 'model': image 'app:latest'" in warnings
    assert "[inject-gpu-toleration] would patch: add a toleration" in warnings
    assert "[inject-startup-probe] would patch: container 'model': add startupProbe" in warnings
    assert "[liveness-probe-tolerance] container 'model': livenessProbe restarts" in warnings
    annotations = decision.audit_annotations
    assert annotations["disallow-latest-tag"].startswith("would deny: container 'model'")
    assert annotations["inject-gpu-toleration"].startswith("would patch: add a toleration")
    assert annotations["require-labels"] == (
        "add the label metadata.labels.app or metadata.labels[app.kubernetes.io/name]")
    # the verdicts themselves are unchanged, so reports still show what would happen
    assert result(decision, "disallow-latest-tag").status == "fail"
    assert result(decision, "inject-startup-probe").status == "patch"


def test_dry_run_turns_an_unjudgeable_object_into_a_warning():
    decision = judge({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": "x"}},
                     with_config(mode="dry-run"))
    assert decision.allowed
    assert decision.warnings == (
        "[dry-run] Pod: the Kubernetes API server would refuse it: spec.containers: expected a "
        "list, got a string",)


# --- exclusions -----------------------------------------------------------------------------

BAD = {"image": "app:latest", "resources": None}


@pytest.mark.parametrize("namespace", ["kube-system", "kube-public", "kube-node-lease"])
def test_default_excluded_namespaces_are_skipped(namespace):
    decision = judge(pod(container(**BAD), gpu_container(), namespace=namespace))
    assert decision.allowed and decision.patch == () and decision.warnings == ()
    assert {r.status for r in decision.results} == {"skip"}
    assert decision.results[0].reason == f"namespace {namespace} is excluded"


def test_namespace_given_by_the_request_is_used_when_the_object_has_none():
    obj = pod(container(**BAD), namespace=None)
    assert judge(obj, review=Review(namespace="kube-system")).allowed
    assert not judge(obj, review=Review(namespace="default")).allowed


def test_excluded_namespaces_users_and_groups_come_from_the_config():
    policies = with_config(excludeNamespaces=["team-*"],
                           excludeUsers=["system:serviceaccount:ci:*"],
                           excludeGroups=["platform-admins"])
    obj = pod(container(**BAD))
    assert not judge(obj, policies).allowed
    assert judge(pod(container(**BAD), namespace="team-a"), policies).allowed
    assert not judge(pod(container(**BAD), namespace="kube-system"), policies).allowed
    decision = judge(obj, policies, Review(username="system:serviceaccount:ci:deployer"))
    assert decision.allowed
    assert decision.results[0].reason == "user system:serviceaccount:ci:deployer is excluded"
    decision = judge(obj, policies, Review(username="alice", groups=["devs", "platform-admins"]))
    assert decision.results[0].reason == "group platform-admins is excluded"
    assert not judge(obj, policies, Review(username="alice", groups=["devs"])).allowed


NODE = Review(username="system:node:gpu-1", groups=("system:nodes", "system:authenticated"))


def test_mirror_pods_a_kubelet_makes_are_skipped():
    obj = pod(container(**BAD), annotations={"kubernetes.io/config.mirror": "abc"})
    decision = judge(obj, review=NODE)
    assert decision.allowed
    assert {r.status for r in decision.results} == {"skip"}
    assert "mirror pod" in decision.results[0].reason


@pytest.mark.parametrize("requester", [
    Review(), Review(username="alice", groups=("system:authenticated",)),
    Review(username="system:node:gpu-1", groups=("system:authenticated",)),  # no node group
    Review(username="mallory", groups=("system:nodes",))])  # no node user name
def test_a_spoofed_mirror_pod_is_judged(requester):
    obj = pod(container(**BAD), annotations={"kubernetes.io/config.mirror": "abc"})
    decision = judge(obj, review=requester)
    assert not decision.allowed
    assert "[disallow-latest-tag]" in decision.message


def test_off_action_skips_the_policy():
    policies = with_config(policies={"disallow-latest-tag": {"action": "off"}})
    decision = judge(pod(container(image="app:latest")), policies)
    assert decision.allowed
    assert (result(decision, "disallow-latest-tag").status,
            result(decision, "disallow-latest-tag").reason) == ("skip", "the policy is off")


def test_warn_action_override_turns_a_denial_into_a_warning():
    policies = with_config(policies={"disallow-latest-tag": {"action": "warn"}})
    decision = judge(pod(container(image="app:latest")), policies)
    assert decision.allowed
    assert decision.warnings[0].startswith("[disallow-latest-tag] container 'app': image")


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(("obj", "problem"), [
    ("a string", "expected a Kubernetes object (a mapping), got a string"),
    ([{"kind": "Pod"}], "expected a Kubernetes object (a mapping), got a list"),
    (None, "expected a Kubernetes object (a mapping), got null"),
    ({"apiVersion": "v1", "metadata": {"name": "x"}}, "the object has no 'kind'"),
    ({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": {"name": "a"}}},
     "spec.containers: expected a list, got a mapping"),
    ({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": ["nginx"]}},
     "spec.containers[0]: expected a mapping, got a string"),
    ({"apiVersion": "apps/v1", "kind": "Deployment",
      "spec": {"template": {"spec": {"initContainers": "x"}}}},
     "spec.template.spec.initContainers: expected a list, got a string"),
    ({"apiVersion": "v1", "kind": "Pod",
      "spec": {"containers": [{"name": "a", "resources": {"limits": ["1"]}}]}},
     "spec.containers[0].resources.limits: expected a mapping, got a list"),
    ({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "a", "env": {}}]}},
     "spec.containers[0].env: expected a list, got a mapping"),
])
def test_bad_objects_get_one_clear_error_result_and_are_denied(obj, problem):
    decision = judge(obj, review=Review(source="pods.yaml:3"))
    assert not decision.allowed
    [found] = decision.results
    assert (found.status, found.reason) == ("error", problem)
    assert decision.resource.source == "pods.yaml:3"
    assert problem in decision.message


# --- patches --------------------------------------------------------------------------------


def test_json_pointers_escape_tilde_and_slash():
    assert pointer(("metadata", "labels", "app.kubernetes.io/name")) == (
        "/metadata/labels/app.kubernetes.io~1name")
    assert pointer(("a~b", "c/d~1", 0)) == "/a~0b/c~1d~01/0"
    document = {"a~b": {"c/d~1": [1]}}
    assert jsonpatch.apply_patch(document, [{"op": "add", "path": pointer(("a~b", "c/d~1", 1)),
                                             "value": 2}]) == {"a~b": {"c/d~1": [1, 2]}}


def test_both_mutations_compose_into_one_patch_that_applies_cleanly():
    obj = workload("StatefulSet", gpu_container(livenessProbe={"exec": {"command": ["ok"]},
                                                               "failureThreshold": 6}),
                   tolerations=[{"key": "zone", "operator": "Exists"}])
    decision = judge(obj)
    assert [op["path"] for op in decision.patch] == [
        "/spec/template/spec/tolerations/-", "/spec/template/spec/containers/0/startupProbe"]
    # The patch is for the object as the API server hands it to the webhook.
    assert jsonpatch.apply_patch(normalize(obj)[0], list(decision.patch)) == decision.patched


def test_a_mutate_policy_set_to_warn_or_audit_reports_its_patch_without_applying_it():
    policies = with_config(policies={"inject-startup-probe": {"action": "warn"},
                                     "inject-gpu-toleration": {"action": "audit"}})
    obj = pod(gpu_container(livenessProbe={"tcpSocket": {"port": 1}, "failureThreshold": 6}),
              priorityClassName="gpu")
    decision = judge(obj, policies)
    assert decision.allowed and decision.patch == () and decision.patched is None
    assert result(decision, "inject-startup-probe").status == "patch"
    # The liveness probe it copies has the API server's default timeoutSeconds.
    assert result(decision, "inject-startup-probe").patch == [
        {"op": "add", "path": "/spec/containers/0/startupProbe",
         "value": {"tcpSocket": {"port": 1}, "timeoutSeconds": 1, "periodSeconds": 10,
                   "failureThreshold": 60}}]
    assert decision.warnings == (
        "[inject-startup-probe] would patch: container 'model': add startupProbe: it runs the "
        "liveness check every 10s for up to 600s and holds off liveness checks until it "
        "succeeds, so a slow start is not restarted",)
    assert list(decision.audit_annotations) == ["inject-gpu-toleration"]
    assert decision.audit_annotations["inject-gpu-toleration"].startswith(
        "would patch: add a toleration")
