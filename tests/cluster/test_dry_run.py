"""Dry runs through a real API server: kubectl's `--dry-run=server` (the webhooks judge and
patch, nothing is stored) and quickq-guard's own dry-run mode (nothing denied or patched,
everything said in warnings and audit annotations)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from cluster_helpers import (
    GPU_TOLERATION,
    ControlPlane,
    Guard,
    Webhook,
    container,
    denies_bad_pod,
    gpu_container,
    pod,
    warnings_of,
)

NAMESPACE = "dry-run"



def absent(kube: ControlPlane, name: str) -> bool:
    return kube.kubectl("get", "pod", name, "-n", NAMESPACE, check=False).returncode == 1


def test_server_side_dry_run_denies_as_a_real_apply_would(kube: ControlPlane) -> None:
    done = kube.apply(pod("latest", NAMESPACE, container(image="nginx:latest")),
                      "--dry-run=server")
    assert done.returncode == 1
    assert 'admission webhook "validate.quickq-guard.quickq.io" denied the request' \
        in done.stderr
    assert "[disallow-latest-tag] container 'web'" in done.stderr


def test_server_side_dry_run_shows_the_patch_and_stores_nothing(kube: ControlPlane) -> None:
    done = kube.apply(pod("gpu", NAMESPACE, gpu_container()), "--dry-run=server", "-o", "json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert "startupProbe" in shown["spec"]["containers"][0]
    assert GPU_TOLERATION in shown["spec"]["tolerations"]
    assert absent(kube, "gpu")


@pytest.fixture(scope="module")
def dry_run_mode(guard: Guard, kube: ControlPlane) -> Iterator[Webhook]:
    """The webhooks pointed at a `quickq-guard serve --mode dry-run` for this module."""
    webhook = Webhook(guard.workdir, guard.certs, "--policies", str(guard.policies),
                      "--config", str(guard.config), "--mode", "dry-run")
    try:
        with guard.pointed_at(webhook.url, lambda: not denies_bad_pod(kube)):
            yield webhook
    finally:
        webhook.stop()


def test_dry_run_mode_admits_a_bad_pod_and_warns_what_it_would_deny(
        kube: ControlPlane, dry_run_mode: Webhook) -> None:
    done = kube.apply(pod("latest-admitted", NAMESPACE, container(image="nginx:latest")))
    assert done.returncode == 0, done.stderr
    assert warnings_of(done.stderr) == [
        "[disallow-latest-tag] would deny: container 'web': image 'nginx:latest' uses the "
        "'latest' tag; pin it to a version (nginx:1.2.3) or a digest (nginx@sha256:...)"]
    assert not absent(kube, "latest-admitted")


def test_dry_run_mode_patches_nothing_and_says_what_it_would_patch(
        kube: ControlPlane, dry_run_mode: Webhook) -> None:
    done = kube.apply(pod("gpu-unpatched", NAMESPACE, gpu_container()))
    assert done.returncode == 0, done.stderr
    stored = kube.get("pod", "gpu-unpatched", NAMESPACE)
    assert "startupProbe" not in stored["spec"]["containers"][0]
    assert GPU_TOLERATION not in stored["spec"].get("tolerations", [])
    warnings = warnings_of(done.stderr)
    assert any(w.startswith("[inject-startup-probe] would patch: container 'model'")
               for w in warnings)
    assert any(w.startswith("[inject-gpu-toleration] would patch: add a toleration")
               for w in warnings)
