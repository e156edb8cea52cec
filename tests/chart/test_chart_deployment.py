"""The webhook Deployment: highly available, locked down, and wired so that
policy, config and certificate changes reach the server without a restart."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from chart_helpers import (
    CHART,
    FULLNAME,
    NAMESPACE,
    REPO,
    SYSTEM_NAMESPACES,
    find,
    helm_template,
    helm_template_raw,
)
from ruamel.yaml import YAML


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return helm_template()


@pytest.fixture(scope="module")
def pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = find(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]
    return spec


@pytest.fixture(scope="module")
def container(pod: dict[str, Any]) -> dict[str, Any]:
    (only,) = pod["containers"]
    return dict(only)


def test_replicas_spread_and_disruption_budget(docs: list[dict[str, Any]],
                                               pod: dict[str, Any]) -> None:
    assert find(docs, "Deployment", FULLNAME)["spec"]["replicas"] == 2
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "topology.kubernetes.io/zone"
    selector = find(docs, "Deployment", FULLNAME)["spec"]["selector"]["matchLabels"]
    assert spread["labelSelector"]["matchLabels"] == selector
    pdb = find(docs, "PodDisruptionBudget")["spec"]
    assert pdb["minAvailable"] == 1 and pdb["selector"]["matchLabels"] == selector


def test_security_context_is_non_root_read_only(pod: dict[str, Any],
                                                container: dict[str, Any]) -> None:
    ctx = container["securityContext"]
    assert ctx["runAsNonRoot"] is True
    assert isinstance(ctx["runAsUser"], int) and ctx["runAsUser"] > 0
    assert ctx["readOnlyRootFilesystem"] is True
    assert ctx["allowPrivilegeEscalation"] is False
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    # A token only for the read-only watches: the DRA claims by default.
    assert pod["automountServiceAccountToken"] is True
    assert "--watch-claims" in pod["containers"][0]["args"]
    quiet = find(helm_template({"dra": {"watchClaims": False}}), "Deployment", FULLNAME)
    assert quiet["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_probes_use_https_health_endpoints(container: dict[str, Any]) -> None:
    expected = {"startupProbe": "/healthz", "readinessProbe": "/readyz",
                "livenessProbe": "/healthz"}
    for probe, path in expected.items():
        get = container[probe]["httpGet"]
        assert (get["path"], get["port"], get["scheme"]) == (path, "https", "HTTPS")
    assert container["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"}]
    live = container["livenessProbe"]
    assert live["failureThreshold"] * live["periodSeconds"] >= 60


def test_resources_fit_the_footprint(container: dict[str, Any]) -> None:
    assert set(container["resources"]["requests"]) >= {"cpu", "memory"}
    # 256 reviews at the 3 MiB body limit at once took one worker to 285 MiB
    # (benchmarks/hostile_load.py): the limit holds that with headroom
    assert container["resources"]["limits"]["memory"] == "320Mi"


def server_container(values: dict[str, Any]) -> dict[str, Any]:
    (only,) = find(helm_template(values), "Deployment", FULLNAME)["spec"]["template"]["spec"][
        "containers"]
    return dict(only)


@pytest.mark.parametrize(("workers", "limit"), [(1, "320Mi"), (2, "576Mi"), (16, "4160Mi")])
def test_memory_limit_grows_with_the_workers(workers: int, limit: str) -> None:
    container = server_container({"server": {"workers": workers}})
    assert f"--workers={workers}" in container["args"]
    assert container["resources"]["limits"]["memory"] == limit


@pytest.mark.parametrize(("memory", "workers"), [("1Gi", 8), ("160Mi", 2), ("96Mi", 1),
                                                 ("100663296", 1)])
def test_a_memory_limit_that_holds_the_workers_is_kept(memory: str, workers: int) -> None:
    container = server_container({"server": {"workers": workers},
                                  "resources": {"limits": {"memory": memory}}})
    assert container["resources"]["limits"]["memory"] == memory


@pytest.mark.parametrize(("memory", "workers", "floor"), [("128Mi", 4, "288Mi"),
                                                          ("95Mi", 1, "96Mi"),
                                                          ("1G", 16, "1056Mi")])
def test_a_memory_limit_too_small_for_the_workers_is_refused(memory: str, workers: int,
                                                             floor: str) -> None:
    proc = helm_template_raw({"server": {"workers": workers},
                              "resources": {"limits": {"memory": memory}}})
    assert proc.returncode != 0
    assert f"too little for {workers} server.workers: give at least {floor}" in proc.stderr


def test_availability_knobs(pod: dict[str, Any], container: dict[str, Any]) -> None:
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert "hostNetwork" not in pod and pod["dnsPolicy"] == "ClusterFirst"
    assert container["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}
    assert pod["terminationGracePeriodSeconds"] == 30


def test_host_network_switches_dns_policy_and_knobs_can_be_changed() -> None:
    docs = helm_template({"hostNetwork": True, "priorityClassName": "",
                          "server": {"preStopSleepSeconds": 0,
                                     "terminationGracePeriodSeconds": 10}})
    pod = find(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert "priorityClassName" not in pod and "lifecycle" not in pod["containers"][0]
    assert pod["terminationGracePeriodSeconds"] == 10
    assert find(helm_template({"hostNetwork": True, "dnsPolicy": "Default"}),
                "Deployment", FULLNAME)["spec"]["template"]["spec"]["dnsPolicy"] == "Default"


def test_a_grace_period_shorter_than_pre_stop_is_refused() -> None:
    proc = helm_template_raw({"server": {"preStopSleepSeconds": 20,
                                         "terminationGracePeriodSeconds": 20}})
    assert proc.returncode != 0 and "must be more than server.preStopSleepSeconds" in proc.stderr


def test_the_server_drains_within_the_grace_period(container: dict[str, Any]) -> None:
    assert "--drain=3" in container["args"]
    drained = server_container({"server": {"drainSeconds": 10}})
    assert "--drain=10" in drained["args"]
    # preStop 5 + drain 25 leaves nothing of 30 for the requests in flight
    proc = helm_template_raw({"server": {"drainSeconds": 25}})
    assert proc.returncode != 0
    assert "(30) must be more than server.preStopSleepSeconds + server.drainSeconds " \
           "(5 + 25)" in proc.stderr


def test_priority_class_quota_names_the_class() -> None:
    docs = helm_template({"priorityClassQuota": True})
    quota = find(docs, "ResourceQuota")["spec"]
    assert quota["scopeSelector"]["matchExpressions"] == [
        {"scopeName": "PriorityClass", "operator": "In", "values": ["system-cluster-critical"]}]


def test_image_is_pinned_to_app_version(container: dict[str, Any]) -> None:
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert container["image"] == f"ghcr.io/quickq/quickq-guard:{app_version}"
    assert yaml.safe_load((CHART / "values.yaml").read_text())["image"]["tag"] == ""
    tagged = helm_template({"image": {"tag": "0.2.0-rc1"}})
    (server,) = find(tagged, "Deployment", FULLNAME)["spec"]["template"]["spec"]["containers"]
    assert server["image"] == "ghcr.io/quickq/quickq-guard:0.2.0-rc1"


def test_labels(docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        labels = doc["metadata"]["labels"]
        assert labels["app"] == "quickq-guard"
        for key in ("name", "instance", "version", "managed-by"):
            assert f"app.kubernetes.io/{key}" in labels, (doc["kind"], key)
    template = find(docs, "Deployment", FULLNAME)["spec"]["template"]["metadata"]["labels"]
    assert template["app"] == "quickq-guard"


def test_labels_given_twice_are_written_once() -> None:
    """commonLabels and podLabels may repeat a standard key: one key, the user's value
    (the object would otherwise carry a duplicate YAML key)."""
    proc = helm_template_raw({"commonLabels": {"app": "guard", "team": "platform"},
                              "podLabels": {"app": "guard-pod", "tier": "control"}})
    assert proc.returncode == 0, proc.stderr
    # ruamel.yaml refuses a mapping with a key twice (DuplicateKeyError), as strict parsers do.
    docs = [d for d in YAML(typ="safe", pure=True).load_all(proc.stdout) if d]
    assert docs
    deployment = find(docs, "Deployment", FULLNAME)
    assert deployment["metadata"]["labels"]["app"] == "guard"
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert (pod_labels["app"], pod_labels["team"], pod_labels["tier"]) == (
        "guard-pod", "platform", "control")
    assert pod_labels["app.kubernetes.io/name"] == "quickq-guard"


def test_server_args_match_mounts(container: dict[str, Any]) -> None:
    args = container["args"]
    for flag in ("--cert=/etc/quickq-guard/tls/tls.crt", "--key=/etc/quickq-guard/tls/tls.key",
                 "--policies=/etc/quickq-guard/policies",
                 "--config=/etc/quickq-guard/config/config.yaml", "--port=8443"):
        assert flag in args


def test_reloadable_mounts_have_no_subpath_and_no_restart_checksum(
        docs: list[dict[str, Any]], pod: dict[str, Any], container: dict[str, Any]) -> None:
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["tls"]["mountPath"] == "/etc/quickq-guard/tls"
    assert mounts["policies"]["mountPath"] == "/etc/quickq-guard/policies"
    assert mounts["config"]["mountPath"] == "/etc/quickq-guard/config"
    assert not [m for m in container["volumeMounts"] if "subPath" in m or "subPathExpr" in m]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["policies"]["configMap"]["name"] == f"{FULLNAME}-policies"
    assert volumes["config"]["configMap"]["name"] == f"{FULLNAME}-config"
    assert "items" not in volumes["policies"]["configMap"]
    annotations = find(docs, "Deployment", FULLNAME)["spec"]["template"]["metadata"].get(
        "annotations", {})
    assert not [a for a in annotations if "checksum" in a]


def test_policies_configmap_holds_every_shipped_policy(docs: list[dict[str, Any]]) -> None:
    shipped = {p.name: p.read_text() for p in (REPO / "policies").glob("*.yaml")}
    assert shipped, "the repository ships no policies"
    data = find(docs, "ConfigMap", f"{FULLNAME}-policies")["data"]
    assert set(data) == set(shipped)
    for name, text in shipped.items():
        assert yaml.safe_load(data[name]) == yaml.safe_load(text), name


def test_policies_come_through_the_symlink_not_a_copy() -> None:
    link = CHART / "policies"
    assert link.is_symlink() and link.resolve() == (REPO / "policies").resolve()


def test_config_carries_overrides_and_release_namespace() -> None:
    overrides = {"require-labels": {"action": "enforce", "params": {"labels": ["app", "team"]}},
                 "gpu-priority-class": {"action": "off"}}
    docs = helm_template({"policies": overrides, "config": {"excludeUsers": ["ci-bot"]},
                          "nodeTemplate": {"groups": ["quickq", "quickq.io"]}},
                         namespace="guard")
    config = yaml.safe_load(find(docs, "ConfigMap", f"{FULLNAME}-config")["data"]["config.yaml"])
    assert config == {
        "mode": "enforce",
        "excludeNamespaces": [*SYSTEM_NAMESPACES, "guard"],
        "excludeUsers": ["ci-bot"], "excludeGroups": [],
        "nodeTemplateGroups": ["quickq", "quickq.io"], "customKinds": [], "policies": overrides,
        "optOutGroups": ["system:masters", "kubeadm:cluster-admins"],
    }


def test_extra_policy_files_are_added() -> None:
    text = "id: team-quota\ntype: validate\naction: warn\n"
    docs = helm_template({"extraPolicies": {"team-quota.yaml": text}})
    data = find(docs, "ConfigMap", f"{FULLNAME}-policies")["data"]
    assert data["team-quota.yaml"].strip() == text.strip()
    assert "require-requests.yaml" in data


def test_namespaced_objects_land_in_release_namespace(docs: list[dict[str, Any]]) -> None:
    cluster_scoped = {"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
                      "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    for doc in docs:
        if doc["metadata"]["name"].endswith("-probe"):  # the hooks dry-run create a Pod there
            assert doc["metadata"]["namespace"] == "default", doc["kind"]
        elif doc["kind"] not in cluster_scoped:
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["kind"]


@pytest.mark.parametrize(("values", "flag"), [({}, "--request-timeout=4"),
                                              ({"requestTimeoutSeconds": 2.5},
                                               "--request-timeout=2.5")])
def test_each_request_has_a_deadline_inside_the_api_servers(values: dict[str, Any],
                                                             flag: str) -> None:
    """A stalled body must not hold a connection for ever (serve --request-timeout)."""
    assert flag in server_container({"server": values})["args"]
