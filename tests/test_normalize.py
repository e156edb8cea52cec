"""webhook.engine.normalize: the object as the API server hands it to a webhook, offline.
tests/cluster/test_offline_model.py proves it equal to a real API server's on 500+ objects;
these tests pin the rules one by one, and what the CLI and the engine make of them."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from builders import judge, judge_given, statuses

from webhook import decode, load_policies
from webhook.cli.main import main
from webhook.engine.normalize import MISSING_FIELD, normalize
from webhook.engine.patch import apply_patch, dotted, rebase
from webhook.engine.quantity import canonical_quantity
from webhook.engine.workload import RefusedObject, read_workload
from webhook.testing import container, node_template, pod, probe, workload


def normalized(obj: dict[str, Any]) -> dict[str, Any]:
    before = copy.deepcopy(obj)
    found, missing = normalize(obj)
    assert obj == before, "normalize() changed the object it was given"
    assert missing == []
    result: dict[str, Any] = found
    return result


@pytest.mark.parametrize(("written", "stored"), [
    ("0.5", "500m"), ("1000m", "1"), ("0.5Gi", "512Mi"), ("1.5Gi", "1536Mi"), ("1Gi", "1Gi"),
    ("1024Mi", "1Gi"), ("0.5Ki", "512"), ("1.5Ki", "1536"), ("120000", "120k"), ("1234", "1234"),
    ("1e3", "1e3"), ("12e2", "1200"), ("0.1m", "100u"), ("0.0001n", "1n"), ("1500m", "1500m"),
    (2, "2"), (0.25, "250m"), (4.0, "4"), ("0", "0"), ("1GB", "1GB"), (True, True),
    # E and Ei are suffixes (exa, exbi), not an exponent; a binary amount is capped at int64's
    ("1Ei", "1Ei"), ("1E", "1E"), ("2E", "2E"), ("1.5E", "1500P"), ("16Ei", "9223372036854775807"),
    # every digit counts, and a nano's round-up past the 28th
    ("99999999999999999999999999999999999999", "99999999999999999999999999999999999999"),
    ("1.0000000000000000000000000001", "1000000001n"),
])
def test_quantities_take_the_form_the_api_server_stores(written: Any, stored: Any) -> None:
    assert canonical_quantity(written) == stored


def test_a_container_gets_the_defaults_the_api_server_sets() -> None:
    obj = pod(container(ports=[{"containerPort": 8080}],
                        livenessProbe={"httpGet": {"port": 8080}}))
    spec = normalized(obj)["spec"]
    item = spec["containers"][0]
    assert item["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]
    assert item["imagePullPolicy"] == "IfNotPresent"
    assert item["terminationMessagePolicy"] == "File"
    assert item["livenessProbe"] == {"httpGet": {"port": 8080, "path": "/", "scheme": "HTTP"},
                                     "timeoutSeconds": 1, "periodSeconds": 10,
                                     "successThreshold": 1, "failureThreshold": 3}
    assert spec["restartPolicy"] == "Always" and spec["dnsPolicy"] == "ClusterFirst"
    assert spec["serviceAccountName"] == "default" and spec["priority"] == 0


@pytest.mark.parametrize(("image", "policy"), [
    ("registry.example.com/app", "Always"), ("registry.example.com/app:latest", "Always"),
    ("registry.example.com/app:1.2", "IfNotPresent"),
    ("registry.example.com:5000/app", "Always"),
    ("registry.example.com/app@sha256:" + "a" * 64, "IfNotPresent"),
])
def test_the_image_pull_policy_follows_the_tag(image: str, policy: str) -> None:
    obj = pod(container(image=image))
    assert normalized(obj)["spec"]["containers"][0]["imagePullPolicy"] == policy


def test_empty_values_and_nulls_are_dropped_where_the_api_server_drops_them() -> None:
    obj = pod(container(securityContext={"privileged": None, "runAsUser": 0,
                                         "allowPrivilegeEscalation": False},
                        workingDir="", env=[]))
    obj["metadata"]["annotations"] = {}
    obj["spec"].update(tolerations=[], nodeSelector={}, hostNetwork=False)
    found = normalized(obj)
    assert "annotations" not in found["metadata"]
    assert "nodeSelector" not in found["spec"] and "hostNetwork" not in found["spec"]
    item = found["spec"]["containers"][0]
    assert "workingDir" not in item and "env" not in item
    context = item["securityContext"]  # pointers in Go: their empty value is a value
    assert context["runAsUser"] == 0 and context["allowPrivilegeEscalation"] is False
    assert "privileged" not in context


def test_a_null_quantity_is_the_zero_the_api_server_stores() -> None:
    obj = pod(container(resources={"requests": {"cpu": None, "memory": "1Gi"},
                                   "limits": {"memory": None}}))
    resources = normalized(obj)["spec"]["containers"][0]["resources"]
    assert resources == {"requests": {"cpu": "0", "memory": "1Gi"}, "limits": {"memory": "0"}}


def test_whole_floats_in_integer_fields_are_integers() -> None:
    obj = workload("Deployment", container(livenessProbe=probe(period=20)))
    obj["spec"]["replicas"] = 3.0
    obj["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["periodSeconds"] = 20.0
    found = normalized(obj)
    assert found["spec"]["replicas"] == 3 and type(found["spec"]["replicas"]) is int
    period = found["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["periodSeconds"]
    assert period == 20 and type(period) is int


def test_controllers_get_their_own_defaults() -> None:
    deployment = normalized(workload("Deployment"))["spec"]
    assert deployment["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {
        "maxUnavailable": "25%", "maxSurge": "25%"}}
    assert deployment["revisionHistoryLimit"] == 10
    recreate = workload("Deployment")
    recreate["spec"]["strategy"] = {"type": "Recreate"}
    assert normalized(recreate)["spec"]["strategy"] == {"type": "Recreate"}
    job = normalized(workload("Job"))["spec"]
    assert (job["completions"], job["parallelism"], job["backoffLimit"]) == (1, 1, 6)
    cron = normalized(workload("CronJob"))["spec"]
    assert "completions" not in cron["jobTemplate"]["spec"]  # a template stays as written
    # the requests of a Pod's container default to its limits; a template's do not
    limits = container(resources={"limits": {"cpu": "1", "memory": "1Gi"}})
    assert normalized(pod(limits))["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "1", "memory": "1Gi"}
    template = normalized(workload("Deployment", limits))["spec"]["template"]["spec"]
    assert "requests" not in template["containers"][0]["resources"]


@pytest.mark.parametrize(("change", "field"), [
    (lambda o: o["spec"].clear(), "spec.containers"),
    (lambda o: o["spec"]["containers"][0].pop("image"), "spec.containers[0].image"),
    (lambda o: o["spec"]["containers"][0].update(image=""), "spec.containers[0].image"),
    (lambda o: o["spec"]["containers"][0].update(ports=[{"name": "http"}]),
     "spec.containers[0].ports[0].containerPort"),
])
def test_what_lacks_a_required_field_is_named(change: Any, field: str) -> None:
    obj = pod()
    change(obj)
    _, missing = normalize(obj)
    assert [(dotted(at), problem) for at, problem in missing] == [(field, MISSING_FIELD)]


def test_a_deployment_without_a_selector_is_refused_not_judged() -> None:
    obj = workload("Deployment", container(image="registry.example.com/app:latest"))
    del obj["spec"]["selector"]
    decision = judge(obj)
    assert decision.outcome == "error"
    assert "spec.selector: required value" in decision.message


def test_a_policy_reading_a_default_sees_it_offline(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A CEL policy that reads a default passes offline as it passes at kubectl apply."""
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "ports.yaml").write_text(
        "id: tcp-only\ndescription: TCP ports only\ntype: validate\naction: enforce\n"
        "validations:\n"
        "  - expression: >-\n"
        "      object.spec.containers.all(c, !has(c.ports) ||"
        " c.ports.all(p, p.protocol == 'TCP'))\n"
        "    message: only TCP ports\n")
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(pod(container(ports=[{"containerPort": 80}]))))
    code = main(["check", str(manifest), "--no-default-policies", "--policies", str(policies),
                 "-o", "json"])
    out, err = capsys.readouterr()
    assert code == 0, (out, err)
    as_written = judge_given(json.loads(manifest.read_text()), load_policies(str(policies)))
    assert statuses(as_written)["tcp-only"] == "error"  # no protocol written
    as_applied = judge(json.loads(manifest.read_text()), load_policies(str(policies)))
    assert statuses(as_applied)["tcp-only"] == "pass"  # decode() then evaluate(), as check


def test_an_object_of_a_kind_not_built_in_is_left_as_written() -> None:
    obj = {"apiVersion": "example.com/v1", "kind": "Thing", "spec": {"x": None}}
    assert normalize(obj) == (obj, [])


@pytest.mark.parametrize("change", [
    lambda o: o["spec"].update(container=[]),  # unknown, with a near miss
    lambda o: o["spec"]["containers"][0].update(securityContext={"runAsUser": "1000"}),
    lambda o: o["spec"].update(tolerations={"key": "x"}),
    lambda o: o["spec"]["containers"].append(None),
    lambda o: o["spec"]["containers"][0].update(env=[{"name": "A", "value": 1}]),
    lambda o: o["spec"]["containers"][0].update(args=["a", 2], ports="80"),
    lambda o: o["metadata"].update(labels={"a": 1}),
    lambda o: o["spec"].update(**{f"x{i}": 1 for i in range(15)}),
])
def test_the_model_refuses_what_the_schema_check_refuses_in_the_same_words(change: Any) -> None:
    """Checked as it is normalized, in one walk: the same problems as webhook.engine.schema."""
    obj = pod()
    change(obj)
    # Was: evaluate(obj, as_applied=False), the schema check of the object as written, gave
    # the same denial. evaluate() now takes an object either decoded or as the API server
    # hands it over (its schema checked already), so the check is asked directly.
    with pytest.raises(RefusedObject) as as_written:
        read_workload(obj, ())
    assert str(RefusedObject(decode(obj).refusals)) == str(as_written.value)
    as_applied = judge(obj)
    assert as_applied.outcome == "error"
    assert as_applied.message.endswith(f"would refuse it: {as_written.value}")


def test_a_patch_for_the_applied_object_is_rebased_on_the_manifest() -> None:
    """What a policy adds to the defaulted object, made to fit the object as written: the
    parents it lacks (or holds as null) are added, a replace of a defaulted field is an add,
    the removal of one is dropped, an index past the end appends."""
    written = {"spec": {"containers": [{"name": "a", "securityContext": None}]}}
    operations = [
        {"op": "add", "path": "/spec/containers/0/securityContext/runAsNonRoot", "value": True},
        {"op": "replace", "path": "/spec/containers/0/imagePullPolicy", "value": "Always"},
        {"op": "remove", "path": "/spec/dnsPolicy"},
        {"op": "add", "path": "/spec/tolerations/2", "value": {"key": "x"}},
    ]
    rebased = rebase(operations, written)
    assert apply_patch(written, rebased) == {"spec": {
        "containers": [{"name": "a", "securityContext": {"runAsNonRoot": True},
                        "imagePullPolicy": "Always"}],
        "tolerations": [{"key": "x"}]}}
    assert written == {"spec": {"containers": [{"name": "a", "securityContext": None}]}}


def test_our_custom_resources_get_their_crd_schemas_defaults() -> None:
    """A PolicyException as the API server serves it: its CRD schema's defaults set (the
    chart's schema is made from the model), its nulls where the schema allows none dropped."""
    obj = {"apiVersion": "quickq.io/v1alpha1", "kind": "PolicyException",
           "metadata": {"name": "x", "namespace": "quickq-guard"},
           "spec": {"policies": [{"id": "disallow-root-user"}],
                    "match": {"namespaces": ["gpu-operator"], "kinds": None},
                    "expires": "2027-01-01T00:00:00Z", "reason": "r", "ticket": None}}
    served, refused = normalize(obj)
    assert refused == []
    assert served["spec"]["match"] == {"namespaces": ["gpu-operator"], "kinds": [], "names": []}
    assert served["spec"]["policies"] == [{"id": "disallow-root-user", "containers": []}]
    assert served["spec"]["ticket"] is None  # nullable: kept
    assert obj["spec"]["match"]["kinds"] is None  # the input is never changed


def test_a_null_the_node_template_crd_refuses_is_refused() -> None:
    obj = node_template(ports=[{"containerPort": 80, "protocol": None}])
    decision = judge(obj)
    assert decision.outcome == "error"
    assert "spec.ports[0].protocol: Unsupported value: null" in decision.message


@pytest.mark.parametrize("kind", ["Job", "Deployment"])
def test_a_metadata_that_is_no_mapping_is_a_problem_not_a_crash(kind: str) -> None:
    obj = workload(kind, container(image="registry.example.com/app:1"))
    obj["metadata"] = True
    obj["spec"]["template"]["metadata"] = "x"
    _, refused = normalize(obj)
    assert (("metadata",), "expected a mapping, got a boolean") in refused


def test_a_priority_class_name_of_the_wrong_type_is_a_problem_not_a_crash() -> None:
    _, refused = normalize(pod(container(image="registry.example.com/app:1"),
                               priorityClassName=[None]))
    assert [path for path, _ in refused] == [("spec", "priorityClassName")]
