"""The test control plane itself: loopback only, a real kube-apiserver, the chart installed."""

from __future__ import annotations

import json

from cluster_helpers import (
    CHART,
    RELEASE,
    RELEASE_NAMESPACE,
    ControlPlane,
    Guard,
    in_ci,
    interfaces,
    loopback_problem,
    skip_or_fail,
)
from support.assets import is_built, releases


def test_the_tests_see_no_network_interface_but_loopback() -> None:
    """Whatever a manifest names, nothing the tests start can reach past loopback."""
    problem = loopback_problem()
    if problem and not in_ci():
        skip_or_fail(problem)
    assert interfaces() == ["lo"]


def test_the_api_server_is_the_release_its_assets_were_built_for(plane: ControlPlane) -> None:
    """The binaries built from tools/controlplane report the version their modfile pins (the
    build stamps it); binaries of a user's own (KUBEBUILDER_ASSETS) are at least the oldest
    release the chart declares."""
    server = json.loads(plane.kubectl("version", "-o", "json").stdout)["serverVersion"]
    built = {release.directory.resolve(): release for release in releases()}
    release = built.get(plane.assets.resolve())
    if release is None:
        oldest = min(int(release.minor) for release in releases())
        assert int(server["minor"].rstrip("+")) >= oldest
        return
    assert (server["gitVersion"], server["major"], server["minor"]) == (
        release.version, release.major, release.minor)
    assert is_built(release)  # stamped: the next `scripts/test` builds nothing


def test_every_pinned_release_is_a_supported_minor() -> None:
    """The default is Kubernetes 1.36; the other pins are older minors, none below the chart's
    kubeVersion floor, so every release the tests run on is one the chart installs on."""
    chart = (CHART / "Chart.yaml").read_text()
    floor = int(chart.split('kubeVersion: ">=1.', 1)[1].split(".", 1)[0])
    minors = [int(release.minor) for release in releases()]
    assert minors[0] == 36
    assert minors == sorted(minors, reverse=True)
    assert min(minors) == floor


def test_the_chart_is_installed_with_url_webhooks(guard: Guard) -> None:
    """helm install passed the chart's kubeVersion check, and the rendered webhooks
    call quickq-guard by loopback URL with the test CA, never through a Service."""
    listed = json.loads(guard.plane.helm("list", "-n", RELEASE_NAMESPACE, "-o", "json").stdout)
    assert [(r["name"], r["status"]) for r in listed] == [(RELEASE, "deployed")]
    for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
        config = json.loads(guard.plane.kubectl("get", kind, RELEASE, "-o", "json").stdout)
        for hook in config["webhooks"]:  # the namespaces and ConfigMaps webhooks too
            assert hook["clientConfig"]["url"].startswith(f"{guard.webhook.url}/")
            assert "service" not in hook["clientConfig"]
            assert hook["clientConfig"]["caBundle"] == guard.ca_bundle
