"""Patched Pods and controllers are still valid Kubernetes objects (the real OpenAPI schema,
strict: unknown fields are errors), so the API server accepts what the webhook returns."""

from __future__ import annotations

from pathlib import Path

import jsonpatch
import kubernetes_validate
import pytest
from builders import CONTROLLERS, container, default_policies, gpu_container, judge, workload
from hypothesis import given, settings
from test_properties import objects

from webhook import decode, evaluate
from webhook.engine.normalize import normalize
from webhook.manifests import read_file

ROOT = Path(__file__).resolve().parent.parent
VERSION = kubernetes_validate.latest_version()
LIVENESS = {"httpGet": {"path": "/healthz", "port": 8080}, "timeoutSeconds": 2,
            "failureThreshold": 6}


def validate(obj) -> None:
    kubernetes_validate.validate(obj, VERSION, strict=True)


def patched(obj):
    decision = judge(obj)
    assert decision.patch, "expected a patch"
    # The patch is for the object as the API server hands it to the webhook.
    return jsonpatch.apply_patch(normalize(obj)[0], list(decision.patch))


@pytest.mark.parametrize("kind", ["Pod", *CONTROLLERS])
def test_patched_workloads_validate_against_the_kubernetes_schema(kind):
    obj = workload(kind, gpu_container(livenessProbe=LIVENESS), container("sidecar"),
                   tolerations=[{"key": "zone", "operator": "Exists"}],
                   priorityClassName="gpu")
    validate(obj)
    validate(patched(obj))


@pytest.mark.parametrize("name", ["good/gpu-inference-pod.yaml", "bad/deployment-latest.yaml",
                                  "offline/gpu-fraction-job.yaml"])
def test_patched_examples_validate_against_the_kubernetes_schema(name):
    [document] = read_file(ROOT / "examples" / name)
    validate(patched(document.obj))


def test_the_schema_check_itself_catches_a_bad_patch():
    obj = workload("Deployment", container())
    bad = jsonpatch.apply_patch(obj, [{"op": "add", "path": "/spec/template/spec/tolerations",
                                       "value": [{"key": "k", "operator": "Exist", "x": 1}]}])
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(bad)


@settings(max_examples=100, deadline=None)
@given(objects())
def test_a_patch_never_makes_a_valid_object_invalid(obj):
    if obj["kind"] == "NodeTemplate":
        return
    try:
        validate(obj)
    except kubernetes_validate.ValidationError:
        return  # generated junk the API server would reject anyway
    decision = evaluate(decode(obj), default_policies())
    if decision.patch:
        validate(jsonpatch.apply_patch(normalize(obj)[0], list(decision.patch)))
