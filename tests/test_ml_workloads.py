"""The ML workload kinds (KServe, Kubeflow training and Trainer, Ray, JobSet, LeaderWorkerSet),
ReplicationControllers and custom kinds: every pod template is judged and patched at its own
paths, through the engine and `quickq-guard check` (tests/ml_workloads/ holds manifests shaped
like the projects' documented ones)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
from builders import container, gpu_container, judge, result, with_config

from webhook import Review, decode, evaluate, load_policies
from webhook.cli import main
from webhook.engine.policy import PolicyError
from webhook.engine.trainjobs import train_jobs_from
from webhook.loader import load_config
from webhook.manifests import read_file

ML = Path(__file__).resolve().parent / "ml_workloads"
VERSION = kubernetes_validate.latest_version()


def load(name: str) -> dict[str, Any]:
    [document] = read_file(ML / name)
    obj: dict[str, Any] = document.obj
    return obj


def names() -> list[str]:
    return sorted(path.name for path in ML.glob("*.yaml"))


def findings(decision: Any, policy: str) -> list[tuple[str, str]]:
    return [(f.path, f.message) for f in result(decision, policy).findings]


def paths(decision: Any, policy: str) -> list[str]:
    return [f.path for f in result(decision, policy).findings]


def pointers(decision: Any) -> list[str]:
    return [op["path"] for op in decision.patch]


# --- every pod template of each kind, at its own path ------------------------------------------

# One container field per pod template, found by require-requests on a copy without requests:
# where each kind keeps its pod specs.
CONTAINERS = {
    "kserve-inferenceservice.yaml": ["spec.predictor.model",
                                     "spec.transformer.containers[0]"],
    "kserve-servingruntime.yaml": ["spec.containers[0]"],
    "pytorchjob.yaml": ["spec.pytorchReplicaSpecs.Master.template.spec.containers[0]",
                        "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0]"],
    "tfjob.yaml": ["spec.tfReplicaSpecs.PS.template.spec.containers[0]",
                   "spec.tfReplicaSpecs.Worker.template.spec.containers[0]"],
    "mpijob.yaml": ["spec.mpiReplicaSpecs.Launcher.template.spec.containers[0]",
                    "spec.mpiReplicaSpecs.Worker.template.spec.containers[0]"],
    "xgboostjob.yaml": ["spec.xgbReplicaSpecs.Master.template.spec.containers[0]",
                        "spec.xgbReplicaSpecs.Worker.template.spec.containers[0]"],
    "trainer-clustertrainingruntime.yaml": [
        "spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0]"],
    "raycluster.yaml": ["spec.headGroupSpec.template.spec.containers[0]",
                        "spec.workerGroupSpecs[0].template.spec.containers[0]",
                        "spec.workerGroupSpecs[1].template.spec.containers[0]"],
    "rayjob.yaml": ["spec.rayClusterSpec.headGroupSpec.template.spec.containers[0]",
                    "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0]",
                    "spec.submitterPodTemplate.spec.containers[0]"],
    "rayservice.yaml": ["spec.rayClusterConfig.headGroupSpec.template.spec.containers[0]",
                        "spec.rayClusterConfig.workerGroupSpecs[0].template.spec.containers[0]"],
    "jobset.yaml": ["spec.replicatedJobs[0].template.spec.template.spec.containers[0]",
                    "spec.replicatedJobs[1].template.spec.template.spec.containers[0]"],
    "leaderworkerset.yaml": ["spec.leaderWorkerTemplate.leaderTemplate.spec.containers[0]",
                             "spec.leaderWorkerTemplate.workerTemplate.spec.containers[0]"],
    "replicationcontroller.yaml": ["spec.template.spec.containers[0]"],
    "volcano-job.yaml": ["spec.tasks[0].template.spec.containers[0]",
                         "spec.tasks[1].template.spec.containers[0]"],
    "kaito-workspace.yaml": ["inference.template.spec.containers[0]"],
    "appwrapper.yaml": ["spec.components[0].template.spec.template.spec.containers[0]"],
    "argo-workflow.yaml": ["spec.templates[1].script", "spec.templates[2].container"],
    "aibrix-stormservice.yaml": [
        "spec.template.spec.roles[0].template.spec.containers[0]",
        "spec.template.spec.roles[1].template.spec.containers[0]"],
    "aibrix-rayclusterfleet.yaml": [
        "spec.template.spec.headGroupSpec.template.spec.containers[0]",
        "spec.template.spec.workerGroupSpecs[0].template.spec.containers[0]"],
    "ome-inferenceservice.yaml": ["spec.engine.runner", "spec.router.runner"],
    "ome-clusterservingruntime.yaml": ["spec.engineConfig.runner", "spec.routerConfig.runner"],
    # Composed kinds: a missing amount belongs in the service's own resources (Dynamo), in
    # spec.resources (NIM); a NIM sidecar's resources are the operator's (not listed).
    "dynamo-graphdeployment.yaml": ["spec.services.Frontend",
                                    "spec.services.VllmDecodeWorker"],
    "nim-service.yaml": ["spec"],
}
# Composed kinds whose requests come from elsewhere when missing (KubeAI's resource
# profile, llm-d's base Deployments): tested apart below.
REQUESTS_ELSEWHERE = ["kubeai-model.yaml", "llmd-modelservice.yaml"]


def test_every_manifest_is_listed():
    assert sorted([*CONTAINERS, *REQUESTS_ELSEWHERE, "trainer-trainjob.yaml"]) == names()


def _without_requests(node: Any) -> None:
    if isinstance(node, dict):
        resources = node.get("resources")
        if isinstance(resources, dict):
            resources.pop("requests", None)
            resources.pop("limits", None)
        for value in node.values():
            _without_requests(value)
    elif isinstance(node, list):
        for item in node:
            _without_requests(item)


@pytest.mark.parametrize("name", sorted(CONTAINERS))
def test_every_container_of_every_pod_template_is_judged_at_its_path(name):
    obj = load(name)
    _without_requests(obj)
    if name == "trainer-clustertrainingruntime.yaml":
        # A runtime's `node` container gets its requests from the TrainJob (a warning, not a
        # denial: tests/test_platform_verdicts.py); any other container is the runtime's own.
        job = obj["spec"]["template"]["spec"]["replicatedJobs"][0]
        job["template"]["spec"]["template"]["spec"]["containers"][0]["name"] = "launcher"
    decision = judge(obj)
    assert decision.outcome == "denied", decision.results
    expected = [f"{where}.resources.requests.{resource}" for where in CONTAINERS[name]
                for resource in ("cpu", "memory")]
    assert paths(decision, "require-requests") == expected


def test_a_train_job_is_skipped_saying_where_its_pods_come_from():
    decision = judge(load("trainer-trainjob.yaml"))
    assert decision.outcome == "allowed"
    assert {r.reason for r in decision.results} == {
        "kind TrainJob (trainer.kubeflow.org) is not judged: a TrainJob carries no pod "
        "template: its pods come from its TrainingRuntime or ClusterTrainingRuntime, which "
        "quickq-guard judges as this TrainJob runs it (its resourcesPerNode, image and env) "
        "when both are in the input"}


def test_a_spark_application_is_skipped_saying_its_pods_are_judged_instead():
    app = {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
           "metadata": {"name": "spark-pi", "namespace": "team-a"},
           "spec": {"type": "Scala", "mode": "cluster", "image": "spark:latest",
                    "driver": {"cores": 1, "memory": "512m",
                               "template": {"spec": {"containers": [{"name": "x"}]}}},
                    "executor": {"instances": 1, "cores": 1, "memory": "512m"}}}
    scheduled = {**app, "kind": "ScheduledSparkApplication",
                 "spec": {"schedule": "@every 1h", "template": app["spec"]}}
    for obj in (app, scheduled):
        decision = judge(obj)
        assert decision.outcome == "allowed"
        [reason] = {r.reason for r in decision.results}
        assert reason.startswith(f"kind {obj['kind']} (sparkoperator.k8s.io) is not judged: "
                                 "Spark builds its driver and executor pods from spec.driver")


# --- what the shipped policies say about each manifest ----------------------------------------

def test_an_aibrix_storm_service_judges_and_patches_each_role_at_its_own_path():
    decision = judge(load("aibrix-stormservice.yaml"))
    assert not decision.allowed
    assert paths(decision, "disallow-latest-tag") == [
        "spec.template.spec.roles[0].template.spec.containers[0].image"]
    # Only the decode role lacks the GPU toleration; its liveness probe gets a startup window.
    assert pointers(decision) == [
        "/spec/template/spec/roles/1/template/spec/tolerations",
        "/spec/template/spec/roles/1/template/spec/containers/0/startupProbe"]
    assert paths(decision, "liveness-probe-tolerance") == [
        "spec.template.spec.roles[1].template.spec.containers[0].livenessProbe"
        ".failureThreshold"]


def test_an_aibrix_ray_cluster_fleet_judges_its_ray_cluster_template():
    decision = judge(load("aibrix-rayclusterfleet.yaml"))
    assert decision.allowed
    assert pointers(decision) == [
        "/spec/template/spec/workerGroupSpecs/0/template/spec/tolerations"]
    assert decision.patch[0]["value"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_an_ome_inference_service_judges_each_components_runner():
    decision = judge(load("ome-inferenceservice.yaml"))
    assert not decision.allowed
    assert findings(decision, "disallow-latest-tag") == [(
        "spec.router.runner.image",
        "container 'ome-container' in router: image "
        "'docker.io/lmsysorg/sgl-model-gateway:latest' uses the 'latest' tag; pin it to a "
        "version (docker.io/lmsysorg/sgl-model-gateway:1.2.3) or a digest "
        "(docker.io/lmsysorg/sgl-model-gateway@sha256:...)")]
    # The engine's runner names no image: OME takes it from the serving runtime.
    assert paths(decision, "no-plaintext-secrets") == ["spec.engine.runner.env[0].value"]
    assert "hf_ome_plaintext_token_not_for_logs" not in json.dumps(
        [decision.message, decision.warnings, dict(decision.audit_annotations)])
    # The engine inlines its pod spec: the toleration goes next to the runner.
    assert pointers(decision) == ["/spec/engine/tolerations"]


def test_a_multi_node_ome_engine_judges_its_leader_and_workers():
    obj = load("ome-inferenceservice.yaml")
    engine = obj["spec"]["engine"]
    runner = engine.pop("runner")
    engine["leader"] = {"runner": copy.deepcopy(runner)}
    engine["worker"] = {"size": 2, "runner": copy.deepcopy(runner)}
    decision = judge(obj)
    assert paths(decision, "no-plaintext-secrets") == [
        "spec.engine.leader.runner.env[0].value", "spec.engine.worker.runner.env[0].value"]
    assert pointers(decision) == ["/spec/engine/leader/tolerations",
                                  "/spec/engine/worker/tolerations"]


def test_an_ome_serving_runtime_judges_each_components_runner():
    decision = judge(load("ome-clusterservingruntime.yaml"))
    assert not decision.allowed
    assert findings(decision, "disallow-latest-tag") == [(
        "spec.routerConfig.runner.image",
        "container 'router' in routerConfig: image "
        "'docker.io/lmsysorg/sgl-model-gateway:latest' uses the 'latest' tag; pin it to a "
        "version (docker.io/lmsysorg/sgl-model-gateway:1.2.3) or a digest "
        "(docker.io/lmsysorg/sgl-model-gateway@sha256:...)")]
    # The spec itself holds no containers: no pod of its own, so no labels asked of it.
    assert result(decision, "require-labels").status == "pass"
    assert not decision.patch


def test_an_ome_inference_service_is_not_taken_for_a_kserve_one():
    ome = load("ome-inferenceservice.yaml")
    kserve = dict(ome, apiVersion="serving.kserve.io/v1beta1")
    # KServe's InferenceService keeps no pod spec in `engine`: nothing of it is judged there.
    [reason] = {r.reason for r in judge(kserve).results}
    assert reason.startswith("kind InferenceService (serving.kserve.io) is not judged: it has "
                             "no pod template where InferenceService keeps them")
    assert paths(judge(ome), "disallow-latest-tag") == ["spec.router.runner.image"]


def test_a_dynamo_graph_judges_each_services_main_container_where_its_fields_are_written():
    decision = judge(load("dynamo-graphdeployment.yaml"))
    assert not decision.allowed
    service = "spec.services.VllmDecodeWorker"
    assert findings(decision, "disallow-latest-tag") == [(
        f"{service}.extraPodSpec.mainContainer.image",
        "container 'main' in services.VllmDecodeWorker: image "
        "'nvcr.io/nvidia/ai-dynamo/vllm-runtime:latest' uses the 'latest' tag; pin it to a "
        "version (nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.2.3) or a digest "
        "(nvcr.io/nvidia/ai-dynamo/vllm-runtime@sha256:...)")]
    # The service's envs, probes and resources (its gpu field) are the main container's.
    assert paths(decision, "no-plaintext-secrets") == [f"{service}.envs[0].value"]
    assert "hf_dynamo_plaintext_token_not_for_logs" not in json.dumps(
        [decision.message, decision.warnings, dict(decision.audit_annotations)])
    assert paths(decision, "liveness-probe-tolerance") == [
        f"{service}.livenessProbe.failureThreshold"]
    assert paths(decision, "require-gpu-limits") == [f"{service}.resources.limits.gpu"]
    # The operator writes the pods: nothing in the graph is patched.
    assert not decision.patch
    assert {r.status for r in decision.results if r.policy in (
        "inject-startup-probe", "inject-gpu-toleration")} == {"skip"}


def test_a_dynamo_gpu_type_and_the_main_containers_own_resources_are_read():
    obj = load("dynamo-graphdeployment.yaml")
    worker = obj["spec"]["services"]["VllmDecodeWorker"]
    worker["resources"]["limits"] = {"gpu": "1", "gpuType": "amd.com/gpu"}
    worker["resources"]["requests"].update(gpu="1", gpuType="amd.com/gpu")
    frontend = obj["spec"]["services"]["Frontend"]
    del frontend["resources"]
    frontend["extraPodSpec"]["mainContainer"]["resources"] = {
        "requests": {"cpu": "1", "memory": "0"}}
    decision = judge(obj)
    assert "require-gpu-limits" not in {p for p, _ in _failed(decision)}
    assert paths(decision, "require-requests") == [
        "spec.services.Frontend.extraPodSpec.mainContainer.resources.requests.memory"]


def _failed(decision: Any) -> list[tuple[str | None, str]]:
    return [(r.policy, f.path) for r in decision.results if r.status == "fail"
            for f in r.findings]


def test_a_nim_service_is_judged_as_the_pod_the_operator_writes():
    decision = judge(load("nim-service.yaml"))
    assert not decision.allowed
    # spec.userID is the pods' uid: 0 is root, for the sidecar too.
    assert findings(decision, "disallow-root-user") == [
        ("spec.userID", "container 'llama3-8b-ctr': runs as root (runAsUser: 0); set "
         "spec.userID to a non-zero uid"),
        ("spec.userID", "container 'log-shipper': runs as root (runAsUser: 0); set "
         "spec.userID to a non-zero uid")]
    # The image is repository:tag, as the operator joins them.
    assert findings(decision, "disallow-latest-tag") == [(
        "spec.sidecarContainers[0].image",
        "container 'log-shipper': image 'registry.example.com/log-shipper:' has an empty tag; "
        "pin it to a version (registry.example.com/log-shipper:1.2.3) or a digest "
        "(registry.example.com/log-shipper@sha256:...)")]
    assert paths(decision, "liveness-probe-tolerance") == [
        "spec.livenessProbe.probe.failureThreshold"]
    assert paths(decision, "gpu-priority-class") == ["spec.priorityClassName"]
    assert not decision.patch


def test_a_nim_service_without_a_user_id_runs_as_the_operators_uid():
    obj = load("nim-service.yaml")
    del obj["spec"]["userID"]
    obj["spec"]["livenessProbe"]["enabled"] = False
    decision = judge(obj)
    assert result(decision, "disallow-root-user").status == "pass"
    assert result(decision, "liveness-probe-tolerance").status == "pass"


def test_a_nim_services_pods_have_the_operators_labels_and_its_own():
    # The operator labels every pod app and app.kubernetes.io/name (GetSelectorLabels,
    # GetStandardLabels): the shipped require-labels is met without spec.labels.
    decision = judge(load("nim-service.yaml"))
    assert result(decision, "require-labels").status == "pass"
    team = with_config(policies={"require-labels": {"params": {"labels": [["team"]]}}})
    assert paths(judge(load("nim-service.yaml"), team), "require-labels") == [
        "spec.labels.team"]
    obj = load("nim-service.yaml")
    obj["spec"]["labels"] = {"team": "inference"}
    assert result(judge(obj, team), "require-labels").status == "pass"


def test_a_nim_image_tag_written_as_a_number_is_refused_naming_the_field():
    obj = load("nim-service.yaml")
    obj["spec"]["image"]["tag"] = 1.8  # `tag: 1.8` in YAML: the CRD's schema wants a string
    decision = judge(obj)
    assert decision.outcome == "error"
    assert "spec.image.tag: expected a string, got a number (quote the value)" in \
        decision.message


def test_a_kubeai_model_judges_its_image_and_env_and_says_what_its_profile_hides():
    decision = judge(load("kubeai-model.yaml"))
    assert not decision.allowed
    assert paths(decision, "disallow-latest-tag") == ["spec.image"]
    assert paths(decision, "no-plaintext-secrets") == ["spec.env.HF_TOKEN"]
    assert "hf_kubeai_plaintext_token_not_for_logs" not in json.dumps(
        [decision.message, decision.warnings, dict(decision.audit_annotations)])
    # Requests, GPUs, the security context: KubeAI's resource profile and configuration.
    for policy in ("require-requests", "disallow-root-user", "require-gpu-limits",
                   "require-labels"):
        assert result(decision, policy).status == "pass", policy
    [warning] = decision.warnings
    assert warning == ("spec.resourceProfile 'nvidia-gpu-l4:1': requests, limits, GPUs, "
                       "tolerations, probes and security context come from KubeAI's "
                       "configuration, not this object: not judged here; the Pods KubeAI "
                       "creates are judged when created")
    # No image: KubeAI's configuration picks one for the engine.
    obj = load("kubeai-model.yaml")
    del obj["spec"]["image"]
    assert result(judge(obj), "disallow-latest-tag").status == "pass"


def test_what_a_composed_kind_leaves_unjudged_is_shown_and_fails_no_run(tmp_path, capsys):
    obj = load("kubeai-model.yaml")
    obj["spec"]["image"] = "ollama/ollama:0.9.0"
    del obj["spec"]["env"]["HF_TOKEN"]
    manifest = tmp_path / "model.json"
    manifest.write_text(json.dumps(obj))
    assert main(["check", "--fail-on", "warn", str(manifest)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("WARN        -                          Model.kubeai.org "
                          "kubeai/qwen2-500m-cpu  spec.resourceProfile 'nvidia-gpu-l4:1': ")
    assert main(["check", "--quiet", "--fail-on", "warn", str(manifest)]) == 0
    assert "WARN" not in capsys.readouterr().out


def test_an_llmd_model_service_judges_what_its_containers_write():
    decision = judge(load("llmd-modelservice.yaml"))
    assert not decision.allowed
    assert findings(decision, "require-gpu-limits") == [(
        "spec.decode.containers[0].resources.limits[nvidia.com/gpu]",
        "container 'vllm' in decode: set resources.limits[nvidia.com/gpu] equal to "
        "resources.requests[nvidia.com/gpu] (2 != 1)")]
    # The base ConfigMap's Deployments give the image, security context, priority class
    # and any missing request: not faults of this object.
    for policy in ("require-requests", "disallow-root-user", "disallow-latest-tag",
                   "gpu-priority-class"):
        assert result(decision, policy).status == "pass", policy
    [warning] = decision.warnings
    assert warning.startswith("spec.baseConfigMapRef: the security context, tolerations")
    assert len(warning) <= 256  # the API server cuts a webhook's warning there
    # What a container writes is judged: a zero request, a pinned-nowhere image.
    obj = load("llmd-modelservice.yaml")
    prefill = obj["spec"]["prefill"]["containers"][0]
    prefill["resources"]["requests"]["memory"] = "0"
    prefill["image"] = "ghcr.io/llm-d/llm-d:latest"
    decision = judge(obj)
    assert paths(decision, "require-requests") == [
        "spec.prefill.containers[0].resources.requests.memory"]
    assert paths(decision, "disallow-latest-tag") == ["spec.prefill.containers[0].image"]


def test_another_projects_kind_is_skipped_naming_custom_kinds():
    dgd = {"apiVersion": "example.com/v1", "kind": "ModelServer",
           "metadata": {"name": "m", "namespace": "ml"}, "spec": {}}
    [reason] = {r.reason for r in judge(dgd).results}
    assert reason == ("kind ModelServer (example.com) is not judged: if it runs pods, name it "
                      "in the config's customKinds with the paths of its pod templates")
    # Kubernetes' own kinds that run no pods are not sent to customKinds.
    for api_version, kind in (("v1", "Service"), ("networking.k8s.io/v1", "Ingress")):
        obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "c"}}
        [reason] = {r.reason for r in judge(obj).results}
        assert "customKinds" not in reason, reason


def test_kserve_predictor_model_spec_is_a_container_of_the_predictor():
    decision = judge(load("kserve-inferenceservice.yaml"))
    # The model spec names no image: its serving runtime supplies one.
    assert findings(decision, "disallow-latest-tag") == [(
        "spec.transformer.containers[0].image",
        "container 'kserve-container' in transformer: image 'kserve/image-transformer:latest' "
        "uses the 'latest' tag; pin it to a version (kserve/image-transformer:1.2.3) or a "
        "digest (kserve/image-transformer@sha256:...)")]
    # The predictor's pod-level fields sit in spec.predictor next to KServe's own.
    assert paths(decision, "gpu-priority-class") == ["spec.predictor.priorityClassName"]
    assert result(decision, "disallow-root-user").status == "pass"
    assert pointers(decision) == ["/spec/predictor/tolerations",
                                  "/spec/predictor/model/startupProbe"]
    startup = decision.patch[1]["value"]
    # initialDelaySeconds 1200 + 3 x 30 s: the model keeps the time its liveness probe gave it
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 1290
    assert decision.patch[0]["value"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_training_jobs_patch_only_the_replica_specs_that_use_gpus():
    decision = judge(load("pytorchjob.yaml"))
    assert pointers(decision) == [
        "/spec/pytorchReplicaSpecs/Worker/template/spec/tolerations"]
    assert messages_of(decision, "require-requests") == [
        "container 'pytorch' in pytorchReplicaSpecs.Worker: add resources.requests.cpu",
        "container 'pytorch' in pytorchReplicaSpecs.Worker: add resources.requests.memory"]
    assert paths(decision, "gpu-priority-class") == [
        "spec.pytorchReplicaSpecs.Worker.template.spec.priorityClassName"]
    # A worker template that tolerates the GPU taint already is not patched.
    assert judge(load("tfjob.yaml")).patch == ()


def test_ray_worker_groups_are_patched_by_index():
    decision = judge(load("raycluster.yaml"))
    assert pointers(decision) == ["/spec/workerGroupSpecs/1/template/spec/tolerations"]
    service = judge(load("rayservice.yaml"))
    assert pointers(service) == [
        "/spec/rayClusterConfig/workerGroupSpecs/0/template/spec/tolerations",
        "/spec/rayClusterConfig/workerGroupSpecs/0/template/spec/containers/0/startupProbe"]
    assert service.patch[0]["value"] == [
        {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_leader_worker_set_judges_leader_and_worker_templates_apart():
    decision = judge(load("leaderworkerset.yaml"))
    assert not decision.allowed
    assert findings(decision, "no-plaintext-secrets") == [(
        "spec.leaderWorkerTemplate.leaderTemplate.spec.containers[0].env[0].value",
        "container 'vllm-leader' in leaderWorkerTemplate.leaderTemplate: env "
        "HUGGING_FACE_HUB_TOKEN holds a literal value; move it into a Secret and reference it "
        "with valueFrom.secretKeyRef")]
    assert "hf_plaintext_token_do_not_ship" not in json.dumps(
        [decision.message, decision.warnings, dict(decision.audit_annotations)])
    assert paths(decision, "require-gpu-limits") == [
        "spec.leaderWorkerTemplate.workerTemplate.spec.containers[0].resources.limits"
        "[nvidia.com/gpu]"]
    assert sorted(pointers(decision)) == [
        "/spec/leaderWorkerTemplate/leaderTemplate/spec/tolerations",
        "/spec/leaderWorkerTemplate/workerTemplate/spec/tolerations"]


def test_jobset_and_trainer_runtime_reach_the_pod_template_inside_the_job_template():
    decision = judge(load("jobset.yaml"))
    assert pointers(decision) == [
        "/spec/replicatedJobs/1/template/spec/template/spec/tolerations"]
    runtime = judge(load("trainer-clustertrainingruntime.yaml"))
    assert pointers(runtime) == [
        "/spec/template/spec/replicatedJobs/0/template/spec/template/spec/tolerations"]


def test_replication_controllers_are_judged_like_other_controllers():
    decision = judge(load("replicationcontroller.yaml"))
    assert findings(decision, "disallow-root-user") == [(
        "spec.template.spec.containers[0].securityContext.runAsNonRoot",
        "container 'master': may run as root; set securityContext.runAsNonRoot: true or a "
        "non-zero securityContext.runAsUser")]


@pytest.mark.parametrize("name", sorted(CONTAINERS))
def test_patches_apply_keep_pod_templates_valid_and_are_not_made_again(name):
    obj = load(name)
    decision = judge(obj)
    if not decision.patch:
        return
    fixed = jsonpatch.apply_patch(obj, list(decision.patch))
    assert fixed == decision.patched
    assert evaluate(decode(fixed), load_policies()).patch == ()
    # Every patched pod template is still one the API server accepts.
    for operation in decision.patch:
        tokens = operation["path"].split("/")[1:]
        if "template" not in tokens:
            continue
        cut = len(tokens) - tokens[::-1].index("template")
        template = fixed
        for token in tokens[:cut]:
            template = template[int(token)] if isinstance(template, list) else template[token]
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate",
                                      "metadata": {"name": "t"}, "template": template},
                                     VERSION, strict=True)


# --- the API server's checks reach the pod templates -------------------------------------------

def test_an_unknown_field_in_a_training_pod_template_is_refused():
    obj = load("pytorchjob.yaml")
    spec = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    spec["container"] = spec.pop("containers")
    decision = judge(obj)
    assert decision.outcome == "error"
    assert [f.path for f in decision.results[0].findings] == [
        "spec.pytorchReplicaSpecs.Worker.template.spec.container"]
    assert "did you mean containers?" in decision.message


def test_kserve_component_fields_are_not_unknown_but_container_fields_are_checked():
    obj = load("kserve-inferenceservice.yaml")
    obj["spec"]["predictor"]["canaryTrafficPercent"] = 10  # KServe's own field
    assert judge(obj).outcome != "error"
    obj["spec"]["predictor"]["model"]["resources"]["limits"]["cpu"] = "6"
    obj["spec"]["transformer"]["containers"][0]["imagePullPolicy"] = 1
    obj["spec"]["predictor"]["securityContext"]["runAsUser"] = "1000"
    decision = judge(obj)
    assert [f.path for f in decision.results[0].findings] == [
        "spec.predictor.securityContext.runAsUser",
        "spec.transformer.containers[0].imagePullPolicy"]


# --- UPDATE: an update that leaves every pod template alone is not patched --------------------

def test_an_update_that_only_scales_a_training_job_is_not_patched():
    old = load("pytorchjob.yaml")
    new = copy.deepcopy(old)
    new["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 8
    decision = judge(new, review=Review(operation="UPDATE", old_object=decode(old)))
    assert decision.patch == ()
    changed = copy.deepcopy(new)
    changed["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "image"] = "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-0000000"
    assert pointers(judge(changed, review=Review(operation="UPDATE", old_object=decode(old)))) == [
        "/spec/pytorchReplicaSpecs/Worker/template/spec/tolerations"]


# --- custom kinds from the config --------------------------------------------------------------

MODEL_SERVER = {
    "apiVersion": "serving.example.com/v1", "kind": "ModelServer",
    "metadata": {"name": "llm", "namespace": "ml", "labels": {"app": "llm"}},
    "spec": {
        "router": {"template": {"spec": {
            "securityContext": {"runAsNonRoot": True},
            "containers": [container("router", image="registry.example.com/router:latest")]}}},
        "shards": [{"template": {"spec": {
            "securityContext": {"runAsNonRoot": True},
            "containers": [gpu_container("shard")]}}}],
    },
}
CUSTOM = {"customKinds": [{"group": "serving.example.com", "kind": "ModelServer",
                           "podTemplates": ["spec.router.template", "spec.shards[*].template"]}]}


def test_a_custom_kind_is_judged_and_patched_where_its_config_entry_says():
    policies = with_config(**CUSTOM)
    decision = judge(MODEL_SERVER, policies)
    assert paths(decision, "disallow-latest-tag") == [
        "spec.router.template.spec.containers[0].image"]
    assert pointers(decision) == ["/spec/shards/0/template/spec/tolerations"]
    # Without the entry, the kind is not judged.
    assert {r.status for r in judge(MODEL_SERVER).results} == {"skip"}


def test_a_custom_kinds_pod_templates_get_the_api_servers_checks():
    obj = copy.deepcopy(MODEL_SERVER)
    obj["spec"]["shards"][0]["template"]["spec"]["containers"][0]["resources"]["request"] = {}
    decision = judge(obj, with_config(**CUSTOM))
    assert [f.path for f in decision.results[0].findings] == [
        "spec.shards[0].template.spec.containers[0].resources.request"]


def test_a_near_miss_of_a_custom_kind_is_named():
    obj = dict(MODEL_SERVER, kind="ModelServr")
    [reason] = {r.reason for r in judge(obj, with_config(**CUSTOM)).results}
    assert reason.endswith("did you mean ModelServer?")


@pytest.mark.parametrize(("entry", "problem"), [
    ({"group": "apps", "kind": "Deployment", "podTemplates": ["spec.template"]},
     "customKinds: Deployment of apps is judged already; customKinds is for kinds "
     "quickq-guard does not know"),
    ({"group": "example.com", "kind": "Thing", "podTemplates": ["spec..template"]},
     "customKinds.0.podTemplates: 'spec..template' is not a path: write field names joined "
     "by dots, with * (or [*]) for every item of a list or value of a map, e.g. "
     "spec.workers[*].template"),
    ({"group": "example.com", "kind": "Thing", "podTemplates": ["*.template"]},
     "customKinds.0.podTemplates: '*.template' is not a path"),
    ({"group": "example.com", "kind": "thing", "podTemplates": ["spec.template"]},
     "customKinds.0.kind: 'thing' is not a kind"),
    ({"group": "example.com", "kind": "Thing", "podTemplates": []},
     "customKinds.0.podTemplates: "),
    ({"group": "example.com", "kind": "Thing", "podTemplate": ["spec.template"]},
     "customKinds.0.podTemplate: unknown field"),
])
def test_a_broken_custom_kind_entry_fails_the_load_naming_the_field(tmp_path, entry, problem):
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"customKinds": [entry]}))
    with pytest.raises(PolicyError) as raised:
        load_config(config)
    assert problem in str(raised.value)


# --- the CLI gives the engine's verdicts --------------------------------------------------------

def test_check_judges_the_ml_kinds_as_the_engine_does(capsys):
    assert main(["check", "--output", "json", str(ML)]) == 1
    report = json.loads(capsys.readouterr().out)
    policies = load_policies()
    # A Trainer runtime is judged with the TrainJobs of the same input.
    review = Review(train_jobs=train_jobs_from(load(name) for name in names()))
    for name in names():
        rows = [row for row in report["results"] if row["resource"]["source"].startswith(
            str(ML / name))]
        decision = evaluate(decode(load(name)), policies, review)
        # An object not judged at all (a TrainJob) is one skip row, of no policy; so is each
        # part of a judged object that is not judged (an Argo Workflow's podSpecPatch).
        results = ((None, "skip", ""),) if decision.skipped else (*(
            (r.policy, r.status, r.findings[0].path if r.findings else "")
            for r in decision.results), *((None, "skip", "") for _ in decision.unjudged))
        assert [(row["policy"], row["result"], row["path"]) for row in rows] == list(
            results), name
        patch = [op for row in rows if row["result"] == "patch" for op in row["patch"]]
        assert patch == list(decision.patch)


def test_check_with_a_custom_kind_config(tmp_path, capsys):
    manifest = tmp_path / "server.json"
    manifest.write_text(json.dumps(MODEL_SERVER))
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps(CUSTOM))
    assert main(["check", str(manifest), "--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert ("container 'router' in router: image 'registry.example.com/router:latest' uses "
            "the 'latest' tag") in out


# --- CEL policies see each container with the pod spec it belongs to -----------------------

CEL_POLICY = """\
id: gpu-pods-have-a-priority-class
description: A container that asks for GPUs runs in a pod spec with a priorityClassName.
type: validate
action: enforce
scope: container
validations:
  - expression: >-
      !('nvidia.com/gpu' in container.?resources.?limits.orValue({})) ||
      has(podSpec.priorityClassName)
    message: set a priorityClassName for this GPU pod spec
    fieldPath: podSpec.priorityClassName
"""


def test_a_cel_container_policy_reads_the_pod_spec_of_each_replica(tmp_path):
    (tmp_path / "policy.yaml").write_text(CEL_POLICY)
    decision = judge(load("pytorchjob.yaml"), load_policies(tmp_path))
    # A finding about the pod spec points at the Worker's, not at the Master's.
    assert findings(decision, "gpu-pods-have-a-priority-class") == [(
        "spec.pytorchReplicaSpecs.Worker.template.spec.priorityClassName",
        "set a priorityClassName for this GPU pod spec")]


def messages_of(decision: Any, policy: str) -> list[str]:
    return [f.message for f in result(decision, policy).findings]


# --- AI scheduler and workflow kinds ----------------------------------------------------------


def test_a_volcano_job_is_judged_per_task_and_not_taken_for_a_batch_job():
    decision = judge(load("volcano-job.yaml"))
    assert pointers(decision) == ["/spec/tasks/1/template/spec/tolerations"]
    assert paths(decision, "gpu-priority-class") == [
        "spec.tasks[1].template.spec.priorityClassName"]
    assert result(decision, "require-labels").status == "pass"  # each task's template has app


def test_a_kaito_workspace_is_judged_at_its_inference_template():
    decision = judge(load("kaito-workspace.yaml"))
    assert paths(decision, "disallow-latest-tag") == [
        "inference.template.spec.containers[0].image"]
    assert pointers(decision) == ["/inference/template/spec/tolerations",
                                  "/inference/template/spec/containers/0/startupProbe"]


def test_a_kaito_workspace_with_a_preset_has_no_template_and_is_not_judged():
    obj = load("kaito-workspace.yaml")
    obj["inference"] = {"preset": {"name": "falcon-7b"}}
    [reason] = {r.reason for r in judge(obj).results}
    assert reason == ("kind Workspace (kaito.sh) is not judged: it has no pod template where "
                      "Workspace keeps them (inference.template)")


def test_an_appwrapper_is_judged_at_the_template_of_what_it_wraps():
    decision = judge(load("appwrapper.yaml"))
    assert pointers(decision) == [
        "/spec/components/0/template/spec/template/spec/tolerations"]


def test_an_appwrapper_wrapping_a_bare_pod_judges_the_pods_spec():
    obj = load("appwrapper.yaml")
    job = obj["spec"]["components"][0]["template"]
    wrapped = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "one", "labels": {"app": "one"}},
               "spec": copy.deepcopy(job["spec"]["template"]["spec"])}
    obj["spec"]["components"].append({"podSets": [{"replicas": 1, "path": "template"}],
                                      "template": wrapped})
    decision = judge(obj)
    assert pointers(decision) == [
        "/spec/components/0/template/spec/template/spec/tolerations",
        "/spec/components/1/template/spec/tolerations"]
    assert "require-labels" not in {r.policy for r in decision.results if r.status == "fail"}
    wrapped["spec"]["containers"][0]["image"] = "registry.example.com/train:latest"
    assert paths(judge(obj), "disallow-latest-tag") == [
        "spec.components[1].template.spec.containers[0].image"]
    # A wrapped Job's own spec is no pod spec: only its template is read.
    del obj["spec"]["components"][1]
    assert pointers(judge(obj)) == [
        "/spec/components/0/template/spec/template/spec/tolerations"]


def test_an_argo_workflow_judges_container_and_script_templates_only():
    decision = judge(load("argo-workflow.yaml"))
    # The workflow's own securityContext holds for every template's pod.
    assert result(decision, "disallow-root-user").status == "pass"
    assert pointers(decision) == ["/spec/templates/2/tolerations"]
    # The steps template makes no pod: no labels are asked of it.
    assert paths(decision, "require-labels") == [
        "spec.templates[1].metadata.labels.app", "spec.templates[2].metadata.labels.app"]
    assert messages_of(decision, "require-requests") == []
    assert decision.warnings == (
        "spec.templates[2].podSpecPatch is not judged: a patch Argo applies to the pod at run "
        "time, which quickq-guard does not judge",)


def test_an_argo_template_names_its_container_main():
    obj = load("argo-workflow.yaml")
    obj["spec"].pop("securityContext")
    decision = judge(obj)
    assert [f.message.split(":")[0] for f in result(decision, "disallow-root-user").findings] \
        == ["container 'main' in templates[1]", "container 'main' in templates[2]"]


def test_a_custom_kind_without_its_declared_templates_is_not_judged():
    obj = copy.deepcopy(MODEL_SERVER)
    obj["spec"] = {"replicas": 2}
    decision = judge(obj, with_config(**CUSTOM))
    assert {r.status for r in decision.results} == {"skip"}
    assert decision.skipped == (
        "kind ModelServer (serving.example.com) is not judged: it has no pod template where "
        "ModelServer keeps them (spec.router.template, spec.shards[*].template)")
