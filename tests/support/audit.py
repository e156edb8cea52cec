"""`quickq-guard audit` against a control plane, as the cluster tests and benchmarks run it:
`python -m webhook.cli audit` in a subprocess, its JSON log in a file; and the reports it
writes, read back with kubectl.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from support.controlplane import ControlPlane
from webhook.testing import REPO, stop_process

CRDS = REPO / "charts" / "quickq-guard" / "crds-optional"
REPORT_RESOURCES = {"openreports": ("reports.openreports.io", "clusterreports.openreports.io"),
                    "wgpolicyk8s": ("policyreports.wgpolicyk8s.io",
                                    "clusterpolicyreports.wgpolicyk8s.io")}


class Auditor:
    """One `quickq-guard audit` process (the controller, or --once with `once`)."""

    def __init__(self, plane: ControlPlane, workdir: Path, *extra: str,
                 name: str = "audit") -> None:
        self.log_path = workdir / f"{name}.log"
        command = [sys.executable, "-m", "webhook.cli", "audit", "--kubeconfig",
                   str(plane.kubeconfig), *extra]
        self.process = subprocess.Popen(command, cwd=REPO, stdout=self.log_path.open("wb"),
                                        stderr=subprocess.STDOUT)

    def logs(self) -> list[dict[str, Any]]:
        lines = self.log_path.read_text(errors="replace").splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def events(self, name: str) -> list[dict[str, Any]]:
        return [entry for entry in self.logs() if entry.get("event") == name]

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> int:
        return stop_process(self.process, 20)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


def install_report_crds(plane: ControlPlane) -> None:
    """The report CRDs of both APIs, from the chart's own schemas, established."""
    for name in ("openreports", "wgpolicyk8s"):
        plane.kubectl("apply", "-f", str(CRDS / f"{name}.yaml"))
    plane.kubectl("wait", "--for=condition=established", "--timeout=30s",
                  *(f"crd/{resource}" for pair in REPORT_RESOURCES.values()
                    for resource in pair))


def reports(plane: ControlPlane, api: str = "openreports") -> dict[str, dict[str, Any]]:
    """Every report of ours by namespace ("" for the cluster report)."""
    found: dict[str, dict[str, Any]] = {}
    namespaced, cluster = REPORT_RESOURCES[api]
    for resource, flags in ((namespaced, ["-A"]), (cluster, [])):
        done = plane.kubectl("get", resource, *flags, "-l",
                             "app.kubernetes.io/managed-by=quickq-guard", "-o", "json")
        for item in json.loads(done.stdout)["items"]:
            found[item["metadata"].get("namespace", "")] = item
    return found
