"""NodeTemplates: the QuickQ manual's minimal example, the shipped JSON Schema and lint."""

from __future__ import annotations

import json
from pathlib import Path

import jsonpatch
import jsonschema
import pytest
from builders import judge, node_template, result, statuses

from webhook.engine import nodetemplate
from webhook.manifests import read_file

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_FILE = ROOT / "webhook/schemas/nodetemplate.schema.json"


def load(name: str):
    [document] = read_file(ROOT / "examples" / name)
    assert document.error == ""
    return document.obj


def test_the_manuals_minimal_node_template_is_denied_warned_audited_and_patched():
    """The manual's example has no securityContext, so it may run as root (denied); its
    liveness probe gives up after 3 x 10 s = 30 s (warned); it has no `app` label (audited);
    and it gets a startup probe and the nvidia.com/gpu toleration (patched)."""
    obj = load("bad/nodetemplate-manual-minimal.yaml")
    decision = judge(obj)

    assert not decision.allowed
    assert statuses(decision) == {
        "disallow-latest-tag": "pass", "disallow-root-user": "fail",
        "gpu-priority-class": "skip", "inject-gpu-toleration": "patch",
        "gpu-claim-usage": "skip", "gpu-resource-claims": "skip", "require-kueue-queue": "skip",
        "inject-startup-probe": "patch", "liveness-probe-tolerance": "fail",
        "no-plaintext-secrets": "pass", "require-gpu-limits": "pass", "require-labels": "fail",
        "require-requests": "pass", "valid-resource-quantities": "pass",
    }
    assert decision.message == (
        "NodeTemplate gpu-inference-manual is denied by quickq-guard:\n"
        "- [disallow-root-user] spec: may run as root; set securityContext.runAsNonRoot: true "
        "or a non-zero securityContext.runAsUser (field: spec.securityContext.runAsNonRoot)")
    assert decision.warnings == (
        "[liveness-probe-tolerance] spec: health.liveness restarts after 30s of failures "
        "(failureThreshold 3 x periodSeconds 10); raise health.liveness.failureThreshold to 6 "
        "or more (>= 60s)",)
    assert decision.audit_annotations == {"require-labels": (
        "add the label metadata.labels.app or metadata.labels[app.kubernetes.io/name]")}
    assert list(decision.patch) == [
        {"op": "add", "path": "/spec/tolerations",
         "value": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
        {"op": "add", "path": "/spec/health/startup",
         "value": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10,
                   "failureThreshold": 60}},
    ]
    # DB_PASSWORD comes from a Secret and MODEL_PATH is no secret: nothing to say.
    assert result(decision, "no-plaintext-secrets").status == "pass"


def test_the_fixed_manual_example_is_admitted_with_the_same_patches():
    decision = judge(load("good/nodetemplate.yaml"))
    assert decision.allowed and decision.warnings == () and decision.audit_annotations == {}
    assert [op["path"] for op in decision.patch] == ["/spec/tolerations", "/spec/health/startup"]


@pytest.mark.parametrize(("name", "denied_by"), [
    ("bad/pod.yaml", {"disallow-latest-tag", "disallow-root-user", "no-plaintext-secrets",
                      "require-requests"}),
    ("bad/deployment-latest.yaml", {"disallow-latest-tag"}),
    ("offline/gpu-fraction-job.yaml", {"require-gpu-limits", "valid-resource-quantities"}),
    ("good/pod.yaml", set()),
    ("good/deployment.yaml", set()),
    ("good/gpu-inference-pod.yaml", set()),
])
def test_the_examples_get_the_verdict_their_comments_promise(name, denied_by):
    decision = judge(load(name))
    enforced = {r.policy for r in decision.results
                if r.status == "fail" and r.action == "enforce"}
    assert enforced == denied_by
    assert decision.allowed == (not denied_by)


# --- the JSON Schema ------------------------------------------------------------------------


def test_the_shipped_schema_is_the_one_the_model_generates():
    assert SCHEMA_FILE.read_text() == nodetemplate.schema_text(), (
        "regenerate it: quickq-guard validate-nodetemplates --schema "
        "> webhook/schemas/nodetemplate.schema.json")


def schema_validator():
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_schema_accepts_the_node_template_examples():
    validator = schema_validator()
    for name in ("good/nodetemplate.yaml", "bad/nodetemplate-manual-minimal.yaml"):
        assert list(validator.iter_errors(load(name))) == [], name


def test_the_patched_node_template_still_matches_the_schema():
    obj = load("bad/nodetemplate-manual-minimal.yaml")
    patched = jsonpatch.apply_patch(obj, list(judge(obj).patch))
    assert list(schema_validator().iter_errors(patched)) == []
    assert nodetemplate.lint(patched) == []


@pytest.mark.parametrize(("change", "where"), [
    ({"image": ""}, ["spec", "image"]),
    ({"resources": {"requests": {"memory": "4GB"}}},
     ["spec", "resources", "requests", "memory"]),
    ({"resources": {"limits": {"cpu": -1}}}, ["spec", "resources", "limits", "cpu"]),
    ({"imagePullPolicy": "Always"}, ["spec"]),
    ({"health": {"liveness": {"httpGet": {"port": 80}, "periodSeconds": 0}}},
     ["spec", "health", "liveness", "periodSeconds"]),
    ({"securityContext": {"runAsUser": -5}}, ["spec", "securityContext", "runAsUser"]),
    ({"tolerations": [{"operator": "Sometimes"}]}, ["spec", "tolerations", 0, "operator"]),
])
def test_the_schema_rejects_bad_node_templates_at_the_field(change, where):
    bad = node_template(**change)
    errors = list(schema_validator().iter_errors(bad))
    assert errors
    assert where in [list(error.absolute_path) for error in _with_context(errors)]
    assert nodetemplate.lint(bad)


def _with_context(errors):
    """Errors and, for anyOf (an optional field), the errors of each alternative."""
    for error in errors:
        yield error
        yield from _with_context(error.context or ())


def test_the_schema_rejects_a_wrong_api_version_and_a_missing_spec():
    validator = schema_validator()
    assert list(validator.iter_errors(node_template(api_version="quickq.io/v2")))
    no_spec = node_template()
    del no_spec["spec"]
    assert list(validator.iter_errors(no_spec))


# --- lint -----------------------------------------------------------------------------------


def test_lint_names_each_problem_by_its_field_path():
    bad = node_template(resources={"requests": {"memory": "4GB", "cpu": "500mi"}},
                        health={"liveness": {"httpGet": {"port": 80}, "periodSecond": 10}})
    bad["metadata"]["name"] = "GPU_01"
    assert nodetemplate.lint(bad) == [
        "metadata.name: String should match pattern '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$'",
        "spec.resources.requests.memory: '4GB' is not a valid quantity; use e.g. 500m, 2, "
        "256Mi or 1Gi",
        "spec.resources.requests.cpu: '500mi' is not a valid quantity; use e.g. 500m, 2, "
        "256Mi or 1Gi",
        "spec.health.liveness.periodSecond: unknown field",
    ]


def test_lint_passes_a_good_node_template():
    assert nodetemplate.lint(node_template()) == []
    assert nodetemplate.lint(load("good/nodetemplate.yaml")) == []
