"""Fixtures for the cluster tests: one etcd + kube-apiserver per session, the chart installed
with helm and its webhooks called by URL on a `quickq-guard serve` started through the CLI.

The binaries come from an envtest assets directory (KUBEBUILDER_ASSETS, else .tools/envtest,
which scripts/install-tools fills). Where they are missing, or the tests do not run in a
loopback-only network namespace (scripts/test makes one as root), the tests skip and say how
to fix that; under CI=true they fail instead, so CI proves they ran.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import (
    CHART,
    HOW_TO_GET,
    RELEASE,
    RELEASE_NAMESPACE,
    ControlPlane,
    Webhook,
    assets_dir,
    chart_runtime_files,
    helm_binary,
    interfaces,
    missing_assets,
    release_values,
    rendered,
    wait_until,
    webhook_certs,
)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def skip_or_fail(reason: str) -> None:
    """Skip with `reason`; in CI, fail: there the cluster tests must run."""
    if in_ci():
        pytest.fail(f"CI=true, so the cluster tests must run: {reason}", pytrace=False)
    pytest.skip(reason)


def loopback_problem() -> str | None:
    names = interfaces()
    if names == ["lo"]:
        return None
    return (f"this process sees the network interfaces {', '.join(names)}; the cluster tests "
            "run only where loopback is the only one: run them through scripts/test as root "
            "(it runs pytest under `unshare --net`)")


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


def denies_bad_pod(plane: ControlPlane, namespace: str = "default") -> bool:
    """Whether quickq-guard now denies a Pod with the latest tag (server-side dry run)."""
    probe = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "probe", "namespace": namespace},
             "spec": {"containers": [{"name": "c", "image": "nginx:latest"}]}}
    done = plane.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(probe),
                         check=False)
    return 'admission webhook "validate.quickq-guard.quickq.io" denied' in done.stderr


@dataclass
class Guard:
    """The chart installed in the test apiserver, its webhooks pointed at a webhook process."""

    plane: ControlPlane
    webhook: Webhook
    certs: Path
    workdir: Path
    policies: Path
    config: Path
    flags: list[str] = field(default_factory=list)

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode((self.certs / "ca.crt").read_bytes()).decode()

    def point_at(self, url: str, ready: Callable[[], bool], **values: Any) -> None:
        """`helm upgrade` the release so its webhooks call `url`; wait until `ready()`."""
        flags = release_values(url, self.ca_bundle, **values)
        self.plane.helm("upgrade", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE, *flags)
        wait_until(ready, what=f"the webhooks to call {url}")

    @contextmanager
    def pointed_at(self, url: str, ready: Callable[[], bool],
                   **values: Any) -> Iterator[None]:
        """Point the webhooks at `url` for a while, then back at the session's webhook."""
        self.point_at(url, ready, **values)
        try:
            yield
        finally:
            self.point_at(self.webhook.url, lambda: denies_bad_pod(self.plane))


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
        yield Guard(plane, webhook, certs, workdir, policies, config, flags)
        plane.helm("uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--wait", check=False)
    finally:
        webhook.stop()
