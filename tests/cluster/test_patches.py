"""Patches as stored: what the mutating webhook adds is in the object the API server keeps,
for a Pod, every pod controller and a NodeTemplate of the chart's CRD."""

from __future__ import annotations

import json

import pytest
from cluster_helpers import (
    API_VERSION,
    GPU_TOLERATION,
    REPO,
    ControlPlane,
    controller,
    gpu_container,
    pod,
    pod_spec,
    template_spec,
    warnings_of,
)

NAMESPACE = "patches"



def assert_patched(spec: dict[str, object]) -> None:
    [model] = spec["containers"]  # type: ignore[misc]
    startup = model["startupProbe"]
    assert startup["httpGet"] == {"path": "/healthz", "port": 8080, "scheme": "HTTP"}
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600
    assert GPU_TOLERATION in spec["tolerations"]  # type: ignore[operator]


def test_a_gpu_pod_is_stored_with_a_startup_probe_and_the_gpu_toleration(
        kube: ControlPlane) -> None:
    done = kube.apply(pod("gpu-pod", NAMESPACE, gpu_container()))
    assert done.returncode == 0, done.stderr
    assert warnings_of(done.stderr) == []
    assert_patched(kube.get("pod", "gpu-pod", NAMESPACE)["spec"])


@pytest.mark.parametrize("kind", sorted(API_VERSION))
def test_every_controller_is_stored_with_the_patches_in_its_pod_template(
        kube: ControlPlane, kind: str) -> None:
    name = f"gpu-{kind.lower()}"
    done = kube.apply(controller(kind, name, NAMESPACE, pod_spec(gpu_container())))
    assert done.returncode == 0, done.stderr
    stored = kube.get(kind.lower(), name, NAMESPACE)
    assert_patched(template_spec(stored))
    # Applying the same manifest again changes nothing: the patch is idempotent.
    again = kube.apply(controller(kind, name, NAMESPACE, pod_spec(gpu_container())))
    assert again.returncode == 0, again.stderr
    assert kube.get(kind.lower(), name, NAMESPACE)["metadata"]["generation"] \
        == stored["metadata"]["generation"]


def test_a_node_template_of_the_chart_crd_is_stored_patched(kube: ControlPlane) -> None:
    text = (REPO / "examples" / "good" / "nodetemplate.yaml").read_text()
    done = kube.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=text)
    assert done.returncode == 0, done.stderr
    stored = json.loads(kube.kubectl("get", "nodetemplates.quickq.io", "gpu-inference-01",
                                     "-n", NAMESPACE, "-o", "json").stdout)
    assert "startup" in stored["spec"]["health"]
    assert GPU_TOLERATION in stored["spec"]["tolerations"]
