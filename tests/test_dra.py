"""Dynamic Resource Allocation: a pod that gets its GPUs through a ResourceClaim(Template) is a
GPU pod; the claims themselves are judged; a claim that cannot be resolved is said, never a
crash and never a silent pass."""

from __future__ import annotations

import copy
import json

import pytest
from builders import (
    container,
    gpu_container,
    judge,
    judge_given,
    messages,
    pod,
    result,
    with_config,
    workload,
)
from builders import run_cli as run

from webhook import Review
from webhook.engine.claims import Claims, claims_from, device_classes


def claim_template(name="one-gpu", device_class="gpu.nvidia.com", namespace=None, **exactly):
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": metadata, "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": device_class, **exactly}}]}}}}


def claim(name="node-gpus", device_class="gpu.nvidia.com", **exactly):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": device_class, **exactly}}]}}}


def claiming(obj_kind="Pod", source=("resourceClaimTemplateName", "one-gpu"), **pod_fields):
    """A Pod (or controller) whose container consumes claim 'gpu'."""
    consumer = container("llm")
    consumer["resources"]["claims"] = [{"name": "gpu"}]
    obj = pod(consumer, **pod_fields) if obj_kind == "Pod" else workload(obj_kind, consumer,
                                                                         **pod_fields)
    spec = obj["spec"] if obj_kind == "Pod" else obj["spec"]["template"]["spec"]
    spec["resourceClaims"] = [{"name": "gpu", source[0]: source[1]}]
    obj["metadata"]["namespace"] = "ml"
    return obj


def lookup(*objects):
    return claims_from(objects)


def _tolerations(decision):
    return [op for op in decision.patch if "/tolerations" in op["path"]]


# --- a GPU pod by its claim -------------------------------------------------------------------


@pytest.mark.parametrize("device_class", ["gpu.nvidia.com", "mig.nvidia.com",
                                          "vfio.gpu.nvidia.com",
                                          "compute-domain-default-channel.nvidia.com"])
def test_a_pod_consuming_a_gpu_claim_gets_the_gpu_policies(device_class):
    decision = judge(claiming(),
                     review=Review(claims=lookup(claim_template(device_class=device_class))))
    assert result(decision, "gpu-priority-class").status == "fail"
    # A Pod reaches the webhook with DefaultTolerationSeconds' two tolerations: appended to.
    assert _tolerations(decision) == [{"op": "add", "path": "/spec/tolerations/-", "value":
                                       {"key": "nvidia.com/gpu", "operator": "Exists",
                                        "effect": "NoSchedule"}}]
    assert result(decision, "gpu-claim-usage").status == "pass"


def test_a_claim_of_another_device_class_is_no_gpu():
    decision = judge(claiming(),
                     review=Review(claims=lookup(claim_template(device_class="nic.example.com"))))
    assert result(decision, "gpu-priority-class").status == "pass"
    assert decision.patch == ()


def test_gpu_device_classes_are_the_accelerators_setting():
    policies = with_config(accelerators={"gpuDeviceClasses": ["gpu.example.com"],
                                         "deviceClassTaintKeys": {"gpu.example.com": "ex/gpu"}})
    decision = judge(claiming(),
                     policies,
                     Review(claims=lookup(claim_template(
        device_class="gpu.example.com"))))
    assert result(decision, "gpu-priority-class").status == "fail"
    assert _tolerations(decision)[0]["value"] == {
        "key": "ex/gpu", "operator": "Exists", "effect": "NoSchedule"}
    nvidia = judge(claiming(), policies, Review(claims=lookup(claim_template())))
    assert result(nvidia, "gpu-priority-class").status == "pass"


def test_a_first_available_alternative_of_a_gpu_class_counts():
    template = claim_template()
    template["spec"]["spec"]["devices"]["requests"] = [{"name": "gpu", "firstAvailable": [
        {"name": "big", "deviceClassName": "gpu.nvidia.com"},
        {"name": "slice", "deviceClassName": "mig.nvidia.com"}]}]
    assert device_classes(template) == ("gpu.nvidia.com", "mig.nvidia.com")
    decision = judge(claiming(), review=Review(claims=lookup(template)))
    assert result(decision, "gpu-priority-class").status == "fail"


def test_a_controller_template_is_a_gpu_pod_by_its_claim_and_the_patch_is_idempotent():
    import jsonpatch

    obj = claiming("Deployment")
    claims = lookup(claim_template())
    decision = judge(obj, review=Review(claims=claims))
    assert [op["path"] for op in _tolerations(decision)] == ["/spec/template/spec/tolerations"]
    patched = jsonpatch.apply_patch(obj, list(decision.patch))
    assert judge(patched, review=Review(claims=claims)).patch == ()


def test_a_claim_in_another_namespace_does_not_resolve():
    decision = judge(claiming(), review=Review(claims=lookup(claim_template(namespace="other"))))
    assert result(decision, "gpu-priority-class").status == "pass"
    assert "not in the input" in messages(decision, "gpu-claim-usage")[0]


# --- claims that cannot be resolved -----------------------------------------------------------


def test_an_unresolvable_template_is_a_finding_that_says_so():
    decision = judge(claiming(), review=Review(claims=lookup()))
    assert result(decision, "gpu-claim-usage").status == "fail"
    assert messages(decision, "gpu-claim-usage") == [
        "container 'llm': claim 'gpu': ResourceClaimTemplate 'one-gpu' is not in the input, so "
        "whether it hands out GPUs is unknown; judge the ResourceClaimTemplate with the pod"]
    assert decision.allowed and any("gpu-claim-usage" in w for w in decision.warnings)


def test_without_a_lookup_a_claim_is_unresolved_not_a_crash():
    decision = judge(claiming())
    assert "is not in the objects judged" in messages(decision, "gpu-claim-usage")[0]
    assert not any(r.status == "error" for r in decision.results)


def test_an_online_lookup_names_the_cluster():
    decision = judge(claiming(), review=Review(claims=Claims({}, "the cluster")))
    assert "is not in the cluster" in messages(decision, "gpu-claim-usage")[0]


def test_a_container_consuming_a_claim_the_pod_does_not_list_is_said():
    obj = claiming()
    obj["spec"]["resourceClaims"][0]["name"] = "elsewhere"
    decision = judge(obj, review=Review(claims=lookup(claim_template())))
    assert messages(decision, "gpu-claim-usage") == [
        "container 'llm': consumes claim 'gpu', which spec.resourceClaims does not list; add "
        "it there"]


@pytest.mark.parametrize("broken", [
    [None], ["gpu"], [{"name": 3}], [{"name": "gpu"}], [{"name": "gpu", "resourceClaimName": 1}],
])
def test_malformed_resource_claims_never_crash(broken):
    obj = claiming()
    obj["spec"]["resourceClaims"] = broken
    decision = judge_given(obj, review=Review(claims=lookup(claim_template())))
    assert not any(r.status == "error" for r in decision.results), decision.results


# --- pod-side warnings ------------------------------------------------------------------------


def test_a_controller_naming_one_resource_claim_is_warned_once():
    obj = claiming("Deployment", source=("resourceClaimName", "node-gpus"))
    decision = judge(obj, review=Review(claims=lookup(claim())))
    assert messages(decision, "gpu-claim-usage") == [
        "spec.template.spec.resourceClaims[0].resourceClaimName: every replica shares "
        "ResourceClaim 'node-gpus' and its devices; name a ResourceClaimTemplate with "
        "resourceClaimTemplateName so each pod gets its own"]
    assert result(decision, "gpu-claim-usage").action == "warn" and decision.allowed


def test_a_pod_naming_a_resource_claim_is_fine():
    decision = judge(claiming(source=("resourceClaimName", "node-gpus")),
                     review=Review(claims=lookup(claim())))
    assert result(decision, "gpu-claim-usage").status == "pass"
    assert result(decision, "gpu-priority-class").status == "fail"  # still a GPU pod


def test_mixing_a_gpu_resource_and_a_gpu_claim_in_one_container_is_warned():
    mixed = gpu_container("llm")
    mixed["resources"]["claims"] = [{"name": "gpu"}]
    obj = pod(mixed, priorityClassName="gpu")
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    decision = judge(obj, review=Review(claims=lookup(claim_template())))
    assert messages(decision, "gpu-claim-usage") == [
        "container 'llm': asks for GPUs twice: nvidia.com/gpu in resources and a DRA claim of "
        "gpu.nvidia.com; the device plugin and the DRA driver each hand out devices, so keep "
        "one of them"]


# --- the claim objects ------------------------------------------------------------------------


def test_a_plain_gpu_claim_template_passes_and_other_policies_skip_it():
    decision = judge(claim_template(allocationMode="ExactCount", count=2))
    assert decision.outcome == "allowed"
    assert result(decision, "gpu-resource-claims").status == "pass"
    assert result(decision, "require-requests").reason == \
        "not applicable to ResourceClaimTemplate"


@pytest.mark.parametrize(("exactly", "field", "message"), [
    ({"allocationMode": "All"}, "allocationMode",
     "All claims every gpu.nvidia.com device of a node; set allocationMode: ExactCount with "
     "a count"),
    ({"adminAccess": True}, "adminAccess",
     "admin access reaches gpu.nvidia.com devices other pods are using; remove it"),
])
def test_a_claim_template_asking_for_every_gpu_or_admin_access_is_denied(exactly, field,
                                                                        message):
    decision = judge(claim_template(**exactly))
    path = f"spec.spec.devices.requests[0].exactly.{field}"
    assert messages(decision, "gpu-resource-claims") == [f"{path}: {message}"]
    assert not decision.allowed and f"(field: {path})" in decision.message


def test_a_resource_claim_is_judged_at_its_own_paths():
    decision = judge(claim(adminAccess=True))
    assert [f.path for f in result(decision, "gpu-resource-claims").findings] == [
        "spec.devices.requests[0].exactly.adminAccess"]


def test_every_gpu_and_admin_access_on_another_class_are_left_alone():
    decision = judge(claim_template(device_class="nic.example.com", allocationMode="All"))
    assert result(decision, "gpu-resource-claims").status == "pass"


def test_the_count_cap_and_allowed_classes_are_parameters_off_by_default():
    assert result(judge(claim_template(count=64)), "gpu-resource-claims").status == "pass"
    policies = with_config(policies={"gpu-resource-claims": {"params": {
        "maxCount": 8, "allowedDeviceClasses": {"team-*": ["mig.nvidia.com"]}}}})
    decision = judge(claim_template(namespace="team-a", count=16), policies)
    assert messages(decision, "gpu-resource-claims") == [
        "spec.spec.devices.requests[0].exactly.deviceClassName: device class gpu.nvidia.com "
        "may not be claimed in namespace team-a; use one of mig.nvidia.com",
        "spec.spec.devices.requests[0].exactly.count: 16 gpu.nvidia.com devices is above the "
        "cap of 8; ask for 8 or fewer"]
    elsewhere = judge(claim_template(namespace="research"), policies)
    assert result(elsewhere, "gpu-resource-claims").status == "pass"


def test_the_v1beta1_shape_names_the_class_on_the_request():
    template = claim_template()
    template["apiVersion"] = "resource.k8s.io/v1beta1"
    template["spec"]["spec"]["devices"]["requests"] = [
        {"name": "gpu", "deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}]
    decision = judge(template)
    assert [f.path for f in result(decision, "gpu-resource-claims").findings] == [
        "spec.spec.devices.requests[0].allocationMode"]
    decision = judge(claiming(), review=Review(claims=lookup(template)))
    assert result(decision, "gpu-priority-class").status == "fail"


@pytest.mark.parametrize("spec", [None, "x", {"spec": None}, {"spec": {"devices": []}},
                                  {"spec": {"devices": {"requests": "x"}}},
                                  {"spec": {"devices": {"requests": [None, {"exactly": 3}]}}}])
def test_malformed_claim_templates_never_crash(spec):
    template = claim_template()
    template["spec"] = copy.deepcopy(spec)
    decision = judge_given(template)
    assert not any(r.status == "error" for r in decision.results), decision.results
    assert claims_from([template]).device_classes("ResourceClaimTemplate", "", "one-gpu") == ()


# --- offline: the claims of the same input ----------------------------------------------------


def test_check_resolves_claims_from_another_file_of_the_input(capsys, tmp_path):
    import yaml

    (tmp_path / "a-deployment.yaml").write_text(yaml.safe_dump(claiming("Deployment")))
    (tmp_path / "z-template.yaml").write_text(yaml.safe_dump(claim_template()))
    _, out, _ = run(capsys, "check", "-o", "json", str(tmp_path))
    report = json.loads(out)
    by_policy = {(r["resource"]["kind"], r["policy"]): r["result"] for r in report["results"]}
    assert by_policy[("Deployment", "gpu-priority-class")] == "fail"
    assert by_policy[("Deployment", "inject-gpu-toleration")] == "patch"
    assert by_policy[("Deployment", "gpu-claim-usage")] == "pass"
    _, out, _ = run(capsys, "check", str(tmp_path / "a-deployment.yaml"))
    assert "is not in the input" in out


def test_check_resolves_claims_on_stdin_and_across_parallel_workers(capsys, tmp_path,
                                                                     monkeypatch):
    import yaml

    text = yaml.safe_dump(claiming("Deployment")) + "---\n" + yaml.safe_dump(claim_template())
    _, out, _ = run(capsys, "check", "-", stdin=text, monkeypatch=monkeypatch)
    assert "not in the input" not in out and "gpu-priority-class" in out
    for index in range(3):
        (tmp_path / f"d{index}.yaml").write_text(yaml.safe_dump(claiming("Deployment")))
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(claim_template()))
    _, out, _ = run(capsys, "check", "--jobs", "2", str(tmp_path))
    assert "not in the input" not in out and out.count("gpu-priority-class") == 3


def test_fix_adds_the_toleration_a_pod_consuming_a_gpu_claim_of_the_input_needs(capsys,
                                                                               tmp_path):
    import yaml

    (tmp_path / "a.yaml").write_text(yaml.safe_dump(claiming("Deployment")))
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(claim_template()))
    _, out, _ = run(capsys, "check", "--fix", str(tmp_path))
    fixed = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Deployment"]
    assert fixed[0]["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
