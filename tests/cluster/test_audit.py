"""Audit annotations as the API server records them in its audit log: under the webhook's
name, for findings of policies whose action is audit."""

from __future__ import annotations

from typing import Any

from cluster_helpers import ControlPlane, gpu_container, pod, wait_until

NAMESPACE = "audit"



def create_event(kube: ControlPlane, name: str) -> dict[str, Any]:
    """The ResponseComplete audit event of the create of Pod `name`."""
    found: list[dict[str, Any]] = []

    def logged() -> bool:
        found[:] = [event for event in kube.audit_events()
                    if event.get("verb") == "create" and event.get("stage") == "ResponseComplete"
                    and event.get("objectRef", {}).get("name") == name
                    and event.get("objectRef", {}).get("namespace") == NAMESPACE]
        return bool(found)

    wait_until(logged, what=f"the audit event of pod {name}")
    return found[-1]


def test_audit_findings_are_annotations_in_the_api_servers_audit_log(
        kube: ControlPlane) -> None:
    obj = pod("unlabelled", NAMESPACE, gpu_container())
    obj["metadata"]["labels"] = {}
    done = kube.apply(obj)
    assert done.returncode == 0, done.stderr
    annotations = create_event(kube, "unlabelled")["annotations"]
    assert annotations["validate.quickq-guard.quickq.io/require-labels"] == \
        "add the label metadata.labels.app or metadata.labels[app.kubernetes.io/name]"
    assert annotations["validate.quickq-guard.quickq.io/gpu-priority-class"].startswith(
        "set spec.priorityClassName (a PriorityClass name)")


def test_a_pod_that_breaks_no_audit_policy_has_no_quickq_guard_annotation(
        kube: ControlPlane) -> None:
    done = kube.apply(pod("labelled", NAMESPACE))
    assert done.returncode == 0, done.stderr
    annotations = create_event(kube, "labelled").get("annotations", {})
    assert not [key for key in annotations if key.startswith("validate.quickq-guard")]
