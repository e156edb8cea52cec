"""Manifests shaped like public projects' own (tests/workloads/): the engine's verdicts on
them, and `quickq-guard check` on the file gives the same verdict as the engine."""

from __future__ import annotations

import json

import jsonpatch
import kubernetes_validate
import pytest
from real_workloads import WORKLOADS, cli_verdict, decide, load, names, verdict

from webhook import decode, evaluate, load_policies
from webhook.cli import main


@pytest.mark.parametrize("name", names())
def test_the_cli_gives_the_engines_verdict(name, capsys):
    code = main(["check", "--output", "json", str(WORKLOADS / name)])
    report = json.loads(capsys.readouterr().out)
    decision = decide(name, decoded=True)  # the object kubectl apply hands the webhook
    assert cli_verdict(report) == verdict(decision)
    assert code == (0 if decision.allowed else 1)


@pytest.mark.parametrize("name", names())
def test_patched_workloads_are_valid_kubernetes_objects_and_are_not_patched_again(name):
    obj = load(name)
    decision = decide(name)
    kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
    if decision.patch:
        fixed = jsonpatch.apply_patch(obj, list(decision.patch))
        kubernetes_validate.validate(fixed, kubernetes_validate.latest_version(), strict=True)
        assert evaluate(decode(fixed), load_policies()).patch == ()


# --- inject-startup-probe: the startup window is never shorter than liveness allowed ---------


def _startup(decision, container=0):
    ops = [op for op in decision.patch if op["path"].endswith(f"/{container}/startupProbe")]
    assert len(ops) == 1, decision.patch
    return ops[0]["value"]


def test_kserve_llm_keeps_the_80_minutes_its_liveness_probe_allowed():
    decision = decide("kserve-llm-predictor.yaml")
    startup = _startup(decision)
    # initialDelaySeconds 4800 + failureThreshold 3 (default) x periodSeconds 10
    assert startup == {"httpGet": {"path": "/v2/health/live", "port": 8080},
                       "timeoutSeconds": 10, "periodSeconds": 10, "failureThreshold": 483}
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 4800 + 30
    [finding] = [f for r in decision.results if r.policy == "inject-startup-probe"
                 for f in r.findings]
    assert finding.path == "spec.template.spec.containers[0].startupProbe"
    assert finding.message == (
        "container 'kserve-container': add startupProbe: it runs the liveness check every 10s "
        "for up to 4830s (no less than livenessProbe allowed) and holds off liveness checks "
        "until it succeeds, so a slow start is not restarted")


@pytest.mark.parametrize(("name", "handler"), [
    ("redis-statefulset.yaml",
     {"exec": {"command": ["sh", "-c", "/health/ping_liveness_local.sh 5"]}}),
    ("argocd-repo-server.yaml", {"httpGet": {"path": "/healthz?full=true", "port": 8084}}),
])
def test_a_liveness_probe_that_allowed_less_than_ten_minutes_gets_the_default_window(
        name, handler):
    startup = _startup(decide(name))
    assert startup.pop("timeoutSeconds", None) in (None, 5, 6)
    assert startup == {**handler, "periodSeconds": 10, "failureThreshold": 60}


def test_a_vllm_server_gets_the_30_minutes_its_image_window_gives():
    startup = _startup(decide("vllm-deployment.yaml"))
    startup.pop("timeoutSeconds", None)
    assert startup == {"httpGet": {"path": "/health", "port": 8000}, "periodSeconds": 10,
                       "failureThreshold": 180}


@pytest.mark.parametrize("name", ["redis-statefulset.yaml", "argocd-repo-server.yaml",
                                  "vllm-deployment.yaml", "kserve-llm-predictor.yaml"])
def test_the_message_says_what_the_probe_does_in_words_that_fit_any_workload(name):
    decision = decide(name)
    [finding] = [f for r in decision.results if r.policy == "inject-startup-probe"
                 for f in r.findings]
    text = finding.message.lower()
    assert "runs the liveness check" in text and "holds off liveness checks" in text
    assert "model" not in text
    policy = load_policies().get("inject-startup-probe")
    assert "model" not in policy.description.lower()


# --- no-plaintext-secrets: settings about secrets pass, a ConfigMap is no place for one -----


@pytest.mark.parametrize("name", ["keycloak-settings-env.yaml", "redis-statefulset.yaml",
                                  "argocd-repo-server.yaml"])
def test_settings_about_secrets_and_references_to_them_pass(name):
    decision = decide(name)
    assert [r.status for r in decision.results if r.policy == "no-plaintext-secrets"] == ["pass"]
    assert decision.allowed


def test_a_token_read_from_a_config_map_is_denied_naming_the_field():
    decision = decide("vllm-token-from-configmap.yaml")
    assert not decision.allowed
    [denied] = [r for r in decision.results if r.status == "fail" and r.action == "enforce"]
    assert denied.policy == "no-plaintext-secrets"
    assert [(f.path, f.container) for f in denied.findings] == [
        ("spec.template.spec.containers[0].env[1].valueFrom.configMapKeyRef", "vllm")]
    assert "(field: spec.template.spec.containers[0].env[1].valueFrom.configMapKeyRef)" \
        in decision.message
    assert "hf-token" not in decision.message and "qwen-settings" not in decision.message


# --- accelerators: time-sliced NVIDIA, Intel i915/xe, AMD partitions ------------------------


@pytest.mark.parametrize(("name", "prefix", "key"), [
    ("nvidia-time-slicing.yaml", "/spec/template/spec", "nvidia.com/gpu"),
    ("intel-gpu-demo-job.yaml", "/spec/template/spec", "gpu.intel.com/i915"),
    ("openvino-xe-deployment.yaml", "/spec/template/spec", "gpu.intel.com/xe"),
    ("amd-mi300x-partition.yaml", "/spec", "amd.com/gpu"),
])
def test_accelerator_workloads_get_their_vendors_toleration(name, prefix, key):
    decision = decide(name)
    assert [op for op in decision.patch if "tolerations" in op["path"]] == [
        {"op": "add", "path": f"{prefix}/tolerations",
         "value": [{"key": key, "operator": "Exists", "effect": "NoSchedule"}]}]


@pytest.mark.parametrize(("name", "priority"), [
    ("nvidia-time-slicing.yaml", "fail"), ("openvino-xe-deployment.yaml", "fail"),
    ("intel-gpu-demo-job.yaml", "pass"), ("amd-mi300x-partition.yaml", "pass"),
])
def test_accelerator_workloads_get_the_gpu_checks(name, priority):
    statuses = {r.policy: r.status for r in decide(name).results}
    assert statuses["gpu-priority-class"] == priority
    assert statuses["require-gpu-limits"] == "pass"
    obj = load(name)
    spec = obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]
    resources = spec["containers"][0]["resources"]
    gpu = next(n for n in resources["limits"] if "/" in n)
    resources["requests"][gpu] = "2"  # request more than the limit
    failed = evaluate(decode(obj), load_policies())
    assert {r.policy: r.status for r in failed.results}["require-gpu-limits"] == "fail"


# --- require-labels: where the pods get their labels, app or app.kubernetes.io/name ----------


@pytest.mark.parametrize("name", ["argocd-repo-server.yaml", "redis-statefulset.yaml",
                                  "keycloak-settings-env.yaml", "openvino-xe-deployment.yaml",
                                  "kserve-llm-predictor.yaml"])
def test_pods_labelled_with_app_or_the_recommended_name_pass(name):
    assert {r.policy: r.status for r in decide(name).results}["require-labels"] == "pass"


def test_labels_on_the_controller_only_are_audited_at_the_pod_template():
    decision = decide("labels-on-controller-only.yaml")
    assert decision.allowed
    [found] = [f for r in decision.results if r.policy == "require-labels" for f in r.findings]
    assert found.path == "spec.template.metadata.labels.app"
    assert decision.audit_annotations["require-labels"] == (
        "add the label spec.template.metadata.labels.app or "
        "spec.template.metadata.labels[app.kubernetes.io/name] (the pods' labels)")
