"""One lightkube class per kind, whoever asks first: the webhook's views, the audit and the
cluster hooks run in one process in a user's script and in these tests."""

from __future__ import annotations

import importlib

import pytest

pytest.importorskip("lightkube")


def test_the_audit_and_the_cluster_hooks_share_the_pod_class() -> None:
    from webhook.audit import cluster
    from webhook.cli import kubeapi

    assert cluster.kind("", "v1", "Pod", "pods").resource is kubeapi.POD


def test_a_core_kind_made_again_after_a_reimport_is_the_same_class() -> None:
    import webhook.api_resources as api_resources

    first = api_resources.resource("", "v1", "Namespace", "namespaces", namespaced=False)
    reloaded = importlib.reload(api_resources)
    assert reloaded.resource("", "v1", "Namespace", "namespaces", namespaced=False) is first
    lease = reloaded.resource("coordination.k8s.io", "v1", "Lease", "leases")
    assert reloaded.resource("coordination.k8s.io", "v1", "Lease", "leases") is lease
