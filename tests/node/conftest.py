"""Fixtures for the node tests: a one-node cluster (tests/support/node.py) in the test's own
network namespace, and quickq-guard installed on it as a user installs it: `helm install`
with its hooks, the image built from the Dockerfile, pods started by the kubelet.

Where the node cannot be built or started here (no root, a package or kernel feature
missing, a runtime that refuses), the tests skip with the exact failing command and its
error, in CI too: the rest of the suite still lands, and the summary line says why.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
from _pytest.terminal import TerminalReporter
from node_helpers import BEFORE, INSTALL_VALUES, NAMESPACE, RELEASE, violator
from support.controlplane import CHART, assets_dir, helm_binary, missing_assets
from support.node import Node, node_problem

PROBLEM = pytest.StashKey[str]()  # why the node did not start, for the summary line


def pytest_terminal_summary(terminalreporter: TerminalReporter,
                            config: pytest.Config) -> None:
    """One line in CI's log: how many node tests ran, or that none did and why."""
    ran = skipped = 0
    for name in ("passed", "failed", "error", "skipped"):
        for report in terminalreporter.stats.get(name, []):
            if getattr(report, "nodeid", "").startswith("tests/node/"):
                if report.skipped:
                    skipped += 1
                elif report.when == "call" or name == "error":
                    ran += 1
    problem = config.stash.get(PROBLEM, None)
    if problem:
        first = problem.splitlines()[0]
        terminalreporter.write_line(f"node tests did not run: {first}")
    elif ran or skipped:
        terminalreporter.write_line(f"node tests: {ran} ran, {skipped} skipped")


def _skip(request: pytest.FixtureRequest, reason: str) -> None:
    request.config.stash[PROBLEM] = reason
    pytest.skip(f"node tests did not run: {reason}")


@pytest.fixture(scope="session")
def node(request: pytest.FixtureRequest,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd and a
    kubelet, started once for the session."""
    assets = assets_dir()
    problem = node_problem()
    missing = missing_assets(assets)
    if not problem and missing:
        problem = f"no {', '.join(missing)} in {assets}: scripts/test builds them"
    if not problem and not os.access(helm_binary(), os.X_OK):
        problem = f"no helm at {helm_binary()}: run scripts/install-tools"
    if not problem and os.environ.get("QUICKQ_LOOPBACK_ONLY") != "1":
        problem = ("not inside the loopback-only namespace scripts/test makes (as root): "
                   "the node adds interfaces and runs containers only there")
    if problem:
        _skip(request, problem)
    cluster = Node(assets, tmp_path_factory.mktemp("node"))
    try:
        cluster.start()
    except Exception as error:
        cluster.stop()
        _skip(request, f"the node did not start: {error}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def installed(node: Node) -> Node:
    """`helm install` with its hooks and `--wait`: the replicas (the webhook's and the
    audit's) Ready through their probes, then the post-install Job (`quickq-guard cluster
    arm`) run as a pod. A violating Deployment is there before, for the audit to find."""
    node.namespace(BEFORE)
    node.kubectl("apply", "-f", "-", input=json.dumps(violator()))
    node.helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace",
              *INSTALL_VALUES, "--wait", "--timeout", "10m", timeout=900)
    return node
