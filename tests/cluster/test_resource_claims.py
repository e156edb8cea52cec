"""Dynamic Resource Allocation through a real kube-apiserver (1.36: resource.k8s.io/v1 GA,
no driver needed to store claims): the shapes quickq-guard reads are the ones the API server
stores, and the webhook's verdict on a pod consuming a claim is the engine's."""

from __future__ import annotations

from typing import Any

import pytest
from cluster_helpers import ControlPlane, Guard, container, controller, pod_spec, warnings_of

NAMESPACE = "dra"


@pytest.fixture(scope="module")
def kube(guard: Guard) -> ControlPlane:
    guard.plane.namespace(NAMESPACE)
    return guard.plane


def claim_template(name: str, **exactly: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", **exactly}}]}}}}


def consuming(name: str, template: str) -> dict[str, Any]:
    consumer = container("llm")
    consumer["resources"]["claims"] = [{"name": "gpu"}]
    spec = pod_spec(consumer, resourceClaims=[{"name": "gpu",
                                               "resourceClaimTemplateName": template}])
    return controller("Deployment", name, NAMESPACE, spec)


def test_the_api_server_stores_the_claim_shapes_quickq_guard_judges(kube: ControlPlane) -> None:
    for template in (claim_template("one-gpu", allocationMode="ExactCount", count=1),
                     claim_template("every-gpu", allocationMode="All")):
        done = kube.apply(template)
        assert done.returncode == 0, done.stderr
    stored = kube.get("resourceclaimtemplate", "every-gpu", NAMESPACE)
    assert stored["spec"]["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] == "All"


def test_a_deployment_consuming_a_claim_is_admitted_with_the_engines_warning(
        kube: ControlPlane) -> None:
    from webhook import evaluate, load_policies
    from webhook.engine.claims import NO_CLUSTER_VIEW

    obj = consuming("llm", "one-gpu")
    done = kube.apply(obj)
    assert done.returncode == 0, done.stderr
    expected = evaluate(obj, load_policies(), claims=NO_CLUSTER_VIEW)
    [warning] = [w for w in expected.warnings if w.startswith("[gpu-claim-usage]")]
    assert warning in warnings_of(done.stderr)
    assert "is not in quickq-guard's view of the cluster (it reads no claims yet)" in warning
    stored = kube.get("deployment", "llm", NAMESPACE)
    assert stored["spec"]["template"]["spec"]["resourceClaims"] == [
        {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
