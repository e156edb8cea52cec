"""require-labels: pods carry `app` or `app.kubernetes.io/name` (audit), read where the pods
get their labels."""

from __future__ import annotations

import pytest
from builders import (
    CONTROLLERS,
    dotted_prefix,
    judge,
    node_template,
    pod,
    result,
    with_config,
    workload,
)

from webhook.engine.policy import PolicyError

EITHER = "add the label metadata.labels.app or metadata.labels[app.kubernetes.io/name]"


def _template_labels_path(kind):
    return dotted_prefix(kind).removesuffix(".spec") + ".metadata.labels"


def test_missing_app_label_is_recorded_as_an_audit_annotation():
    decision = judge(pod(labels={"team": "ml"}))
    found = result(decision, "require-labels")
    assert (found.status, found.action) == ("fail", "audit")
    assert [(f.path, f.message, f.container) for f in found.findings] == [
        ("metadata.labels.app", EITHER, None)]
    assert decision.allowed
    assert decision.audit_annotations == {"require-labels": EITHER}
    assert decision.warnings == ()


@pytest.mark.parametrize("labels", [{"app": "web"}, {"app.kubernetes.io/name": "web"},
                                    {"app": "web", "app.kubernetes.io/name": "web"}])
def test_either_app_or_the_recommended_name_label_will_do(labels):
    assert result(judge(pod(labels=labels)), "require-labels").status == "pass"


def test_object_without_any_labels_is_audited():
    obj = pod()
    del obj["metadata"]["labels"]
    assert result(judge(obj), "require-labels").status == "fail"


@pytest.mark.parametrize("kind", CONTROLLERS)
def test_controllers_are_judged_by_their_pod_templates_labels(kind):
    bare = workload(kind, labels={})  # the template keeps app: web
    assert result(judge(bare), "require-labels").status == "pass"
    obj = workload(kind, labels={"app": "web", "app.kubernetes.io/name": "web"})
    template = obj["spec"]["jobTemplate"]["spec"]["template"] if kind == "CronJob" \
        else obj["spec"]["template"]
    template["metadata"]["labels"] = {"tier": "backend"}
    found = result(judge(obj), "require-labels")
    where = _template_labels_path(kind)
    assert [(f.path, f.message) for f in found.findings] == [
        (f"{where}.app", f"add the label {where}.app or {where}[app.kubernetes.io/name] "
                         "(the pods' labels)")]


def test_a_template_without_metadata_is_audited_at_the_template():
    obj = workload("Deployment")
    del obj["spec"]["template"]["metadata"]
    assert [f.path for f in result(judge(obj), "require-labels").findings] == [
        "spec.template.metadata.labels.app"]


def test_node_template_labels_are_checked():
    obj = node_template()
    obj["metadata"]["labels"] = {"env": "prod"}
    assert result(judge(obj), "require-labels").status == "fail"
    obj["metadata"]["labels"] = {"app.kubernetes.io/name": "model-server"}
    assert result(judge(obj), "require-labels").status == "pass"


def test_label_keys_are_configurable_and_a_prefixed_key_gets_a_readable_path():
    policies = with_config(policies={"require-labels": {"params": {
        "labels": ["app", "app.kubernetes.io/part-of"]}}})
    found = result(judge(pod(), policies), "require-labels")
    assert [(f.path, f.message) for f in found.findings] == [
        ("metadata.labels[app.kubernetes.io/part-of]",
         "add the label metadata.labels[app.kubernetes.io/part-of]")]


def test_required_labels_and_alternatives_mix():
    policies = with_config(policies={"require-labels": {"params": {
        "labels": [["app", "app.kubernetes.io/name"], "team",
                   ["cost-center", "example.com/cost-center"]]}}})
    found = result(judge(pod(labels={"app.kubernetes.io/name": "web",
                                     "example.com/cost-center": "42"}), policies),
                   "require-labels")
    assert [f.message for f in found.findings] == ["add the label metadata.labels.team"]


@pytest.mark.parametrize(("labels", "problem"), [
    ("app", "expected a list; each item of labels is a label key or a list of alternative "
            "keys, e.g. [[app, app.kubernetes.io/name], team]"),
    ([[]], "item 1 is an empty list; each item of labels"),
    (["app", [["a"]]], "item 2 holds a list of lists; each item of labels"),
    (["app", 3], "item 2 is a number; each item of labels"),
    ([{"app": "x"}], "item 1 is a mapping; each item of labels"),
    ([["app", None]], "item 1 holds null; each item of labels"),
    (["my label"], "item 1: 'my label' is not a Kubernetes label key"),
    (["Example.com/app"], "item 1: 'Example.com/app' is not a Kubernetes label key"),
    (["-app"], "item 1: '-app' is not a Kubernetes label key"),
    (["a" * 64], f"item 1: '{'a' * 64}' is not a Kubernetes label key"),
])
def test_a_malformed_labels_parameter_is_refused_with_the_shape_it_should_have(labels, problem):
    with pytest.raises(PolicyError) as raised:
        with_config(policies={"require-labels": {"params": {"labels": labels}}})
    text = str(raised.value)
    assert text.startswith("config: policies.require-labels.params: labels: ")
    assert problem in text


# --- kinds with several pod templates, and KServe components ---------------------------------


def _pytorchjob(master_labels, worker_labels):
    def replica(labels):
        template = {"spec": {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
                             "containers": [{"name": "pytorch", "image": "train:1.0",
                                             "resources": {"requests": {"cpu": "1",
                                                                        "memory": "1Gi"}}}]}}
        if labels is not None:
            template["metadata"] = {"labels": labels}
        return {"replicas": 1, "restartPolicy": "OnFailure", "template": template}

    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "mnist", "namespace": "ml", "labels": {"app": "mnist"}},
            "spec": {"pytorchReplicaSpecs": {"Master": replica(master_labels),
                                             "Worker": replica(worker_labels)}}}


def test_each_pod_template_of_a_training_job_is_checked():
    decision = judge(_pytorchjob({"app.kubernetes.io/name": "mnist"}, None))
    assert [f.path for f in result(decision, "require-labels").findings] == [
        "spec.pytorchReplicaSpecs.Worker.template.metadata.labels.app"]
    both = judge(_pytorchjob({"app": "mnist"}, {"app": "mnist"}))
    assert result(both, "require-labels").status == "pass"


def _inference_service(labels, predictor_labels):
    predictor = {"model": {"modelFormat": {"name": "sklearn"},
                           "storageUri": "gs://kfserving-examples/models/sklearn/1.0/model",
                           "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                 "securityContext": {"runAsNonRoot": True, "runAsUser": 1000}}
    if predictor_labels is not None:
        predictor["labels"] = predictor_labels
    metadata = {"name": "sklearn-iris", "namespace": "ml"}
    if labels is not None:
        metadata["labels"] = labels
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": metadata, "spec": {"predictor": predictor}}


@pytest.mark.parametrize(("labels", "predictor_labels"), [
    ({"app": "iris"}, None), (None, {"app.kubernetes.io/name": "iris"}),
    ({"team": "ml"}, {"app": "iris"}),
])
def test_a_kserve_component_has_its_own_labels_and_the_objects(labels, predictor_labels):
    # KServe puts the InferenceService's labels and the component's `labels` on its pods.
    obj = _inference_service(labels, predictor_labels)
    assert result(judge(obj), "require-labels").status == "pass"


def test_a_kserve_component_without_either_is_audited_at_its_labels():
    found = result(judge(_inference_service({"team": "ml"}, {})), "require-labels")
    assert [(f.path, f.message) for f in found.findings] == [
        ("spec.predictor.labels.app", "add the label spec.predictor.labels.app or "
         "spec.predictor.labels[app.kubernetes.io/name] (the pods' labels)")]
