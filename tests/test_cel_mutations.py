"""CEL mutations (MutatingAdmissionPolicy's JSONPatch form): per-container paths in every
kind, minimal patches, the idempotence check, bad operations as errors, load errors."""

from __future__ import annotations

from typing import Any

import pytest
from builders import CONTROLLERS, node_template, pod, pointer_prefix, workload
from builders import policies_in as policies

from webhook import Config, PolicyError, Review, decode, evaluate
from webhook.engine.normalize import normalize
from webhook.engine.patch import apply_patch

NON_ROOT: dict[str, Any] = {
    "id": "default-non-root",
    "description": "Containers without a securityContext run as non-root.",
    "type": "mutate",
    "action": "enforce",
    "scope": "container",
    "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": (
        "has(container.securityContext) ? [] : "
        "[JSONPatch{op: 'add', path: '/securityContext', value: {'runAsNonRoot': true}}]")}}],
}




def mutation(expression: str, **changes: Any) -> dict[str, Any]:
    return {**NON_ROOT, **changes,
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}]}


BARE = {"name": "bare", "image": "app:1"}
SET = {"name": "set", "image": "app:1", "securityContext": {"runAsUser": 1000}}


@pytest.mark.parametrize("kind", ["Pod", *CONTROLLERS])
def test_a_container_scope_patch_lands_on_each_container_that_needs_it(tmp_path, kind):
    obj = workload(kind, SET, BARE, initContainers=[dict(BARE, name="init")])
    decision = evaluate(decode(obj), policies(tmp_path, NON_ROOT))
    prefix = pointer_prefix(kind)
    assert decision.outcome == "patched"
    assert [op["path"] for op in decision.patch] == [
        f"{prefix}/containers/1/securityContext", f"{prefix}/initContainers/0/securityContext"]
    # The patch is for the object as the API server hands it to the webhook.
    assert decision.patched == apply_patch(normalize(obj)[0], list(decision.patch))
    assert [f.message for f in decision.results[0].findings] == [
        "container 'bare': add securityContext", "initContainer 'init': add securityContext"]
    again = evaluate(decode(decision.patched), policies(tmp_path, NON_ROOT))
    assert (again.outcome, again.patch) == ("allowed", ())


def test_a_node_template_spec_is_the_container(tmp_path):
    template = node_template()
    del template["spec"]["securityContext"]
    decision = evaluate(decode(template), policies(tmp_path, NON_ROOT))
    assert decision.patch == ({"op": "add", "path": "/spec/securityContext",
                               "value": {"runAsNonRoot": True}},)


def test_an_operation_that_changes_nothing_is_left_out_of_the_patch(tmp_path):
    rule = mutation("[JSONPatch{op: 'add', path: '/metadata/labels', value: {'app': 'web'}},"
                    " JSONPatch{op: 'replace', path: '/spec/restartPolicy', value: 'Never'}]",
                    scope="object")
    obj = pod(BARE, restartPolicy="Always")  # labels are already {'app': 'web'}
    decision = evaluate(decode(obj), policies(tmp_path, rule))
    assert decision.patch == ({"op": "replace", "path": "/spec/restartPolicy",
                               "value": "Never"},)
    assert decision.results[0].findings[0].message == "replace spec.restartPolicy"


def test_a_mutation_that_patches_again_on_the_probe_pod_fails_the_load(tmp_path):
    rule = mutation(
        "[JSONPatch{op: 'add', path: '/metadata/annotations', value: "
        "{'count': string(size(object.metadata.?annotations.orValue({})))}}]", scope="object")
    with pytest.raises(PolicyError) as caught:
        policies(tmp_path, rule)
    assert "p.yaml: mutations: not idempotent: on a probe Pod, a second pass patches again " \
           "(add metadata.annotations)" in str(caught.value)


def test_a_mutation_that_would_patch_again_is_an_error_not_a_patch(tmp_path):
    # The probe Pod has no `generation` annotation, so only a real object shows the problem.
    rule = mutation(
        "'generation' in object.metadata.?annotations.orValue({}) ? [JSONPatch{op: 'replace', "
        "path: '/metadata/annotations/generation', "
        "value: object.metadata.annotations.generation + '+'}] : []", scope="object")
    loaded = policies(tmp_path, rule)
    assert evaluate(decode(pod(BARE)), loaded).outcome == "allowed"
    decision = evaluate(decode(pod(BARE, annotations={"generation": "1"})), loaded)
    [result] = decision.results
    assert result.status == "error" and decision.outcome == "error"
    assert "not idempotent" in result.reason and decision.patch == ()


def test_keys_with_slashes_are_escaped_with_jsonpatch_escape_key(tmp_path):
    rule = mutation(
        "has(object.metadata.labels) && 'team.example.com/owner' in object.metadata.labels ? []"
        " : [JSONPatch{op: 'add', path: '/metadata/labels/' + "
        "jsonpatch.escapeKey('team.example.com/owner'), value: 'unknown'}]", scope="object")
    decision = evaluate(decode(pod(BARE)), policies(tmp_path, rule))
    assert decision.patch[0]["path"] == "/metadata/labels/team.example.com~1owner"
    assert decision.patched["metadata"]["labels"]["team.example.com/owner"] == "unknown"


@pytest.mark.parametrize(("expression", "problem"), [
    ("[JSONPatch{op: 'move', path: '/x', from: '/y'}]", "operation 0: unknown field 'from'"),
    ("[JSONPatch{op: 'copy', path: '/x', value: 1}]", "op must be add, replace or remove"),
    ("[JSONPatch{op: 'add', path: 'securityContext', value: 1}]",
     "path must be a JSON pointer"),
    ("[JSONPatch{op: 'add', path: '/a'}]", "a add operation needs a value"),
    ("[JSONPatch{op: 'add', path: '/securityContext/runAsUser', value: 1}]",
     "operation 0 (add /spec/containers/0/securityContext/runAsUser) does not apply"),
])
def test_a_bad_operation_is_an_error_naming_it(tmp_path, expression, problem):
    decision = evaluate(decode(pod(BARE)), policies(tmp_path, mutation(expression)))
    [result] = decision.results
    assert result.status == "error" and problem in result.reason
    assert "mutations[0].jsonPatch.expression" in result.reason


@pytest.mark.parametrize(("expression", "problem"), [
    ("{'op': 'add'}", "must evaluate to list(JSONPatch) but got map(string, string)"),
    ("JSONPatch{op: 'add'}", "must evaluate to list(JSONPatch) but got JSONPatch"),
    ("[{'op': 'add', 'path': '/a', 'value': 1}]", "expected type 'string' but found 'int'"),
])
def test_what_is_not_a_list_of_jsonpatch_does_not_load(tmp_path, expression, problem):
    """A mutation is typed as the mutating plugin types it: a list of JSONPatch{...}, the
    plugin's message otherwise."""
    with pytest.raises(PolicyError) as caught:
        policies(tmp_path, mutation(expression))
    assert "mutations[0].jsonPatch.expression: " in str(caught.value)
    assert problem in str(caught.value)


def test_actions_and_dry_run_only_say_what_would_be_patched(tmp_path):
    warned = evaluate(decode(pod(BARE)), policies(tmp_path, {**NON_ROOT, "action": "warn"}))
    assert warned.patch == () and warned.warnings == (
        "[default-non-root] would patch: container 'bare': add securityContext",)
    dry = evaluate(decode(pod(BARE)), policies(tmp_path, NON_ROOT, config=Config(mode="dry-run")))
    assert dry.patch == () and dry.outcome == "would-patch"
    update = evaluate(decode(pod(BARE)),
                      policies(tmp_path, NON_ROOT),
                      Review(operation="UPDATE", old_object=decode(pod(BARE))))
    assert update.results[0].status == "skip" and update.patch == ()


def test_validate_policies_judge_the_patched_object(tmp_path):
    check = {"id": "non-root", "description": "d", "type": "validate", "action": "enforce",
             "scope": "container",
             "validations": [{"expression": "container.?securityContext.?runAsNonRoot"
                                            ".orValue(false) || has(container.securityContext"
                                            ".runAsUser)", "message": "set runAsNonRoot"}]}
    decision = evaluate(decode(pod(BARE, SET)), policies(tmp_path, NON_ROOT, check))
    assert decision.outcome == "patched" and decision.allowed


@pytest.mark.parametrize(("changes", "expected"), [
    ({"type": "validate"}, "type: a policy with `mutations` is a mutate policy"),
    ({"validations": [{"expression": "true"}]}, "a policy has `validations` or `mutations`"),
    ({"mutations": [{"patchType": "ApplyConfiguration", "jsonPatch": {"expression": "[]"}}]},
     "mutations.0.patchType: Input should be 'JSONPatch'"),
    ({"mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: }]"}}]},
     "mutations[0].jsonPatch.expression: line 1"),
])
def test_a_bad_mutate_policy_fails_the_load(tmp_path, changes, expected):
    with pytest.raises(PolicyError) as caught:
        policies(tmp_path, {**NON_ROOT, **changes})
    assert expected in str(caught.value)


def test_a_patch_the_api_server_would_refuse_is_an_error(tmp_path):
    rule = mutation("has(container.securityContext) ? [] : [JSONPatch{op: 'add', "
                    "path: '/securityContext', value: {'runAsNonRot': true}}]")
    decision = evaluate(decode(pod(BARE)), policies(tmp_path, rule))
    [result] = decision.results
    assert result.status == "error" and decision.patch == ()
    assert "patch failed" in result.reason and "runAsNonRot" in result.reason


def test_an_ml_workload_kind_is_patched_per_container(tmp_path):
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "train", "namespace": "ml", "labels": {"app": "train"}},
           "spec": {"pytorchReplicaSpecs": {
               "Master": {"replicas": 1, "template": {"spec": {"containers": [SET]}}},
               "Worker": {"replicas": 2, "template": {"spec": {"containers": [BARE]}}}}}}
    decision = evaluate(decode(job), policies(tmp_path, NON_ROOT))
    assert decision.patch == ({
        "op": "add",
        "path": "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/securityContext",
        "value": {"runAsNonRoot": True}},)
