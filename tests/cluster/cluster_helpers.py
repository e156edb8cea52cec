"""The cluster tests' names for webhook.testing.controlplane (the real control plane that
benchmarks use too), and what only tests do: skip, or in CI fail, when the control plane
cannot run."""

from __future__ import annotations

import os

import pytest

from webhook.testing.controlplane import (
    API_VERSION,
    CHART,
    GPU_TOLERATION,
    HOW_TO_GET,
    RELEASE,
    RELEASE_NAMESPACE,
    REPO,
    ApiClient,
    ControlPlane,
    Guard,
    Webhook,
    assets_dir,
    chart_runtime_files,
    container,
    controller,
    denies_bad_pod,
    gpu_container,
    helm_binary,
    interfaces,
    issue,
    liveness,
    loopback_problem,
    make_ca,
    missing_assets,
    pod,
    pod_spec,
    release_values,
    rendered,
    running,
    started,
    template_spec,
    wait_until,
    warnings_of,
    webhook_certs,
)

__all__ = [
    "API_VERSION",
    "CHART",
    "GPU_TOLERATION",
    "HOW_TO_GET",
    "RELEASE",
    "RELEASE_NAMESPACE",
    "REPO",
    "ApiClient",
    "ControlPlane",
    "Guard",
    "Webhook",
    "assets_dir",
    "chart_runtime_files",
    "container",
    "controller",
    "denies_bad_pod",
    "gpu_container",
    "helm_binary",
    "in_ci",
    "interfaces",
    "issue",
    "liveness",
    "loopback_problem",
    "make_ca",
    "missing_assets",
    "pod",
    "pod_spec",
    "release_values",
    "rendered",
    "running",
    "skip_or_fail",
    "started",
    "template_spec",
    "wait_until",
    "warnings_of",
    "webhook_certs",
]


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def skip_or_fail(reason: str) -> None:
    """Skip with `reason`; in CI, fail: there the cluster tests must run."""
    if in_ci():
        pytest.fail(f"CI=true, so the cluster tests must run: {reason}", pytrace=False)
    pytest.skip(reason)
