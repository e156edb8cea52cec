"""quickq-guard in a real (kind) cluster: install with Helm, then the
admissions an admin would see. Expected messages and patches come from
`quickq-guard check` run offline on the same manifests, so the webhook and the
CLI are held to the same answers."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import time
from typing import Any

import pytest
import yaml
from e2e_helpers import (
    IMAGE_REPOSITORY,
    IMAGE_TAG,
    NAMESPACE,
    RELEASE,
    REPO,
    WORKLOADS,
    Cluster,
    helm_release_args,
    pinned_tool,
)

Manifest = dict[str, Any]


def cli() -> str:
    venv = REPO / ".venv" / "bin" / "quickq-guard"
    found = str(venv) if os.access(venv, os.X_OK) else shutil.which("quickq-guard")
    if not found:
        pytest.fail("quickq-guard CLI is not installed (pip install -e .)", pytrace=False)
    return found


def offline(manifest: Manifest, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([cli(), "check", *flags, "-"], input=yaml.safe_dump(manifest),
                          capture_output=True, text=True, timeout=60, check=False)


def enforce_failures(manifest: Manifest) -> list[dict[str, Any]]:
    """What the engine says an enforcing webhook must deny this manifest for."""
    report = json.loads(offline(manifest, "--output", "json").stdout)
    return [r for r in report["results"] if r["action"] == "enforce" and r["result"] == "fail"]


def fixed(manifest: Manifest) -> Manifest:
    """The manifest with the mutate policies' patches applied, per the CLI."""
    proc = offline(manifest, "--fix")
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert len(docs) == 1, proc.stdout + proc.stderr
    return dict(docs[0])


def contains(live: Any, expected: Any) -> bool:
    """`expected` is a subset of `live` (the API server adds defaults and other items)."""
    if isinstance(expected, dict):
        return isinstance(live, dict) and all(
            k in live and contains(live[k], v) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(live, list) and all(
            any(contains(item, want) for item in live) for want in expected)
    return bool(live == expected)


def pod(name: str, *, image: str = "registry.k8s.io/pause:3.10", root: bool = False,
        requests: bool = True, gpu: bool = False) -> Manifest:
    resources: dict[str, Any] = {}
    if requests:
        resources = {"requests": {"cpu": "50m", "memory": "32Mi"},
                     "limits": {"memory": "32Mi"}}
    if gpu:
        resources.setdefault("requests", {})["nvidia.com/gpu"] = "1"
        resources.setdefault("limits", {})["nvidia.com/gpu"] = "1"
    container: dict[str, Any] = {
        "name": "main", "image": image, "resources": resources,
        "securityContext": {"runAsNonRoot": not root, "runAsUser": 0 if root else 65532,
                            "allowPrivilegeEscalation": False},
    }
    if gpu:
        container["livenessProbe"] = {"httpGet": {"path": "/healthz", "port": 8080},
                                      "periodSeconds": 10, "failureThreshold": 6}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": WORKLOADS, "labels": {"app": "e2e"}},
            "spec": {"containers": [container]}}


def deployment(name: str, image: str) -> Manifest:
    template = pod(name, image=image)
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": WORKLOADS, "labels": {"app": "e2e"}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": template["spec"]}}}


def apply(cluster: Cluster, manifest: Manifest) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(manifest), check=False)


def assert_denied_like_cli(cluster: Cluster, manifest: Manifest) -> None:
    failures = enforce_failures(manifest)
    assert failures, "test manifest should break an enforce policy"
    proc = apply(cluster, manifest)
    assert proc.returncode != 0, f"admitted:\n{proc.stdout}"
    assert "denied the request" in proc.stderr
    for failure in failures:
        assert failure["message"] in proc.stderr, (failure["policy"], proc.stderr)


def test_install_is_healthy(cluster: Cluster) -> None:
    status = cluster.kubectl("-n", NAMESPACE, "get", "deployment", RELEASE, "-o", "json")
    ready = json.loads(status.stdout)["status"].get("readyReplicas", 0)
    assert ready == 2
    hooks = cluster.kubectl("get", "validatingwebhookconfigurations,"
                            "mutatingwebhookconfigurations", "-o", "name").stdout
    assert hooks.count(RELEASE) == 2


def test_bad_pod_is_denied_with_policy_message(cluster: Cluster) -> None:
    assert_denied_like_cli(cluster, pod("root-no-requests", root=True, requests=False))


def test_latest_deployment_is_denied_at_apply(cluster: Cluster) -> None:
    manifest = deployment("latest-web", "nginx:latest")
    assert "disallow-latest-tag" in {f["policy"] for f in enforce_failures(manifest)}
    assert_denied_like_cli(cluster, manifest)


def test_gpu_pod_is_admitted_with_startup_probe_and_toleration(cluster: Cluster) -> None:
    manifest = pod("gpu-inference", gpu=True)
    assert enforce_failures(manifest) == []
    expected = fixed(manifest)
    proc = apply(cluster, manifest)
    assert proc.returncode == 0, proc.stderr
    live = json.loads(cluster.kubectl("-n", WORKLOADS, "get", "pod", "gpu-inference",
                                      "-o", "json").stdout)
    container = live["spec"]["containers"][0]
    assert "startupProbe" in container
    assert contains(container["startupProbe"], expected["spec"]["containers"][0]["startupProbe"])
    assert any(t.get("key") == "nvidia.com/gpu" for t in live["spec"]["tolerations"])
    assert contains(live["spec"]["tolerations"], expected["spec"]["tolerations"])


def nodetemplate(name: str) -> Manifest:
    good = yaml.safe_load((REPO / "examples" / "good" / "nodetemplate.yaml").read_text())
    good["metadata"] = {**good["metadata"], "name": name, "namespace": WORKLOADS}
    return dict(good)


def test_nodetemplate_is_judged(cluster: Cluster) -> None:
    good = nodetemplate("gpu-inference-01")
    expected = fixed(good)
    proc = apply(cluster, good)
    assert proc.returncode == 0, proc.stderr
    live = json.loads(cluster.kubectl("-n", WORKLOADS, "get", "nodetemplates.quickq.io",
                                      "gpu-inference-01", "-o", "json").stdout)
    assert contains(live["spec"], expected["spec"])
    assert live["spec"] != good["spec"], "the mutating webhook should have patched it"

    bad = copy.deepcopy(nodetemplate("root-template"))
    del bad["spec"]["securityContext"]
    assert_denied_like_cli(cluster, bad)


def test_dry_run_mode_admits_with_warnings(cluster: Cluster) -> None:
    cluster.helm("upgrade", *helm_release_args("--reuse-values", "--set", "mode=dry-run"))
    manifest = pod("root-in-dry-run", root=True, requests=False)
    failures = enforce_failures(manifest)
    deadline = time.monotonic() + 120
    while True:  # pods of the previous revision may still answer for a moment
        proc = apply(cluster, manifest)
        if proc.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert proc.returncode == 0, proc.stderr
    assert "Warning:" in proc.stderr
    for failure in failures:
        assert failure["message"] in proc.stderr, failure["policy"]
    latest = deployment("latest-in-dry-run", "nginx:latest")
    proc = apply(cluster, latest)
    assert proc.returncode == 0 and "Warning:" in proc.stderr, proc.stderr


def test_uninstall_leaves_nothing_behind(cluster: Cluster) -> None:
    cluster.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait")
    hooks = cluster.kubectl("get", "validatingwebhookconfigurations,"
                            "mutatingwebhookconfigurations", "-o", "name").stdout
    assert RELEASE not in hooks
    crds = cluster.kubectl("get", "customresourcedefinitions", "-o", "name").stdout
    assert "nodetemplates.quickq.io" not in crds
    left = cluster.kubectl("-n", NAMESPACE, "get",
                           "all,configmaps,secrets,serviceaccounts,poddisruptionbudgets",
                           "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "name").stdout
    assert left.strip() == ""
    # Nothing intercepts any more: the same bad pod now goes through.
    proc = apply(cluster, pod("after-uninstall", root=True, requests=False))
    assert proc.returncode == 0, proc.stderr


# --- Preflight: no cluster needed ---------------------------------------------
# These run everywhere, so the e2e manifests and install flags are known to be
# right before anyone spends ten minutes on a kind cluster.


def test_preflight_manifests_break_the_intended_policies() -> None:
    bad = {f["policy"] for f in enforce_failures(pod("x", root=True, requests=False))}
    assert {"require-requests", "disallow-root-user"} <= bad
    latest = {f["policy"] for f in enforce_failures(deployment("x", "nginx:latest"))}
    assert latest == {"disallow-latest-tag"}
    root_template = nodetemplate("x")
    del root_template["spec"]["securityContext"]
    assert "disallow-root-user" in {f["policy"] for f in enforce_failures(root_template)}


def test_preflight_gpu_pod_and_nodetemplate_get_patched() -> None:
    gpu = pod("x", gpu=True)
    assert enforce_failures(gpu) == []
    patched = fixed(gpu)
    assert "startupProbe" in patched["spec"]["containers"][0]
    assert any(t.get("key") == "nvidia.com/gpu" for t in patched["spec"]["tolerations"])
    template = nodetemplate("x")
    assert enforce_failures(template) == []
    assert fixed(template)["spec"] != template["spec"]


def test_preflight_install_flags_render() -> None:
    args = [a for a in helm_release_args() if a not in ("--wait", "--timeout", "5m")]
    proc = subprocess.run([pinned_tool("helm"), "template", *args],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"{IMAGE_REPOSITORY}:{IMAGE_TAG}"
    assert container["imagePullPolicy"] == "Never"
    (crd,) = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    assert "annotations" not in crd["metadata"], "crd.keep=false so uninstall removes it"
