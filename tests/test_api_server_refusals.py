"""Objects the API server refuses before it calls any webhook: only an offline check sees
them, and its verdict says the API server itself refuses those fields."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from builders import container, gpu_container, judge, node_template, pod, result, workload

from webhook.engine.apiserver import REFUSED

ROOT = Path(__file__).resolve().parent.parent


def resources(requests: dict[str, str], limits: dict[str, str]) -> dict[str, object]:
    return {"requests": requests, "limits": limits}


@pytest.mark.parametrize(("policy", "resource_spec"), [
    ("valid-resource-quantities", resources({"cpu": "1", "memory": "8GB"}, {})),
    ("valid-resource-quantities", resources({"cpu": "2", "memory": "1Gi"}, {"cpu": "1"})),
    ("require-gpu-limits", resources({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "0.5"},
                                     {"nvidia.com/gpu": "0.5"})),
    ("require-gpu-limits", resources({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"},
                                     {"nvidia.com/gpu": "1"})),
    ("require-gpu-limits", resources({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}, {})),
])
@pytest.mark.parametrize("kind", ["Pod", "Deployment", "CronJob"])
def test_what_the_api_server_refuses_is_denied_with_that_note(kind, policy, resource_spec):
    decision = judge(workload(kind, container(resources=resource_spec)))
    assert not decision.allowed
    found = result(decision, policy)
    assert found.status == "fail" and found.reason == REFUSED


def test_a_denial_the_api_server_lets_through_has_no_note():
    decision = judge(pod(container(image="app:latest")))
    assert result(decision, "disallow-latest-tag").reason == ""


def test_a_zero_gpu_count_is_allowed_by_the_api_server_so_no_note():
    zero = resources({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "0"},
                     {"nvidia.com/gpu": "0"})
    decision = judge(pod(container(resources=zero)))
    assert result(decision, "require-gpu-limits").reason == ""


def test_a_node_template_reaches_the_webhook_so_its_verdict_has_no_note():
    half = {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "0.5"},
            "limits": {"nvidia.com/gpu": "0.5"}}
    decision = judge(node_template(resources=half))
    found = result(decision, "require-gpu-limits")
    assert found.status == "fail" and found.reason == ""


def test_a_good_gpu_pod_has_no_note():
    assert all(r.reason != REFUSED for r in judge(pod(gpu_container())).results)


def test_the_cli_says_the_api_server_itself_refuses_the_offline_example():
    done = subprocess.run([sys.executable, "-m", "webhook.cli", "check",
                           "examples/offline/gpu-fraction-job.yaml"],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 1
    denials = [line for line in done.stdout.splitlines() if line.startswith("DENY")]
    assert len(denials) == 4
    assert all("(the API server itself refuses this field before any webhook is called)  "
               "[examples/offline/gpu-fraction-job.yaml:" in line for line in denials)
    # Each denial points at its field: requests.cpu, requests.memory and both GPU counts.
    source = (ROOT / "examples/offline/gpu-fraction-job.yaml").read_text().splitlines()
    fields = [f"{number}:{text.index(text.strip()) + 1}" for number, text in
              enumerate(source, 1) if text.strip() in
              ('cpu: "2"', "memory: 8GB", 'nvidia.com/gpu: "0.5"')]
    assert len(fields) == 4
    assert sorted(line.rsplit(":", 2)[-2] + ":" + line.rsplit(":", 2)[-1].rstrip("]")
                  for line in denials) == sorted(fields)


def test_another_projects_kind_is_stored_and_only_its_pods_are_refused():
    from webhook.manifests import read_file

    [document] = read_file(ROOT / "tests" / "ml_workloads" / "leaderworkerset.yaml")
    obj = document.obj  # its worker asks for 8 GPUs with a limit of 4
    worker = obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    found = result(judge(obj), "require-gpu-limits")
    assert found.status == "fail"
    assert found.reason == ("the API server stores this LeaderWorkerSet, but refuses every pod "
                            "made from it with this field, so none will start")
    worker["resources"]["limits"]["memory"] = "8GB"  # its CRD's schema refuses the format
    assert result(judge(obj), "valid-resource-quantities").reason == REFUSED
