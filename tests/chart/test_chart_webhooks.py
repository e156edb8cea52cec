"""The webhook configurations: what they intercept, and that they can never
lock an admin out (system namespaces and the release's own are left out); the namespaces
webhook, called only for an opt-out asked for by someone not trusted with one."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from chart_helpers import (
    FULLNAME,
    NAMESPACE,
    SYSTEM_NAMESPACES,
    find,
    helm_template,
    helm_template_raw,
    helm_template_with_cluster,
)

from webhook import Review, load_policies
from webhook import evaluate as engine_evaluate
from webhook.engine.cel import activation, compile_expression, evaluate
from webhook.engine.globs import matches_any
from webhook.engine.policy import Config

WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
MAIN = ("validate.quickq-guard.quickq.io", "mutate.quickq-guard.quickq.io")
NAMESPACES = "namespaces.quickq-guard.quickq.io"


def hooks(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The validating and mutating webhooks that judge workloads."""
    return [hook for kind in WEBHOOK_KINDS for hook in find(docs, kind)["webhooks"]
            if hook["name"] in MAIN]


def excluded_namespaces(hook: dict[str, Any]) -> set[str]:
    """Namespaces the selector keeps out, from its kubernetes.io/metadata.name NotIn term."""
    terms = hook["namespaceSelector"]["matchExpressions"]
    (term,) = [t for t in terms if t["key"] == "kubernetes.io/metadata.name"]
    assert term["operator"] == "NotIn"
    assert "matchLabels" not in hook["namespaceSelector"]
    return set(term["values"])


def intercepted(hook: dict[str, Any]) -> dict[tuple[str, str], tuple[str, ...]]:
    """(group, resource) -> operations, for every rule of the hook."""
    pairs: dict[tuple[str, str], tuple[str, ...]] = {}
    for rule in hook["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert (group, resource) not in pairs
                pairs[(group, resource)] = tuple(sorted(rule["operations"]))
    return pairs


def validating(docs: list[dict[str, Any]], name: str = MAIN[0]) -> dict[str, Any]:
    (hook,) = [hook for hook in find(docs, "ValidatingWebhookConfiguration")["webhooks"]
               if hook["name"] == name]
    return dict(hook)


def mutating(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (hook,) = find(docs, "MutatingWebhookConfiguration")["webhooks"]
    return dict(hook)


@pytest.mark.parametrize("namespace", ["quickq-guard", "policy-system"])
def test_namespace_selector_spares_system_and_own_namespace(namespace: str) -> None:
    for hook in hooks(helm_template(namespace=namespace)):
        assert excluded_namespaces(hook) == set(SYSTEM_NAMESPACES) | {namespace}
        assert {"key": "quickq.io/ignore", "operator": "NotIn", "values": ["true"]} in \
            hook["namespaceSelector"]["matchExpressions"]


def test_configured_exclusions_reach_selector_and_config() -> None:
    docs = helm_template({"config": {"excludeNamespaces": ["monitoring"],
                                     "systemNamespaces": ["kube-system"]}})
    for hook in hooks(docs):
        assert excluded_namespaces(hook) == {"kube-system", "monitoring", "quickq-guard"}


@pytest.mark.parametrize(("cert_manager", "excluded"), [
    ({}, "cert-manager"), ({"namespace": "pki"}, "pki")])
def test_cert_manager_mode_spares_cert_managers_namespace(cert_manager: dict[str, Any],
                                                          excluded: str) -> None:
    docs = helm_template({"config": {"systemNamespaces": ["kube-system"]},
                          "certs": {"mode": "cert-manager", "certManager": cert_manager}})
    for hook in hooks(docs):
        assert excluded_namespaces(hook) == {"kube-system", excluded, "quickq-guard"}


CORE = {("", "replicationcontrollers"), ("apps", "deployments"), ("apps", "replicasets"),
        ("apps", "statefulsets"), ("apps", "daemonsets"), ("batch", "jobs"),
        ("batch", "cronjobs"), ("quickq.io", "nodetemplates")}
BOTH = ("CREATE", "UPDATE")


CLAIMS = {("resource.k8s.io", "resourceclaims"), ("resource.k8s.io", "resourceclaimtemplates")}


def test_validating_rules_cover_pods_debug_containers_controllers_and_nodetemplates() -> None:
    rules = intercepted(validating(helm_template()))
    assert rules == {**dict.fromkeys(CORE | CLAIMS, BOTH), ("", "pods"): BOTH,
                     ("", "pods/ephemeralcontainers"): BOTH}
    off = intercepted(validating(helm_template({"workloadKinds": {"resourceClaims": False}})))
    assert set(off) == set(rules) - CLAIMS


def test_mutating_rules_leave_out_pod_updates_and_debug_containers() -> None:
    """The engine patches a Pod on CREATE only, and never an ephemeral container."""
    rules = intercepted(mutating(helm_template()))
    assert rules == {**dict.fromkeys(CORE, BOTH), ("", "pods"): ("CREATE",)}


def test_nodetemplate_groups_from_values() -> None:
    docs = helm_template({"nodeTemplate": {"groups": ["quickq", "quickq.io"]}})
    for hook in hooks(docs):
        groups = {g for g, r in intercepted(hook) if r == "nodetemplates"}
        assert groups == {"quickq", "quickq.io"}


def test_webhook_safety_settings() -> None:
    docs = helm_template()
    for hook, path in zip((*hooks(docs), validating(docs, NAMESPACES)),
                          ("/validate", "/mutate", "/validate"), strict=True):
        assert hook["sideEffects"] == "None"
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["timeoutSeconds"] == 5
        assert hook["clientConfig"]["service"]["path"] == path
    assert mutating(docs)["reinvocationPolicy"] == "IfNeeded"


def policies(docs: list[dict[str, Any]]) -> tuple[str, str]:
    """The failurePolicy of the validating and the mutating webhook; the namespaces webhook,
    in the validating configuration, has the validating one's (`cluster arm` sets both)."""
    policy = validating(docs)["failurePolicy"]
    assert validating(docs, NAMESPACES)["failurePolicy"] == policy
    return policy, mutating(docs)["failurePolicy"]


def test_a_first_install_registers_both_webhooks_as_ignore() -> None:
    """Fail-safe: nothing is blocked until the arm hook saw the webhook answer."""
    docs = helm_template()
    assert policies(docs) == ("Ignore", "Ignore")
    job = find(docs, "Job", f"{FULLNAME}-arm")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == [
        "quickq-guard", "cluster", "arm", "--namespace", "default",
        "--instance", f"{NAMESPACE}/{FULLNAME}", "--timeout", "300",
        "--validating", f"{FULLNAME}=Fail", "--mutating", f"{FULLNAME}=Ignore"]


def armed(kind: str, policy: str) -> dict[str, Any]:
    """A webhook configuration as `quickq-guard cluster arm` left it."""
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
            "metadata": {"name": FULLNAME,
                         "annotations": {"quickq.io/failure-policy-armed": "true",
                                         "meta.helm.sh/release-name": FULLNAME,
                                         "meta.helm.sh/release-namespace": NAMESPACE},
                         "labels": {"app.kubernetes.io/managed-by": "Helm"}},
            "webhooks": [{"name": "x", "failurePolicy": policy}]}


def test_an_upgrade_after_arming_renders_the_configured_policies() -> None:
    base = "/apis/admissionregistration.k8s.io/v1/"
    objects = {f"{base}validatingwebhookconfigurations/{FULLNAME}":
               armed("ValidatingWebhookConfiguration", "Fail")}
    docs = helm_template_with_cluster(objects)
    # The validating one was armed; the mutating one not yet, so it stays Ignore.
    assert policies(docs) == ("Fail", "Ignore")
    assert find(docs, "ValidatingWebhookConfiguration")["metadata"]["annotations"][
        "quickq.io/failure-policy-armed"] == "true"
    objects[f"{base}mutatingwebhookconfigurations/{FULLNAME}"] = \
        armed("MutatingWebhookConfiguration", "Ignore")
    docs = helm_template_with_cluster(objects, {"webhook": {"failurePolicy": {
        "validating": "Ignore", "mutating": "Fail"}}})
    assert policies(docs) == ("Ignore", "Fail")


def test_without_fail_safe_the_configured_policies_are_rendered_and_no_job() -> None:
    docs = helm_template({"webhook": {"failSafe": {"enabled": False}}})
    assert policies(docs) == ("Fail", "Ignore")
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Job"] == [f"{FULLNAME}-cleanup"]
    docs = helm_template({"webhook": {"failSafe": {"enabled": False}, "failurePolicy": {
        "validating": "Ignore", "mutating": "Fail"}}})
    assert policies(docs) == ("Ignore", "Fail")


def test_nothing_to_arm_when_both_policies_are_ignore() -> None:
    docs = helm_template({"webhook": {"failurePolicy": {"validating": "Ignore"}}})
    assert not [d for d in docs if d["kind"] == "Job" and d["metadata"]["name"].endswith("-arm")]


def test_a_probe_namespace_that_is_excluded_is_refused() -> None:
    proc = helm_template_raw({"webhook": {"failSafe": {"probeNamespace": "kube-system"}}})
    assert proc.returncode != 0
    assert "probeNamespace kube-system is excluded" in proc.stderr


def test_an_install_into_default_says_to_give_it_a_namespace_of_its_own() -> None:
    """`helm install quickq-guard charts/quickq-guard` with no -n: the release namespace is
    `default`, which the webhook never judges, and the probe's namespace too."""
    proc = helm_template_raw(namespace="default")
    assert proc.returncode != 0
    assert "the release namespace default is excluded" in proc.stderr
    assert "helm install -n quickq-guard --create-namespace" in proc.stderr


def condition(hook: dict[str, Any], name: str) -> Any:
    [expression] = [c["expression"] for c in hook["matchConditions"] if c["name"] == name]
    return compile_expression(expression, "object", "bool")


def skips(compiled: Any, request: dict[str, Any], obj: dict[str, Any] | None = None) -> bool:
    """Whether the API server skips the call: the condition is false."""
    data = {"request": {"resource": {"group": "", "version": "v1", "resource": "pods"},
                        **request}, "object": obj or {"metadata": {}}}
    return evaluate(compiled, activation("object", data)) is False


USERS = ["admin", "system:serviceaccount:ci:*", "a?b*c", "*-bot"]
GROUPS = ["system:masters", "team-*"]


@pytest.mark.parametrize("username", [
    "admin", "system:serviceaccount:ci:deployer", "axbc", "aybzzc", "release-bot", "alice",
    "admin2", "system:serviceaccount:cd:x", "abc", "bot"])
def test_excluded_users_are_skipped_by_the_api_server_as_the_engine_skips_them(
        username: str) -> None:
    """The rendered CEL and the engine's globs agree: offline equals online."""
    docs = helm_template({"config": {"excludeUsers": USERS}})
    for hook in hooks(docs):
        compiled = condition(hook, "quickq-guard-exclude-users")
        assert skips(compiled, {"userInfo": {"username": username}}) is \
            matches_any(username, tuple(USERS))
        assert not skips(compiled, {"userInfo": {}})


@pytest.mark.parametrize("groups", [["system:masters"], ["system:authenticated", "team-ml"],
                                    ["system:authenticated"], ["teams-ml"], []])
def test_excluded_groups_are_skipped_by_the_api_server_as_the_engine_skips_them(
        groups: list[str]) -> None:
    docs = helm_template({"config": {"excludeGroups": GROUPS}})
    for hook in hooks(docs):
        compiled = condition(hook, "quickq-guard-exclude-groups")
        expected = any(matches_any(group, tuple(GROUPS)) for group in groups)
        user = {"username": "u", **({"groups": groups} if groups else {})}
        assert skips(compiled, {"userInfo": user}) is expected


def test_exclusions_reach_the_server_config_too() -> None:
    docs = helm_template({"config": {"excludeUsers": USERS, "excludeGroups": GROUPS}})
    config = yaml.safe_load(find(docs, "ConfigMap", f"{FULLNAME}-config")["data"]["config.yaml"])
    assert (config["excludeUsers"], config["excludeGroups"]) == (USERS, GROUPS)


def test_no_user_or_group_condition_without_exclusions() -> None:
    for hook in hooks(helm_template()):
        names = [c["name"] for c in hook["matchConditions"]]
        assert "quickq-guard-exclude-users" not in names
        assert "quickq-guard-exclude-groups" not in names


KUBELET = {"username": "system:node:gpu-1", "groups": ["system:nodes", "system:authenticated"]}
MIRROR = {"kubernetes.io/config.mirror": "abc"}


@pytest.mark.parametrize(("annotations", "resource", "user", "skipped"), [
    (MIRROR, "pods", KUBELET, True),
    (MIRROR, "pods", {"username": "alice", "groups": ["system:authenticated"]}, False),
    (MIRROR, "pods", {"username": "system:node:gpu-1", "groups": ["system:authenticated"]},
     False),
    (MIRROR, "pods", {"username": "mallory", "groups": ["system:nodes"]}, False),
    (MIRROR, "pods", {}, False),
    ({"team": "a"}, "pods", KUBELET, False), (None, "pods", KUBELET, False),
    (MIRROR, "deployments", KUBELET, False)])
def test_only_the_mirror_pods_a_kubelet_makes_are_skipped(
        annotations: dict[str, str] | None, resource: str, user: dict[str, Any],
        skipped: bool) -> None:
    """As the engine tells a kubelet (webhook.engine.evaluate.is_node): offline equals
    online."""
    for hook in hooks(helm_template()):
        compiled = condition(hook, "quickq-guard-skip-mirror-pods")
        metadata = {"annotations": annotations} if annotations is not None else {}
        request = {"resource": {"group": "", "version": "v1", "resource": resource},
                   "userInfo": user}
        assert skips(compiled, request, {"metadata": metadata}) is skipped


OWNER = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u"}


@pytest.mark.parametrize(("owners", "skipped"), [
    ([{**OWNER, "controller": True}], True),
    ([{**OWNER, "controller": False}], False), ([OWNER], False),
    ([{**OWNER, "kind": "Rollout", "apiVersion": "argoproj.io/v1alpha1", "controller": True}],
     False), (None, False)])
def test_the_mutating_webhook_skips_replicasets_a_deployment_controls(
        owners: list[dict[str, Any]] | None, skipped: bool) -> None:
    docs = helm_template()
    compiled = condition(mutating(docs), "quickq-guard-skip-deployment-replicasets")
    request = {"resource": {"group": "apps", "version": "v1", "resource": "replicasets"}}
    metadata = {"ownerReferences": owners} if owners is not None else {}
    assert skips(compiled, request, {"metadata": metadata}) is skipped
    pods = {"resource": {"group": "", "version": "v1", "resource": "pods"}}
    assert not skips(compiled, pods, {"metadata": metadata})
    names = [c["name"] for c in validating(docs)["matchConditions"]]
    assert "quickq-guard-skip-deployment-replicasets" not in names


def test_user_match_conditions_follow_the_charts_own() -> None:
    conditions = [{"name": "skip-node-users",
                   "expression": "!request.userInfo.username.startsWith('system:node:')"}]
    docs = helm_template({"webhook": {"timeoutSeconds": 3, "matchConditions": conditions}})
    for hook in hooks(docs):
        assert hook["timeoutSeconds"] == 3
        assert hook["matchConditions"][-1] == conditions[0]
        assert hook["matchConditions"][0]["name"].startswith("quickq-guard-")


def test_either_webhook_can_be_switched_off() -> None:
    docs = helm_template({"webhook": {"mutating": False}})
    kinds = {d["kind"] for d in docs}
    assert "MutatingWebhookConfiguration" not in kinds
    assert "ValidatingWebhookConfiguration" in kinds
    (container,) = find(docs, "Job", f"{FULLNAME}-cleanup")["spec"]["template"]["spec"][
        "containers"]
    assert container["command"][2:] == ["remove", "--validating", FULLNAME]


def test_config_maps_have_a_webhook_of_their_own_that_never_locks_the_cluster_out() -> None:
    """no-plaintext-secrets judges ConfigMaps, which the cluster's own components write in
    every namespace (kube-root-ca.crt, leader election): their entry is failurePolicy Ignore
    whatever failurePolicy says (and `cluster arm` leaves it so), never called for nodes,
    kube-controller-manager, kube-scheduler or kube-system's service accounts, and spares the
    same namespaces as the main entry."""
    docs = helm_template({"webhook": {"failurePolicy": {"validating": "Fail"},
                                      "failSafe": {"enabled": False}}})
    main, config_maps = validating(docs), validating(docs, "configmaps.quickq-guard.quickq.io")
    assert main["failurePolicy"] == "Fail" and config_maps["failurePolicy"] == "Ignore"
    assert intercepted(config_maps) == {("", "configmaps"): ("CREATE", "UPDATE")}
    assert ("", "configmaps") not in intercepted(main)
    assert config_maps["namespaceSelector"] == main["namespaceSelector"]
    assert config_maps["clientConfig"] == main["clientConfig"]
    [skip] = [c["expression"] for c in config_maps["matchConditions"]
              if c["name"] == "quickq-guard-skip-cluster-components"]
    for user in ("system:node:", "system:serviceaccount:kube-system:",
                 "system:kube-controller-manager", "system:kube-scheduler"):
        assert user in skip
    off = helm_template({"webhook": {"configMaps": False}})
    assert "configmaps.quickq-guard.quickq.io" not in [
        h["name"] for h in find(off, "ValidatingWebhookConfiguration")["webhooks"]]


def test_the_namespaces_webhook_judges_namespace_creates_and_updates_only() -> None:
    docs = helm_template({"webhook": {"objectSelector": {"matchLabels": {"a": "b"}},
                                      "matchConditions": [{"name": "x", "expression": "true"}]}})
    hook = validating(docs, NAMESPACES)
    assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"],
                              "resources": ["namespaces"], "operations": ["CREATE", "UPDATE"],
                              "scope": "Cluster"}]
    # On a Namespace a namespaceSelector matches that namespace itself: it would leave out
    # exactly the names and the label this webhook is for. Nor do the workload webhooks'
    # objectSelector and extra conditions (written for pods) apply.
    assert "namespaceSelector" not in hook and "objectSelector" not in hook
    assert [c["name"] for c in hook["matchConditions"]] == [
        "quickq-guard-untrusted", "quickq-guard-opt-out"]
    assert hook["clientConfig"]["service"]["path"] == "/validate"
    assert not [h for h in find(docs, "MutatingWebhookConfiguration")["webhooks"]
                if h["name"] == NAMESPACES]


def sent(hook: dict[str, Any], request: dict[str, Any], obj: dict[str, Any],
         old: dict[str, Any] | None) -> bool:
    """Whether the API server calls the webhook: every matchCondition holds."""
    data = {"request": {"resource": {"group": "", "version": "v1", "resource": "namespaces"},
                        **request}, "object": obj, "oldObject": old}
    return all(evaluate(compile_expression(c["expression"], "object", "bool"),
                        activation("object", data)) is True
               for c in hook["matchConditions"])


def ns(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, **({"labels": labels} if labels else {})}}


IGNORED = {"quickq.io/ignore": "true"}
TENANT = {"username": "tenant", "groups": ["self-service", "system:authenticated"]}
ADMIN = {"username": "admin", "groups": ["system:masters", "system:authenticated"]}


@pytest.mark.parametrize(("operation", "obj", "old", "user"), [
    ("CREATE", ns("longhorn-system"), None, TENANT),
    ("CREATE", ns("openebs"), None, ADMIN),
    ("CREATE", ns("quickq-guard"), None, TENANT),  # the release's own
    ("CREATE", ns("team-a"), None, TENANT),
    ("CREATE", ns("team-a", **IGNORED), None, TENANT),
    ("CREATE", ns("team-a", **IGNORED), None, ADMIN),
    ("CREATE", ns("team-a", **{"quickq.io/ignore": "false"}), None, TENANT),
    ("UPDATE", ns("team-a", **IGNORED), ns("team-a"), TENANT),
    ("UPDATE", ns("team-a", **IGNORED), ns("team-a", **{"quickq.io/ignore": "no"}), TENANT),
    ("UPDATE", ns("team-a", x="1", **IGNORED), ns("team-a", **IGNORED), TENANT),
    ("UPDATE", ns("openebs", x="1"), ns("openebs"), TENANT),
    ("UPDATE", ns("team-a", **IGNORED), ns("team-a"), {"username": "u"}),  # no groups
    ("UPDATE", ns("team-a", **IGNORED), ns("team-a"), {"username": "ci", "groups": ["ci"]}),
])
def test_the_api_server_calls_the_namespaces_webhook_exactly_when_the_engine_denies(
        operation: str, obj: dict[str, Any], old: dict[str, Any] | None,
        user: dict[str, Any]) -> None:
    """Never for anything it would admit, so a webhook that is down blocks nothing else
    (offline equals online: the rendered CEL and the engine agree)."""
    docs = helm_template({"config": {"excludeUsers": ["ci"]}})
    config = yaml.safe_load(find(docs, "ConfigMap", f"{FULLNAME}-config")["data"]["config.yaml"])
    policy_set = load_policies(None, Config.model_validate(config))
    decision = engine_evaluate(obj, policy_set, Review(
        operation=operation, old_object=old, username=user.get("username"),
        groups=tuple(user.get("groups", ()))))
    request = {"operation": operation, "userInfo": user}
    assert sent(validating(docs, NAMESPACES), request, obj, old) is (not decision.allowed)


def test_the_trusted_groups_come_from_values_and_reach_the_config() -> None:
    docs = helm_template({"config": {"optOutGroups": ["platform-*"]}})
    config = yaml.safe_load(find(docs, "ConfigMap", f"{FULLNAME}-config")["data"]["config.yaml"])
    assert config["optOutGroups"] == ["platform-*"]
    hook = validating(docs, NAMESPACES)
    create = {"operation": "CREATE"}
    assert not sent(hook, {**create, "userInfo": {"username": "p", "groups": ["platform-x"]}},
                    ns("openebs"), None)
    assert sent(hook, {**create, "userInfo": ADMIN}, ns("openebs"), None)
    default = yaml.safe_load(find(helm_template(), "ConfigMap", f"{FULLNAME}-config")["data"][
        "config.yaml"])
    assert default["optOutGroups"] == ["system:masters", "kubeadm:cluster-admins"]
