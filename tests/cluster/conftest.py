"""Fixtures for the cluster tests: one etcd + kube-apiserver per session, the chart installed
with helm and its webhooks called by URL on a `quickq-guard serve` started through the CLI.

The binaries come from an envtest assets directory (KUBEBUILDER_ASSETS, else .tools/envtest,
which scripts/install-tools fills). Where they are missing, or the tests do not run in a
loopback-only network namespace (scripts/test makes one as root), the tests skip and say how
to fix that; under CI=true they fail instead, so CI proves they ran.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_helpers import (
    CHART,
    HOW_TO_GET,
    RELEASE,
    RELEASE_NAMESPACE,
    ControlPlane,
    Guard,
    Webhook,
    assets_dir,
    chart_runtime_files,
    denies_bad_pod,
    helm_binary,
    loopback_problem,
    missing_assets,
    release_values,
    rendered,
    skip_or_fail,
    wait_until,
    webhook_certs,
)


@pytest.fixture(scope="session")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd and kube-apiserver v1.28, started once for the session."""
    assets = assets_dir()
    missing = missing_assets(assets)
    if missing:
        skip_or_fail(f"no {', '.join(missing)} in {assets}: {HOW_TO_GET}")
    if not os.access(helm_binary(), os.X_OK):
        skip_or_fail(f"no helm at {helm_binary()}: run scripts/install-tools")
    problem = loopback_problem()
    if problem:
        skip_or_fail(problem)
    control = ControlPlane(assets, tmp_path_factory.mktemp("control-plane"))
    try:
        control.start()
        control.service_account("default")
        yield control
    finally:
        control.stop()


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The webhook's CA and serving certificate, made by `quickq-guard certs`."""
    return webhook_certs(tmp_path_factory.mktemp("webhook-certs"))


@pytest.fixture(scope="session")
def guard(plane: ControlPlane, certs: Path,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guard]:
    """`helm install` of the chart (CRD included) whose webhooks call, by URL, a
    `quickq-guard serve` running the policies and config the chart renders."""
    workdir = tmp_path_factory.mktemp("guard")
    bundle = base64.b64encode((certs / "ca.crt").read_bytes()).decode()
    url_placeholder = "https://127.0.0.1:1"
    documents = rendered(plane, RELEASE, RELEASE_NAMESPACE,
                         release_values(url_placeholder, bundle))
    policies, config = chart_runtime_files(documents, workdir / "chart-files")
    webhook = Webhook(workdir, certs, "--policies", str(policies), "--config", str(config))
    try:
        flags = release_values(webhook.url, bundle)
        plane.helm("install", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE,
                   "--create-namespace", *flags)
        plane.service_account(RELEASE_NAMESPACE)
        wait_until(lambda: denies_bad_pod(plane), what="quickq-guard to judge Pods")
        yield Guard(plane, webhook, certs, workdir, policies, config)
        plane.helm("uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--wait", check=False)
    finally:
        webhook.stop()
