"""Fixtures for the cluster tests: one etcd + kube-apiserver per session, the chart installed
with helm and its webhooks called by URL on a `quickq-guard serve` started through the CLI.

The binaries come from an envtest assets directory (KUBEBUILDER_ASSETS, else
.tools/envtest/<default version>, which scripts/test builds from tools/controlplane/). Where
they are missing, or the tests do not run in a loopback-only network namespace (scripts/test
makes one as root), the tests skip and say how to fix that; under CI=true they fail instead,
so CI proves they ran. The one exception: a Go build that failed skips them everywhere with
the command and its error, so the rest of the suite can still land.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pytest.terminal import TerminalReporter
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
    started,
    wait_until,
    webhook_certs,
)
from support.assets import build_problem

SERVER_VERSION = pytest.StashKey[str]()  # what the session's control plane reported


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    """One line CI's log shows: which kube-apiserver the cluster tests ran against, how many."""
    skipped: dict[str, bool] = {}  # test id -> whether it was skipped (a fixture skips in setup)
    for name in ("passed", "failed", "error", "skipped"):
        for report in terminalreporter.stats.get(name, []):
            test = getattr(report, "nodeid", "")
            if test.startswith("tests/cluster/"):
                skipped[test] = skipped.get(test, False) or bool(report.skipped)
    if not skipped:
        return
    count = sum(skipped.values())
    version = terminalreporter.config.stash.get(SERVER_VERSION, None)
    against = f"kube-apiserver {version}" if version else "no kube-apiserver"
    terminalreporter.write_line(f"cluster tests: {len(skipped) - count} ran, {count} skipped, "
                                f"against {against} ({assets_dir()})")


@pytest.fixture(scope="session")
def plane(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd and kube-apiserver, started once for the session."""
    assets = assets_dir()
    failed = build_problem(assets)
    if failed:
        pytest.skip(f"the control plane could not be built, so the cluster tests do not run: "
                    f"{failed}")
    missing = missing_assets(assets)
    if missing:
        skip_or_fail(f"no {', '.join(missing)} in {assets}: {HOW_TO_GET}")
    if not os.access(helm_binary(), os.X_OK):
        skip_or_fail(f"no helm at {helm_binary()}: run scripts/install-tools")
    problem = loopback_problem()
    if problem:
        skip_or_fail(problem)
    with started(assets, tmp_path_factory.mktemp("control-plane")) as control:
        request.config.stash[SERVER_VERSION] = control.version()
        control.service_account("default")
        yield control


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


@pytest.fixture(scope="module")
def kube(guard: Guard, request: pytest.FixtureRequest) -> ControlPlane:
    """The chart installed and its webhooks calling the session's webhook, with the module's
    NAMESPACE created when it names one: what most cluster test modules start from (a
    module that needs more defines its own)."""
    namespace = getattr(request.module, "NAMESPACE", None)
    if namespace:
        guard.plane.namespace(namespace)
    return guard.plane
