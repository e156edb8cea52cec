"""The chart's switches for the AI scheduler and inference platform kinds through a real
kube-apiserver: with minimal CRDs for Volcano's Job, Argo's Workflow, Kueue's AppWrapper,
AIBrix's StormService and RayClusterFleet and OME's InferenceService installed, the
`workloadKinds` switches send them to the webhooks, which judge and patch their pod specs (an
AppWrapper's wrapped bare Pod too, an OME component's inlined one); without the switches the
API server never asks. The kinds whose operators compose their pods (Dynamo, NIM, KubeAI,
llm-d: webhook.engine.workload.composed), installed from minimal schemas of our own, are
judged through the API server as `check` judges them offline, and never patched."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import (
    GPU_TOLERATION,
    ControlPlane,
    Guard,
    container,
    denies_bad_pod,
    gpu_container,
    pod_spec,
)

from webhook import Review, decode, evaluate, load_policies
from webhook.manifests import read_file

NAMESPACE = "ai-kinds"
SWITCHES = {"workloadKinds.volcano": "true", "workloadKinds.argo": "true",
            "workloadKinds.appWrapper": "true", "workloadKinds.aibrix": "true",
            "workloadKinds.ome": "true", "workloadKinds.dynamo": "true",
            "workloadKinds.nim": "true", "workloadKinds.kubeai": "true",
            "workloadKinds.llmd": "true"}
CRDS = [("batch.volcano.sh", "Job", "jobs"), ("argoproj.io", "Workflow", "workflows"),
        ("workload.codeflare.dev", "AppWrapper", "appwrappers"),
        ("orchestration.aibrix.ai", "StormService", "stormservices"),
        ("orchestration.aibrix.ai", "RayClusterFleet", "rayclusterfleets"),
        ("ome.io", "InferenceService", "inferenceservices", "v1beta1"),
        ("ome.io", "ServingRuntime", "servingruntimes", "v1beta1")]


def crd(group: str, kind: str, plural: str, version: str = "v1alpha1") -> dict[str, Any]:
    """A CRD that stores anything: the shape is the project's, the schema beside the point."""
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower(),
                               "listKind": f"{kind}List"},
                     "versions": [{"name": version, "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {
                                       "type": "object",
                                       "x-kubernetes-preserve-unknown-fields": True}}}]}}


# The composed kinds: each CRD's schema is ours and minimal (the types of the fields
# quickq-guard reads, everything else kept as written), its shape the project's: read in
# ai-dynamo/dynamo's DynamoGraphDeployment (nvidia.com/v1alpha1), NVIDIA/k8s-nim-operator's
# NIMService (apps.nvidia.com/v1alpha1), kubeai-project/kubeai's Model (kubeai.org/v1) and
# llm-d/llm-d-model-service's ModelService (llm-d.ai/v1alpha1).
ML = Path(__file__).resolve().parents[1] / "ml_workloads"
_KEPT: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_ITEMS = {"type": "array", "items": _KEPT}
_ROLE = {**_KEPT, "properties": {"containers": _ITEMS, "initContainers": _ITEMS}}
_IMAGE = {**_KEPT, "required": ["repository", "tag"],
          "properties": {"repository": {"type": "string"}, "tag": {"type": "string"}}}
COMPOSED = {
    "dynamo-graphdeployment.yaml": (
        "nvidia.com", "DynamoGraphDeployment", "dynamographdeployments", "v1alpha1",
        {"envs": _ITEMS, "services": {"type": "object", "additionalProperties": _KEPT}}),
    "nim-service.yaml": (
        "apps.nvidia.com", "NIMService", "nimservices", "v1alpha1",
        {"image": _IMAGE, "userID": {"type": "integer"}, "groupID": {"type": "integer"},
         "env": _ITEMS, "resources": _KEPT,
         "sidecarContainers": {"type": "array", "items": {**_KEPT, "properties": {
             "image": _IMAGE}}}}),
    "kubeai-model.yaml": (
        "kubeai.org", "Model", "models", "v1",
        {"image": {"type": "string"}, "resourceProfile": {"type": "string"},
         "args": {"type": "array", "items": {"type": "string"}},
         "env": {"type": "object", "additionalProperties": {"type": "string"}}}),
    "llmd-modelservice.yaml": (
        "llm-d.ai", "ModelService", "modelservices", "v1alpha1",
        {"prefill": _ROLE, "decode": _ROLE, "endpointPicker": _ROLE}),
}


def composed_crd(group: str, kind: str, plural: str, version: str,
                 spec: dict[str, Any]) -> dict[str, Any]:
    """A CRD with our own minimal structural schema for the spec."""
    schema = {"type": "object", "properties": {"spec": {**_KEPT, "properties": spec}}}
    made = crd(group, kind, plural, version)
    made["spec"]["versions"][0]["schema"] = {"openAPIV3Schema": schema}
    return made


def manifest(name: str) -> dict[str, Any]:
    [document] = read_file(ML / name)
    obj: dict[str, Any] = copy.deepcopy(document.obj)
    obj["metadata"]["namespace"] = NAMESPACE
    return obj


def volcano_job(name: str, *containers: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
            "spec": {"schedulerName": "volcano", "minAvailable": 1, "tasks": [
                {"name": "worker", "replicas": 1, "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": pod_spec(*containers, restartPolicy="Never")}}]}}


def workflow(name: str, image: str) -> dict[str, Any]:
    main = container("main", image=image)
    del main["name"]  # an Argo template's container has no name: it is `main`
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
            "spec": {"entrypoint": "run",
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
                     "templates": [{"name": "run", "container": main}]}}


def wrapped_pod(name: str, *containers: dict[str, Any]) -> dict[str, Any]:
    """An AppWrapper around one bare Pod."""
    inner = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": name, "labels": {"app": name}},
             "spec": pod_spec(*containers, restartPolicy="Never")}
    return {"apiVersion": "workload.codeflare.dev/v1alpha1", "kind": "AppWrapper",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
            "spec": {"components": [{"podSets": [{"replicas": 1, "path": "template"}],
                                     "template": inner}]}}


def storm_service(name: str, *containers: dict[str, Any]) -> dict[str, Any]:
    """An AIBrix StormService with one role (orchestration.aibrix.ai/v1alpha1)."""
    return {"apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"roles": [
                         {"name": "decode", "replicas": 1, "template": {
                             "metadata": {"labels": {"app": name}},
                             "spec": pod_spec(*containers)}}]}}}}


def ray_cluster_fleet(name: str, *workers: dict[str, Any]) -> dict[str, Any]:
    """An AIBrix RayClusterFleet whose RayCluster has one worker group."""
    group = {"metadata": {"labels": {"app": name}}}
    return {"apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RayClusterFleet",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "headGroupSpec": {"template": {**group, "spec": pod_spec(
                             container("ray-head"))}},
                         "workerGroupSpecs": [{"groupName": "gpu", "template": {
                             **group, "spec": pod_spec(*workers)}}]}}}}


def ome_service(name: str, runner: dict[str, Any]) -> dict[str, Any]:
    """An OME InferenceService (ome.io/v1beta1) whose engine inlines its pod spec around a
    runner, OME's container, which names none."""
    runner = {key: value for key, value in runner.items() if key != "name"}
    return {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
            "spec": {"model": {"name": "llama"}, "engine": {
                "labels": {"app": name}, "securityContext": {"runAsNonRoot": True,
                                                             "runAsUser": 10001},
                "runner": runner}}}


def ome_runtime(name: str, runner: dict[str, Any]) -> dict[str, Any]:
    """An OME ServingRuntime (ome.io/v1beta1) whose engineConfig inlines its pod spec around a
    runner."""
    return {"apiVersion": "ome.io/v1beta1", "kind": "ServingRuntime",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
            "spec": {"supportedModelFormats": [{"modelFormat": {"name": "safetensors"}}],
                     "engineConfig": {
                         "labels": {"app": name},
                         "securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
                         "runner": {**runner, "name": "ome-container"}}}}


@pytest.fixture(scope="module")
def kube(guard: Guard) -> ControlPlane:
    plane = guard.plane
    plane.namespace(NAMESPACE)
    made = [crd(group, kind, plural, *version) for group, kind, plural, *version in CRDS]
    made += [composed_crd(*entry) for entry in COMPOSED.values()]
    for definition in made:
        plane.apply(definition, check=True)
        plane.kubectl("wait", "--for=condition=Established", "--timeout=30s",
                      f"crd/{definition['metadata']['name']}")
    return plane


@pytest.fixture
def switched_on(guard: Guard, kube: ControlPlane) -> Iterator[ControlPlane]:
    with guard.pointed_at(guard.webhook.url, lambda: denies_bad_pod(kube), **SWITCHES):
        yield kube


def server_dry_run(kube: ControlPlane, obj: dict[str, Any]) -> tuple[int, str, dict[str, Any]]:
    done = kube.apply(obj, "--dry-run=server", "-o", "json")
    return done.returncode, done.stderr, json.loads(done.stdout) if done.returncode == 0 else {}


def test_off_by_default_the_api_server_never_asks(kube: ControlPlane) -> None:
    for obj in (volcano_job("latest", container("worker", image="nginx:latest")),
                workflow("latest", "nginx:latest"),
                wrapped_pod("latest", container("worker", image="nginx:latest")),
                storm_service("latest", container("decode", image="nginx:latest")),
                ray_cluster_fleet("latest", container("worker", image="nginx:latest")),
                ome_service("latest", container(image="nginx:latest")),
                ome_runtime("latest", container(image="nginx:latest"))):
        code, stderr, _ = server_dry_run(kube, obj)
        assert code == 0, stderr


def test_switched_on_the_webhooks_judge_and_patch_the_pod_templates(
        switched_on: ControlPlane) -> None:
    kube = switched_on
    code, stderr, _ = server_dry_run(
        kube, volcano_job("latest", container("worker", image="nginx:latest")))
    assert code != 0
    assert "[disallow-latest-tag]" in stderr
    assert "spec.tasks[0].template.spec.containers[0].image" in stderr
    code, stderr, _ = server_dry_run(kube, workflow("latest", "nginx:latest"))
    assert code != 0
    assert "[disallow-latest-tag]" in stderr and "spec.templates[0].container.image" in stderr
    # The mutating webhook too: a GPU task gets the GPU toleration.
    code, stderr, admitted = server_dry_run(kube, volcano_job("gpu", gpu_container()))
    assert code == 0, stderr
    assert admitted["spec"]["tasks"][0]["template"]["spec"]["tolerations"] == [GPU_TOLERATION]
    code, stderr, _ = server_dry_run(kube, workflow("pinned", "registry.example.com/t:1.0"))
    assert code == 0, stderr
    # An AppWrapper's wrapped bare Pod is judged, and patched, at its own spec.
    code, stderr, _ = server_dry_run(
        kube, wrapped_pod("latest", container("worker", image="nginx:latest")))
    assert code != 0
    assert "spec.components[0].template.spec.containers[0].image" in stderr
    code, stderr, admitted = server_dry_run(kube, wrapped_pod("gpu", gpu_container()))
    assert code == 0, stderr
    assert admitted["spec"]["components"][0]["template"]["spec"]["tolerations"] == [
        GPU_TOLERATION]


def test_switched_on_the_inference_platforms_pods_are_judged_and_patched_where_written(
        switched_on: ControlPlane) -> None:
    kube = switched_on
    for obj, where in (
            (storm_service("latest", container("decode", image="nginx:latest")),
             "spec.template.spec.roles[0].template.spec.containers[0].image"),
            (ray_cluster_fleet("latest", container("worker", image="nginx:latest")),
             "spec.template.spec.workerGroupSpecs[0].template.spec.containers[0].image"),
            (ome_service("latest", container(image="nginx:latest")),
             "spec.engine.runner.image"),
            (ome_runtime("latest", container(image="nginx:latest")),
             "spec.engineConfig.runner.image")):
        code, stderr, _ = server_dry_run(kube, obj)
        assert code != 0, obj["kind"]
        assert "[disallow-latest-tag]" in stderr and where in stderr, stderr
    # The mutating webhook patches each GPU pod spec where the kind keeps it.
    code, stderr, admitted = server_dry_run(kube, storm_service("gpu", gpu_container()))
    assert code == 0, stderr
    role = admitted["spec"]["template"]["spec"]["roles"][0]["template"]["spec"]
    assert role["tolerations"] == [GPU_TOLERATION]
    assert "startupProbe" in role["containers"][0]
    code, stderr, admitted = server_dry_run(kube, ray_cluster_fleet("gpu", gpu_container()))
    assert code == 0, stderr
    worker = admitted["spec"]["template"]["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["tolerations"] == [GPU_TOLERATION]
    code, stderr, admitted = server_dry_run(kube, ome_service("gpu", gpu_container()))
    assert code == 0, stderr
    engine = admitted["spec"]["engine"]
    assert engine["tolerations"] == [GPU_TOLERATION]
    assert "startupProbe" in engine["runner"]
    code, stderr, admitted = server_dry_run(kube, ome_runtime("gpu", gpu_container()))
    assert code == 0, stderr
    assert admitted["spec"]["engineConfig"]["tolerations"] == [GPU_TOLERATION]


def test_the_composed_kinds_are_judged_through_the_api_server_as_offline(
        guard: Guard, switched_on: ControlPlane) -> None:
    kube = switched_on
    policies = load_policies(guard.policies, guard.config)
    for name in COMPOSED:
        obj = manifest(name)
        offline = evaluate(decode(obj), policies, Review(namespace=NAMESPACE))
        denials = [line[2:] for line in offline.message.splitlines() if line.startswith("- ")]
        assert denials, name
        code, stderr, _ = server_dry_run(kube, obj)
        assert code != 0, name
        for line in denials:
            assert line in stderr, (name, line, stderr)
        assert stderr.count("- [") == len(denials), stderr
        for warning in offline.warnings:
            assert warning in stderr, (name, warning)
    # Never patched: a Dynamo GPU service with nothing to deny and no GPU toleration is
    # admitted as sent, where a pod template would get one.
    graph = manifest("dynamo-graphdeployment.yaml")
    worker = graph["spec"]["services"]["VllmDecodeWorker"]
    worker.pop("envs")
    worker["livenessProbe"]["failureThreshold"] = 12
    worker["resources"]["limits"] = {"gpu": "1"}
    worker["extraPodSpec"].pop("tolerations")
    worker["extraPodSpec"]["mainContainer"]["image"] = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.1"
    assert evaluate(decode(graph), policies, Review(namespace=NAMESPACE)).allowed
    code, stderr, admitted = server_dry_run(kube, graph)
    assert code == 0, stderr
    assert admitted["spec"] == graph["spec"]


def test_off_by_default_the_composed_kinds_are_never_sent(kube: ControlPlane) -> None:
    for name in COMPOSED:
        code, stderr, _ = server_dry_run(kube, manifest(name))
        assert code == 0, (name, stderr)
