"""The test control plane itself: loopback only, a real kube-apiserver, the chart installed."""

from __future__ import annotations

import json

from cluster_helpers import (
    RELEASE,
    RELEASE_NAMESPACE,
    ControlPlane,
    Guard,
    in_ci,
    interfaces,
    loopback_problem,
    skip_or_fail,
)


def test_the_tests_see_no_network_interface_but_loopback() -> None:
    """Whatever a manifest names, nothing the tests start can reach past loopback."""
    problem = loopback_problem()
    if problem and not in_ci():
        skip_or_fail(problem)
    assert interfaces() == ["lo"]


def test_the_api_server_is_kubernetes_1_28(plane: ControlPlane) -> None:
    version = json.loads(plane.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == "v1.28.7"


def test_the_chart_is_installed_with_url_webhooks(guard: Guard) -> None:
    """helm install passed the chart's kubeVersion check on 1.28, and the rendered webhooks
    call quickq-guard by loopback URL with the test CA, never through a Service."""
    listed = json.loads(guard.plane.helm("list", "-n", RELEASE_NAMESPACE, "-o", "json").stdout)
    assert [(r["name"], r["status"]) for r in listed] == [(RELEASE, "deployed")]
    for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
        config = json.loads(guard.plane.kubectl("get", kind, RELEASE, "-o", "json").stdout)
        [hook] = config["webhooks"]
        assert hook["clientConfig"]["url"].startswith(f"{guard.webhook.url}/")
        assert "service" not in hook["clientConfig"]
        assert hook["clientConfig"]["caBundle"] == guard.ca_bundle
