"""A validation's `forEach` (a finding per item of a list or map that fails, at the item's
own field) and `perContainer` (a pod-level field that each container inherits, a finding
for each container), in the engine and as exported: the exported policy's message is the
engine's findings, each failing container's items after its name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from test_export import pairs, vap_judges

from webhook import Review, decode, evaluate, load_policies
from webhook.engine.policy import PolicyError
from webhook.export.vap import export

ENV = {"forEach": "container.?env.orValue([])",
       "expression": "!each.name.startsWith('BAD')",
       "messageExpression": "'env ' + each.name + ' is bad, not ' + each.?value.orValue('')",
       "fieldPath": "env[*].value"}
LIMITS = {"forEach": "container.?resources.?limits.orValue({})",
          "expression": "!each.startsWith('example.com/')",
          "message": "no example.com resources", "fieldPath": "resources.limits[*]"}
ROOT = {"expression": "container.?securityContext.?runAsUser.orValue(null) != null "
                      "|| podSpec.?securityContext.?runAsUser.orValue(1) != 0",
        "message": "inherits runAsUser: 0", "fieldPath": "podSpec.securityContext.runAsUser",
        "perContainer": True}


def load(tmp_path: Path, *validations: dict[str, Any], scope: str = "container") -> Any:
    folder = tmp_path / "policies"
    folder.mkdir(exist_ok=True)
    (folder / "p.yaml").write_text(yaml.safe_dump({
        "id": "p", "description": "d", "type": "validate", "action": "enforce",
        "scope": scope, "validations": list(validations)}))
    return load_policies(folder)


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d"},
            "spec": {"containers": [{"image": "app:1", **c} for c in containers], **spec}}


def found(decision: Any) -> list[tuple[str | None, str, str]]:
    return [(f.container, f.path, f.message)
            for result in decision.results for f in result.findings]


def test_a_finding_per_failing_item_of_a_list_at_its_index(tmp_path):
    policies = load(tmp_path, ENV)
    obj = pod({"name": "a", "env": [{"name": "OK", "value": "1"},
                                    {"name": "BAD_1", "value": "s3cr3t-one"},
                                    {"name": "BAD_2", "value": "s3cr3t-two"}]},
              {"name": "b", "env": [{"name": "BAD_3", "value": "s3cr3t-three"}]},
              {"name": "c"})
    assert found(evaluate(decode(obj), policies)) == [
        ("a", "spec.containers[0].env[1].value", "container 'a': env BAD_1 is bad, not (hidden)"),
        ("a", "spec.containers[0].env[2].value", "container 'a': env BAD_2 is bad, not (hidden)"),
        ("b", "spec.containers[1].env[0].value", "container 'b': env BAD_3 is bad, not (hidden)")]


def test_a_finding_per_failing_key_of_a_map_at_its_key(tmp_path):
    policies = load(tmp_path, LIMITS)
    obj = pod({"name": "a", "resources": {"limits": {
        "cpu": "1", "example.com/x": "1", "example.com/y": "2"}}})
    assert sorted(found(evaluate(decode(obj), policies))) == [
        ("a", "spec.containers[0].resources.limits[example.com/x]",
         "container 'a': no example.com resources"),
        ("a", "spec.containers[0].resources.limits[example.com/y]",
         "container 'a': no example.com resources")]
    assert found(evaluate(decode(pod({"name": "a"})), policies)) == []


def test_a_pod_level_field_per_container_names_each_container(tmp_path):
    policies = load(tmp_path, ROOT)
    obj = pod({"name": "a"}, {"name": "b", "securityContext": {"runAsUser": 0}},
              {"name": "c"}, securityContext={"runAsUser": 0})
    assert found(evaluate(decode(obj), policies)) == [
        ("a", "spec.securityContext.runAsUser", "container 'a': inherits runAsUser: 0"),
        ("c", "spec.securityContext.runAsUser", "container 'c': inherits runAsUser: 0")]
    # without perContainer the same field is the pod's: one finding, no container named
    policies = load(tmp_path, {**ROOT, "perContainer": False})
    assert found(evaluate(decode(obj), policies)) == [
        (None, "spec.securityContext.runAsUser", "inherits runAsUser: 0")]


def test_an_item_message_that_fails_falls_back_to_the_message(tmp_path):
    policies = load(tmp_path, {**ENV, "messageExpression": "'env ' + each.nope",
                               "message": "bad name"})
    obj = pod({"name": "a", "env": [{"name": "BAD", "value": "x"}]})
    assert found(evaluate(decode(obj), policies)) == [
        ("a", "spec.containers[0].env[0].value", "container 'a': bad name")]


def test_what_is_not_a_list_or_map_is_an_error_naming_the_validation(tmp_path):
    policies = load(tmp_path, {**ENV, "forEach": "container.name"})
    [result] = evaluate(decode(pod({"name": "a"})), policies).results
    assert result.status == "error" and "validations[0]" in result.reason


@pytest.mark.parametrize(("validation", "said"), [
    ({**ENV, "forEach": None}, "fieldPath: [*] at character 4"),
    ({**ROOT, "fieldPath": "securityContext[*]"}, "fieldPath: [*] at character 16"),
    ({**ENV, "fieldPath": "env[*].x[*]"}, "fieldPath: [*] at character 9"),
    ({"expression": "true", "messageExpression": "each.name"},
     "validations[0].messageExpression: .*undeclared reference to 'each"),
])
def test_a_forEach_that_cannot_work_fails_the_load(tmp_path, validation, said):
    with pytest.raises(PolicyError, match=said.replace("[*]", r"\[\*\]")
                       .replace("[0]", r"\[0\]")):
        load(tmp_path, {key: value for key, value in validation.items() if value is not None})


def test_per_container_needs_the_container_scope(tmp_path):
    with pytest.raises(PolicyError, match="perContainer: only a policy with `scope: contain"):
        load(tmp_path, {"expression": "true", "perContainer": True}, scope="object")


def test_object_scope_items_are_findings_of_the_object(tmp_path):
    policies = load(tmp_path, {"forEach": "object.metadata.?labels.orValue({})",
                               "expression": "!each.startsWith('tmp-')",
                               "messageExpression": "'label ' + each + ' is temporary'",
                               "fieldPath": "metadata.labels[*]"}, scope="object")
    obj = pod({"name": "a"})
    obj["metadata"]["labels"] = {"tmp-a": "x", "app": "y"}
    assert found(evaluate(decode(obj), policies)) == [
        (None, "metadata.labels.tmp-a", "label tmp-a is temporary")]


@pytest.mark.parametrize("scope", ["container", "object"])
def test_the_export_gives_the_engines_findings_in_one_message(tmp_path, scope):
    """A message per validation: each failing container's items, in order, after its name,
    joined by '; ', as the engine's findings of that validation are."""
    validations = [{**ENV, "messageExpression": "'env ' + each.name + ' is bad'"}, LIMITS,
                   ROOT] if scope == "container" else [
        {"forEach": "object.spec.containers", "expression": "each.name != 'bad'",
         "messageExpression": "'container ' + each.name + ' is bad'"}]
    policies = load(tmp_path, *validations, scope=scope)
    obj = pod({"name": "a", "env": [{"name": "BAD_1", "value": "1"}, {"name": "OK"},
                                    {"name": "BAD_2", "value": "2"}],
               "resources": {"limits": {"example.com/x": "1"}}},
              {"name": "bad", "env": [{"name": "BAD_3", "value": "3"}]},
              securityContext={"runAsUser": 0})
    by_field: dict[str, list[str]] = {}
    for result in evaluate(decode(obj), policies).results:
        for finding in result.findings:
            last = str(finding.at[-1]) if finding.at else ""
            by_field.setdefault(last, []).append(finding.message)
    [(vap, _)] = pairs(export(policies).objects).values()
    status, messages = vap_judges(vap, obj, "d")
    assert status == "fail"
    if scope == "container":
        assert len(by_field["value"]) == 3 and len(by_field["runAsUser"]) == 2
        assert messages == ["; ".join(by_field[name])
                            for name in ("value", "example.com/x", "runAsUser")]
    else:
        assert messages == ["; ".join(by_field[""])] == ["container bad is bad"]


def test_a_new_failing_item_beside_an_old_one_is_denied_on_update(tmp_path):
    """Without a [*] step in its fieldPath every item of a forEach names the same field:
    which item failed is part of the finding, so an item that failed before does not excuse
    a new one on UPDATE."""
    policies = load(tmp_path, {key: value for key, value in ENV.items() if key != "fieldPath"})
    old = pod({"name": "a", "env": [{"name": "BAD_1", "value": "1"}]})
    new = pod({"name": "a", "env": [{"name": "BAD_1", "value": "1"}, {"name": "BAD_2",
                                                                     "value": "2"}]})
    decision = evaluate(decode(new), policies, Review(operation="UPDATE", old_object=decode(old)))
    assert not decision.allowed
    assert "env BAD_2 is bad" in decision.message and "BAD_1" not in decision.message
    assert evaluate(decode(old), policies,
                    Review(operation="UPDATE", old_object=decode(old))).allowed
