"""Denials through a real kube-apiserver and kubectl: what a user sees at `kubectl apply`."""

from __future__ import annotations

import json
from typing import Any

from cluster_helpers import ControlPlane, Guard

NAMESPACE = "denials"



def pod(name: str, image: str = "registry.example.com/web:1.0", **container: Any
        ) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
        "spec": {"securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
                 "containers": [{"name": "web", "image": image,
                                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                               "limits": {"memory": "64Mi"}},
                                 **container}]},
    }


def test_a_pod_with_the_latest_tag_is_denied_naming_container_and_field(
        kube: ControlPlane) -> None:
    done = kube.apply(pod("latest", image="nginx:latest"))
    assert done.returncode == 1
    assert ('admission webhook "validate.quickq-guard.quickq.io" denied the request: '
            f"Pod {NAMESPACE}/latest is denied by quickq-guard:") in done.stderr
    assert "[disallow-latest-tag]" in done.stderr
    assert "'web'" in done.stderr and "spec.containers[0].image" in done.stderr
    assert kube.kubectl("get", "pod", "latest", "-n", NAMESPACE, check=False).returncode == 1


def test_a_good_pod_is_stored(kube: ControlPlane) -> None:
    done = kube.apply(pod("good"))
    assert done.returncode == 0, done.stderr
    assert kube.get("pod", "good", NAMESPACE)["metadata"]["labels"] == {"app": "good"}


def test_the_charts_match_conditions_decide_which_objects_are_judged(guard: Guard) -> None:
    """webhook.matchConditions (CEL, GA since 1.30) reach the API server: an
    object the condition leaves out is admitted without a call to quickq-guard."""
    opted_out = pod("opted-out", image="nginx:latest")
    opted_out["metadata"]["labels"]["quickq.io/skip"] = "true"
    condition = [{"name": "not-opted-out", "expression":
                  "!has(object.metadata.labels) || !('quickq.io/skip' in object.metadata.labels)"}]

    def admitted() -> bool:
        return guard.plane.apply(opted_out, "--dry-run=server").returncode == 0

    with guard.pointed_at(guard.webhook.url, admitted, **{"webhook.matchConditions": condition}):
        for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
            [hook] = [hook for hook in json.loads(guard.plane.kubectl(
                "get", kind, "quickq-guard", "-o", "json").stdout)["webhooks"]
                if hook["name"] not in ("namespaces.quickq-guard.quickq.io",
                                        "configmaps.quickq-guard.quickq.io")]
            # The chart's own conditions first, then webhook.matchConditions.
            assert hook["matchConditions"][-1:] == condition
            assert all(c["name"].startswith("quickq-guard-")
                       for c in hook["matchConditions"][:-1])
        assert guard.plane.apply(opted_out).returncode == 0
        denied = guard.plane.apply(pod("not-opted-out", image="nginx:latest"))
        assert denied.returncode == 1 and "[disallow-latest-tag]" in denied.stderr
