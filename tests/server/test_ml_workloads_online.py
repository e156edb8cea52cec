"""The webhook judges the ML workload kinds (tests/ml_workloads/) and a custom kind from its
config as the engine does: offline == online, through the public HTTP interface only."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from real_workloads import patched, verdict
from server_helpers import Server, post, review
from test_workloads_online import online_verdict

from webhook import decode, evaluate, load_policies
from webhook.loader import load_config
from webhook.manifests import read_file

ML = Path(__file__).resolve().parent.parent / "ml_workloads"


def load(path: Path) -> dict[str, Any]:
    [document] = read_file(path)
    obj: dict[str, Any] = document.obj
    return obj



@pytest.mark.parametrize("name", sorted(path.name for path in ML.glob("*.yaml")))
def test_the_webhook_gives_the_engines_verdict_on_ml_kinds(client: httpx.Client,
                                                           name: str) -> None:
    obj = load(ML / name)
    assert online_verdict(client, obj) == verdict(evaluate(decode(obj), load_policies()))


def test_the_webhook_patches_a_training_job_at_the_gpu_replica_spec(client: httpx.Client) -> None:
    obj = load(ML / "pytorchjob.yaml")
    response = post(client, "/mutate", review(obj, namespace="kubeflow"))
    operations = json.loads(base64.b64decode(response["patch"]))
    assert [op["path"] for op in operations] == [
        "/spec/pytorchReplicaSpecs/Worker/template/spec/tolerations"]
    denied = post(client, "/validate", review(patched(obj, operations), namespace="kubeflow"))
    assert denied["allowed"] is False
    assert ("container 'pytorch' in pytorchReplicaSpecs.Worker: add resources.requests.cpu "
            "(field: spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources."
            "requests.cpu)") in denied["status"]["message"]


def test_the_webhook_refuses_a_broken_pod_template_naming_the_field(client: httpx.Client) -> None:
    obj = load(ML / "raycluster.yaml")
    obj["spec"]["workerGroupSpecs"][1]["template"]["spec"]["containers"][0]["ports"] = 8080
    response = post(client, "/validate", review(obj, namespace="ray"))
    assert response["allowed"] is False
    assert ("spec.workerGroupSpecs[1].template.spec.containers[0].ports: expected a list, "
            "got a number") in response["status"]["message"]


CUSTOM = {"customKinds": [{"group": "serving.example.com", "kind": "ModelServer",
                           "podTemplates": ["spec.shards[*].template"]}]}
MODEL_SERVER = {
    "apiVersion": "serving.example.com/v1", "kind": "ModelServer",
    "metadata": {"name": "llm", "namespace": "ml", "labels": {"app": "llm"}},
    "spec": {"shards": [{"template": {"spec": {
        "securityContext": {"runAsNonRoot": True},
        "containers": [{"name": "shard", "image": "registry.example.com/shard:2.0.0",
                        "resources": {"requests": {"cpu": "4", "memory": "32Gi",
                                                   "nvidia.com/gpu": "1"},
                                      "limits": {"nvidia.com/gpu": "1"}}}]}}}]},
}


def test_a_custom_kind_from_the_config_is_judged_online(tmp_path: Path, certs_dir: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps(CUSTOM))
    server = Server(tmp_path, certs_dir, "--config", str(config))
    try:
        with server.client() as client:
            online = online_verdict(client, MODEL_SERVER)
    finally:
        assert server.stop() == 0
    offline = verdict(evaluate(decode(MODEL_SERVER), load_policies(None, load_config(config))))
    assert online == offline
    assert [op["path"] for op in online["patch"]] == [
        "/spec/shards/0/template/spec/tolerations"]


def test_at_admission_a_trainer_runtime_is_told_no_trainjob_exists_yet(
        client: httpx.Client) -> None:
    """The webhook judges a runtime alone: its TrainJobs are created after it."""
    obj = load(ML / "trainer-clustertrainingruntime.yaml")
    node = obj["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"]["spec"]["containers"][0]
    del node["resources"]
    response = post(client, "/validate", review(obj))
    assert response["allowed"] is True
    assert response["warnings"] == [
        "container 'node' sets no resources: each TrainJob sets them "
        "(spec.trainer.resourcesPerNode) and none exists yet at admission, so they are not "
        "judged here; give each resourcesPerNode.requests (cpu, memory)"]
