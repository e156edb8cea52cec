"""Dynamic Resource Allocation through a real kube-apiserver (1.36: resource.k8s.io/v1 GA,
no driver needed to store claims): the shapes quickq-guard reads are the ones the API server
stores, the chart's rule sends the claims themselves to the webhook, and a webhook watching
the cluster's claims (`serve --watch-claims`) with the chart's ServiceAccount token and
RBAC treats a pod consuming a GPU claim as a GPU pod, as `check` does offline."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_helpers import (
    GPU_TOLERATION,
    RELEASE,
    RELEASE_NAMESPACE,
    ControlPlane,
    Guard,
    Webhook,
    container,
    controller,
    denies_bad_pod,
    pod,
    pod_spec,
    release_values,
    rendered,
    wait_until,
    warnings_of,
)
from support.controlplane import printed_objects

from webhook import Review, decode

NAMESPACE = "dra"
CLAIMS_READER = f"{RELEASE}-claims-reader"


def claim_template(name: str, device_class: str = "gpu.nvidia.com",
                   **exactly: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": device_class, **exactly}}]}}}}


def consumer() -> dict[str, Any]:
    llm = container("llm")
    llm["resources"]["claims"] = [{"name": "gpu"}]
    return llm


def consuming(name: str, template: str) -> dict[str, Any]:
    spec = pod_spec(consumer(), resourceClaims=[{"name": "gpu",
                                                 "resourceClaimTemplateName": template}])
    return controller("Deployment", name, NAMESPACE, spec)


def consuming_pod(name: str, template: str) -> dict[str, Any]:
    return pod(name, NAMESPACE, consumer(),
               resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": template}])



# --- the session's webhook: no claims watch -------------------------------------------------


def test_the_api_server_stores_the_claim_shapes_and_the_webhook_judges_them(
        kube: ControlPlane) -> None:
    done = kube.apply(claim_template("one-gpu", allocationMode="ExactCount", count=1))
    assert done.returncode == 0, done.stderr
    stored = kube.get("resourceclaimtemplate", "one-gpu", NAMESPACE)
    assert stored["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1
    # The chart's rule (workloadKinds.resourceClaims, on by default) sends claims to the
    # validating webhook: gpu-resource-claims refuses one taking every GPU of a node.
    every = kube.apply(claim_template("every-gpu", allocationMode="All"))
    assert every.returncode != 0
    assert "[gpu-resource-claims]" in every.stderr and "allocationMode" in every.stderr


def test_without_a_claims_watch_the_webhook_says_the_claim_is_unresolved(
        kube: ControlPlane) -> None:
    from webhook import evaluate, load_policies
    from webhook.server.claim_view import NOT_WATCHED

    obj = consuming("llm", "one-gpu")
    done = kube.apply(obj)
    assert done.returncode == 0, done.stderr
    expected = evaluate(decode(obj), load_policies(), Review(claims=NOT_WATCHED))
    [warning] = [w for w in expected.warnings if w.startswith("[gpu-claim-usage]")]
    assert warning in warnings_of(done.stderr)
    assert "is not in quickq-guard's view (serve --watch-claims is off)" in warning
    stored = kube.get("deployment", "llm", NAMESPACE)
    assert stored["spec"]["template"]["spec"]["resourceClaims"] == [
        {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    assert "tolerations" not in stored["spec"]["template"]["spec"]


# --- a webhook that watches the claims, as the chart's ServiceAccount -------------------------


def service_account_kubeconfig(plane: ControlPlane, account: str, out: Path) -> Path:
    """A kubeconfig whose only credential is a token of `account` (kubectl create token):
    the webhook gets the rights the chart's RBAC gives that account, not the admin's."""
    token = plane.kubectl("create", "token", account, "-n", RELEASE_NAMESPACE,
                          "--duration", "2h").stdout.strip()
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "sa",
              "clusters": [{"name": "test", "cluster": {
                  "server": f"https://127.0.0.1:{plane.port}",
                  "certificate-authority": str(plane.ca.cert)}}],
              "users": [{"name": account, "user": {"token": token}}],
              "contexts": [{"name": "sa", "context": {"cluster": "test", "user": account}}]}
    path = out / "service-account.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def account(guard: Guard) -> str:
    """The webhook's ServiceAccount, with the chart's rendered RBAC for it in the cluster."""
    plane = guard.plane
    documents = rendered(plane, RELEASE, RELEASE_NAMESPACE,
                         release_values("https://127.0.0.1:1", guard.ca_bundle))
    [deployment] = [d for d in documents if d["kind"] == "Deployment"
                    and d["metadata"]["name"] == RELEASE]  # the webhook's, not the audit's
    name = str(deployment["spec"]["template"]["spec"]["serviceAccountName"])
    assert "--watch-claims" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    rbac = [d for d in documents if d["kind"] in ("ServiceAccount", "ClusterRole",
                                                  "ClusterRoleBinding")
            and d["metadata"]["name"] in (name, CLAIMS_READER)]
    assert sorted(d["kind"] for d in rbac) == ["ClusterRole", "ClusterRoleBinding",
                                               "ServiceAccount"]
    # What the release installed is what the chart renders.
    installed = json.loads(plane.kubectl("get", "clusterrole", CLAIMS_READER, "-o",
                                         "json").stdout)
    assert installed["rules"] == next(d for d in rbac if d["kind"] == "ClusterRole")["rules"]
    return name


@pytest.fixture(scope="module")
def watcher(guard: Guard, kube: ControlPlane, account: str,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    workdir = tmp_path_factory.mktemp("claims")
    kubeconfig = service_account_kubeconfig(kube, account, workdir)
    webhook = Webhook(workdir, guard.certs, "--policies", str(guard.policies), "--config",
                      str(guard.config), "--watch-claims", "--kubeconfig", str(kubeconfig))
    try:
        with guard.pointed_at(webhook.url, lambda: denies_bad_pod(kube)):
            yield webhook
    finally:
        webhook.stop()


def can_i(kube: ControlPlane, account: str, *what: str) -> bool:
    done = kube.kubectl("auth", "can-i", *what, "--as",
                        f"system:serviceaccount:{RELEASE_NAMESPACE}:{account}", check=False)
    return done.stdout.strip() == "yes"


def test_the_chart_lets_its_account_read_claims_and_nothing_else(kube: ControlPlane,
                                                                 account: str) -> None:
    for resource in ("resourceclaims.resource.k8s.io", "resourceclaimtemplates.resource.k8s.io"):
        assert can_i(kube, account, "watch", resource, "--all-namespaces")
        assert not can_i(kube, account, "create", resource, "-n", NAMESPACE)
    assert not can_i(kube, account, "list", "secrets", "--all-namespaces")
    assert not can_i(kube, account, "list", "pods", "-n", NAMESPACE)


def metrics_text(guard: Guard, webhook: Webhook) -> str:
    context = ssl.create_default_context(cafile=str(guard.certs / "ca.crt"))
    with urllib.request.urlopen(f"{webhook.url}/metrics", context=context,
                                timeout=10) as answer:
        return str(answer.read().decode())


def dry_run(kube: ControlPlane, obj: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A server-side dry run: the object as admission left it, and the warnings."""
    done = kube.apply(obj, "--dry-run=server", "-o", "json")
    assert done.returncode == 0, done.stderr
    [printed] = printed_objects(done.stdout)
    return printed, warnings_of(done.stderr)


def pod_spec_of(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"] if obj["kind"] == "Pod" else \
        obj["spec"]["template"]["spec"]
    return spec


def test_a_pod_consuming_a_gpu_claim_template_is_a_gpu_pod_through_the_webhook(
        kube: ControlPlane, guard: Guard, watcher: Webhook) -> None:
    wait_until(lambda: 'quickq_guard_cluster_view_age_seconds{kind="ResourceClaimTemplate"} 0.0'
               in metrics_text(guard, watcher), timeout=20, what="the claims view to list")
    for obj in (consuming("served", "one-gpu"), consuming_pod("served-pod", "one-gpu")):
        admitted, warnings = dry_run(kube, obj)
        # (a Pod also gets the API server's own not-ready/unreachable tolerations)
        assert GPU_TOLERATION in pod_spec_of(admitted)["tolerations"], obj["kind"]
        assert not [w for w in warnings if w.startswith("[gpu-claim-usage]")]
    # gpu-priority-class (audit) is recorded on the create, as for any GPU pod.
    done = kube.apply(consuming("served", "one-gpu"))
    assert done.returncode == 0, done.stderr
    assert kube.get("deployment", "served", NAMESPACE)["spec"]["template"]["spec"][
        "tolerations"] == [GPU_TOLERATION]
    wait_until(lambda: any(
        event.get("verb") == "create" and event.get("stage") == "ResponseComplete"
        and event.get("objectRef", {}).get("name") == "served"
        and "validate.quickq-guard.quickq.io/gpu-priority-class" in event.get("annotations", {})
        for event in kube.audit_events()), what="the gpu-priority-class audit annotation")
    # A claim of another device class is no GPU; one the cluster lacks is said.
    assert kube.apply(claim_template("nic", device_class="nic.example.com")).returncode == 0
    wait_until(lambda: "tolerations" not in pod_spec_of(dry_run(kube, consuming("nic", "nic"))[0])
               and not [w for w in dry_run(kube, consuming("nic", "nic"))[1]
                        if w.startswith("[gpu-claim-usage]")],
               what="the non-GPU template to be seen")
    missing, warnings = dry_run(kube, consuming("missing", "no-such-template"))
    assert "tolerations" not in pod_spec_of(missing)
    assert any(w.startswith("[gpu-claim-usage]") and
               "ResourceClaimTemplate 'no-such-template' is not in the cluster," in w
               for w in warnings), warnings


def test_a_template_created_later_is_seen_by_the_watch(kube: ControlPlane,
                                                       watcher: Webhook) -> None:
    obj = consuming("later", "later-gpu")
    assert "tolerations" not in pod_spec_of(dry_run(kube, obj)[0])
    assert kube.apply(claim_template("later-gpu")).returncode == 0
    wait_until(lambda: pod_spec_of(dry_run(kube, obj)[0]).get("tolerations") == [GPU_TOLERATION],
               timeout=15, what="the new template to be watched")


def test_check_offline_gives_the_webhooks_verdict(kube: ControlPlane, guard: Guard,
                                                  watcher: Webhook, tmp_path: Path) -> None:
    template = claim_template("one-gpu", allocationMode="ExactCount", count=1)
    workloads = [consuming("offline-gpu", "one-gpu"), consuming("offline-missing", "absent")]
    online = {}
    for obj in workloads:
        admitted, warnings = dry_run(kube, obj)
        online[obj["metadata"]["name"]] = (
            "tolerations" in pod_spec_of(admitted),
            any(w.startswith("[gpu-claim-usage]") for w in warnings))
    manifests = tmp_path / "objects.yaml"
    manifests.write_text(yaml.safe_dump_all([template, *workloads]))
    done = subprocess.run([sys.executable, "-m", "webhook.cli", "check", str(manifests),
                           "--policies", str(guard.policies), "--config", str(guard.config),
                           "-o", "json"], capture_output=True, text=True, check=False)
    report = json.loads(done.stdout)
    offline = {}
    for obj in workloads:
        name = obj["metadata"]["name"]
        rows = {row["policy"]: row["result"] for row in report["results"]
                if row["resource"]["name"] == name}
        offline[name] = (rows["inject-gpu-toleration"] == "patch",
                         rows["gpu-claim-usage"] == "fail")
    assert offline == online == {"offline-gpu": (True, False), "offline-missing": (False, True)}
