"""The background audit's Deployment, ServiceAccount, RBAC and report CRDs as the chart
renders them: on by default and off-able, the webhook's image and mounts, its own pods (never
the webhook Service's), reads exactly what the validating webhook judges, writes only its
reports, one Lease; the report CRDs installed unless someone else's are there, and never
deleted. What the RBAC lets the account do on a real API server: tests/cluster/test_audit_rbac.py.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import kubernetes_validate
import pytest
import yaml
from chart_helpers import (
    FULLNAME,
    KUBE_VERSION,
    NAMESPACE,
    RELEASE,
    find,
    helm_template,
    helm_template_raw,
    helm_template_with_cluster,
    kubectl_dry_run,
)

from webhook.cli.main import parser

AUDIT = f"{FULLNAME}-audit"
READ = ["get", "list", "watch"]
OPENREPORTS = {"reports.openreports.io", "clusterreports.openreports.io"}
WGPOLICY = {"policyreports.wgpolicyk8s.io", "clusterpolicyreports.wgpolicyk8s.io"}
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
# Read besides the judged kinds: what decides which namespaces and kinds are judged.
ALWAYS = {("", "namespaces"), ("apiextensions.k8s.io", "customresourcedefinitions")}


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return helm_template()


def pod_of(docs: list[dict[str, Any]], name: str = AUDIT) -> dict[str, Any]:
    spec: dict[str, Any] = find(docs, "Deployment", name)["spec"]["template"]["spec"]
    return spec


def audit_objects(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return sorted((d["kind"], d["metadata"]["name"]) for d in docs
                  if d["metadata"]["name"].startswith(AUDIT)
                  or d["kind"] == "CustomResourceDefinition")


def crds(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "CustomResourceDefinition"}


def pairs(rules: list[dict[str, Any]], verbs: list[str] | None = None) -> set[tuple[str, str]]:
    """(group, resource) of every rule (with exactly `verbs`, when given)."""
    return {(group, resource) for rule in rules if verbs is None or rule["verbs"] == verbs
            for group in rule["apiGroups"] for resource in rule["resources"]}


def webhook_pairs(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(group, resource) the validating webhooks judge, subresources left out."""
    hooks = find(docs, "ValidatingWebhookConfiguration")["webhooks"]
    return {(group, resource) for hook in hooks
            if hook["name"].split(".")[0] in ("validate", "configmaps")
            for rule in hook["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] if "/" not in resource}


def test_on_by_default_with_the_webhooks_image_mounts_and_a_lease(
        docs: list[dict[str, Any]]) -> None:
    pod, webhook = pod_of(docs), pod_of(docs, FULLNAME)
    (container,) = pod["containers"]
    assert find(docs, "Deployment", AUDIT)["spec"]["replicas"] == 1
    assert container["image"] == webhook["containers"][0]["image"]
    assert container["command"] == ["quickq-guard", "audit"]
    args = container["args"]
    assert args[:7] == [
        "--policies=/etc/quickq-guard/policies",
        "--config=/etc/quickq-guard/config/config.yaml", "--report-api=openreports",
        "--metrics-port=9090", "--leader-elect", f"--lease-namespace={NAMESPACE}",
        f"--lease-name={AUDIT}"]
    # the CLI takes what the chart writes (once the controller is in the tree)
    if importlib.util.find_spec("webhook.cli.audit"):
        parser().parse_args(container["command"][1:] + args)
    # the policies and config the webhook reads, from the same ConfigMaps
    volumes = {v["name"]: v for v in pod["volumes"]}
    webhook_volumes = {v["name"]: v for v in webhook["volumes"]}
    for name in ("policies", "config"):
        assert volumes[name] == webhook_volumes[name]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    webhook_mounts = {m["name"]: m for m in webhook["containers"][0]["volumeMounts"]}
    for name in ("policies", "config"):
        assert mounts[name] == webhook_mounts[name] and "subPath" not in mounts[name]
    assert "tls" not in volumes  # it serves no admission
    assert pod["serviceAccountName"] == AUDIT and pod["automountServiceAccountToken"] is True


def test_non_root_read_only_with_a_memory_limit_and_probes(docs: list[dict[str, Any]]) -> None:
    pod = pod_of(docs)
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True and context["runAsNonRoot"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["limits"]["memory"] == "256Mi"
    assert container["ports"] == [{"name": "metrics", "containerPort": 9090, "protocol": "TCP"}]
    for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"),
                        ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "metrics"}
    ready = container["readinessProbe"]  # ready within seconds of the first scan's end
    assert ready["periodSeconds"] * ready["failureThreshold"] <= 10
    live = container["livenessProbe"]
    assert live["failureThreshold"] * live["periodSeconds"] >= 60


def test_its_pods_are_never_the_webhooks(docs: list[dict[str, Any]]) -> None:
    """Selected by labels of their own: the webhook's Service, PDB and spread skip them."""
    labels = find(docs, "Deployment", AUDIT)["spec"]["template"]["metadata"]["labels"]
    for selector in (find(docs, "Service", FULLNAME)["spec"]["selector"],
                     find(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
                     find(docs, "Deployment", FULLNAME)["spec"]["selector"]["matchLabels"]):
        assert not selector.items() <= labels.items()
    assert labels["app.kubernetes.io/component"] == "audit"
    assert labels["app"] == "quickq-guard"  # require-labels holds for it too


def test_off_removes_everything_of_it() -> None:
    docs = helm_template({"audit": {"enabled": False}})
    assert audit_objects(docs) == []
    assert not [d for d in docs if "audit" in str(d["metadata"].get("labels", {}))]


def test_two_replicas() -> None:
    deployment = find(helm_template({"audit": {"replicas": 2}}), "Deployment", AUDIT)
    assert deployment["spec"]["replicas"] == 2
    assert "--leader-elect" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]


def test_it_reads_exactly_what_the_validating_webhook_judges(docs: list[dict[str, Any]]) -> None:
    reader = find(docs, "ClusterRole", f"{AUDIT}-reader")
    assert all(rule["verbs"] == READ for rule in reader["rules"])
    assert pairs(reader["rules"]) == webhook_pairs(docs) | ALWAYS
    assert ("", "configmaps") in pairs(reader["rules"])  # webhook.configMaps judges them
    binding = find(docs, "ClusterRoleBinding", f"{AUDIT}-reader")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": AUDIT,
                                    "namespace": NAMESPACE}]


@pytest.mark.parametrize("values", [
    {"workloadKinds": {"ray": True, "kserve": True, "resourceClaims": False}},
    {"customKinds": [{"group": "serving.example.com", "kind": "ModelServer",
                      "resource": "modelservers", "podTemplates": ["spec.template"]},
                     {"group": "fleet.example.com", "kind": "Fleet", "resource": "fleets",
                      "podTemplates": ["spec.template"], "scope": "Cluster"}]},
    {"webhook": {"configMaps": False}, "nodeTemplate": {"groups": ["a.example.com"]}},
    {"webhook": {"validating": False}},
], ids=["workload-kinds", "custom-kinds", "no-configmaps", "no-validating-webhook"])
def test_the_read_rules_follow_the_webhook_rules(values: dict[str, Any]) -> None:
    docs = helm_template(values)
    read = pairs(find(docs, "ClusterRole", f"{AUDIT}-reader")["rules"])
    if values.get("webhook", {}).get("validating") is False:
        # no validating webhook is registered, yet the audit judges what it would
        assert ("apps", "deployments") in read and ("", "configmaps") in read
        return
    assert read == webhook_pairs(docs) | ALWAYS
    if "workloadKinds" in values:
        assert {("ray.io", "rayclusters"), ("serving.kserve.io", "clusterservingruntimes")} <= read
        assert ("resource.k8s.io", "resourceclaims") not in read
    if "customKinds" in values:
        assert {("serving.example.com", "modelservers"), ("fleet.example.com", "fleets")} <= read
    if values.get("webhook", {}).get("configMaps") is False:
        assert ("", "configmaps") not in read
        assert ("a.example.com", "nodetemplates") in read


@pytest.mark.parametrize(("api", "group", "kinds"), [
    ("openreports", "openreports.io", ["reports", "clusterreports"]),
    ("wgpolicyk8s", "wgpolicyk8s.io", ["policyreports", "clusterpolicyreports"])])
def test_it_writes_its_report_kinds_and_nothing_else(api: str, group: str,
                                                     kinds: list[str]) -> None:
    docs = helm_template({"audit": {"reportApi": api}})
    assert f"--report-api={api}" in pod_of(docs)["containers"][0]["args"]
    writer = find(docs, "ClusterRole", f"{AUDIT}-reports")
    assert writer["rules"] == [{"apiGroups": [group], "resources": kinds,
                                "verbs": ["get", "list", "watch", "create", "update", "patch",
                                          "delete"]}]
    # Anything else the account is granted is read only, but for its one Lease.
    role = find(docs, "Role", f"{AUDIT}")
    assert role["metadata"]["namespace"] == NAMESPACE
    for rule in role["rules"]:
        if rule["resources"] == ["leases"]:
            assert rule["apiGroups"] == ["coordination.k8s.io"]
            assert rule["verbs"] == ["create"] or (
                rule["resourceNames"] == [AUDIT]
                and rule["verbs"] == ["get", "watch", "update", "patch"])
        else:
            assert rule == {"apiGroups": [""], "resources": ["configmaps"],
                            "resourceNames": [f"{FULLNAME}-policies", f"{FULLNAME}-config"],
                            "verbs": READ}
    bound = {b["roleRef"]["name"] for b in docs
             if b["kind"] in ("RoleBinding", "ClusterRoleBinding")
             and {"kind": "ServiceAccount", "name": AUDIT, "namespace": NAMESPACE}
             in b["subjects"]}
    assert bound == {f"{AUDIT}-reader", f"{AUDIT}-reports", AUDIT}
    assert set(crds(docs)) == {f"{kind}.{group}" for kind in kinds}


def test_it_reads_the_exceptions_the_webhook_honours() -> None:
    docs = helm_template({"exceptions": {"enabled": True, "namespaces": ["grants", "team-a"]}})
    bindings = [d for d in docs if d["kind"] == "RoleBinding"
                and d["metadata"]["name"] == f"{AUDIT}-exceptions"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["grants", "team-a"]
    for binding in bindings:
        assert binding["roleRef"]["name"] == f"{FULLNAME}-exceptions-reader"
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": AUDIT,
                                        "namespace": NAMESPACE}]
        reader = find([d for d in docs if d["metadata"].get("namespace")
                       == binding["metadata"]["namespace"]], "Role",
                      f"{FULLNAME}-exceptions-reader")
        assert reader["rules"] == [{"apiGroups": ["quickq.io"],
                                    "resources": ["policyexceptions"], "verbs": READ}]
    assert not [d for d in helm_template() if d["metadata"]["name"] == f"{AUDIT}-exceptions"]


def test_the_report_crds_are_valid_kept_and_never_in_a_hook(docs: list[dict[str, Any]]) -> None:
    found = crds(docs)
    assert set(found) == OPENREPORTS
    for crd in found.values():
        kubernetes_validate.validate(crd, KUBE_VERSION, strict=True)
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert crd["spec"]["group"] == "openreports.io"
        (version,) = crd["spec"]["versions"]
        assert version["name"] == "v1alpha1"
        schema = version["schema"]["openAPIV3Schema"]["properties"]
        assert set(schema["summary"]["properties"]) == {"pass", "fail", "warn", "error", "skip"}
    scopes = {crd["spec"]["names"]["kind"]: crd["spec"]["scope"] for crd in found.values()}
    assert scopes == {"Report": "Namespaced", "ClusterReport": "Cluster"}
    # The pre-delete cleanup removes the webhook configurations only.
    for doc in docs:
        if "helm.sh/hook" in doc["metadata"].get("annotations", {}):
            assert "customresourcedefinition" not in yaml.safe_dump(doc).lower()


@pytest.mark.parametrize(("mode", "expected"), [(True, OPENREPORTS), (False, set()),
                                                ("auto", OPENREPORTS)])
def test_install_crds_without_a_cluster(mode: Any, expected: set[str]) -> None:
    assert set(crds(helm_template({"audit": {"installCRDs": mode}}))) == expected


def existing(name: str, release: str | None = None) -> dict[str, Any]:
    """A CRD as the cluster holds it: installed by someone else, or by helm for `release`."""
    metadata: dict[str, Any] = {"name": name}
    if release:
        metadata["annotations"] = {"meta.helm.sh/release-name": release,
                                   "meta.helm.sh/release-namespace": NAMESPACE}
        metadata["labels"] = {"app.kubernetes.io/managed-by": "Helm"}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": metadata, "spec": {}}


def test_auto_leaves_out_crds_someone_else_installed() -> None:
    objects = {CRD_PATH + "reports.openreports.io": existing("reports.openreports.io")}
    assert set(crds(helm_template_with_cluster(objects))) == {"clusterreports.openreports.io"}
    both = {CRD_PATH + name: existing(name, "kyverno") for name in OPENREPORTS}
    assert crds(helm_template_with_cluster(both)) == {}
    # true renders them anyway, and helm refuses to take over another owner's
    with pytest.raises(AssertionError, match="cannot be imported into the current release"):
        helm_template_with_cluster(both, {"audit": {"installCRDs": True}})


def test_auto_keeps_the_crds_this_release_installed() -> None:
    """An upgrade must not drop (and so delete) the CRDs its own install made."""
    objects = {CRD_PATH + name: existing(name, RELEASE) for name in OPENREPORTS}
    assert set(crds(helm_template_with_cluster(objects))) == OPENREPORTS


def test_service_monitor_scrapes_its_metrics_port() -> None:
    docs = helm_template({"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}})
    service = find(docs, "Service", AUDIT)
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9090,
                                         "targetPort": "metrics", "protocol": "TCP"}]
    labels = find(docs, "Deployment", AUDIT)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    monitor = find(docs, "ServiceMonitor", AUDIT)
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"][
        "labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["scheme"]) == \
        ("metrics", "/metrics", "http")
    assert "Service" not in [kind for kind, name in audit_objects(helm_template())]


@pytest.mark.parametrize("values", [{}, {"audit": {"reportApi": "wgpolicyk8s"}},
                                    {"exceptions": {"enabled": True},
                                     "serviceMonitor": {"enabled": True}}])
def test_kubectl_loads_it(values: dict[str, Any]) -> None:
    docs = [d for d in helm_template(values) if d["metadata"]["name"].startswith(AUDIT)]
    assert len(docs) >= 7
    done = kubectl_dry_run(docs)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("values", "expected"), [
    ({"audit": {"reportApi": "policyreport"}}, ["/audit/reportApi", "wgpolicyk8s"]),
    ({"audit": {"installCRDs": "yes"}}, ["/audit/installCRDs"]),
    ({"audit": {"replicas": 0}}, ["/audit/replicas", "minimum"]),
    ({"audit": {"resources": {"limits": {"memory": None}}}},
     ["/audit/resources/limits", "missing property 'memory'"]),
    ({"audit": {"enable": True}}, ["/audit", "'enable'"]),
    ({"audit": {"probes": {"liveness": {"failureThreshold": 2}}}},
     ["audit.probes.liveness: failureThreshold x periodSeconds is 20s"]),
])
def test_bad_values_are_refused(values: dict[str, Any], expected: list[str]) -> None:
    done = helm_template_raw(values)
    assert done.returncode != 0
    for fragment in expected:
        assert fragment in done.stderr, done.stderr


def test_metrics_port_and_extra_args_reach_the_container_and_the_service() -> None:
    docs = helm_template({"audit": {"metricsPort": 9191, "extraArgs": ["--max-results=200"]},
                          "serviceMonitor": {"enabled": True}})
    (container,) = pod_of(docs)["containers"]
    assert "--metrics-port=9191" in container["args"]
    assert container["args"][-1] == "--max-results=200"
    assert container["ports"][0]["containerPort"] == 9191
    assert find(docs, "Service", AUDIT)["spec"]["ports"][0]["port"] == 9191
    if importlib.util.find_spec("webhook.cli.audit"):
        parser().parse_args(container["command"][1:] + container["args"])


def test_with_network_policies_only_its_metrics_port_is_reachable() -> None:
    docs = helm_template({"networkPolicy": {"enabled": True, "from": [
        {"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]}})
    policy = find(docs, "NetworkPolicy", AUDIT)["spec"]
    labels = find(docs, "Deployment", AUDIT)["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["ingress"] == [{"ports": [{"port": 9090, "protocol": "TCP"}],
                                  "from": [{"namespaceSelector": {
                                      "matchLabels": {"name": "monitoring"}}}]}]
    webhook = find(docs, "NetworkPolicy", FULLNAME)["spec"]["podSelector"]["matchLabels"]
    assert not webhook.items() <= labels.items()
