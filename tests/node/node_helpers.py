"""What the node tests share: the release's names, the image values, and readers of the
pods' state."""

from __future__ import annotations

import json
from pathlib import Path

from support.controlplane import CHART
from support.node import GUARD_IMAGE, Node

from webhook.testing import wait_until

RELEASE = "quickq-guard"
NAMESPACE = "quickq-system"
AUDIT = f"{RELEASE}-audit"  # the audit's Deployment, ServiceAccount and Lease
AUDIT_PODS = "app.kubernetes.io/name=quickq-guard-audit"
BEFORE = "before-install"  # a namespace whose workloads were there before quickq-guard

repository, tag = GUARD_IMAGE.rsplit(":", 1)
IMAGE_VALUES = ["--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
                # The image exists only in this node's containerd: never try a registry.
                "--set", "image.pullPolicy=Never"]
# The audit (on by default) also serves its page of results at /report on its metrics port.
INSTALL_VALUES = [*IMAGE_VALUES, "--set", "audit.extraArgs={--serve-report}"]


def violator() -> dict[str, object]:
    """A Deployment that fails disallow-latest-tag, made before the install (so no webhook
    judged it); no replicas, so no pod tries to pull its image."""
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "legacy", "namespace": BEFORE, "labels": {"app": "legacy"}},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "legacy"}},
                     "template": {"metadata": {"labels": {"app": "legacy"}}, "spec": {
                         "containers": [{"name": "web", "image": "nginx:latest"}]}}}}


def deployment(node: Node) -> dict[str, object]:
    done = node.kubectl("get", "deployment", RELEASE, "-n", NAMESPACE, "-o", "json")
    loaded: dict[str, object] = json.loads(done.stdout)
    return loaded


def ready_pods(node: Node, namespace: str = NAMESPACE,
               selector: str = "app.kubernetes.io/name=quickq-guard") -> list[str]:
    """Names of the Running, Ready, not terminating pods that match `selector`."""
    done = node.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json")
    names = []
    for pod in json.loads(done.stdout)["items"]:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        conditions = pod.get("status", {}).get("conditions", [])
        if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            names.append(pod["metadata"]["name"])
    return names


def wait_ready(node: Node, count: int, timeout: float = 300) -> None:
    wait_until(lambda: len(ready_pods(node)) == count, timeout=timeout, interval=1,
               what=f"{count} quickq-guard pods Ready")


def chart_path() -> Path:
    return CHART
