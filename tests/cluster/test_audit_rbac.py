"""The audit controller's ServiceAccount, with exactly the RBAC the chart installs, on the real
API server: it may get, list and watch every kind the installed validating webhook judges, in
every namespace, and write its own reports; it cannot write anything else (no Pod, Secret,
ConfigMap, PolicyException or other custom resource), and of Leases only its own.

Every check is made with a token of the account itself (`kubectl create token`), as its pod
would hold it: its groups are the API server's, not a guess of ours. The session's release
(the chart's defaults: OpenReports) is checked against the webhook configuration it
installed; a second release, installed with --no-hooks as test_chart_lifecycle.py does,
checks the wgpolicyk8s report API, the ML kinds and the exceptions, and that uninstalling
keeps the report CRDs and the reports in them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import CHART, RELEASE, RELEASE_NAMESPACE, ControlPlane, Guard, wait_until

NAMESPACE = "audit-rbac"
AUDIT = f"{RELEASE}-audit"
WRITE = ("create", "update", "patch", "delete")
# What the API server's default roles let every authenticated account do.
EVERYONE = {("authorization.k8s.io", "selfsubjectaccessreviews"),
            ("authorization.k8s.io", "selfsubjectrulesreviews"),
            ("authentication.k8s.io", "selfsubjectreviews")}
OTHER = "audit-other"
OTHER_NAMESPACE = "audit-other-system"
GRANTS = "audit-grants"


class Account:
    """kubectl as a ServiceAccount, through a kubeconfig holding its token."""

    def __init__(self, plane: ControlPlane, namespace: str, name: str, workdir: Path) -> None:
        self.plane = plane
        self.config = plane.kubeconfig_as(namespace, name, workdir / f"{name}.kubeconfig")

    def kubectl(self, *args: str, input: str | None = None) -> Any:
        return self.plane.kubectl("--kubeconfig", str(self.config), *args, input=input,
                                  check=False)

    def can(self, verb: str, resource: str, *where: str) -> bool:
        """A SelfSubjectAccessReview (what `kubectl auth can-i` sends, without its mapping of
        names through discovery, which knows no kind whose CRD is not installed): `resource`
        as `plural[.group][/name]`, `where` as `-A`, `-n NS` or `--subresource=S`."""
        kind, _, name = resource.partition("/")
        plural, _, group = kind.partition(".")
        attributes = {"verb": verb, "resource": plural, "group": group, "name": name}
        args = list(where)
        if "-n" in args:
            attributes["namespace"] = args[args.index("-n") + 1]
        for arg in args:
            if arg.startswith("--subresource="):
                attributes["subresource"] = arg.split("=", 1)[1]
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                  "spec": {"resourceAttributes": attributes}}
        done = self.kubectl("create", "--validate=false", "-f", "-", "-o", "json",
                            input=json.dumps(review))
        assert done.returncode == 0, done.stderr
        return bool(json.loads(done.stdout)["status"].get("allowed"))

    def rules(self, namespace: str) -> list[dict[str, Any]]:
        """Its resource rules in `namespace`, as a SelfSubjectRulesReview tells them."""
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                  "spec": {"namespace": namespace}}
        # --validate=false: kubectl's client-side check lists CRDs, which it may not
        done = self.kubectl("create", "--validate=false", "-f", "-", "-o", "json",
                            input=json.dumps(review))
        assert done.returncode == 0, done.stderr
        status = json.loads(done.stdout)["status"]
        assert not status.get("incomplete"), status
        rules: list[dict[str, Any]] = status["resourceRules"]
        return rules


def judged(plane: ControlPlane, configuration: str) -> set[tuple[str, str]]:
    """(group, resource) the installed validating webhooks judge, subresources left out."""
    hooks = plane.get("validatingwebhookconfiguration", configuration, "")["webhooks"]
    return {(group, resource) for hook in hooks
            if hook["name"].split(".")[0] in ("validate", "configmaps")
            for rule in hook["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] if "/" not in resource}


def written(rules: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(group, resource) of every rule that allows anything but reading."""
    return {(group, resource) for rule in rules if set(rule["verbs"]) - {"get", "list", "watch"}
            for group in rule.get("apiGroups", []) for resource in rule.get("resources", [])}


def plural(group: str, resource: str) -> str:
    return f"{resource}.{group}" if group else resource


def report(kind: str, name: str, namespace: str | None = None,
           api: str = "openreports.io/v1alpha1") -> dict[str, Any]:
    metadata = {"name": name, "labels": {"app.kubernetes.io/managed-by": "quickq-guard"}}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": api, "kind": kind, "metadata": metadata,
            "summary": {"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 0},
            "results": [{"source": "quickq-guard", "policy": "disallow-latest-tag",
                         "result": "fail", "message": "pin the image", "severity": "high",
                         "scored": True, "timestamp": {"seconds": 1, "nanos": 0},
                         "resources": [{"apiVersion": "v1", "kind": "Pod", "name": "web",
                                        "namespace": namespace or ""}],
                         "properties": {"action": "enforce"}}]}


@pytest.fixture(scope="module")
def account(guard: Guard, kube: ControlPlane,
            tmp_path_factory: pytest.TempPathFactory) -> Account:
    return Account(kube, RELEASE_NAMESPACE, AUDIT, tmp_path_factory.mktemp("audit-rbac"))


def test_it_reads_every_kind_the_installed_webhook_judges(account: Account,
                                                          kube: ControlPlane) -> None:
    kinds = judged(kube, RELEASE)
    assert {("", "pods"), ("apps", "deployments"), ("batch", "cronjobs"),
            ("", "configmaps"), ("quickq.io", "nodetemplates")} <= kinds
    for group, resource in sorted(kinds | {("", "namespaces"),
                                           ("apiextensions.k8s.io", "customresourcedefinitions")}):
        for verb in ("get", "list", "watch"):
            assert account.can(verb, plural(group, resource), "-A"), (verb, group, resource)
    # and really lists them, in every namespace
    done = account.kubectl("get", "pods,deployments.apps,configmaps", "-A", "-o", "name")
    assert done.returncode == 0, done.stderr


def test_it_writes_its_reports_and_nothing_else(account: Account, kube: ControlPlane) -> None:
    for namespace in (NAMESPACE, RELEASE_NAMESPACE, "default"):
        rules = account.rules(namespace)
        assert written(rules) - EVERYONE == {("openreports.io", "reports"),
                                             ("openreports.io", "clusterreports")} | (
            {("coordination.k8s.io", "leases")} if namespace == RELEASE_NAMESPACE else set())
    for verb in WRITE:
        assert account.can(verb, "reports.openreports.io", "-n", NAMESPACE)
        assert account.can(verb, "clusterreports.openreports.io")
        for resource in ("pods", "secrets", "configmaps", "deployments.apps", "namespaces",
                         "serviceaccounts", "policyexceptions.quickq.io",
                         "nodetemplates.quickq.io", "policyreports.wgpolicyk8s.io",
                         "clusterroles.rbac.authorization.k8s.io",
                         "validatingwebhookconfigurations.admissionregistration.k8s.io"):
            assert not account.can(verb, resource, "-A"), (verb, resource)
    assert not account.can("get", "secrets", "-A")
    assert not account.can("create", "serviceaccounts", "--subresource=token", "-n",
                           RELEASE_NAMESPACE)


def test_its_reports_are_stored_and_nothing_else_is(account: Account, kube: ControlPlane) -> None:
    """Written through the API with its token: the CRDs the chart installed take the reports,
    and a write of anything else is Forbidden."""
    namespaced = report("Report", "quickq-guard", NAMESPACE)
    for obj in (namespaced, report("ClusterReport", "quickq-guard")):
        done = account.kubectl("apply", "--server-side", "--field-manager=quickq-guard",
                               "-f", "-", input=json.dumps(obj))
        assert done.returncode == 0, done.stderr
    stored = kube.get("reports.openreports.io", "quickq-guard", NAMESPACE)
    assert stored["results"][0]["policy"] == "disallow-latest-tag"
    done = account.kubectl("delete", "reports.openreports.io", "quickq-guard", "-n", NAMESPACE)
    assert done.returncode == 0, done.stderr
    config_map = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "planted", "namespace": NAMESPACE}}
    for obj in (config_map, {**config_map, "kind": "Secret"}):
        done = account.kubectl("create", "-f", "-", input=json.dumps(obj))
        assert "Forbidden" in done.stderr or "forbidden" in done.stderr, done.stderr


def test_of_leases_only_its_own(account: Account) -> None:
    assert account.can("create", "leases.coordination.k8s.io", "-n", RELEASE_NAMESPACE)
    for verb in ("get", "update", "patch", "watch"):
        assert account.can(verb, f"leases.coordination.k8s.io/{AUDIT}", "-n",
                           RELEASE_NAMESPACE)
        assert not account.can(verb, "leases.coordination.k8s.io/someone-else", "-n",
                               RELEASE_NAMESPACE)
    assert not account.can("delete", f"leases.coordination.k8s.io/{AUDIT}", "-n",
                           RELEASE_NAMESPACE)
    assert not account.can("create", "leases.coordination.k8s.io", "-n", "kube-system")
    # the chart's policies and config, by name
    assert account.can("get", f"configmaps/{RELEASE}-config", "-n", RELEASE_NAMESPACE)


@pytest.fixture(scope="module")
def other(kube: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Account]:
    """A second release: wgpolicyk8s reports, Ray kinds judged, exceptions from GRANTS; no
    webhooks registered (the audit's RBAC follows their rules whether they are or not)."""
    for name in (OTHER_NAMESPACE, GRANTS):
        kube.namespace(name)
    flags = ["--set", "audit.reportApi=wgpolicyk8s", "--set", "workloadKinds.ray=true",
             "--set", "exceptions.enabled=true", "--set", f"exceptions.namespaces={{{GRANTS}}}",
             "--set", "exceptions.installCrd=false", "--set", "webhook.validating=false",
             "--set", "webhook.mutating=false", "--set", "crd.install=false"]
    kube.helm("install", OTHER, str(CHART), "-n", OTHER_NAMESPACE, "--no-hooks", *flags)
    try:
        yield Account(kube, OTHER_NAMESPACE, f"{OTHER}-quickq-guard-audit",
                      tmp_path_factory.mktemp("audit-other"))
    finally:
        kube.helm("uninstall", OTHER, "-n", OTHER_NAMESPACE, "--no-hooks", check=False)


def test_the_wgpolicyk8s_reports_ml_kinds_and_exceptions(other: Account,
                                                         kube: ControlPlane) -> None:
    assert account_writes(other) == {("wgpolicyk8s.io", "policyreports"),
                                     ("wgpolicyk8s.io", "clusterpolicyreports")}
    assert not other.can("create", "reports.openreports.io", "-n", NAMESPACE)
    assert other.can("list", "rayclusters.ray.io", "-A")
    assert other.can("list", "policyexceptions.quickq.io", "-n", GRANTS)
    assert not other.can("list", "policyexceptions.quickq.io", "-n", NAMESPACE)
    assert not other.can("create", "policyexceptions.quickq.io", "-n", GRANTS)
    # the chart installed the wgpolicyk8s CRDs (none were there): a report is stored
    wait_until(lambda: kube.kubectl("get", "crd", "policyreports.wgpolicyk8s.io",
                                    check=False).returncode == 0, what="the PolicyReport CRD")
    obj = report("PolicyReport", "quickq-guard", NAMESPACE, api="wgpolicyk8s.io/v1alpha2")
    done = other.kubectl("create", "--validate=false", "-f", "-", input=json.dumps(obj))
    assert done.returncode == 0, done.stderr


def account_writes(account: Account) -> set[tuple[str, str]]:
    return written(account.rules(NAMESPACE)) - EVERYONE


def test_uninstall_keeps_the_report_crds_and_the_reports(other: Account,
                                                        kube: ControlPlane) -> None:
    kube.helm("uninstall", OTHER, "-n", OTHER_NAMESPACE, "--no-hooks")
    for crd in ("policyreports.wgpolicyk8s.io", "clusterpolicyreports.wgpolicyk8s.io"):
        assert kube.kubectl("get", "crd", crd, check=False).returncode == 0, crd
    kept = kube.kubectl("get", "policyreports.wgpolicyk8s.io", "quickq-guard", "-n", NAMESPACE,
                        check=False)
    assert kept.returncode == 0, kept.stderr
    # its RBAC went with the release
    left = kube.kubectl("get", "clusterroles", "-o", "name").stdout
    assert f"{OTHER}-quickq-guard-audit" not in left
