"""The audit as the chart runs it, and its reports as people read them, on the real API server.

The controller runs out of cluster (no kubelet here) with a token of the chart's own audit
ServiceAccount and the chart's rendered arguments, policies and config: with exactly the RBAC
the chart installs it scans, writes its reports and holds its Lease, and answers the chart's
probes. Then `quickq-guard report` reads reports back through the API: those the controller
wrote, and reports made here of every kind of result (denied, excepted, a patch, a report cut
short), as JSON and as the HTML page, which headless Chromium opens with no console error and
no request, showing the findings."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import (
    RELEASE,
    RELEASE_NAMESPACE,
    REPO,
    ControlPlane,
    Guard,
    container,
    controller,
    gpu_container,
    liveness,
    pod_spec,
    release_values,
    rendered,
    wait_until,
)
from support.audit import Auditor, reports
from test_html_report_browser import browser, load, show_all, visible

from webhook.testing import free_port

__all__ = ["browser"]  # the Chromium fixture, shared with the check -o html browser tests

NAMESPACE = "audit-report"
MADE = "audit-report-made"
AUDIT = f"{RELEASE}-audit"
SECRET = "planted-7781-value"


def chart_audit_args(guard: Guard) -> list[str]:
    """The audit container's arguments as the chart renders them, with the policies and
    config files the session's webhook runs (the chart's ConfigMaps, written out)."""
    documents = rendered(guard.plane, RELEASE, RELEASE_NAMESPACE,
                         release_values("https://127.0.0.1:1", guard.ca_bundle))
    [deployment] = [d for d in documents if d["kind"] == "Deployment"
                    and d["metadata"]["name"] == AUDIT]
    (audit,) = deployment["spec"]["template"]["spec"]["containers"]
    assert audit["command"] == ["quickq-guard", "audit"]
    args = []
    for arg in audit["args"]:
        if arg.startswith("--policies="):
            arg = f"--policies={guard.policies}"
        elif arg.startswith("--config="):
            arg = f"--config={guard.config}"
        elif arg.startswith("--metrics-port="):
            continue
        args.append(arg)
    return args


@pytest.fixture(scope="module")
def audited(guard: Guard, kube: ControlPlane,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Auditor, int]]:
    """The controller, as its pod would run it, over objects admitted with findings."""
    workdir = tmp_path_factory.mktemp("audit-report")
    # Admitted with findings that do not block: a warn policy's and an audit policy's.
    for obj in (controller("Deployment", "impatient", NAMESPACE,
                           pod_spec(container(livenessProbe=liveness(threshold=1)))),
                controller("Deployment", "model", NAMESPACE, pod_spec(gpu_container())),
                controller("Deployment", "clean", NAMESPACE, pod_spec(container()))):
        kube.apply(obj, check=True)
    config = kube.kubeconfig_as(RELEASE_NAMESPACE, AUDIT, workdir / "audit.kubeconfig")
    port = free_port()
    auditor = Auditor(kube, workdir, *chart_audit_args(guard), "--kubeconfig", str(config),
                      "--metrics-port", str(port), "--write-interval", "0.5")
    try:
        yield auditor, port
    finally:
        auditor.stop()


def test_the_controller_with_the_charts_rbac_writes_reports_and_holds_its_lease(
        audited: tuple[Auditor, int], kube: ControlPlane) -> None:
    auditor, port = audited
    wait_until(lambda: NAMESPACE in reports(kube), timeout=60,
               what=f"the report of {NAMESPACE}\n{auditor.output()[-3000:]}")
    found = reports(kube)[NAMESPACE]["results"]
    rows = {(r["resources"][0]["name"], r["policy"], r["result"]) for r in found}
    assert {("impatient", "liveness-probe-tolerance", "warn"),
            ("model", "gpu-priority-class", "warn")} <= rows
    assert "clean" not in {name for name, _, _ in rows}
    assert "forbidden" not in auditor.output().lower(), auditor.output()[-3000:]
    lease = kube.get("lease", AUDIT, RELEASE_NAMESPACE)
    assert lease["spec"]["holderIdentity"]
    # The chart's probes: /healthz on the metrics port.
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
        assert answer.status == 200
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        assert b"quickq_guard_audit_leader 1.0" in answer.read()


def result(kind: str, name: str, policy: str, outcome: str, message: str,
           **properties: str) -> dict[str, Any]:
    return {"source": "quickq-guard", "policy": policy, "rule": policy, "result": outcome,
            "category": "mutate" if outcome == "pass" else "validate", "severity": "high",
            "scored": True, "message": message, "timestamp": {"seconds": 1, "nanos": 0},
            "resources": [{"apiVersion": "apps/v1", "kind": kind, "name": name,
                           "namespace": MADE, "uid": f"uid-{name}"}],
            "properties": properties}


MADE_RESULTS = [
    result("Deployment", "web", "disallow-latest-tag", "fail",
           "container 'web': image 'nginx:latest' uses the latest tag; pin it to a version",
           action="enforce", verdict="deny"),
    result("Deployment", "api", "no-plaintext-secrets", "fail",
           "container 'api': env DB_PASSWORD holds a literal value (hidden); move it to a "
           "Secret", action="enforce", verdict="deny"),
    result("Deployment", "legacy-api", "disallow-latest-tag", "skip",
           "excepted by grants/legacy: container 'web': image 'nginx:latest' uses the latest "
           "tag; pin it to a version", action="enforce", verdict="excepted",
           exception="grants/legacy"),
    result("Deployment", "model", "inject-startup-probe", "pass",
           "would patch: container 'model': add a startupProbe",
           action="enforce", verdict="patch",
           patch=json.dumps([{"op": "add", "path": "/spec/template/spec/containers/0/"
                              "startupProbe", "value": {"periodSeconds": 10}}])),
    {"source": "quickq-guard", "policy": "quickq-guard-report-limit",
     "rule": "quickq-guard-report-limit", "result": "warn", "severity": "info",
     "scored": False, "timestamp": {"seconds": 1, "nanos": 0},
     "message": "7 more results left out of this report (at most 4 results, 768 KiB); see "
                f"them all with: quickq-guard audit --once --namespace {MADE}",
     "properties": {"leftOut": "7"}},
]


@pytest.fixture(scope="module")
def made(kube: ControlPlane) -> str:
    """A report of every kind of result, as the audit writes one, made here."""
    kube.namespace(MADE)
    report = {"apiVersion": "openreports.io/v1alpha1", "kind": "Report",
              "metadata": {"name": "quickq-guard", "namespace": MADE,
                           "labels": {"app.kubernetes.io/managed-by": "quickq-guard"}},
              "source": "quickq-guard",
              "summary": {"pass": 1, "fail": 2, "warn": 7, "error": 0, "skip": 1},
              "results": MADE_RESULTS}
    kube.apply(report, check=True)
    return MADE


def report(kube: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "webhook.cli", "report", "--kubeconfig",
                           str(kube.kubeconfig), *args], cwd=REPO, capture_output=True,
                          text=True, check=False, timeout=120)


def test_report_json_reads_every_kind_of_result(kube: ControlPlane, made: str) -> None:
    done = report(kube, "-n", made, "-o", "json")
    assert done.returncode == 1, done.stderr  # a denial: check's exit code
    found = json.loads(done.stdout)
    by = {(r["resource"]["name"], r["policy"]): r for r in found["results"]}
    assert by[("web", "disallow-latest-tag")]["result"] == "fail"
    excepted = by[("legacy-api", "disallow-latest-tag")]
    assert excepted["findings"][0]["exception"] == "grants/legacy"
    assert excepted["findings"][0]["message"].startswith("container 'web'")
    assert by[("model", "inject-startup-probe")]["result"] == "patch"
    summary = found["summary"]
    assert (summary["resources"], summary["outcomes"]["denied"], summary["excepted"]) == \
        (4, 2, 1)


def test_report_reads_what_the_controller_wrote(kube: ControlPlane,
                                                audited: tuple[Auditor, int]) -> None:
    wait_until(lambda: NAMESPACE in reports(kube), timeout=60, what="the audit's report")
    done = report(kube, "-n", NAMESPACE, "-o", "json")
    assert done.returncode == 0, done.stderr  # a warning and an audit finding fail nothing
    found = {(r["resource"]["name"], r["policy"], r["action"])
             for r in json.loads(done.stdout)["results"]}
    assert {("impatient", "liveness-probe-tolerance", "warn"),
            ("model", "gpu-priority-class", "audit")} <= found


def test_report_html_opens_with_no_error_and_shows_the_findings(
        kube: ControlPlane, made: str, browser: Any, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    done = report(kube, "-n", made, "-o", "html", "--output-file", str(page))
    assert done.returncode == 1, done.stderr
    text = page.read_text()
    assert "Made by <code>quickq-guard report</code>" in text
    assert SECRET not in text
    seen = load(browser, page)
    assert seen["console"] == []
    assert seen["requests"] == [page.as_uri()]
    show_all(browser)
    rows = visible(browser)
    names = {(row[0], row[1], row[4]) for row in rows}
    assert {("deny", "disallow-latest-tag", "web"), ("deny", "no-plaintext-secrets", "api"),
            ("excepted", "disallow-latest-tag", "legacy-api"),
            ("patch", "inject-startup-probe", "model")} <= names
    # the report cut short
    assert any("7 more results left out" in " ".join(row) for row in rows)
    assert f"{MADE}/Deployment/web" in " ".join(cell for row in rows for cell in row)


def test_no_report_api_installed_is_a_clear_error(kube: ControlPlane) -> None:
    done = report(kube, "--report-api", "wgpolicyk8s", "-o", "json")
    if kube.kubectl("get", "crd", "policyreports.wgpolicyk8s.io", check=False).returncode:
        assert done.returncode == 2
        assert "report CRDs are not installed" in done.stderr
        assert "Traceback" not in done.stderr
    else:  # another module installed them: then it reads them
        assert done.returncode in (0, 1), done.stderr


def test_a_kind_installed_but_not_judged_by_the_chart_stops_nothing(
        audited: tuple[Auditor, int], kube: ControlPlane) -> None:
    """Volcano's CRD installed, its kind left off in the chart (workloadKinds.volcano), so
    the chart grants no read of it: the audit goes on judging and writing the rest."""
    auditor, _ = audited
    wait_until(lambda: NAMESPACE in reports(kube), timeout=60, what="the audit's report")
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "jobs.batch.volcano.sh"},
           "spec": {"group": "batch.volcano.sh", "scope": "Namespaced",
                    "names": {"kind": "Job", "plural": "jobs", "singular": "job",
                              "listKind": "JobList"},
                    "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                                  "schema": {"openAPIV3Schema": {
                                      "type": "object",
                                      "x-kubernetes-preserve-unknown-fields": True}}}]}}
    made_here = kube.kubectl("get", "crd", "jobs.batch.volcano.sh", check=False).returncode
    kube.apply(crd, check=True)
    try:
        kube.kubectl("wait", "--for=condition=Established", "--timeout=30s",
                     "crd/jobs.batch.volcano.sh")
        judged_after_the_crd(auditor, kube)
    finally:
        if made_here:
            kube.kubectl("delete", "crd", "jobs.batch.volcano.sh", "--wait=false")


def judged_after_the_crd(auditor: Auditor, kube: ControlPlane) -> None:
    late = controller("Deployment", "late", NAMESPACE,
                      pod_spec(container(livenessProbe=liveness(threshold=1))))
    kube.apply(late, check=True)

    def judged_late() -> bool:
        found = reports(kube)[NAMESPACE]["results"]
        return any(r["resources"][0]["name"] == "late" for r in found)

    wait_until(judged_late, timeout=60,
               what=f"the Deployment made after the CRD judged\n{auditor.output()[-3000:]}")
    # The CRD's arrival starts a scan: it leaves out the kind it may not read and ends well.
    wait_until(lambda: any(e.get("kind") == "Job" for e in auditor.events("kind-not-permitted"))
               or auditor.events("scan-failed"), timeout=30,
               what=f"the scan after the CRD\n{auditor.output()[-3000:]}")
    assert auditor.events("scan-failed") == [], auditor.output()[-3000:]


def test_an_account_that_may_not_read_reports_gets_a_clear_error(
        kube: ControlPlane, tmp_path: Path) -> None:
    config = kube.kubeconfig_as("default", "default", tmp_path / "nobody.kubeconfig")
    done = subprocess.run([sys.executable, "-m", "webhook.cli", "report", "--kubeconfig",
                           str(config), "-o", "json"], cwd=REPO, capture_output=True,
                          text=True, check=False, timeout=120)
    assert done.returncode == 2
    assert "answered 403 to the list of reports.openreports.io" in done.stderr
    assert "forbidden" in done.stderr and "Traceback" not in done.stderr
