"""`quickq-guard audit` against a real kube-apiserver: the reports it writes say what `check`
says about a dump of the same objects, result for result, and follow the cluster (a fix, a
config change, a namespace deleted, a leader stopped); `audit --once` prints what `check`
prints for the dump.

The module has an API server of its own with no webhook registered: the objects are created
as a cluster holds them from before quickq-guard was installed, violations included."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_helpers import (
    ControlPlane,
    container,
    controller,
    gpu_container,
    pod,
    pod_spec,
    started,
    wait_until,
)
from support.audit import (
    Auditor,
    check,
    check_rows,
    install_report_crds,
    report_rows,
    reports,
)
from test_audit_page import by_object
from test_cli_html import Page

from webhook.testing import REPO, free_port

A, B, GONE = "audit-a", "audit-b", "audit-gone"
GRANTS = "audit-grants"  # the config's exceptionNamespaces
IGNORED, EXCLUDED = "audit-ignored", "audit-excluded"
SECRET = "planted-s3cr3t-9157"  # an env value no report may show
JUDGED = ("deployments,statefulsets,jobs,cronjobs,pods,configmaps,nodetemplates,"
          "clustertrainers")
CLUSTER_KIND = {  # a cluster-scoped kind of another project, named in the config's customKinds
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "clustertrainers.example.com"},
    "spec": {"group": "example.com", "scope": "Cluster",
             "names": {"kind": "ClusterTrainer", "plural": "clustertrainers",
                       "singular": "clustertrainer", "listKind": "ClusterTrainerList"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                 "openAPIV3Schema": {"type": "object",
                                     "x-kubernetes-preserve-unknown-fields": True}}}]}}


def config(require_labels: str = "audit") -> str:
    return yaml.safe_dump({
        "excludeNamespaces": ["kube-system", "kube-public", "kube-node-lease", EXCLUDED],
        "exceptionNamespaces": [GRANTS],
        "customKinds": [{"group": "example.com", "kind": "ClusterTrainer",
                         "podTemplates": ["spec.template"]}],
        "policies": {"require-labels": {"action": require_labels}}})


def latest(name: str = "web") -> dict[str, Any]:
    return container(name, image="nginx:latest")


def objects() -> list[dict[str, Any]]:
    """Violating, clean, warned, audited, patched and excepted objects in A and B; the same
    violations where the webhook never looks (a labelled and an excluded namespace)."""
    secret = container("api", env=[{"name": "DB_PASSWORD", "value": SECRET}])
    unlabelled = pod("unlabelled", A, container())
    unlabelled["metadata"]["labels"] = {}
    excepted = controller("Deployment", "legacy-api", A, pod_spec(latest()))
    trainer = {"apiVersion": "example.com/v1", "kind": "ClusterTrainer",
               "metadata": {"name": "big-run"},
               "spec": {"template": {"metadata": {"labels": {"app": "big-run"}},
                                     "spec": pod_spec(latest("trainer"))}}}
    node_template = yaml.safe_load((REPO / "examples/bad/nodetemplate-manual-minimal.yaml")
                                   .read_text())
    node_template["metadata"]["namespace"] = A
    grant = {"apiVersion": "quickq.io/v1", "kind": "PolicyException",
             "metadata": {"name": "legacy", "namespace": GRANTS},
             "spec": {"policies": [{"id": "disallow-latest-tag"}],
                      "match": {"namespaces": [A], "names": ["legacy-*"]},
                      "expires": (datetime.now(UTC) + timedelta(days=30)).strftime(
                          "%Y-%m-%dT%H:%M:%SZ"),
                      "reason": "the legacy API is pinned by digest next sprint"}}
    return [
        controller("Deployment", "web", A, pod_spec(latest())),
        controller("Deployment", "clean", A, pod_spec(container())),
        controller("Deployment", "secrets", A, pod_spec(secret)),
        controller("Deployment", "model", A, pod_spec(gpu_container())),
        unlabelled, excepted, node_template,
        controller("StatefulSet", "db", B, pod_spec(latest("db"))),
        controller("CronJob", "nightly", B, pod_spec(container("job", image="busybox"))),
        controller("Deployment", "api", B, pod_spec(latest("api"))),
        controller("Deployment", "old", GONE, pod_spec(latest())),
        controller("Deployment", "web", IGNORED, pod_spec(latest())),
        controller("Deployment", "web", EXCLUDED, pod_spec(latest())),
        trainer, grant,
    ]


@pytest.fixture(scope="module")
def world(plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An API server of its own (no webhook), the CRDs, namespaces and objects."""
    workdir = tmp_path_factory.mktemp("audit")
    with started(plane.assets, tmp_path_factory.mktemp("audit-plane")) as own:
        crds = subprocess.run([sys.executable, "-m", "webhook.cli", "crd"], cwd=REPO,
                              capture_output=True, text=True, check=True).stdout
        own.kubectl("apply", "-f", "-", input=crds)
        own.apply(CLUSTER_KIND, check=True)
        install_report_crds(own)
        own.kubectl("wait", "--for=condition=established", "--timeout=30s",
                    "crd/policyexceptions.quickq.io", "crd/nodetemplates.quickq.io",
                    "crd/clustertrainers.example.com")
        for name in (A, B, GONE, GRANTS, EXCLUDED):
            own.namespace(name)
        own.namespace(IGNORED, {"quickq.io/ignore": "true"})
        listed = {"apiVersion": "v1", "kind": "List", "items": objects()}
        own.apply(json.dumps(listed), check=True)
        (workdir / "config.yaml").write_text(config())
        yield own, workdir


def start(plane: ControlPlane, workdir: Path, *extra: str, name: str = "audit") -> Auditor:
    return Auditor(plane, workdir, "--config", str(workdir / "config.yaml"),
                   "--write-interval", "0.5", "--metrics-port", "0", *extra, name=name)


def dump(plane: ControlPlane, workdir: Path, namespaces: tuple[str, ...]) -> Path:
    """What a team would hand to check: the judged kinds of the namespaces, the cluster-
    scoped ones and the PolicyExceptions, from kubectl."""
    items: list[Any] = []
    for namespace in namespaces:
        done = plane.kubectl("get", JUDGED, "-n", namespace, "-o", "json")
        items += [item for item in json.loads(done.stdout)["items"]
                  if item["kind"] != "ClusterTrainer"]
    done = plane.kubectl("get", "clustertrainers,policyexceptions", "-A", "-o", "json")
    items += json.loads(done.stdout)["items"]
    out = workdir / "dump.json"
    out.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return out


def test_the_reports_say_what_check_says_of_a_dump(world: Any) -> None:
    plane, workdir = world
    port = free_port()
    audit = start(plane, workdir, "--metrics-port", str(port))
    try:
        wait_until(lambda: {A, B, GONE, ""} <= set(reports(plane)), timeout=20,
                   what=f"reports for {A}, {B}, {GONE} and the cluster\n{audit.output()}")
        found = reports(plane)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as got:
            exposed = got.read().decode()
    finally:
        audit.stop()
    samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
               for line in exposed.splitlines() if line.startswith("quickq_guard_audit")}
    assert samples['quickq_guard_audit_results{policy="disallow-latest-tag",result="fail"}'] \
        >= 4
    assert samples['quickq_guard_audit_report_writes_total{operation="create"}'] >= 4
    assert samples['quickq_guard_audit_objects_judged_total{by="scan"}'] >= 12
    assert samples["quickq_guard_audit_last_full_scan_age_seconds"] < 60
    assert samples["quickq_guard_audit_scan_duration_seconds_count"] >= 1
    assert set(found) == {A, B, GONE, ""}, "no report where the webhook never judges"
    checked = check(workdir, "-o", "policyreport", str(dump(plane, workdir, (A, B, GONE))))
    assert checked.returncode == 1, checked.stderr
    expected = check_rows(checked.stdout)
    assert report_rows(found) == expected
    results = {(row[2], row[3]): row[4] for row in expected if row[0] == A}
    assert results[("web", "disallow-latest-tag")] == "fail"
    assert results[("legacy-api", "disallow-latest-tag")] == "skip"  # excepted
    assert results[("unlabelled", "require-labels")] == "warn"  # an audit policy
    assert results[("model", "inject-startup-probe")] == "pass"  # would patch
    assert ("", "ClusterTrainer", "big-run", "disallow-latest-tag", "fail") in {
        row[:5] for row in expected}
    text = json.dumps(found)
    assert SECRET not in text
    report = found[A]
    assert report["apiVersion"] == "openreports.io/v1alpha1" and report["kind"] == "Report"
    assert report["source"] == "quickq-guard"
    assert found[""]["kind"] == "ClusterReport"
    assert report["summary"]["fail"] == sum(r["result"] == "fail" for r in report["results"])
    excepted = next(r for r in report["results"] if r["result"] == "skip")
    assert excepted["properties"]["exception"].startswith("PolicyException")
    subject = excepted["resources"][0]
    assert subject["namespace"] == A and subject["uid"] and subject["apiVersion"] == "apps/v1"


def test_once_prints_what_check_prints_for_a_dump(world: Any) -> None:
    plane, workdir = world
    once = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "audit", "--once", "--kubeconfig",
         str(plane.kubeconfig), "--config", str(workdir / "config.yaml"), "-n", A, "-n", B,
         "-o", "json"], cwd=REPO, capture_output=True, text=True, check=False)
    checked = check(workdir, "-o", "json", str(dump(plane, workdir, (A, B))))

    def judged(output: str) -> list[str]:
        rows = json.loads(output)["results"]
        kept = []
        for row in rows:
            if row["resource"]["kind"] in ("PolicyException", "ClusterTrainer"):
                continue  # --namespace leaves cluster-scoped objects out
            for key in ("source", "file", "line", "column"):
                row["resource"].pop(key, None)
            for finding in row.get("findings") or ():
                finding.pop("line", None)
                finding.pop("column", None)
            kept.append(json.dumps(row, sort_keys=True))
        return sorted(kept)

    assert once.returncode == checked.returncode == 1, once.stderr
    assert judged(once.stdout) == judged(checked.stdout)
    assert len(judged(once.stdout)) > 20
    table = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "audit", "--once", "--kubeconfig",
         str(plane.kubeconfig), "--config", str(workdir / "config.yaml"), "-n", A],
        cwd=REPO, capture_output=True, text=True, check=False)
    assert "DENY" in table.stdout and "/apis/apps/v1/namespaces/audit-a/deployments/web" \
        in table.stdout
    assert SECRET not in table.stdout + once.stdout
    for name in ("sarif", "junit", "github", "gitlab", "policyreport", "html"):
        shown = subprocess.run(
            [sys.executable, "-m", "webhook.cli", "audit", "--once", "--kubeconfig",
             str(plane.kubeconfig), "--config", str(workdir / "config.yaml"), "-o", name],
            cwd=REPO, capture_output=True, text=True, check=False)
        assert shown.returncode == 1, f"{name}: {shown.stderr}"
        assert "disallow-latest-tag" in shown.stdout and SECRET not in shown.stdout, name


def same_page(text: str) -> str:
    """A page with the moment it was made and the command that made it left out."""
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", "(when)", text)
    return re.sub(r"Made by <code>[^<]*</code>", "Made by (who)", text)


def test_the_page_at_report_shows_what_audit_once_and_report_show(world: Any) -> None:
    """/report on the metrics port (--serve-report) is the page `quickq-guard report -o html`
    makes of the reports the controller wrote, and shows each object's failures as
    `audit --once -o html` shows them (a report joins a policy's findings into one row)."""
    plane, workdir = world
    port = free_port()
    audit = start(plane, workdir, "--metrics-port", str(port), "--serve-report", name="page")
    url = f"http://127.0.0.1:{port}/report"

    def served() -> str:
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert answer.headers["Content-Type"] == "text/html; charset=utf-8"
            return str(answer.read().decode())

    def scanned() -> bool:
        """The port answers (the process has started) and the first full scan has ended:
        before it, /report answers 503."""
        try:
            served()
        except urllib.error.HTTPError as error:
            assert error.code == 503, error
            return False
        except urllib.error.URLError:
            return False
        return True

    def from_reports() -> str:
        return subprocess.run(
            [sys.executable, "-m", "webhook.cli", "report", "--kubeconfig",
             str(plane.kubeconfig), "--config", str(workdir / "config.yaml"), "-o", "html"],
            cwd=REPO, capture_output=True, text=True, check=False, timeout=120).stdout

    try:
        wait_until(scanned, timeout=30, interval=0.5,
                   what=f"the first full scan's page at /report\n{audit.output()}")
        wait_until(lambda: {A, B, GONE, ""} <= set(reports(plane)), timeout=20,
                   what=f"reports for {A}, {B}, {GONE} and the cluster\n{audit.output()}")
        wait_until(lambda: same_page(served()) == same_page(from_reports()), timeout=20,
                   interval=1, what="/report to be the page of the reports written")
        page = served()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"),
                                   timeout=10)
        assert refused.value.code == 405
    finally:
        audit.stop()
    once = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "audit", "--once", "--kubeconfig",
         str(plane.kubeconfig), "--config", str(workdir / "config.yaml"), "-o", "html"],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=120)
    assert once.returncode == 1, once.stderr
    shown = by_object(Page(page).rows)
    assert shown == by_object(Page(once.stdout).rows)
    assert shown[("disallow-latest-tag", "Deployment", A, "legacy-api")][0] == "excepted"
    assert shown[("inject-startup-probe", "Deployment", A, "model")][0] == "patch"
    assert shown[("disallow-latest-tag", "ClusterTrainer", "", "big-run")][0] == "deny"
    assert f"{A}/Deployment/web" in {row[7] for row in Page(page).rows}
    assert SECRET not in page


def probed(port: int, path: str) -> tuple[int, str] | None:
    """What a probe of the metrics port hears: status and body; None while nothing listens."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return int(answer.status), str(answer.read().decode())
    except urllib.error.HTTPError as error:
        return int(error.code), str(error.read().decode())
    except urllib.error.URLError:
        return None


def test_readyz_answers_503_until_the_first_full_scan_ended_then_200(world: Any) -> None:
    """The chart's readiness probe: 503 with its reason while the first full scan runs (held
    here by pausing the API server), 200 once it ended; /healthz is 200 all along."""
    plane, workdir = world
    (apiserver,) = [process for process in plane.processes
                    if "kube-apiserver" in str(process.args[0])]
    port = free_port()
    apiserver.send_signal(signal.SIGSTOP)
    try:
        audit = start(plane, workdir, "--metrics-port", str(port), name="ready")
        wait_until(lambda: probed(port, "/readyz") is not None, timeout=30, interval=0.2,
                   what=f"the metrics port to answer\n{audit.output()}")
        time.sleep(1)  # the scan has begun and waits for the API server
        assert probed(port, "/readyz") == (503, "no full scan has ended yet\n")
        assert probed(port, "/healthz") == (200, "ok\n")
        assert not audit.events("scanned")
    finally:
        apiserver.send_signal(signal.SIGCONT)
    try:
        wait_until(lambda: probed(port, "/readyz") == (200, "ok\n"), timeout=30,
                   interval=0.5, what=f"/readyz to answer 200\n{audit.output()}")
        assert audit.events("scanned")
        assert probed(port, "/healthz") == (200, "ok\n")
        metrics = probed(port, "/metrics")
        assert metrics is not None and "quickq_guard_audit_leader" in metrics[1]
    finally:
        audit.stop()


def failures_of(plane: ControlPlane, namespace: str, name: str) -> set[str]:
    report = reports(plane).get(namespace) or {}
    return {result["policy"] for result in report.get("results") or ()
            if result["result"] == "fail" and result["resources"][0]["name"] == name}


def test_a_fixed_or_deleted_object_leaves_the_report_within_10_s(world: Any) -> None:
    plane, workdir = world
    audit = start(plane, workdir)
    try:
        wait_until(lambda: "disallow-latest-tag" in failures_of(plane, B, "api"),
                   timeout=20, what=f"the report of {B}\n{audit.output()}")
        fixed = controller("Deployment", "api", B, pod_spec(container("api")))
        plane.apply(fixed, check=True)
        began = time.monotonic()
        wait_until(lambda: not failures_of(plane, B, "api"), timeout=10,
                   what="the fixed Deployment's failures to leave the report", interval=0.1)
        took = time.monotonic() - began
        assert "disallow-latest-tag" in failures_of(plane, B, "nightly")
        plane.kubectl("delete", "cronjob", "nightly", "-n", B)
        wait_until(lambda: not failures_of(plane, B, "nightly"), timeout=10,
                   what="the deleted CronJob's failures to leave the report")
    finally:
        audit.stop()
    assert took < 10
    assert "disallow-latest-tag" in failures_of(plane, B, "db")  # the others stay


RAY = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
       "metadata": {"name": "rayclusters.ray.io"},
       "spec": {"group": "ray.io", "scope": "Namespaced",
                "names": {"kind": "RayCluster", "plural": "rayclusters",
                          "singular": "raycluster", "listKind": "RayClusterList"},
                "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                    "openAPIV3Schema": {"type": "object",
                                        "x-kubernetes-preserve-unknown-fields": True}}}]}}


def test_a_judged_kind_installed_later_is_audited(world: Any) -> None:
    plane, workdir = world
    audit = start(plane, workdir)
    try:
        wait_until(lambda: bool(audit.events("scanned")), timeout=20, what="a first scan")
        plane.apply(RAY, check=True)
        plane.kubectl("wait", "--for=condition=established", "--timeout=30s",
                      "crd/rayclusters.ray.io")
        ray = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
               "metadata": {"name": "llm", "namespace": B},
               "spec": {"headGroupSpec": {"template": {
                   "metadata": {"labels": {"app": "llm"}},
                   "spec": pod_spec(latest("head"))}}}}
        plane.apply(ray, check=True)
        wait_until(lambda: "disallow-latest-tag" in failures_of(plane, B, "llm"),
                   timeout=15, what="the RayCluster in the report")
    finally:
        audit.stop()


def require_labels_of(plane: ControlPlane) -> str:
    report = reports(plane).get(A) or {}
    return next((r["result"] for r in report.get("results") or ()
                 if r["policy"] == "require-labels"
                 and r["resources"][0]["name"] == "unlabelled"), "")


def test_switching_a_policy_to_enforce_in_the_config_rescans(world: Any) -> None:
    plane, workdir = world
    audit = start(plane, workdir)
    try:
        wait_until(lambda: bool(audit.events("scanned")), timeout=20,
                   what=f"a first scan\n{audit.output()}")
        assert require_labels_of(plane) == "warn"
        (workdir / "config.yaml").write_text(config(require_labels="enforce"))
        wait_until(lambda: require_labels_of(plane) == "fail", timeout=15,
                   what=f"require-labels to fail once enforced\n{audit.output()}")
    finally:
        (workdir / "config.yaml").write_text(config())
        audit.stop()
    assert len(audit.events("scanned")) >= 2


def latest_tag_of_db(plane: ControlPlane) -> str:
    report = reports(plane).get(B) or {}
    return next((r["result"] for r in report.get("results") or ()
                 if r["policy"] == "disallow-latest-tag"
                 and r["resources"][0]["name"] == "db"), "")


def test_an_exception_granted_then_expired_changes_the_results_it_covers(world: Any) -> None:
    plane, workdir = world
    audit = start(plane, workdir)
    expires = datetime.now(UTC) + timedelta(seconds=12)
    grant = {"apiVersion": "quickq.io/v1", "kind": "PolicyException",
             "metadata": {"name": "db-tag", "namespace": GRANTS},
             "spec": {"policies": [{"id": "disallow-latest-tag"}],
                      "match": {"namespaces": [B], "names": ["db"]},
                      "expires": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
                      "reason": "the database image is pinned next week"}}
    try:
        wait_until(lambda: bool(audit.events("scanned")), timeout=20,
                   what="a first scan")
        assert latest_tag_of_db(plane) == "fail"
        plane.apply(grant, check=True)
        wait_until(lambda: latest_tag_of_db(plane) == "skip", timeout=10,
                   what="the exception to except the StatefulSet")
        wait_until(lambda: latest_tag_of_db(plane) == "fail", timeout=20,
                   what="the expired exception to except it no more")
        assert datetime.now(UTC) >= expires
    finally:
        plane.kubectl("delete", "policyexception", "db-tag", "-n", GRANTS,
                      "--ignore-not-found")
        audit.stop()


def test_a_report_deleted_by_hand_is_written_again_after_the_next_scan(world: Any) -> None:
    plane, workdir = world
    audit = start(plane, workdir, "--resync", "2")
    try:
        wait_until(lambda: len(audit.events("scanned")) >= 1 and A in reports(plane),
                   timeout=20, what="the report")
        deleted = reports(plane)[A]["metadata"]["uid"]
        plane.kubectl("delete", "reports.openreports.io", "quickq-guard", "-n", A)
        # Written again as a new object (a new uid): with a 2 s resync it may be back before
        # a read right after the delete could see it gone.
        wait_until(lambda: reports(plane).get(A, {}).get("metadata", {}).get("uid")
                   not in (None, deleted), timeout=10, what="the report to be back")
    finally:
        audit.stop()


def test_a_deleted_namespace_takes_its_report_with_it(world: Any) -> None:
    plane, workdir = world
    audit = start(plane, workdir)
    try:
        wait_until(lambda: GONE in reports(plane), timeout=20,
                   what=f"the report of {GONE}\n{audit.output()}")
        plane.kubectl("delete", "namespace", GONE, "--wait=false")
        wait_until(lambda: GONE not in reports(plane), timeout=15,
                   what=f"the report of the deleted namespace to go\n{audit.output()}")
    finally:
        audit.stop()
    assert A in reports(plane)


def test_the_older_report_api_holds_the_same_results(world: Any) -> None:
    plane, workdir = world
    audit = start(plane, workdir, "--report-api", "wgpolicyk8s")
    try:
        wait_until(lambda: {A, B, ""} <= set(reports(plane, "wgpolicyk8s")), timeout=20,
                   what="PolicyReports")
        wait_until(lambda: report_rows(reports(plane, "wgpolicyk8s"))
                   == report_rows(reports(plane)), timeout=10,
                   what="the PolicyReports to say what the Reports say")
        older = reports(plane, "wgpolicyk8s")
    finally:
        audit.stop()
    assert older[A]["apiVersion"] == "wgpolicyk8s.io/v1alpha2"
    assert older[A]["kind"] == "PolicyReport" and older[""]["kind"] == "ClusterPolicyReport"
    assert "source" not in older[A]
    plane.kubectl("delete", "policyreports.wgpolicyk8s.io,clusterpolicyreports.wgpolicyk8s.io",
                  "-A", "-l", "app.kubernetes.io/managed-by=quickq-guard")


def holder(plane: ControlPlane) -> str:
    done = plane.kubectl("get", "lease", "quickq-guard-audit", "-n", "default", "-o", "json",
                         check=False)
    return str(json.loads(done.stdout)["spec"].get("holderIdentity") or "") \
        if done.returncode == 0 else ""


def test_the_other_replica_takes_over_when_the_leader_stops(world: Any) -> None:
    plane, workdir = world
    flags = ("--leader-elect", "--lease-namespace", "default", "--lease-duration", "3")
    first = start(plane, workdir, *flags, name="first")
    second = start(plane, workdir, *flags, name="second")
    replicas = {"first": first, "second": second}
    try:
        wait_until(lambda: bool(holder(plane)), timeout=20,
                   what=f"a leader\n{first.output()}\n{second.output()}")
        leader = holder(plane)
        led = next(r for r in replicas.values() if r.events("leader")
                   and r.events("leader")[0]["identity"] == leader)
        other = next(r for r in replicas.values() if r is not led)
        wait_until(lambda: A in reports(plane), timeout=20, what="the leader's reports")
        before = {namespace: report["metadata"]["uid"]
                  for namespace, report in reports(plane).items()}
        assert not other.events("leader")  # the other writes nothing
        led.kill()  # no clean stop: the Lease must expire
        wait_until(lambda: bool(other.events("leader")), timeout=15,
                   what=f"the other replica to lead\n{other.output()}")
        assert holder(plane) == other.events("leader")[0]["identity"]
        plane.apply(controller("Deployment", "web", A, pod_spec(container())), check=True)
        wait_until(lambda: not failures_of(plane, A, "web"), timeout=10,
                   what="the new leader to write")
        after = reports(plane)
    finally:
        for replica in replicas.values():
            if replica.running():
                replica.stop()
    assert {namespace: report["metadata"]["uid"] for namespace, report in after.items()} \
        == before, "a report lost, or made again"
    done = plane.kubectl("get", "reports.openreports.io", "-A", "-o", "json")
    names = [(i["metadata"]["namespace"], i["metadata"]["name"])
             for i in json.loads(done.stdout)["items"]]
    assert len(names) == len(set(names)) == len(before) - 1  # and the cluster report
