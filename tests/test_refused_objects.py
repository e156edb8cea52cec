"""Objects the Kubernetes API server would refuse (unknown fields, wrong types, apiVersions no
longer served) are errors that name the field offline; the webhook, whose objects the API server
has decoded already, does not check them again. Kinds quickq-guard does not judge are skipped
with their name."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from builders import (
    CONTROLLERS,
    POD_SPEC_PATHS,
    container,
    gpu_container,
    judge,
    judge_given,
    pod,
    workload,
)

from webhook.cli import main

ROOT = Path(__file__).resolve().parent.parent
VERSION = kubernetes_validate.latest_version()


def problems(decision: Any) -> list[tuple[str, str]]:
    """(path, message) of each finding of the one error result."""
    assert decision.outcome == "error", decision.results
    [found] = decision.results
    assert found.status == "error" and found.policy is None
    return [(f.path, f.message) for f in found.findings]


def test_a_typo_in_containers_is_an_unknown_field_with_a_suggestion():
    obj = workload("Deployment", container())
    spec = obj["spec"]["template"]["spec"]
    spec["container"] = spec.pop("containers")
    decision = judge(obj)
    assert not decision.allowed
    assert problems(decision) == [(
        "spec.template.spec.container",
        "spec.template.spec.container: unknown field 'container'; did you mean containers?")]
    assert decision.message.startswith(
        "Deployment default/web: the Kubernetes API server would refuse it: "
        "spec.template.spec.container: unknown field")


def test_a_quoted_uid_is_a_type_error_not_a_root_user():
    obj = pod(container(securityContext={"runAsUser": "1000"}))
    decision = judge(obj)
    [(path, message)] = problems(decision)
    assert path == "spec.containers[0].securityContext.runAsUser"
    assert "expected an integer, got a string (write the number without quotes)" in message
    assert "root" not in decision.message


@pytest.mark.parametrize(("field", "value", "expected"), [
    (("securityContext", "runAsNonRoot"), "true", "expected a boolean"),
    (("ports",), {"containerPort": 80}, "expected a list, got a mapping"),
    (("ports",), [{"containerPort": "80"}], "expected an integer"),
    (("args",), ["--port", 8080], "expected a string, got a number (quote the value)"),
    (("livenessProbe", "periodSecond"), 5, "unknown field 'periodSecond'; did you mean "
                                           "periodSeconds?"),
    (("resources", "limit"), {"cpu": "1"}, "unknown field 'limit'; did you mean limits?"),
    (("env",), [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "keys": "k"}}}],
     "unknown field 'keys'"),
    (("livenessProbe", "httpGet", "port"), True, "expected an integer or a string"),
])
def test_container_fields_are_checked_at_every_level(field, value, expected):
    spec = container()
    node = spec
    for name in field[:-1]:
        node = node.setdefault(name, {})
    node[field[-1]] = value
    for kind in ("Pod", "CronJob"):
        decision = judge(workload(kind, spec))
        [(path, message)] = problems(decision)
        assert expected in message
        assert path.startswith(".".join(POD_SPEC_PATHS[kind][1]) + ".containers[0].")


def test_the_controllers_own_spec_fields_are_checked():
    obj = workload("StatefulSet", container())
    obj["spec"]["replica"] = 2
    obj["spec"]["serviceName"] = 5
    found = dict(problems(judge(obj)))
    assert found["spec.replica"].endswith("unknown field 'replica'; did you mean replicas?")
    assert "expected a string, got a number" in found["spec.serviceName"]


def test_a_value_is_never_echoed_in_a_type_error():
    obj = pod(container(env=[{"name": "API_TOKEN", "value": 73519462}]))
    decision = judge(obj)
    assert problems(decision) == [("spec.containers[0].env[0].value",
                                   "spec.containers[0].env[0].value: expected a string, got a "
                                   "number (quote the value)")]
    assert "73519462" not in json.dumps([decision.message, decision.results], default=str)


def test_well_typed_objects_are_judged_as_before():
    obj = workload("Job", gpu_container(securityContext={"runAsUser": 1000.0}))
    decision = judge(obj)
    assert decision.outcome != "error"
    assert {r.policy for r in decision.results} >= {"require-requests", "disallow-root-user"}


def test_the_webhook_does_not_check_again_what_the_api_server_decoded():
    obj = workload("Deployment", container(image="app:latest"))
    online = judge_given(obj)
    assert not online.allowed and online.message == judge(obj).message
    # Only an object that never came from an API server can hold an unknown field: offline it
    # is an error; a review that holds one anyway is judged on the fields the rules read.
    spec = obj["spec"]["template"]["spec"]
    spec["containers"][0]["imagePullPolicyy"] = "Always"
    assert judge(obj).outcome == "error"
    online = judge_given(obj)
    assert online.outcome == "denied" and "disallow-latest-tag" in online.message
    # A wrong type the rules read is still named, never a crash.
    spec["containers"] = "oops"
    broken = judge_given(obj)
    assert broken.outcome == "error"
    assert "cannot be judged: spec.template.spec.containers: expected a list" in broken.message


@pytest.mark.parametrize(("api_version", "kind", "use"), [
    ("extensions/v1beta1", "DaemonSet", "apps/v1"),
    ("extensions/v1beta1", "Deployment", "apps/v1"),
    ("extensions/v1beta1", "ReplicaSet", "apps/v1"),
    ("apps/v1beta1", "Deployment", "apps/v1"),
    ("apps/v1beta1", "StatefulSet", "apps/v1"),
    ("apps/v1beta2", "DaemonSet", "apps/v1"),
    ("apps/v1beta2", "Deployment", "apps/v1"),
    ("batch/v1beta1", "CronJob", "batch/v1"),
    ("extensions/v1beta1", "Ingress", "networking.k8s.io/v1"),
    ("policy/v1beta1", "PodDisruptionBudget", "policy/v1"),
])
def test_removed_api_versions_are_errors_that_name_the_one_to_use(api_version, kind, use):
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "old"}, "spec": {}}
    [(path, message)] = problems(judge(obj))
    assert path == "apiVersion"
    assert message.startswith(f"apiVersion {api_version} of {kind} is no longer served")
    assert message.endswith(f"use apiVersion {use}")


def test_an_api_version_that_never_served_a_judged_kind_is_an_error():
    obj = workload("Deployment", container())
    obj["apiVersion"] = "apps/v2"
    assert problems(judge(obj)) == [
        ("apiVersion", "apiVersion apps/v2 does not serve Deployment; use apiVersion apps/v1")]


@pytest.mark.parametrize(("kind", "reason"), [
    ("Deploymnet", "kind Deploymnet (apps) is not judged: quickq-guard knows no kind "
                   "Deploymnet; did you mean Deployment?"),
    ("statefulset", "kind statefulset (apps) is not judged: quickq-guard knows no kind "
                    "statefulset; did you mean StatefulSet?"),
    ("Service", "kind Service (apps) is not judged"),
])
def test_a_kind_not_judged_is_skipped_with_its_name(kind, reason):
    obj = workload("Deployment", container())
    obj["kind"] = kind
    decision = judge(obj)
    assert decision.outcome == "allowed"
    assert {(r.status, r.reason) for r in decision.results} == {("skip", reason)}


def test_the_check_command_reports_refusals_as_errors(tmp_path, capsys):
    manifest = tmp_path / "broken.yaml"
    manifest.write_text("""\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      securityContext: {runAsNonRoot: true}
      container:
        - name: web
          image: registry.example.com/web:1.2.3
---
apiVersion: extensions/v1beta1
kind: DaemonSet
metadata: {name: agent}
spec: {}
---
apiVersion: apps/v1
kind: Deploymnet
metadata: {name: typo}
""")
    assert main(["check", str(manifest)]) == 2
    out, err = capsys.readouterr()
    assert (f"quickq-guard: error: {manifest}:1:1 Deployment web: spec.template.spec.container: "
            "unknown field 'container'; did you mean containers?") in err
    assert (f"{manifest}:14:1 DaemonSet agent: apiVersion: apiVersion extensions/v1beta1 of "
            "DaemonSet is no longer served") in err
    # a typo of a judged kind is an error, not a skip that would pass CI unjudged
    assert (f"{manifest}:19:1 Deploymnet typo: kind Deploymnet (apps) is not judged: "
            "quickq-guard knows no kind Deploymnet; did you mean Deployment?; fix the kind") in err
    assert "SKIP" not in out
    assert main(["check", "-o", "json", str(manifest)]) == 2
    report = json.loads(capsys.readouterr().out)
    errors = [row for row in report["results"] if row["result"] == "error"]
    assert [row["path"] for row in errors] == ["spec.template.spec.container", "apiVersion",
                                               ""]
    assert report["summary"]["error"] == 3


# --- the Kubernetes OpenAPI schemas are the judge -----------------------------------------------

def schema_says_valid(obj: Any) -> bool:
    try:
        kubernetes_validate.validate(obj, VERSION, strict=True)
    except kubernetes_validate.ValidationError:
        return False
    return True


def spoil(obj: Any, rng: random.Random) -> tuple[Any, str]:
    """A copy with one unknown field added to a random mapping, or one scalar's type changed
    (str <-> int, bool -> str); and what was done."""
    spoiled = copy.deepcopy(obj)
    mappings: list[dict[str, Any]] = []
    scalars: list[tuple[dict[str, Any], str]] = []

    def walk(node: Any, under_free_map: bool) -> None:
        if isinstance(node, dict):
            if not under_free_map:
                mappings.append(node)
            for key, value in node.items():
                free = key in ("labels", "annotations", "requests", "limits", "matchLabels")
                if isinstance(value, str | int) and not under_free_map:
                    scalars.append((node, key))
                walk(value, free)
        elif isinstance(node, list):
            for item in node:
                walk(item, False)

    walk(spoiled, False)
    if rng.random() < 0.5:
        target = rng.choice(mappings)
        target["qqUnknownField"] = "x"
        return spoiled, "unknown field"
    node, key = rng.choice(scalars)
    value = node[key]
    node[key] = (str(value).lower() if isinstance(value, bool) else
                 str(value) if isinstance(value, int) else 7)
    return spoiled, f"{key} changed type"


SAMPLES = [workload(kind, gpu_container(livenessProbe={"httpGet": {"path": "/", "port": 80},
                                                       "periodSeconds": 10},
                                        ports=[{"containerPort": 80, "protocol": "TCP"}],
                                        env=[{"name": "A", "value": "1"}]),
                    container("side", securityContext={"runAsUser": 1000,
                                                       "allowPrivilegeEscalation": False}),
                    tolerations=[{"key": "k", "operator": "Exists", "tolerationSeconds": 5}],
                    priorityClassName="gpu", terminationGracePeriodSeconds=30)
           for kind in ("Pod", *CONTROLLERS)]


@pytest.mark.parametrize("seed", range(60))
def test_the_verdict_on_a_spoiled_object_agrees_with_the_kubernetes_schema(seed):
    rng = random.Random(seed)
    original = SAMPLES[seed % len(SAMPLES)]
    assert schema_says_valid(original)
    assert judge(original).outcome != "error"
    spoiled, what = spoil(original, rng)
    refused = "would refuse it" in judge(spoiled).message
    if what.startswith("apiVersion") or what.startswith("kind"):
        return  # not a decoding question
    assert refused == (not schema_says_valid(spoiled)), what


def test_the_generated_fields_are_current():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "generate_kubernetes_fields", ROOT / "scripts" / "generate_kubernetes_fields.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    committed = (ROOT / "webhook" / "engine" / "kubernetes_fields.py").read_text()
    assert committed == module.module_text(), \
        "run .venv/bin/python scripts/generate_kubernetes_fields.py"
