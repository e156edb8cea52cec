"""CEL policies in policy files: loading (errors name file, field, line and column), the
container and object scopes over every kind, variables, matchConditions, messages, actions,
dry-run, UPDATE with pre-existing violations, and the evaluation limit."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import CONTROLLERS, dotted_prefix, node_template, pod, workload
from builders import policies_in as policies

from webhook import Config, PolicyError, Review, decode, evaluate

NO_PRIVILEGED: dict[str, Any] = {
    "id": "no-privileged",
    "description": "Containers do not run privileged.",
    "type": "validate",
    "action": "enforce",
    "scope": "container",
    "validations": [{
        "expression": "!(container.?securityContext.?privileged.orValue(false))",
        "message": "runs privileged; set securityContext.privileged: false",
        "fieldPath": "securityContext.privileged",
    }],
}




def load_error(tmp_path: Path, **changes: Any) -> str:
    with pytest.raises(PolicyError) as caught:
        policies(tmp_path, {**NO_PRIVILEGED, **changes})
    return str(caught.value)


PRIVILEGED = {"name": "bad", "image": "app:1", "securityContext": {"privileged": True}}
PLAIN = {"name": "ok", "image": "app:1"}


@pytest.mark.parametrize("kind", ["Pod", *CONTROLLERS])
def test_a_container_scope_finding_names_the_container_and_its_path_in_every_kind(
        tmp_path, kind):
    decision = evaluate(decode(workload(kind, PLAIN, initContainers=[PRIVILEGED])),
                        policies(tmp_path, NO_PRIVILEGED))
    assert decision.outcome == "denied"
    [result] = decision.results
    [found] = result.findings
    assert found.container == "bad"
    assert found.path == f"{dotted_prefix(kind)}.initContainers[0].securityContext.privileged"
    assert found.message == ("initContainer 'bad': runs privileged; "
                             "set securityContext.privileged: false")
    assert f"(field: {found.path})" in decision.message


def test_ephemeral_containers_and_node_templates_are_containers_too(tmp_path):
    loaded = policies(tmp_path, NO_PRIVILEGED)
    decision = evaluate(decode(pod(PLAIN, ephemeralContainers=[PRIVILEGED])), loaded)
    assert [f.path for f in decision.results[0].findings] == [
        "spec.ephemeralContainers[0].securityContext.privileged"]
    template = node_template(securityContext={"privileged": True})
    [found] = evaluate(decode(template), loaded).results[0].findings
    assert (found.message.startswith("spec: "), found.path) == (
        True, "spec.securityContext.privileged")
    assert evaluate(decode(pod(PLAIN)), loaded).outcome == "allowed"


def test_object_scope_reads_the_pod_spec_of_any_kind_and_points_at_it(tmp_path):
    loaded = policies(tmp_path, {
        "id": "no-host-network", "description": "d", "type": "validate", "action": "enforce",
        "validations": [{"expression": "!podSpec.?hostNetwork.orValue(false)",
                         "message": "remove hostNetwork", "fieldPath": "podSpec.hostNetwork"}]})
    for kind in ("Pod", *CONTROLLERS):
        decision = evaluate(decode(workload(kind, PLAIN, hostNetwork=True)), loaded)
        [found] = decision.results[0].findings
        assert (found.container, found.path) == (None, f"{dotted_prefix(kind)}.hostNetwork")
        assert evaluate(decode(workload(kind, PLAIN)), loaded).outcome == "allowed"


def test_variables_params_and_message_expressions(tmp_path):
    loaded = policies(tmp_path, {
        "id": "registry", "description": "d", "type": "validate", "action": "enforce",
        "scope": "container", "params": {"registries": ["registry.example.com/"]},
        "variables": [{"name": "image", "expression": "container.image"},
                      {"name": "allowed", "expression":
                       "params.registries.exists(r, variables.image.startsWith(r))"}],
        "validations": [{"expression": "variables.allowed",
                         "messageExpression": "'image ' + variables.image + ' is not from ' + "
                                              "params.registries.join(', ')",
                         "fieldPath": "image"}]})
    decision = evaluate(decode(pod({"name": "a", "image": "docker.io/app:1"},
                            {"name": "b", "image": "registry.example.com/app:1"})),
                        loaded)
    [found] = decision.results[0].findings
    assert found.message == ("container 'a': image docker.io/app:1 is not from "
                             "registry.example.com/")
    assert found.path == "spec.containers[0].image"
    override = Config.model_validate(
        {"policies": {"registry": {"params": {"registries": ["docker.io/"]}}}})
    decision = evaluate(decode(pod({"name": "a", "image": "docker.io/app:1"})),
                        policies(tmp_path, loaded.policies[0].params.model_dump() and {
                            **yaml.safe_load((tmp_path / "policies" / "p.yaml").read_text())},
                            config=override))
    assert decision.outcome == "allowed"


def test_a_message_expression_that_fails_falls_back_to_the_message(tmp_path):
    rule = {**NO_PRIVILEGED, "validations": [{
        **NO_PRIVILEGED["validations"][0], "messageExpression": "container.missing + 'x'"}]}
    [found] = evaluate(decode(pod(PRIVILEGED)), policies(tmp_path, rule)).results[0].findings
    assert found.message == ("container 'bad': runs privileged; "
                             "set securityContext.privileged: false")
    rule["validations"][0].pop("message")
    [found] = evaluate(decode(pod(PRIVILEGED)), policies(tmp_path, rule)).results[0].findings
    assert found.message.startswith("container 'bad': failed expression: !(container")


def test_an_expression_that_fails_on_the_object_is_an_error_naming_it(tmp_path):
    rule = {**NO_PRIVILEGED, "validations": [{"expression": "container.securityContext.privileged"
                                                            " == false"}]}
    decision = evaluate(decode(pod(PLAIN)), policies(tmp_path, rule))
    [result] = decision.results
    assert result.status == "error" and decision.outcome == "error" and not decision.allowed
    assert "validations[0].expression" in result.reason and "securityContext" in result.reason


def test_a_failing_variable_only_fails_the_expressions_that_read_it(tmp_path):
    rule = {**NO_PRIVILEGED,
            "variables": [{"name": "broken", "expression": "container.nothing.here"}],
            "validations": [NO_PRIVILEGED["validations"][0],
                            {"expression": "variables.broken == 1"}]}
    loaded = policies(tmp_path, rule)
    result = evaluate(decode(pod(PLAIN)), loaded).results[0]
    assert result.status == "error"
    assert ("validations[1].expression (or the variables it reads: broken): composited "
            'variable "broken" fails to evaluate: no such key: nothing') in result.reason
    rule["validations"] = rule["validations"][:1]
    assert evaluate(decode(pod(PRIVILEGED)), policies(tmp_path, rule)).results[0].status == "fail"


def test_match_conditions_and_request_fields(tmp_path):
    rule = {**NO_PRIVILEGED, "matchConditions": [
        {"name": "not-admins", "expression": "!('admins' in request.userInfo.groups)"},
        {"name": "creates", "expression": "request.operation == 'CREATE' && !request.dryRun"}]}
    loaded = policies(tmp_path, rule)
    assert evaluate(decode(pod(PRIVILEGED)), loaded).outcome == "denied"
    skipped = evaluate(decode(pod(PRIVILEGED)), loaded, Review(groups=["admins"])).results[0]
    assert (skipped.status, skipped.reason) == ("skip", "matchCondition 'not-admins' is false")
    dry_run = evaluate(decode(pod(PRIVILEGED)), loaded, Review(dry_run=True))
    assert dry_run.results[0].status == "skip"


def test_a_false_match_condition_wins_over_one_that_errors_before_it(tmp_path):
    """As Kubernetes: any false condition skips the policy; an error counts only when no
    condition is false, and then it is the first error."""
    failing = {"name": "reads-nothing", "expression": "object.spec.nothing == 1"}
    rule = {**NO_PRIVILEGED, "matchConditions": [
        failing, {"name": "never", "expression": "false"}]}
    skipped = evaluate(decode(pod(PRIVILEGED)), policies(tmp_path, rule)).results[0]
    assert (skipped.status, skipped.reason) == ("skip", "matchCondition 'never' is false")
    rule["matchConditions"] = [failing, {"name": "always", "expression": "true"}]
    errored = evaluate(decode(pod(PRIVILEGED)), policies(tmp_path, rule)).results[0]
    assert errored.status == "error" and "matchConditions[reads-nothing]" in errored.reason


def test_namespace_object_and_old_object(tmp_path):
    loaded = policies(tmp_path, {
        "id": "ns", "description": "d", "type": "validate", "action": "enforce",
        "validations": [{"expression": "namespaceObject == null || "
                                       "namespaceObject.metadata.labels.tier != 'gpu' || "
                                       "has(object.spec.priorityClassName)",
                         "message": "set a priorityClassName in GPU namespaces"},
                        {"expression": "oldObject == null || oldObject.metadata.name == "
                                       "object.metadata.name", "message": "no renames"}]})
    gpu = {"metadata": {"name": "ml", "labels": {"tier": "gpu"}}}
    assert evaluate(decode(pod(PLAIN)), loaded).outcome == "allowed"
    assert evaluate(decode(pod(PLAIN)), loaded, Review(namespace_object=gpu)).outcome == "denied"
    assert evaluate(decode(pod(PLAIN, priorityClassName="p")),
                    loaded,
                    Review(namespace_object=gpu)).outcome == "allowed"
    decision = evaluate(decode(pod(PLAIN)),
                        loaded,
                        Review(operation="UPDATE", old_object=decode(pod(PLAIN, name="x"))))
    assert decision.outcome == "denied" and "no renames" in decision.message


def test_actions_dry_run_and_preexisting_violations_work_as_for_built_in_rules(tmp_path):
    bad = pod(PRIVILEGED)
    warned = evaluate(decode(bad), policies(tmp_path, {**NO_PRIVILEGED, "action": "warn"}))
    assert warned.allowed and warned.warnings == (
        "[no-privileged] initContainer 'bad': runs privileged; set securityContext."
        "privileged: false".replace("initContainer", "container"),)
    audited = evaluate(decode(bad), policies(tmp_path, {**NO_PRIVILEGED, "action": "audit"}))
    assert audited.allowed and "no-privileged" in audited.audit_annotations
    off = evaluate(decode(bad), policies(tmp_path, {**NO_PRIVILEGED, "action": "off"}))
    assert off.results[0].status == "skip"
    dry = evaluate(decode(bad), policies(tmp_path, NO_PRIVILEGED, config=Config(mode="dry-run")))
    assert dry.allowed and dry.outcome == "would-deny"
    loaded = policies(tmp_path, NO_PRIVILEGED)
    update = evaluate(decode(pod(PRIVILEGED, PLAIN)),
                      loaded,
                      Review(operation="UPDATE", old_object=decode(bad)))
    assert update.allowed and "already violated" in update.warnings[0]
    worse = evaluate(decode(pod(PRIVILEGED, {**PRIVILEGED, "name": "new"})),
                     loaded,
                     Review(operation="UPDATE", old_object=decode(bad)))
    assert not worse.allowed and "container 'new'" in worse.message
    assert "container 'bad'" not in worse.message


def test_the_evaluation_limit_stops_a_costly_expression_quickly(tmp_path):
    rule = {**NO_PRIVILEGED, "scope": "object", "validations": [{"expression": (
        "object.spec.containers.all(a, object.spec.containers.all(b, "
        "object.spec.containers.all(c, a.name != '' || b.name != c.name)))")}]}
    many = pod(*({"name": f"c{i}", "image": "app:1"} for i in range(500)))
    result = evaluate(decode(many), policies(tmp_path, rule)).results[0]
    # the API server's per-call limit (its message)
    assert result.status == "error" and "actual cost limit exceeded" in result.reason
    small = pod(*({"name": f"c{i}", "image": "app:1"} for i in range(5)))
    assert evaluate(decode(small), policies(tmp_path, rule)).results[0].status == "pass"


@pytest.mark.parametrize(("changes", "expected"), [
    ({"validations": [{"expression": "container.image.startsWith(1)"}]},
     "p.yaml: validations[0].expression: line 1, column 27: found no matching overload for "
     "'startsWith' applied to 'dyn.(int)'"),
    ({"validations": [{"expression": "container.image +"}]},
     "p.yaml: validations[0].expression: line 1, column 18: Syntax error"),
    ({"validations": [{"expression": "1 + 1"}]},
     "validations[0].expression: must evaluate to bool but got int"),  # the API server's
    ({"validations": [{"expression": "true", "messageExpression": "1"}]},
     "validations[0].messageExpression: must evaluate to string but got int"),
    ({"scope": "object"},
     "validations[0].expression: line 1, column 3: undeclared reference to 'container"),
    ({"validations": [{"expression": "variables.nope"}]},
     "validations[0].expression: reads variables.nope, which is not defined"),
    ({"variables": [{"name": "a", "expression": "variables.b"},
                    {"name": "b", "expression": "1"}]},
     "variables[0] (a).expression: reads variables.b, which is not defined before it"),
    ({"variables": [{"name": "a", "expression": "1"}, {"name": "a", "expression": "2"}]},
     "variables[1].name: 'a' is defined twice"),
    ({"matchConditions": [{"name": "m", "expression": "container.name == ''"}]},
     "matchConditions[0] (m).expression: line 1, column 1: undeclared reference"),
    ({"rule": "disallow-root-user"},
     "rule: a CEL policy (one with `validations` or `mutations`) names no rule"),
    ({"type": "mutate"}, "type: a policy with `validations` is a validate policy"),
    ({"scope": "pod"}, "scope: Input should be 'object' or 'container'"),
    ({"validations": [{"expression": "true", "fieldPath": "a b"}]},
     "validations[0].fieldPath: not a field path at character 2"),
    ({"validations": [{"expression": "true", "reason": "Nope"}]}, "validations.0.reason"),
    ({"validations": [{"expresion": "true"}]}, "validations.0.expresion: unknown field"),
    ({"validations": [{"expression": "x" * 10_001}]}, "at most 10000 are allowed"),
])
def test_a_policy_that_does_not_compile_fails_the_load_naming_file_field_and_position(
        tmp_path, changes, expected):
    message = load_error(tmp_path, **changes)
    assert expected in message
    assert message.startswith(str(tmp_path / "policies" / "p.yaml"))


def test_cel_fields_on_a_built_in_rule_policy_are_refused(tmp_path):
    with pytest.raises(PolicyError, match="scope: only a CEL policy"):
        policies(tmp_path, {"id": "disallow-root-user", "description": "d",
                            "type": "validate", "action": "enforce", "scope": "container"})


def test_a_compile_error_shows_a_caret_under_the_position(tmp_path):
    message = load_error(tmp_path, validations=[{"expression": "container.image == 'a' &&"}])
    assert "\n | container.image == 'a' &&\n | " in message and message.endswith("^")


def test_the_docs_policy_loads_lists_and_judges_as_the_docs_say(tmp_path, capsys):
    from webhook.cli import main
    from webhook.loader import default_policies_dir

    page = (Path(__file__).resolve().parent.parent / "docs" / "writing-policies.md").read_text()
    block = re.search(r"## A policy in CEL.*?<<'YAML'\n(.*?)\nYAML\n", page, re.S)
    assert block is not None
    folder = tmp_path / "my-policies"
    shutil.copytree(default_policies_dir(), folder)
    (folder / "allowed-registries.yaml").write_text(block.group(1))
    assert main(["policies", "--policies", str(folder)]) == 0
    assert "allowed-registries" in capsys.readouterr().out
    examples = Path(__file__).resolve().parent.parent / "examples"
    assert main(["check", "--policies", str(folder), str(examples / "good" / "pod.yaml")]) == 0
    assert main(["check", "--policies", str(folder), str(examples / "bad" / "pod.yaml")]) == 1
    assert ("container 'app': image python:latest is not from registry.example.com/"
            in capsys.readouterr().out)


def test_a_pod_level_finding_in_container_scope_is_reported_once(tmp_path):
    loaded = policies(tmp_path, {
        "id": "no-root-uid", "description": "d", "type": "validate", "action": "enforce",
        "scope": "container",
        "validations": [
            {"expression": "podSpec.?securityContext.?runAsUser.orValue(1) != 0",
             "message": "the pod runs as root", "fieldPath": "podSpec.securityContext.runAsUser"},
            {"expression": "container.?securityContext.?runAsUser.orValue(1) != 0",
             "message": "runs as root", "fieldPath": "securityContext.runAsUser"}]})
    both = {"runAsUser": 0}
    decision = evaluate(decode(workload("Deployment", {"name": "a", "image": "x:1"},
                                 {"name": "b", "image": "x:1", "securityContext": both},
                                 securityContext=both)),
                        loaded)
    assert [(f.container, f.path, f.message) for f in decision.results[0].findings] == [
        (None, "spec.template.spec.securityContext.runAsUser", "the pod runs as root"),
        ("b", "spec.template.spec.containers[1].securityContext.runAsUser",
         "container 'b': runs as root")]


def _pytorch_job(master_spec: dict[str, Any], worker_spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "train", "namespace": "ml", "labels": {"app": "train"}},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": master_spec}},
                "Worker": {"replicas": 2, "template": {"spec": worker_spec}}}}}


def test_an_ml_workload_kind_is_judged_per_container_with_its_own_pod_spec(tmp_path):
    loaded = policies(tmp_path, {
        **NO_PRIVILEGED,
        "validations": [NO_PRIVILEGED["validations"][0],
                        {"expression": "!podSpec.?hostIPC.orValue(false)",
                         "message": "remove hostIPC", "fieldPath": "podSpec.hostIPC"}]})
    job = _pytorch_job({"containers": [PLAIN]},
                       {"hostIPC": True, "containers": [PRIVILEGED]})
    decision = evaluate(decode(job), loaded)
    worker = "spec.pytorchReplicaSpecs.Worker.template.spec"
    name = "bad in pytorchReplicaSpecs.Worker"  # a container's name within its replica spec
    assert [(f.container, f.path) for f in decision.results[0].findings] == [
        (name, f"{worker}.containers[0].securityContext.privileged"),
        (None, f"{worker}.hostIPC")]  # about the pod spec, not the container
    assert decision.outcome == "denied"
