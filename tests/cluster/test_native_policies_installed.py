"""The chart with nativePolicies.enabled on the real API server: with quickq-guard's webhooks
unregistered, the admission policies the chart installed deny a bad object, naming the
policy, and patch a GPU pod as the webhook would; the release namespace is left alone.

The manifest is the user's workflow: `quickq-guard export --format native` on the policies
and config the release renders, plus the user's own CEL policies (tests/vap_policies/),
given with --set-file. MutatingAdmissionPolicy v1 is
served from 1.36: where it is not, the test skips and says so."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import (
    CHART,
    GPU_TOLERATION,
    RELEASE,
    RELEASE_NAMESPACE,
    REPO,
    ControlPlane,
    Guard,
    chart_runtime_files,
    container,
    denies_bad_pod,
    dry_run_create,
    export,
    gpu_container,
    pod,
    release_values,
    rendered,
    wait_until,
)

NAMESPACE = "native-chart"
USER_POLICIES = REPO / "tests" / "vap_policies"
MAP_RESOURCE = "mutatingadmissionpolicies.admissionregistration.k8s.io"


def _create(plane: ControlPlane, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return dry_run_create(plane, obj, "-o", "json")


def _manifest(guard: Guard, out: Path) -> Path:
    """The export of the policies the release renders, and the user's."""
    documents = rendered(guard.plane, RELEASE, RELEASE_NAMESPACE,
                         release_values(guard.webhook.url, guard.ca_bundle))
    policies, config = chart_runtime_files(documents, out / "files")
    for path in USER_POLICIES.glob("*.yaml"):
        shutil.copy(path, policies / path.name)
    manifest = out / "native.yaml"
    export("native", manifest, "--policies", str(policies), "--config", str(config))
    return manifest


def _stored(plane: ControlPlane, obj: dict[str, Any]) -> dict[str, Any]:
    done = _create(plane, obj)
    assert done.returncode == 0, done.stderr
    stored: dict[str, Any] = json.loads(done.stdout)
    return stored


@pytest.mark.parametrize("source", ["shipped", "manifest"])
def test_the_chart_installs_native_policies_that_hold_with_the_webhook_unregistered(
        guard: Guard, tmp_path: Path, source: str) -> None:
    """shipped: the chart's own file (disallow-latest-tag from its CEL form, the two
    mutations); manifest: the export of the release's policies and the user's."""
    plane = guard.plane
    served = plane.kubectl("api-resources", "--api-group=admissionregistration.k8s.io",
                           "-o", "name").stdout.split()
    if MAP_RESOURCE not in served:
        pytest.skip(f"kube-apiserver {plane.version()} does not serve {MAP_RESOURCE} "
                    "(MutatingAdmissionPolicy v1 is GA from Kubernetes 1.36)")
    plane.namespace(NAMESPACE)
    if source == "shipped":
        bad = pod("latest", NAMESPACE, container(image="registry.example.com/web:latest"))
        policy, said = "quickq-guard-disallow-latest-tag", "uses the 'latest' tag"
        extra: list[str] = []
    else:
        bad = pod("privileged", NAMESPACE, container(securityContext={"privileged": True}))
        policy, said = "quickq-guard-no-privileged", "privileged"
        extra = ["--set-file", f"nativePolicies.manifest={_manifest(guard, tmp_path)}"]
    flags = release_values(guard.webhook.url, guard.ca_bundle, **{
        "webhook.validating": "false", "webhook.mutating": "false",
        "nativePolicies.enabled": "true"})
    try:
        plane.helm("upgrade", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE, *flags, *extra)
        wait_until(lambda: _create(plane, bad).returncode != 0,
                   what="the chart's native policies to deny")
        configurations = plane.kubectl("get", "validatingwebhookconfigurations,"
                                       "mutatingwebhookconfigurations", "-o", "name").stdout
        assert "quickq-guard" not in configurations  # the webhooks are unregistered
        denied = _create(plane, bad)
        assert f"ValidatingAdmissionPolicy '{policy}'" in denied.stderr
        assert said in denied.stderr.split("denied request:", 1)[1]
        # The release namespace is excluded, as the webhook's config excludes it.
        bad["metadata"]["namespace"] = RELEASE_NAMESPACE
        assert _create(plane, bad).returncode == 0
        # The chart's MutatingAdmissionPolicies patch a GPU pod.
        # (they load on their own schedule, apart from the validating ones)
        gpu = pod("gpu", NAMESPACE, gpu_container())
        wait_until(lambda: "startupProbe" in _stored(plane, gpu)["spec"]["containers"][0],
                   what="the chart's mutating policies to patch")
        stored = _stored(plane, gpu)
        assert "startupProbe" in stored["spec"]["containers"][0]
        assert GPU_TOLERATION in stored["spec"]["tolerations"]
    finally:
        guard.point_at(guard.webhook.url, lambda: denies_bad_pod(plane))
        bad["metadata"]["namespace"] = NAMESPACE
        # (the webhook, registered again, denies the shipped case itself)
        wait_until(lambda: "ValidatingAdmissionPolicy" not in _create(plane, bad).stderr,
                   what="the chart's native policies to be gone")
