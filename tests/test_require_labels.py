"""require-labels: objects carry the `app` label (audit)."""

from __future__ import annotations

from builders import judge, node_template, pod, result, with_config, workload


def test_missing_app_label_is_recorded_as_an_audit_annotation():
    decision = judge(pod(labels={"team": "ml"}))
    found = result(decision, "require-labels")
    assert (found.status, found.action) == ("fail", "audit")
    assert [(f.path, f.message, f.container) for f in found.findings] == [
        ("metadata.labels.app", "add the label metadata.labels.app", None)]
    assert decision.allowed
    assert decision.audit_annotations == {"require-labels": "add the label metadata.labels.app"}
    assert decision.warnings == ()


def test_object_without_any_labels_is_audited():
    obj = pod()
    del obj["metadata"]["labels"]
    assert result(judge(obj), "require-labels").status == "fail"


def test_controller_labels_are_its_own_not_the_templates():
    obj = workload("Deployment", labels={})
    assert result(judge(obj), "require-labels").status == "fail"


def test_node_template_labels_are_checked():
    obj = node_template()
    obj["metadata"]["labels"] = {"env": "prod"}
    assert result(judge(obj), "require-labels").status == "fail"


def test_label_keys_are_configurable_and_a_prefixed_key_gets_a_readable_path():
    policies = with_config(policies={"require-labels": {"params": {
        "labels": ["app", "app.kubernetes.io/part-of"]}}})
    found = result(judge(pod(), policies), "require-labels")
    assert [f.path for f in found.findings] == ["metadata.labels[app.kubernetes.io/part-of]"]
