"""The chart lets the webhook read the DRA claims pods consume, and nothing more: a
ClusterRole to get, list and watch ResourceClaims and ResourceClaimTemplates, bound to the
webhook's own ServiceAccount, whose token is then mounted; all of it gone with
dra.watchClaims off."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
from chart_helpers import FULLNAME, KUBE_VERSION, NAMESPACE, find, helm_template

READER = f"{FULLNAME}-claims-reader"


def test_the_webhook_may_read_claims_and_nothing_else() -> None:
    docs = helm_template()
    role = find(docs, "ClusterRole", READER)
    assert role["rules"] == [{"apiGroups": ["resource.k8s.io"],
                              "resources": ["resourceclaims", "resourceclaimtemplates"],
                              "verbs": ["get", "list", "watch"]}]
    binding = find(docs, "ClusterRoleBinding", READER)
    pod = find(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": READER}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"],
                                    "namespace": NAMESPACE}]
    assert pod["automountServiceAccountToken"] is True
    assert "--watch-claims" in pod["containers"][0]["args"]
    for doc in (role, binding):
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_off_means_no_role_no_watch_and_no_token() -> None:
    docs: list[dict[str, Any]] = helm_template({"dra": {"watchClaims": False}})
    assert not [d for d in docs if d["metadata"]["name"] == READER]
    pod = find(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]
    assert "--watch-claims" not in pod["containers"][0]["args"]
    assert pod["automountServiceAccountToken"] is False
    both = find(helm_template({"dra": {"watchClaims": False}, "exceptions": {"enabled": True}}),
                "Deployment", FULLNAME)["spec"]["template"]["spec"]
    assert both["automountServiceAccountToken"] is True
