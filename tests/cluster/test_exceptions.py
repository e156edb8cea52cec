"""PolicyExceptions through the real API server: the chart's CRD and webhook, and a webhook
that watches the exceptions of the release namespace (`serve --watch-exceptions`)."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_helpers import (
    RELEASE,
    RELEASE_NAMESPACE,
    ControlPlane,
    Guard,
    Webhook,
    chart_runtime_files,
    container,
    denies_bad_pod,
    pod,
    release_values,
    rendered,
    wait_until,
    warnings_of,
)

TEAM = "gpu-team"
GRANTERS = "platform-admins"
VALUES = {"exceptions.enabled": "true", "exceptions.granteeGroup": GRANTERS}
ROOT = {"securityContext": {"runAsUser": 0}}


def root_pod(name: str = "device-plugin") -> dict[str, Any]:
    return pod(name, TEAM, container("plugin", **ROOT))


def exception(name: str, namespace: str = RELEASE_NAMESPACE, seconds: float = 3600,
              version: str = "v1", **spec: Any) -> dict[str, Any]:
    expires = datetime.now(UTC) + timedelta(seconds=seconds)
    return {"apiVersion": f"quickq.io/{version}", "kind": "PolicyException",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"policies": [{"id": "disallow-root-user"}],
                     "match": {"namespaces": [TEAM], "names": [f"{name}-*"]},
                     "expires": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
                     "reason": "the device plugin needs root", **spec}}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("exceptions")


@pytest.fixture(scope="module")
def runtime_files(guard: Guard, workdir: Path) -> tuple[Path, Path]:
    """The chart's policies directory and config file, as its pods have them mounted."""
    documents = rendered(guard.plane, RELEASE, RELEASE_NAMESPACE,
                         release_values("https://127.0.0.1:1", guard.ca_bundle, **VALUES))
    return chart_runtime_files(documents, workdir / "chart-files")


@pytest.fixture(scope="module")
def watcher(guard: Guard, workdir: Path,
            runtime_files: tuple[Path, Path]) -> Iterator[Webhook]:
    """The chart with exceptions on, its webhooks calling a webhook that watches them."""
    plane = guard.plane
    policies, config = runtime_files
    assert "exceptionNamespaces" in config.read_text()
    # The webhook reads exceptions as its pods do: with a token of the chart's ServiceAccount,
    # so only the read-only Role the chart grants it (created by the upgrade below).
    account = plane.kubeconfig_as(RELEASE_NAMESPACE, RELEASE, workdir / "webhook-kubeconfig")
    webhook = Webhook(workdir, guard.certs, "--policies", str(policies), "--config",
                      str(config), "--watch-exceptions", "--kubeconfig", str(account))
    try:
        with guard.pointed_at(webhook.url, lambda: denies_bad_pod(plane), **VALUES):
            plane.namespace(TEAM)
            yield webhook
    finally:
        webhook.stop()


@pytest.fixture(scope="module")
def kube(guard: Guard, watcher: Webhook) -> ControlPlane:
    return guard.plane


def admitted(plane: ControlPlane, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """A server-side dry run: admission runs in full, nothing is stored."""
    return plane.apply(obj, "--dry-run=server")


def test_a_denied_pod_is_admitted_once_an_exception_is_granted(kube: ControlPlane) -> None:
    workload = root_pod("grant-1-plugin")
    denied = admitted(kube, workload)
    assert denied.returncode != 0 and "disallow-root-user" in denied.stderr
    # written through the deprecated version: still served, read by the webhook through v1
    created = kube.apply(exception("grant-1", version="v1alpha1"))
    assert created.returncode == 0, created.stderr
    assert "quickq.io/v1alpha1 PolicyException is deprecated; use quickq.io/v1" in created.stderr
    wait_until(lambda: admitted(kube, workload).returncode == 0, timeout=15,
               what="the exception to be honoured")
    done = admitted(kube, workload)
    [warning] = [w for w in warnings_of(done.stderr) if "disallow-root-user" in w]
    assert f"PolicyException {RELEASE_NAMESPACE}/grant-1" in warning
    assert "the device plugin needs root" in warning and "until 20" in warning


def test_the_same_exception_in_the_workloads_namespace_has_no_effect(kube: ControlPlane) -> None:
    own = kube.apply(exception("grant-2", namespace=TEAM))
    assert own.returncode == 0, own.stderr
    assert any("has no effect" in w for w in warnings_of(own.stderr))
    # No fixed wait for the watch to (not) see it: a watch delivers events in order, so
    # once an exception created after it is honoured, this one has been seen too.
    assert kube.apply(exception("after-grant-2")).returncode == 0
    wait_until(lambda: admitted(kube, root_pod("after-grant-2-plugin")).returncode == 0,
               timeout=15, what="an exception created after it to be honoured")
    denied = admitted(kube, root_pod("grant-2-plugin"))
    assert denied.returncode != 0 and "disallow-root-user" in denied.stderr


def test_an_exception_stops_applying_at_its_expiry(kube: ControlPlane) -> None:
    workload = root_pod("grant-3-plugin")
    assert kube.apply(exception("grant-3", seconds=12)).returncode == 0
    wait_until(lambda: admitted(kube, workload).returncode == 0, timeout=10,
               what="the exception to be honoured")
    # It expires 12 s after it was created: refused from then on, within the wait.
    wait_until(lambda: admitted(kube, workload).returncode != 0, timeout=20,
               what="the exception to expire")


@pytest.mark.parametrize(("change", "refusal"), [
    ({"expires": None}, "spec.expires"),  # the CRD's schema refuses it
    ({"reason": ""}, "spec.reason"),
    ({"policies": [{"id": "disallow-rot-user"}]}, "no policy 'disallow-rot-user'"),
    ({"policies": [{"id": "*"}]}, "is a wildcard"),
])
def test_malformed_exceptions_are_refused(kube: ControlPlane, change: dict[str, Any],
                                          refusal: str) -> None:
    bad = exception("bad")
    bad["spec"].update(change)
    bad["spec"] = {k: v for k, v in bad["spec"].items() if v is not None}
    done = kube.apply(bad, "--dry-run=server")
    assert done.returncode != 0 and refusal in done.stderr, done.stderr


def test_an_over_long_exception_is_refused_with_the_latest_expiry(kube: ControlPlane) -> None:
    done = kube.apply(exception("too-long", seconds=200 * 86400), "--dry-run=server")
    assert done.returncode != 0
    assert "more than 90 days away" in done.stderr and "or earlier" in done.stderr


def test_an_exception_in_the_past_is_refused(kube: ControlPlane) -> None:
    done = kube.apply(exception("past", seconds=-60), "--dry-run=server")
    assert done.returncode != 0 and "is in the past" in done.stderr


def can_i(kube: ControlPlane, *who: str) -> bool:
    done = kube.kubectl("auth", "can-i", "create", "policyexceptions.quickq.io", "-n",
                        RELEASE_NAMESPACE, *who, check=False)
    return done.stdout.strip() == "yes"


def test_only_the_grantee_group_may_create_exceptions(kube: ControlPlane) -> None:
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "alice-admin", "namespace": TEAM},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": "admin"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                             "name": "alice"}]}
    kube.apply(binding, check=True)
    assert not can_i(kube, "--as", "alice")
    assert can_i(kube, "--as", "bob", "--as-group", GRANTERS)
    # Impersonated, alice's create is refused by RBAC before any webhook is asked.
    done = kube.apply(exception("alice"), "--as", "alice")
    assert done.returncode != 0 and "forbidden" in done.stderr.lower()
    service_account = f"system:serviceaccount:{TEAM}:default"
    assert not can_i(kube, "--as", service_account)


def test_check_offline_gives_the_webhooks_verdicts(kube: ControlPlane, tmp_path: Path) -> None:
    granted = exception("grant-4")
    assert kube.apply(granted).returncode == 0
    workloads = [root_pod("grant-4-plugin"), root_pod("other-plugin")]
    wait_until(lambda: admitted(kube, workloads[0]).returncode == 0, timeout=15,
               what="the exception to be honoured")
    online = [admitted(kube, w).returncode == 0 for w in workloads]
    manifests = tmp_path / "pods.yaml"
    manifests.write_text(yaml.safe_dump_all(workloads))
    (tmp_path / "exception.yaml").write_text(yaml.safe_dump(granted))
    config = tmp_path / "config.yaml"
    config.write_text(f"exceptionNamespaces: [{RELEASE_NAMESPACE}]\n")
    done = subprocess.run([sys.executable, "-m", "webhook.cli", "check", str(manifests),
                           "--config", str(config), "--exceptions",
                           str(tmp_path / "exception.yaml"), "-o", "json"],
                          capture_output=True, text=True, check=False)
    report = json.loads(done.stdout)
    offline = {}
    for row in report["results"]:
        name = row["resource"]["name"]
        offline.setdefault(name, True)
        if row["result"] == "fail" and row["action"] == "enforce" and not all(
                "exception" in f for f in row["findings"]):
            offline[name] = False
    assert [offline[w["metadata"]["name"]] for w in workloads] == online == [True, False]


WEBHOOK_ACCOUNT = f"system:serviceaccount:{RELEASE_NAMESPACE}:{RELEASE}"


@pytest.mark.parametrize(("verb", "namespace", "allowed"), [
    ("list", RELEASE_NAMESPACE, True), ("watch", RELEASE_NAMESPACE, True),
    ("list", TEAM, False), ("create", RELEASE_NAMESPACE, False),
    ("delete", RELEASE_NAMESPACE, False), ("update", RELEASE_NAMESPACE, False)])
def test_the_webhooks_account_only_reads_the_exception_namespace(
        kube: ControlPlane, verb: str, namespace: str, allowed: bool) -> None:
    done = kube.kubectl("auth", "can-i", verb, "policyexceptions.quickq.io", "-n", namespace,
                        "--as", WEBHOOK_ACCOUNT, check=False)
    assert done.stdout.strip() == ("yes" if allowed else "no"), done.stderr


def test_the_view_age_is_a_metric(kube: ControlPlane, guard: Guard, watcher: Webhook) -> None:
    context = ssl.create_default_context(cafile=str(guard.certs / "ca.crt"))
    with urllib.request.urlopen(f"{watcher.url}/metrics", context=context,
                                timeout=10) as answer:
        text = answer.read().decode()
    assert 'quickq_guard_cluster_view_age_seconds{kind="PolicyException"} 0.0' in text
    assert 'quickq_guard_excepted_findings_total{policy="disallow-root-user"}' in text


def test_an_exception_namespace_added_by_an_upgrade_is_watched_without_a_restart(
        kube: ControlPlane, guard: Guard, watcher: Webhook, workdir: Path) -> None:
    """`helm upgrade` with another exceptions.namespaces entry changes the mounted config
    and the Roles; the webhook reloads the config in place and watches the new namespace."""
    added = "platform-exceptions"
    kube.namespace(added)
    kube.apply(exception("grant-5", namespace=added), check=True)
    workload = root_pod("grant-5-plugin")
    assert admitted(kube, workload).returncode != 0  # not an exception namespace yet

    def upgrade(namespaces: list[str]) -> None:
        values = {**VALUES, "exceptions.namespaces": namespaces}
        documents = rendered(kube, RELEASE, RELEASE_NAMESPACE,
                             release_values(watcher.url, guard.ca_bundle, **values))
        chart_runtime_files(documents, workdir / "chart-files")  # what the pods see mounted
        guard.point_at(watcher.url, lambda: True, **values)

    upgrade([RELEASE_NAMESPACE, added])
    try:
        wait_until(lambda: admitted(kube, workload).returncode == 0, timeout=20,
                   what="the added exception namespace to be watched")
    finally:
        upgrade([RELEASE_NAMESPACE])
    wait_until(lambda: admitted(kube, workload).returncode != 0, timeout=20,
               what="the removed exception namespace to stop counting")
