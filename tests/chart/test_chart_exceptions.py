"""The chart's PolicyException pieces: the CRD, who may read and write exceptions, the webhook
that checks each one, and the config that says where they are honoured from."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml
from chart_helpers import FULLNAME, KUBE_VERSION, NAMESPACE, find, helm_lint, helm_template

from webhook.engine.policy import Config
from webhook.export import crd

ON = {"exceptions": {"enabled": True, "granteeGroup": "platform-admins"}}


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return helm_template(ON)


def config_of(docs: list[dict[str, Any]]) -> Config:
    configmap = next(d for d in docs if d["kind"] == "ConfigMap"
                     and d["metadata"]["name"].endswith("-config"))
    return Config.model_validate(yaml.safe_load(configmap["data"]["config.yaml"]))


def test_off_by_default() -> None:
    docs = helm_template()
    assert not [d for d in docs if "exceptions" in d["metadata"]["name"]]
    assert config_of(docs).exceptionNamespaces == ()
    deployment = find(docs, "Deployment", FULLNAME)
    assert "--watch-exceptions" not in deployment["spec"]["template"]["spec"]["containers"][0][
        "args"]
    webhooks = find(docs, "ValidatingWebhookConfiguration")["webhooks"]
    assert [w["name"] for w in webhooks] == ["validate.quickq-guard.quickq.io",
                                             "namespaces.quickq-guard.quickq.io",
                                             "configmaps.quickq-guard.quickq.io"]


def test_every_object_is_valid_kubernetes(docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
    assert helm_lint(ON).returncode == 0


def test_the_crd_carries_the_generated_schema(docs: list[dict[str, Any]]) -> None:
    definition = find(docs, "CustomResourceDefinition", "policyexceptions.quickq.io")
    assert definition["metadata"]["name"] == "policyexceptions.quickq.io"
    version, old = definition["spec"]["versions"]
    assert (version["name"], version["storage"]) == ("v1", True)
    assert version["schema"]["openAPIV3Schema"] == crd.exception_schema()
    # the version before quickq.io/v1, served with the same schema and a warning
    assert (old["name"], old["served"], old["storage"], old["deprecated"]) == (
        "v1alpha1", True, False, True)
    assert old["schema"] == version["schema"]
    assert "use quickq.io/v1" in old["deprecationWarning"]
    assert definition["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert not [d for d in helm_template({"exceptions": {"enabled": True, "installCrd": False}})
                if d["metadata"]["name"] == "policyexceptions.quickq.io"]


def test_exceptions_are_honoured_from_the_release_namespace(docs: list[dict[str, Any]]) -> None:
    config = config_of(docs)
    assert config.exceptionNamespaces == (NAMESPACE,)
    assert (config.exceptionMaxDays, config.exceptionWildcards) == (90, False)
    other = config_of(helm_template({"exceptions": {"enabled": True, "namespaces": ["grants"],
                                                    "maxDays": 30}}))
    assert (other.exceptionNamespaces, other.exceptionMaxDays) == (("grants",), 30)


def test_the_webhook_reads_exceptions_and_nothing_else(docs: list[dict[str, Any]]) -> None:
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Role"}
    reader = next(r for name, r in roles.items() if name.endswith("-exceptions-reader"))
    assert reader["metadata"]["namespace"] == NAMESPACE
    assert reader["rules"] == [{"apiGroups": ["quickq.io"], "resources": ["policyexceptions"],
                                "verbs": ["get", "list", "watch"]}]
    pod = find(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True
    assert "--watch-exceptions" in pod["containers"][0]["args"]
    bindings = [d for d in docs if d["kind"] == "RoleBinding"
                and "-exceptions-" in d["metadata"]["name"]]
    subjects = {(s["kind"], s["name"]) for b in bindings for s in b["subjects"]}
    assert subjects == {("ServiceAccount", pod["serviceAccountName"]),
                        ("Group", "platform-admins")}


def test_only_the_grantee_group_may_write(docs: list[dict[str, Any]]) -> None:
    granter = next(d for d in docs if d["kind"] == "Role"
                   and d["metadata"]["name"].endswith("-exceptions-granter"))
    assert "create" in granter["rules"][0]["verbs"]
    binding = next(d for d in docs if d["kind"] == "RoleBinding"
                   and d["metadata"]["name"].endswith("-exceptions-granter"))
    assert binding["subjects"] == [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io",
                                    "name": "platform-admins"}]
    without = helm_template({"exceptions": {"enabled": True}})
    assert not [d for d in without if d["metadata"]["name"].endswith("-exceptions-granter")]


def test_every_exception_is_checked_in_every_namespace(docs: list[dict[str, Any]]) -> None:
    webhooks = find(docs, "ValidatingWebhookConfiguration")["webhooks"]
    [checks] = [w for w in webhooks if w["name"] == "exceptions.quickq-guard.quickq.io"]
    assert "namespaceSelector" not in checks  # the release namespace, where they live, too
    assert checks["matchPolicy"] == "Equivalent"
    # The validating webhook's policy: Ignore until the install is armed (failSafe).
    [main] = [w for w in webhooks if w["name"] == "validate.quickq-guard.quickq.io"]
    assert checks["failurePolicy"] == main["failurePolicy"]
    assert checks["rules"] == [{"apiGroups": ["quickq.io"], "apiVersions": ["*"],
                                "resources": ["policyexceptions"],
                                "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}]
    assert checks["clientConfig"]["service"]["path"] == "/validate"
