"""`quickq-guard audit` against a control plane, as the cluster tests and benchmarks run it:
`python -m webhook.cli audit` in a subprocess, its JSON log in a file; the reports it
writes, read back with kubectl; and what a report and `check -o policyreport` of a dump say,
as rows to compare result for result.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import yaml

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


def check(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`quickq-guard check` with the config.yaml of `workdir`, as the audit there runs."""
    return subprocess.run([sys.executable, "-m", "webhook.cli", "check", "--config",
                           str(workdir / "config.yaml"), *args], cwd=REPO,
                          capture_output=True, text=True, check=False)


Row = tuple[str, str, str, str, str, str]


def report_rows(found: dict[str, dict[str, Any]]) -> set[Row]:
    """(namespace, kind, name, policy, result, message) of every result of the reports."""
    rows = set()
    for namespace, report in found.items():
        for result in report.get("results") or ():
            for resource in result.get("resources") or ():
                rows.add((namespace, resource["kind"], resource["name"], result["policy"],
                          result["result"], result["message"]))
    return rows


def kept(result: dict[str, Any]) -> bool:
    """Whether a report keeps this result of `check -o policyreport`: failures, warnings,
    errors, excepted violations (skip) and patches (pass)."""
    return result["result"] in ("fail", "warn", "error") or (
        result["result"] == "skip" and result["message"].startswith("excepted by")) \
        or (result["result"] == "pass" and result["message"].startswith("would patch"))


def without_unkept(policyreports: str) -> str:
    """The stream less the results no report keeps. check writes each result as one line of
    JSON, which YAML reads as the same mapping: 10,000 objects' passes take minutes to read
    as YAML, a fraction of a second as JSON."""
    return "\n".join(line for line in policyreports.splitlines()
                     if not line.startswith("- {") or kept(orjson.loads(line[2:])))


def check_rows(policyreports: str) -> set[Row]:
    """The same of `check -o policyreport`, for the results a report keeps. A manifest
    cannot say that another project's kind is cluster-scoped, so check reports it in
    `default`, as `kubectl apply` without -n would place a namespaced one; the cluster knows
    better."""
    rows = set()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's: 10 times faster
    for report in yaml.load_all(without_unkept(policyreports), Loader=loader):
        namespace = report["metadata"].get("namespace", "")
        for result in report["results"] or ():
            resource = result["resources"][0]
            if kept(result) and resource["kind"] != "PolicyException":
                where = "" if resource["kind"] == "ClusterTrainer" else namespace
                rows.add((where, resource["kind"], resource["name"], result["policy"],
                          result["result"], result["message"]))
    return rows
