"""End-to-end fixtures: a throwaway kind cluster with quickq-guard installed
the way an admin installs it (docker build, kind load, helm install).

Tests that use the `cluster` fixture run only where `docker` and `kind` are
on PATH and a Docker engine answers; elsewhere they are skipped with the
reason (the preflight checks of the test manifests still run). Set
QUICKQ_E2E_KEEP=1 to keep the cluster after the run for debugging.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_helpers import (
    CLUSTER,
    IMAGE_REPOSITORY,
    IMAGE_TAG,
    REPO,
    WORKLOADS,
    Cluster,
    helm_release_args,
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "e2e: needs Docker and kind; creates a kind cluster (skipped elsewhere)")


def docker_unavailable() -> str | None:
    """Why the kind end-to-end run cannot happen here, or None when it can."""
    for binary in ("docker", "kind"):
        if shutil.which(binary) is None:
            return f"`{binary}` is not on PATH"
    try:
        info = subprocess.run(["docker", "info"], capture_output=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return "`docker info` timed out: no Docker engine answers"
    if info.returncode != 0:
        return "`docker info` failed: no Docker engine answers"
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests that need the cluster; skip them, with the reason, without Docker."""
    here = Path(__file__).parent
    needs_cluster = [item for item in items
                     if Path(str(item.fspath)).is_relative_to(here)
                     and "cluster" in getattr(item, "fixturenames", ())]
    reason = docker_unavailable() if needs_cluster else None
    for item in needs_cluster:
        item.add_marker(pytest.mark.e2e)
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"kind e2e skipped: {reason}"))


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """kind cluster + image + `helm install`, torn down at the end of the session."""
    kubeconfig = tmp_path_factory.mktemp("kind") / "kubeconfig"
    kind = Cluster(kubeconfig)
    kind.run(["kind", "delete", "cluster", "--name", CLUSTER], check=False)
    kind.run(["kind", "create", "cluster", "--name", CLUSTER, "--kubeconfig", str(kubeconfig),
              "--wait", "180s"])
    try:
        image = f"{IMAGE_REPOSITORY}:{IMAGE_TAG}"
        kind.run(["docker", "build", "-t", image, str(REPO)], timeout=1200)
        kind.run(["kind", "load", "docker-image", image, "--name", CLUSTER])
        kind.helm("install", *helm_release_args("--create-namespace"))
        kind.kubectl("create", "namespace", WORKLOADS)
        yield kind
    finally:
        if not os.environ.get("QUICKQ_E2E_KEEP"):
            kind.run(["kind", "delete", "cluster", "--name", CLUSTER], check=False)
