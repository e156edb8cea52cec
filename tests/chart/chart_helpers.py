"""Shared helpers for the chart tests: run the real helm/kubectl binaries.

The binaries come from `scripts/install-tools` (into `<repo>/.tools/bin`).
A missing binary fails the tests instead of skipping them, so CI can never
go green with the chart untested.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "quickq-guard"
TOOLS = REPO / ".tools" / "bin"
VENV_BIN = REPO / ".venv" / "bin"
RELEASE = "quickq-guard"
NAMESPACE = "quickq-guard"
# Resource name prefix for RELEASE (the release name already says quickq-guard).
FULLNAME = "quickq-guard"
# Newest Kubernetes the chart targets; kubectl and the validated schemas match it.
KUBE_VERSION = "1.35.0"

# What the chart leaves out by default: the control plane's namespaces, then the usual CNI,
# CSI, cert-manager and GPU operator ones (README "Never judged").
SYSTEM_NAMESPACES = [
    "kube-system", "kube-public", "kube-node-lease",
    "calico-system", "calico-apiserver", "tigera-operator", "cilium", "cilium-secrets",
    "kube-flannel", "longhorn-system", "rook-ceph", "openebs", "cert-manager",
    "gpu-operator", "nvidia-gpu-operator", "nvidia-network-operator", "kube-amd-gpu"]

Manifest = dict[str, Any]


def tool(name: str) -> Path:
    """Path of a pinned tool binary, failing loudly when it was never installed."""
    path = TOOLS / name
    if not os.access(path, os.X_OK):
        pytest.fail(
            f"{path} is missing: run `scripts/install-tools` first "
            "(it installs the helm and kubectl binaries the chart tests use)",
            pytrace=False,
        )
    return path


def run(cmd: Sequence[str | Path], stdin: str | None = None,
        env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command and capture its output; callers decide what a failure means."""
    return subprocess.run(
        [str(part) for part in cmd], input=stdin, capture_output=True, text=True,
        timeout=120, env={**os.environ, **(env or {})}, check=False,
    )


def helm_args(values: Mapping[str, Any] | None, sets: Sequence[str], tmp: Path) -> list[str]:
    """Turn a values dict and --set strings into helm flags."""
    args: list[str] = []
    if values is not None:
        values_file = tmp / "values.yaml"
        values_file.write_text(yaml.safe_dump(dict(values)))
        args += ["-f", str(values_file)]
    for item in sets:
        args += ["--set", item]
    return args


def helm_template_raw(values: Mapping[str, Any] | None = None, sets: Sequence[str] = (),
                      namespace: str = NAMESPACE, release: str = RELEASE,
                      extra: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """`helm template` the chart as a user would, returning the raw process result."""
    with tempfile.TemporaryDirectory() as tmp:
        return run([tool("helm"), "template", release, CHART, "--namespace", namespace,
                    "--kube-version", KUBE_VERSION,
                    *helm_args(values, sets, Path(tmp)), *extra])


def helm_template(values: Mapping[str, Any] | None = None, sets: Sequence[str] = (),
                  namespace: str = NAMESPACE, release: str = RELEASE,
                  extra: Sequence[str] = ()) -> list[Manifest]:
    """Render the chart and parse every manifest; a render error fails the test."""
    proc = helm_template_raw(values, sets, namespace, release, extra)
    assert proc.returncode == 0, f"helm template failed:\n{proc.stderr}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def helm_lint(values: Mapping[str, Any] | None = None, sets: Sequence[str] = (),
              namespace: str = NAMESPACE) -> subprocess.CompletedProcess[str]:
    """`helm lint --strict` the chart with the given values."""
    with tempfile.TemporaryDirectory() as tmp:
        return run([tool("helm"), "lint", "--strict", CHART, "--namespace", namespace,
                    "--kube-version", KUBE_VERSION, *helm_args(values, sets, Path(tmp))])


def find(docs: Sequence[Manifest], kind: str, name: str | None = None) -> Manifest:
    """The one rendered object of a kind (and name), failing when absent or ambiguous."""
    hits = [d for d in docs if d["kind"] == kind
            and (name is None or d["metadata"]["name"] == name)]
    assert len(hits) == 1, f"expected one {kind} {name or ''}, got {len(hits)}"
    return hits[0]


def kinds(docs: Sequence[Manifest]) -> list[str]:
    return sorted(d["kind"] for d in docs)


def b64decode(text: str) -> bytes:
    return base64.b64decode(text.encode())


def to_yaml_stream(docs: Sequence[Manifest]) -> str:
    return yaml.safe_dump_all(list(docs), sort_keys=False)


# --- A read-only stub API server for kubectl and helm --------------------------
#
# kubectl maps every object's apiVersion/kind to a REST resource through API
# discovery even for a client-side dry run, and there is no cluster here
# (an empty kubeconfig makes `kubectl create --dry-run=client` fail with
# "unable to recognize"). This stub answers GETs only: the legacy discovery
# endpoints (/api, /apis, /apis/<gv>) with the resources a cluster running
# cert-manager and the Prometheus operator advertises, plus any objects a test
# hands it; everything else gets 404, and nothing can be written. An object of
# an unknown apiVersion or kind still fails with "no matches for kind", as on
# a real cluster.

VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
# group/version -> [(plural, kind, namespaced)]
DISCOVERY: dict[str, list[tuple[str, str, bool]]] = {
    "v1": [("configmaps", "ConfigMap", True), ("secrets", "Secret", True),
           ("services", "Service", True), ("serviceaccounts", "ServiceAccount", True),
           ("pods", "Pod", True), ("namespaces", "Namespace", False),
           ("resourcequotas", "ResourceQuota", True)],
    "apps/v1": [("deployments", "Deployment", True), ("replicasets", "ReplicaSet", True),
                ("statefulsets", "StatefulSet", True), ("daemonsets", "DaemonSet", True)],
    "batch/v1": [("jobs", "Job", True), ("cronjobs", "CronJob", True)],
    "policy/v1": [("poddisruptionbudgets", "PodDisruptionBudget", True)],
    "autoscaling/v2": [("horizontalpodautoscalers", "HorizontalPodAutoscaler", True)],
    "networking.k8s.io/v1": [("networkpolicies", "NetworkPolicy", True)],
    "rbac.authorization.k8s.io/v1": [
        ("clusterroles", "ClusterRole", False),
        ("clusterrolebindings", "ClusterRoleBinding", False),
        ("roles", "Role", True), ("rolebindings", "RoleBinding", True)],
    "admissionregistration.k8s.io/v1": [
        ("validatingwebhookconfigurations", "ValidatingWebhookConfiguration", False),
        ("mutatingwebhookconfigurations", "MutatingWebhookConfiguration", False)],
    "apiextensions.k8s.io/v1": [
        ("customresourcedefinitions", "CustomResourceDefinition", False)],
    "cert-manager.io/v1": [("certificates", "Certificate", True), ("issuers", "Issuer", True),
                           ("clusterissuers", "ClusterIssuer", False)],
    "monitoring.coreos.com/v1": [("servicemonitors", "ServiceMonitor", True)],
}


def discovery_documents() -> dict[str, Any]:
    """Legacy discovery responses keyed by URL path."""
    docs: dict[str, Any] = {
        "/api": {"kind": "APIVersions", "versions": ["v1"],
                 "serverAddressByClientCIDRs": []},
        "/version": {"major": "1", "minor": "35", "gitVersion": "v1.35.0"},
    }
    groups = []
    for group_version, resources in DISCOVERY.items():
        path = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        docs[path] = {
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
            "resources": [{"name": plural, "singularName": kind.lower(), "kind": kind,
                           "namespaced": namespaced, "verbs": VERBS}
                          for plural, kind, namespaced in resources],
        }
        if group_version != "v1":
            group, version = group_version.split("/")
            entry = {"groupVersion": group_version, "version": version}
            groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
    docs["/apis"] = {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
    return docs


class _DiscoveryHandler(BaseHTTPRequestHandler):
    documents: dict[str, Any] = {}

    def do_GET(self) -> None:
        body = self.documents.get(self.path.split("?")[0])
        payload = json.dumps(body or {"kind": "Status", "code": 404}).encode()
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        return


@contextmanager
def discovery_kubeconfig(objects: Mapping[str, Manifest] | None = None) -> Iterator[Path]:
    """Serve discovery (plus `objects`, keyed by API path) on 127.0.0.1 and yield
    a kubeconfig that points at it."""
    documents = {**discovery_documents(), **(objects or {})}
    handler = type("Handler", (_DiscoveryHandler,), {"documents": documents})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "kubeconfig"
            config.write_text(yaml.safe_dump({
                "apiVersion": "v1", "kind": "Config", "current-context": "stub",
                "clusters": [{"name": "stub", "cluster": {
                    "server": f"http://127.0.0.1:{server.server_address[1]}"}}],
                "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "stub"}}],
                "users": [{"name": "stub", "user": {}}],
            }))
            yield config
    finally:
        server.shutdown()
        server.server_close()


def kubectl_dry_run(docs: Sequence[Manifest]) -> subprocess.CompletedProcess[str]:
    """Load manifests with `kubectl create --dry-run=client -f - -o yaml`.

    --validate=false because schema validation would download the cluster's
    OpenAPI document; the tests validate against kubernetes_validate's
    Kubernetes schemas instead.
    """
    with discovery_kubeconfig() as config:
        return run([tool("kubectl"), "create", "--dry-run=client", "--validate=false",
                    "-f", "-", "-o", "yaml"], stdin=to_yaml_stream(docs),
                   env={"KUBECONFIG": str(config), "HOME": str(config.parent)})


def helm_template_with_cluster(objects: Mapping[str, Manifest],
                               values: Mapping[str, Any] | None = None) -> list[Manifest]:
    """Render as `helm upgrade` would against a cluster holding `objects`.

    `--dry-run=server` makes helm's `lookup` read from the stub, which is how
    the chart finds the certificate Secret of an earlier install. The stub
    answers only GETs, so nothing is written anywhere.
    """
    with discovery_kubeconfig(objects) as config, tempfile.TemporaryDirectory() as tmp:
        proc = run([tool("helm"), "template", RELEASE, CHART, "--namespace", NAMESPACE,
                    "--dry-run=server", "--disable-openapi-validation",
                    *helm_args(values, (), Path(tmp))],
                   env={"KUBECONFIG": str(config), "HOME": str(config.parent)})
    assert proc.returncode == 0, f"helm template --dry-run=server failed:\n{proc.stderr}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]
