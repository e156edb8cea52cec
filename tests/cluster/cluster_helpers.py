"""The cluster tests' names for tests/support/controlplane.py (the real control plane that
benchmarks use too), and what only tests do: skip, or in CI fail, when the control plane
cannot run; export policies and hold them in force with quickq-guard's webhooks
unregistered; create an object in a server-side dry run; act as a user with only the rights
a test grants."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support.controlplane import (
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
    "MUTATING",
    "RELEASE",
    "RELEASE_NAMESPACE",
    "REPO",
    "VALIDATING",
    "ApiClient",
    "ControlPlane",
    "Guard",
    "Webhook",
    "acting_as",
    "assets_dir",
    "chart_runtime_files",
    "container",
    "controller",
    "denies_bad_pod",
    "dry_run_create",
    "export",
    "exported_in_force",
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


# What an export makes, by the kinds to delete again: validating and mutating admission
# policies with their bindings.
VALIDATING = ("validatingadmissionpolicybindings", "validatingadmissionpolicies")
MUTATING = ("mutatingadmissionpolicybindings", "mutatingadmissionpolicies")


def export(fmt: str, out: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """`quickq-guard export --format FMT OPTIONS -O OUT`, which must succeed."""
    done = subprocess.run([sys.executable, "-m", "webhook.cli", "export", "--format", fmt,
                           *options, "-O", str(out)], capture_output=True, text=True,
                          cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    return done


@contextmanager
def exported_in_force(guard: Guard, manifest: Path, in_force: Callable[[], bool],
                      gone: Callable[[], bool], kinds: tuple[str, ...] = VALIDATING,
                      what: str = "the exported policies") -> Iterator[ControlPlane]:
    """The exported `manifest` applied with quickq-guard's webhooks unregistered, so that
    every verdict comes from the API server's own admission policies: from when `in_force`
    holds until the block ends; then its `kinds` deleted until `gone` holds (the API server
    drops them asynchronously, and the chart's own objects must pass when the webhooks are
    registered again)."""
    plane = guard.plane
    with guard.paused():
        plane.kubectl("apply", "-f", str(manifest))
        try:
            wait_until(in_force, what=f"{what} to be in force")
            yield plane
        finally:
            plane.kubectl("delete", ",".join(kinds), "-l",
                          "app.kubernetes.io/managed-by=quickq-guard", "--wait=true")
            wait_until(gone, what=f"{what} to be gone")


def dry_run_create(plane: ControlPlane, obj: dict[str, Any],
                   *flags: str) -> subprocess.CompletedProcess[str]:
    """A server-side dry-run create: admission runs in full, nothing is stored."""
    return plane.kubectl("create", "--dry-run=server", *flags, "-f", "-",
                         input=json.dumps(obj), check=False)


def acting_as(plane: ControlPlane, user: str, rules: list[dict[str, Any]],
              groups: tuple[str, ...] = ()) -> list[str]:
    """kubectl flags that impersonate `user` (in `groups`, and system:authenticated, which the
    API server adds), granted `rules` (RBAC PolicyRules) and nothing else by a ClusterRole
    bound to that user: a self-service tenant, or a kubelet, as the API server sees them."""
    name = "test-" + "".join(c if c.isalnum() else "-" for c in user.lower())
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name}, "rules": rules}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": name},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                             "name": user}]}
    for obj in (role, binding):
        plane.apply(obj, check=True)
    flags = ["--as", user, *(f"--as-group={group}" for group in groups)]
    first = rules[0]
    probe = ["auth", "can-i", first["verbs"][0], first["resources"][0], *flags]
    wait_until(lambda: plane.kubectl(*probe, check=False).stdout.strip() == "yes",
               what=f"RBAC to grant {user} its rights")
    return flags
