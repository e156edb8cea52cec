"""The chart's own workload obeys quickq-guard's default policies: an admin
who runs `quickq-guard check` on the rendered chart gets a clean bill."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from chart_helpers import REPO, VENV_BIN, helm_template, run, to_yaml_stream

CLI = VENV_BIN / "quickq-guard"
# ConfigMaps too: no-plaintext-secrets judges their data (the chart's own hold no secret).
JUDGED = {"Pod", "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob",
          "ConfigMap"}


def check(docs: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    """Run `quickq-guard check --output json -` on manifests, as CI or an admin would."""
    if not os.access(CLI, os.X_OK):
        pytest.fail(f"{CLI} is missing: install the package into the venv "
                    "(pip install -e .)", pytrace=False)
    proc = run([CLI, "check", "--output", "json", "-"], stdin=to_yaml_stream(docs))
    assert proc.returncode in (0, 1), f"check crashed ({proc.returncode}):\n{proc.stderr}"
    return proc.returncode, json.loads(proc.stdout)


def enforce_findings(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Results of enforce policies that are anything but a clean pass or skip."""
    return [r for r in report["results"]
            if r["action"] == "enforce" and r["result"] not in ("pass", "skip")]


@pytest.mark.parametrize("values", [None, {"mode": "dry-run", "crd": {"install": True}},
                                    {"autoscaling": {"enabled": True},
                                     "networkPolicy": {"enabled": True}}],
                         ids=["defaults", "dry-run-crd", "hpa-netpol"])
def test_rendered_chart_passes_own_policies(values: dict[str, Any] | None) -> None:
    docs = helm_template(values)
    code, report = check(docs)
    assert enforce_findings(report) == []
    assert code == 0
    assert report["summary"]["fail"] == 0 and report["summary"]["error"] == 0
    # The Deployment was really judged, by every shipped policy that is on and judges pods.
    from webhook import load_policies

    shipped = {p.id for p in load_policies().policies if p.action != "off" and p.pods}
    assert len(shipped) == len(list((REPO / "policies").glob("*.yaml"))) - 2
    judged = {r["policy"] for r in report["results"]
              if r["resource"]["kind"] == "Deployment" and r["result"] != "skip"}
    assert judged == shipped
    assert report["summary"]["resources"] == len(docs)
    assert {r["resource"]["kind"] for r in report["results"]
            if r["result"] == "pass"} <= JUDGED


def test_check_catches_a_chart_without_requests() -> None:
    """Control: dropping the requests must make the same check fail."""
    # null deletes a default; limits alone would count as requests, as in Kubernetes.
    docs = helm_template({"resources": {"requests": None, "limits": None}})
    code, report = check(docs)
    assert code == 1
    assert {r["policy"] for r in enforce_findings(report)} == {"require-requests"}


def test_check_catches_a_root_container() -> None:
    """Control: the same chart made to run as root (the values schema refuses that, so the
    rendered Deployment is changed instead) fails the check."""
    docs = helm_template()
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    pod["securityContext"].update(runAsUser=0, runAsNonRoot=False)
    pod["containers"][0]["securityContext"].update(runAsUser=0, runAsNonRoot=False)
    code, report = check(docs)
    assert code == 1
    assert "disallow-root-user" in {r["policy"] for r in enforce_findings(report)}
