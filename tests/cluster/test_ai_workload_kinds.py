"""The chart's switches for the AI scheduler and inference platform kinds through a real
kube-apiserver: with minimal CRDs for Volcano's Job, Argo's Workflow, Kueue's AppWrapper,
AIBrix's StormService and RayClusterFleet and OME's InferenceService installed, the
`workloadKinds` switches send them to the webhooks, which judge and patch their pod specs (an
AppWrapper's wrapped bare Pod too, an OME component's inlined one); without the switches the
API server never asks."""

from __future__ import annotations

import json
from collections.abc import Iterator
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

NAMESPACE = "ai-kinds"
SWITCHES = {"workloadKinds.volcano": "true", "workloadKinds.argo": "true",
            "workloadKinds.appWrapper": "true", "workloadKinds.aibrix": "true",
            "workloadKinds.ome": "true"}
CRDS = [("batch.volcano.sh", "Job", "jobs"), ("argoproj.io", "Workflow", "workflows"),
        ("workload.codeflare.dev", "AppWrapper", "appwrappers"),
        ("orchestration.aibrix.ai", "StormService", "stormservices"),
        ("orchestration.aibrix.ai", "RayClusterFleet", "rayclusterfleets"),
        ("ome.io", "InferenceService", "inferenceservices", "v1beta1")]


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


@pytest.fixture(scope="module")
def kube(guard: Guard) -> ControlPlane:
    plane = guard.plane
    plane.namespace(NAMESPACE)
    for group, kind, plural, *version in CRDS:
        plane.apply(crd(group, kind, plural, *version), check=True)
        plane.kubectl("wait", "--for=condition=Established", "--timeout=30s",
                      f"crd/{plural}.{group}")
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
                ome_service("latest", container(image="nginx:latest"))):
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
             "spec.engine.runner.image")):
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
