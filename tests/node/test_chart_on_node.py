"""quickq-guard as a user meets it: the chart installed with helm, its hooks and `helm test`
run as pods, the webhook pods (the image built from the Dockerfile) Ready through their real
probes and called by the API server through their Service, the audit pod reporting what ran
before the install, upgraded and disrupted under a stream of creates, and uninstalled clean.

The tests run in file order and share one install (the session's `installed`); the last one
uninstalls it.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from typing import Any

from node_helpers import (
    AUDIT,
    AUDIT_PODS,
    BEFORE,
    IMAGE_VALUES,
    NAMESPACE,
    RELEASE,
    chart_path,
    deployment,
    ready_pods,
    wait_ready,
)
from support.controlplane import ApiClient
from support.node import BRIDGE, GUARD_IMAGE, NODE_IP, SERVICE_IP, Node

from webhook.testing import (
    bad_pod,
    container,
    gpu_container,
    pod,
    probe,
    wait_until,
    workload,
)

WORKLOADS = "workloads"


def test_nothing_leaves_the_namespace(node: Node) -> None:
    """The node's network is loopback (holding the node's address and the API server's
    ClusterIP), the pod bridge and the pods' veths: no other interface, no default route, no
    route but to loopback and the bridge."""
    names = sorted(name for _, name in socket.if_nameindex())
    others = [name for name in names if name not in ("lo", BRIDGE)
              and not name.startswith("veth")]
    assert others == [], f"interfaces besides the node's own: {others}"
    routes = json.loads(node.run(["ip", "-j", "route", "show", "table", "all"]).stdout)
    assert [route for route in routes if route.get("dst") == "default"] == []
    for route in routes:
        assert route.get("dev") in ("lo", BRIDGE), route
    local = node.run(["ip", "-j", "addr", "show", "dev", "lo"]).stdout
    assert NODE_IP in local and SERVICE_IP in local


def test_install_runs_hooks_and_pods_become_ready(installed: Node) -> None:
    """Both replicas Ready (their startup and readiness probes answered the kubelet), the
    post-install Job armed the webhooks, and `helm test` passes as a pod."""
    status: Any = deployment(installed)["status"]
    assert status.get("readyReplicas") == 2, status
    assert len(ready_pods(installed)) == 2
    image = installed.kubectl("get", "deployment", RELEASE, "-n", NAMESPACE, "-o",
                              "jsonpath={.spec.template.spec.containers[0].image}").stdout
    assert image == GUARD_IMAGE
    # The arm Job ran and succeeded (hook-succeeded deleted it), so the validating webhook
    # fails closed now: what `cluster arm` does after its probe Pod was judged.
    policy = installed.kubectl("get", "validatingwebhookconfiguration", RELEASE, "-o",
                               "jsonpath={.webhooks[*].failurePolicy}").stdout
    assert "Fail" in policy.split(), policy
    events = installed.kubectl("get", "events", "-n", NAMESPACE, "-o", "json").stdout
    jobs = {event["involvedObject"]["name"] for event in json.loads(events)["items"]
            if event["involvedObject"]["kind"] == "Job"}
    assert f"{RELEASE}-arm" in jobs, jobs
    done = installed.helm("test", RELEASE, "-n", NAMESPACE, "--timeout", "5m", timeout=400)
    assert "Phase:          Succeeded" in done.stdout or "Succeeded" in done.stdout, done.stdout


def _view_ages(node: Node, pod_name: str) -> dict[str, float]:
    """quickq_guard_cluster_view_age_seconds by kind, read from the pod's /metrics through
    the API server's pod proxy."""
    text = node.kubectl("get", "--raw", f"/api/v1/namespaces/{NAMESPACE}/pods/"
                        f"https:{pod_name}:8443/proxy/metrics", check=False).stdout
    ages: dict[str, float] = {}
    for line in text.splitlines():
        found = re.match(r'quickq_guard_cluster_view_age_seconds\{.*kind="([^"]+)".*\} (\S+)',
                         line)
        if found:
            ages[found.group(1)] = float(found.group(2))
    return ages


def test_watches_run_with_the_charts_own_account(installed: Node) -> None:
    """The webhook pods watch ResourceClaims (and PolicyExceptions) with lightkube, the
    chart's ServiceAccount token and RBAC, through the `kubernetes` ClusterIP: each view is
    current (age 0 while its watch is open)."""
    for name in ready_pods(installed):
        wait_until(lambda name=name: bool(ages := _view_ages(installed, name))
                   and "ResourceClaim" in ages and all(age == 0 for age in ages.values()),
                   timeout=60, interval=1, what=f"{name}'s cluster views to be current")


def _audit_port(node: Node, path: str, pod_name: str) -> str:
    """A path of the audit pod's metrics port, through the API server's pod proxy."""
    return node.kubectl("get", "--raw", f"/api/v1/namespaces/{NAMESPACE}/pods/"
                        f"http:{pod_name}:9090/proxy{path}").stdout


def _results(node: Node, name: str = "legacy") -> list[dict[str, Any]]:
    """The results of the audit's report in BEFORE about the object `name`."""
    done = node.kubectl("get", "reports.openreports.io", "quickq-guard", "-n", BEFORE,
                        "-o", "json", check=False)
    if done.returncode != 0:
        return []
    return [result for result in json.loads(done.stdout).get("results") or ()
            if result["resources"][0]["name"] == name]


def test_audit_pod_reports_what_ran_before_the_install(installed: Node) -> None:
    """The audit pod, Ready through its probes, finds the Deployment that was there before
    quickq-guard and writes its namespace's OpenReports Report with the chart's
    ServiceAccount (the pod's only credential) and RBAC; its metrics say it leads and wrote;
    /report shows the same finding. A Deployment admitted afterwards with a finding of an
    audit policy joins the report through the pod's watch."""
    [name] = ready_pods(installed, NAMESPACE, AUDIT_PODS)
    spec = installed.get("pod", name, NAMESPACE)["spec"]
    assert spec["serviceAccountName"] == AUDIT
    assert spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    wait_until(lambda: any(r["policy"] == "disallow-latest-tag" for r in
                           _results(installed)),
               timeout=120, interval=2, what=f"the audit's report of {BEFORE}/legacy")
    [result] = [r for r in _results(installed) if r["policy"] == "disallow-latest-tag"]
    assert result["source"] == "quickq-guard" and result["result"] == "fail", result
    assert "nginx:latest" in result["message"]
    reference = result["resources"][0]
    assert (reference["apiVersion"], reference["kind"], reference["namespace"]) == \
        ("apps/v1", "Deployment", BEFORE)
    assert reference["uid"] == installed.get("deployment", "legacy", BEFORE)["metadata"]["uid"]
    # Written by this pod: nothing else runs the audit here, and it says it leads and wrote.
    exposed = _audit_port(installed, "/metrics", name)
    assert "quickq_guard_audit_leader 1.0" in exposed
    writes = [float(line.rsplit(" ", 1)[1]) for line in exposed.splitlines()
              if line.startswith("quickq_guard_audit_report_writes_total")]
    assert sum(writes) >= 1, exposed
    assert installed.get("lease", AUDIT, NAMESPACE)["spec"]["holderIdentity"]
    # Its account may write reports and read what it judges; nothing else.
    account = f"--as=system:serviceaccount:{NAMESPACE}:{AUDIT}"
    for verb, resource, allowed in (("create", "reports.openreports.io", True),
                                    ("list", "deployments.apps", True),
                                    ("create", "deployments.apps", False),
                                    ("get", "secrets", False)):
        done = installed.kubectl("auth", "can-i", verb, resource, "-n", BEFORE, account,
                                 check=False)
        assert (done.stdout.strip() == "yes") is allowed, (verb, resource, done.stdout)
    page = _audit_port(installed, "/report", name)
    assert "<!doctype html>" in page
    assert "disallow-latest-tag" in page and f"{BEFORE}/Deployment/legacy" in page
    # Admitted now with a finding an audit policy only records: its watch sees it.
    model = workload("Deployment", gpu_container(), name="model", namespace=BEFORE)
    model["spec"]["replicas"] = 0
    installed.kubectl("create", "-f", "-", input=json.dumps(model))
    wait_until(lambda: any(r["policy"] == "gpu-priority-class" and r["result"] == "warn"
                           for r in _results(installed, "model")),
               timeout=60, interval=2, what=f"the audit's result for {BEFORE}/model")


def test_pods_deny_and_patch_through_the_service(installed: Node) -> None:
    installed.namespace(WORKLOADS)
    denied = installed.kubectl("create", "-f", "-", input=json.dumps(
        {**bad_pod(), "metadata": {"name": "bad", "namespace": WORKLOADS}}), check=False)
    assert denied.returncode != 0
    assert 'admission webhook "validate.quickq-guard.quickq.io" denied' in denied.stderr
    gpu = pod(gpu_container(livenessProbe=probe()), name="model", namespace=WORKLOADS)
    done = installed.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                             input=json.dumps(gpu))
    patched = json.loads(done.stdout)
    assert any(t.get("key") == "nvidia.com/gpu" for t in patched["spec"]["tolerations"])
    assert "startupProbe" in patched["spec"]["containers"][0]


def test_injected_startup_probe_runs(installed: Node) -> None:
    """A workload with only a livenessProbe gets a startupProbe from the webhook, and the
    kubelet runs it: the pod becomes Ready with the probe in place."""
    installed.namespace(WORKLOADS)
    server = container(
        "web", image=GUARD_IMAGE, imagePullPolicy="Never",
        args=["--self-signed", "--port=8443", "--policies=/etc/quickq-guard/policies"],
        livenessProbe={"httpGet": {"path": "/healthz", "port": 8443, "scheme": "HTTPS"},
                       "periodSeconds": 10, "failureThreshold": 6},
        readinessProbe={"httpGet": {"path": "/readyz", "port": 8443, "scheme": "HTTPS"},
                        "periodSeconds": 2})
    installed.kubectl("create", "-f", "-",
                      input=json.dumps(pod(server, name="probed", namespace=WORKLOADS)))
    stored = installed.get("pod", "probed", WORKLOADS)
    startup = stored["spec"]["containers"][0].get("startupProbe")
    assert startup and startup["httpGet"]["path"] == "/healthz", stored["spec"]
    wait_until(lambda: "probed" in ready_pods(installed, WORKLOADS, "app=probed"),
               timeout=240, interval=1, what="the probed pod to become Ready")
    statuses = installed.get("pod", "probed", WORKLOADS)["status"]["containerStatuses"]
    assert statuses[0]["started"] is True and statuses[0]["restartCount"] == 0


class Stream:
    """Creates (server-side dry runs of a Pod every policy accepts) one after another until
    stopped or `limit` is reached: a bounded stream of admissions, each counted."""

    def __init__(self, node: Node, limit: int = 3000, seconds: float = 600) -> None:
        self.node = node
        self.limit = limit
        self.deadline = time.monotonic() + seconds
        self.stop = threading.Event()
        self.admitted = 0
        self.failed: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        client = ApiClient(self.node, timeout=30)
        try:
            body = pod(name="stream", namespace=WORKLOADS)
            while (not self.stop.is_set() and self.admitted + len(self.failed) < self.limit
                   and time.monotonic() < self.deadline):
                try:
                    status, answer = client.create(body, dry_run=True)
                except OSError as error:
                    self.failed.append(f"connection: {error}")
                    client.close()
                    client = ApiClient(self.node, timeout=30)
                    continue
                if status == 201:
                    self.admitted += 1
                else:
                    self.failed.append(f"{status}: {answer.get('message', '')[:200]}")
        finally:
            client.close()

    def __enter__(self) -> Stream:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)


def _webhook_called(node: Node) -> bool:
    return 'denied' in node.kubectl("create", "--dry-run=server", "-f", "-", check=False,
                                    input=json.dumps({**bad_pod(), "metadata": {
                                        "name": "bad", "namespace": WORKLOADS}})).stderr


def test_rolling_upgrade_under_load_fails_no_admission(installed: Node) -> None:
    installed.namespace(WORKLOADS)
    before = set(ready_pods(installed))
    with Stream(installed) as stream:
        installed.helm("upgrade", RELEASE, str(chart_path()), "-n", NAMESPACE, *IMAGE_VALUES,
                       # A new pod annotation changes the pod template: a rolling restart
                       # (the chart keeps no checksum; the pods reload config themselves).
                       "--reuse-values", "--set", "webhook.timeoutSeconds=6",
                       "--set-string", "podAnnotations.rollout=1",
                       "--wait", "--timeout", "10m", timeout=900)
        wait_ready(installed, 2)
        wait_until(lambda: not (set(ready_pods(installed)) & before), timeout=300,
                   interval=1, what="every webhook pod replaced")
    print(f"rolling upgrade: {stream.admitted} admitted, {len(stream.failed)} failed")
    assert stream.admitted > 0
    assert stream.failed == [], f"{len(stream.failed)} failed: {stream.failed[:5]}"


def test_webhook_pod_deleted_under_load_fails_no_admission(installed: Node) -> None:
    installed.namespace(WORKLOADS)
    wait_ready(installed, 2)
    victim = ready_pods(installed)[0]
    with Stream(installed) as stream:
        time.sleep(3)
        installed.kubectl("delete", "pod", victim, "-n", NAMESPACE, "--wait=true",
                          "--timeout=120s")
        wait_ready(installed, 2)
        time.sleep(3)
    print(f"webhook pod deleted: {stream.admitted} admitted, {len(stream.failed)} failed")
    assert stream.admitted > 0
    assert stream.failed == [], f"{len(stream.failed)} failed: {stream.failed[:5]}"


def test_both_pods_gone_fail_closed_but_system_namespaces_heal(installed: Node) -> None:
    """With no webhook pod at all, `Fail` denies Pods in an ordinary namespace, while a
    Deployment in an excluded system namespace still gets its pod back."""
    installed.namespace(WORKLOADS)
    keeper = {"apiVersion": "apps/v1", "kind": "Deployment",
              "metadata": {"name": "keeper", "namespace": "kube-system"},
              "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "keeper"}},
                       "template": {"metadata": {"labels": {"app": "keeper"}}, "spec": {
                           "containers": [{"name": "keeper", "image": GUARD_IMAGE,
                                           "imagePullPolicy": "Never",
                                           "args": ["--self-signed"]}]}}}}
    installed.kubectl("apply", "-f", "-", input=json.dumps(keeper))
    wait_until(lambda: len(ready_pods(installed, "kube-system", "app=keeper")) == 1,
               timeout=240, interval=1, what="the kube-system pod Ready")
    installed.kubectl("scale", "deployment", RELEASE, "-n", NAMESPACE, "--replicas=0")
    try:
        wait_until(lambda: not ready_pods(installed) and not _pods(installed), timeout=180,
                   interval=1, what="no webhook pod left")
        refused = installed.kubectl("create", "-f", "-", check=False, input=json.dumps(
            pod(name="while-down", namespace=WORKLOADS)))
        assert refused.returncode != 0
        assert "failed calling webhook" in refused.stderr, refused.stderr
        old = ready_pods(installed, "kube-system", "app=keeper")
        installed.kubectl("delete", "pod", *old, "-n", "kube-system", "--wait=false")
        wait_until(lambda: bool(set(ready_pods(installed, "kube-system", "app=keeper"))
                                - set(old)), timeout=240, interval=1,
                   what="the kube-system Deployment's pod replaced while the webhook is down")
    finally:
        installed.kubectl("scale", "deployment", RELEASE, "-n", NAMESPACE, "--replicas=2")
        wait_ready(installed, 2)
        installed.kubectl("delete", "deployment", "keeper", "-n", "kube-system", check=False)
    wait_until(lambda: _webhook_called(installed), timeout=120, what="the webhook back")


def _pods(node: Node) -> list[str]:
    done = node.kubectl("get", "pods", "-n", NAMESPACE, "-l",
                        "app.kubernetes.io/name=quickq-guard", "-o", "name")
    return done.stdout.split()


def test_uninstall_runs_pre_delete_and_leaves_nothing(installed: Node) -> None:
    done = installed.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "5m",
                          timeout=400)
    assert "uninstalled" in done.stdout
    label = f"app.kubernetes.io/instance={RELEASE}"
    for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations",
                 "clusterroles", "clusterrolebindings"):
        left = installed.kubectl("get", kind, "-l", label, "-o", "name").stdout.strip()
        assert left == "", f"{kind} left behind: {left}"
    # The pods go after the Deployments, through the garbage collector, each after its
    # preStop sleep (the audit's after its grace period): wait for that, then nothing may be
    # left.
    wait_until(lambda: not _pods(installed) and not installed.kubectl(
                   "get", "pods", "-n", NAMESPACE, "-l", AUDIT_PODS, "-o", "name").stdout.strip(),
               timeout=180, interval=1, what="the webhook and audit pods gone after uninstall")
    for kind in ("secrets", "configmaps", "services", "roles", "rolebindings",
                 "serviceaccounts", "jobs", "pods", "poddisruptionbudgets"):
        left = installed.kubectl("get", kind, "-n", NAMESPACE, "-l", label,
                                 "-o", "name").stdout.strip()
        assert left == "", f"{kind} left behind: {left}"
    events = installed.kubectl("get", "events", "-n", NAMESPACE, "-o", "json").stdout
    jobs = {event["involvedObject"]["name"] for event in json.loads(events)["items"]
            if event["involvedObject"]["kind"] == "Job"}
    assert f"{RELEASE}-cleanup" in jobs, jobs
    # The report CRDs stay (reports other tools wrote live under them), and so do the reports.
    installed.kubectl("get", "crd", "reports.openreports.io", "clusterreports.openreports.io")
    assert any(r["policy"] == "disallow-latest-tag" for r in _results(installed))
