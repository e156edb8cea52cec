"""Shared pieces of the kind end-to-end tests: names, the pinned tools and a
cluster handle whose commands use the test cluster's own kubeconfig."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

import webhook

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "quickq-guard"
CLUSTER = "quickq-guard-e2e"
RELEASE = "quickq-guard"
NAMESPACE = "quickq-guard"
WORKLOADS = "e2e-workloads"
IMAGE_REPOSITORY = "localhost/quickq-guard"
IMAGE_TAG = webhook.__version__  # the image is tagged with the version, read in one place


def pinned_tool(name: str) -> str:
    """helm/kubectl from scripts/install-tools, so e2e runs the versions CI tests."""
    path = REPO / ".tools" / "bin" / name
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing: run `scripts/install-tools` first", pytrace=False)
    return str(path)


@dataclass
class Cluster:
    """Commands against the kind cluster, with its own kubeconfig."""

    kubeconfig: Path

    def run(self, cmd: Sequence[str], stdin: str | None = None, check: bool = True,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(list(cmd), input=stdin, capture_output=True, text=True,
                              env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
                              timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n"
                                 f"{proc.stdout}\n{proc.stderr}")
        return proc

    def kubectl(self, *args: str, stdin: str | None = None,
                check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run([pinned_tool("kubectl"), *args], stdin=stdin, check=check)

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run([pinned_tool("helm"), *args], check=check)


def helm_release_args(*extra: str) -> list[str]:
    """The install flags: the locally built image, the CRD, and a clean uninstall."""
    return [RELEASE, str(CHART), "--namespace", NAMESPACE,
            "--set", f"image.repository={IMAGE_REPOSITORY}", "--set", f"image.tag={IMAGE_TAG}",
            "--set", "image.pullPolicy=Never",
            "--set", "crd.install=true", "--set", "crd.keep=false",
            "--wait", "--timeout", "5m", *extra]


