"""UPDATE through a real API server: objects created before quickq-guard was installed, which
already break a policy or lack what the mutating webhook adds."""

from __future__ import annotations

import pytest
from cluster_helpers import (
    GPU_TOLERATION,
    ControlPlane,
    Guard,
    container,
    controller,
    gpu_container,
    pod,
    pod_spec,
    template_spec,
    warnings_of,
)

NAMESPACE = "updates"
NOT_PATCHED = "(not patched: this update leaves the pod template unchanged)"
MAY_RUN_AS_ROOT = ("[disallow-root-user] container '{}': may run as root; set "
                   "securityContext.runAsNonRoot: true or a non-zero securityContext.runAsUser "
                   "(already violated before this update)")


@pytest.fixture(scope="module")
def kube(guard: Guard) -> ControlPlane:
    """A GPU Deployment and a Pod that may run as root, created while no webhook was
    registered: what a cluster holds when quickq-guard is installed."""
    plane = guard.plane
    plane.namespace(NAMESPACE)
    with guard.paused():
        legacy = controller("Deployment", "gpu-legacy", NAMESPACE, pod_spec(gpu_container()))
        rooted = pod("rooted", NAMESPACE, container("a"), container("b"))
        rooted["spec"]["securityContext"] = {}
        for obj in (legacy, rooted):
            done = plane.apply(obj)
            assert done.returncode == 0 and not warnings_of(done.stderr), done.stderr
    return plane


def test_a_label_edit_rolls_out_nothing_and_says_what_the_template_lacks(
        kube: ControlPlane) -> None:
    before = kube.get("deployment", "gpu-legacy", NAMESPACE)
    done = kube.kubectl("label", "deployment", "gpu-legacy", "-n", NAMESPACE, "team=ml")
    after = kube.get("deployment", "gpu-legacy", NAMESPACE)
    assert after["metadata"]["labels"]["team"] == "ml"
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["spec"]["template"] == before["spec"]["template"]
    warnings = warnings_of(done.stderr)
    for policy in ("inject-startup-probe", "inject-gpu-toleration"):
        [warning] = [w for w in warnings if w.startswith(f"[{policy}]")]
        assert warning.endswith(NOT_PATCHED) and len(warning.encode()) <= 256


def test_an_update_of_the_template_gets_the_patches(kube: ControlPlane) -> None:
    before = kube.get("deployment", "gpu-legacy", NAMESPACE)
    kube.kubectl("set", "image", "deployment/gpu-legacy", "-n", NAMESPACE,
                 "model=registry.example.com/model-server:2.0.2")
    after = kube.get("deployment", "gpu-legacy", NAMESPACE)
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1
    spec = template_spec(after)
    assert "startupProbe" in spec["containers"][0]
    assert GPU_TOLERATION in spec["tolerations"]


def test_an_update_keeping_an_old_violation_is_admitted_with_whole_warnings(
        kube: ControlPlane) -> None:
    done = kube.kubectl("label", "pod", "rooted", "-n", NAMESPACE, "team=ml")
    assert kube.get("pod", "rooted", NAMESPACE)["metadata"]["labels"]["team"] == "ml"
    warnings = [w for w in warnings_of(done.stderr) if w.startswith("[disallow-root-user]")]
    assert warnings == [MAY_RUN_AS_ROOT.format("a"), MAY_RUN_AS_ROOT.format("b")]


def test_an_update_adding_a_violation_is_denied(kube: ControlPlane) -> None:
    done = kube.kubectl("set", "image", "pod/rooted", "-n", NAMESPACE,
                        "a=registry.example.com/web:latest", check=False)
    assert done.returncode == 1
    assert 'admission webhook "validate.quickq-guard.quickq.io" denied' in done.stderr
    assert f"Pod {NAMESPACE}/rooted is denied" in done.stderr
    assert "[disallow-latest-tag] container 'a'" in done.stderr
    denial = done.stderr.split("denied the request:", 1)[1]
    assert "[disallow-root-user]" not in denial  # old violations only warn
    stored = kube.get("pod", "rooted", NAMESPACE)
    assert stored["spec"]["containers"][0]["image"] == "registry.example.com/web:1.0"
