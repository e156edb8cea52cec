"""Many objects in a real API server at once, as a cluster holds them from before
quickq-guard was installed: the world of benchmarks/audit_scale.py and of
tests/cluster/test_audit_at_scale.py.

Each namespace gets the same mix, by an object's number in it: Deployments with 0 replicas
and bare Pods (no scheduler or kubelet runs, so the Pods stay Pending and nothing else is
made), one in five with a `:latest` image, one in ten without an `app` label, one in twenty a
`legacy-*` one that a PolicyException in GRANTS excepts. Kubernetes takes one object per
create, so they go through many kept-alive connections at once.
"""

from __future__ import annotations

import http.client
import json
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from support.audit import install_report_crds
from support.controlplane import ControlPlane
from webhook.testing import REPO

GRANTS = "bench-grants"  # the config's exceptionNamespaces


# --- the API, many requests at once ----------------------------------------------------------

class Api:
    """Kept-alive HTTPS connections to the API server, one per thread, as the admin."""

    def __init__(self, plane: ControlPlane) -> None:
        self.port = plane.port
        self.context = ssl.create_default_context(cafile=str(plane.ca.cert))
        self.headers = {"Authorization": f"Bearer {plane.token}", "Accept": "application/json"}
        self.local = threading.local()
        self.made: Counter[tuple[str, str]] = Counter()  # (verb, resource) of ours
        self.lock = threading.Lock()

    def request(self, method: str, path: str, body: Any = None, verb: str = "",
                resource: str = "", content_type: str = "application/json",
                accept: str = "") -> tuple[int, bytes]:
        headers = dict(self.headers)
        if accept:
            headers["Accept"] = accept
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        for attempt in range(2):  # the server may close a kept-alive connection left idle
            connection = getattr(self.local, "connection", None)
            if connection is None:
                connection = http.client.HTTPSConnection("127.0.0.1", self.port,
                                                          context=self.context, timeout=120)
                self.local.connection = connection
            try:
                connection.request(method, path, body=data, headers=headers)
                answer = connection.getresponse()
                raw = answer.read()
                break
            except (http.client.RemoteDisconnected, ConnectionError):
                connection.close()
                self.local.connection = None
                if attempt:
                    raise
        if resource:
            with self.lock:
                self.made[(verb, resource)] += 1
        return answer.status, raw

    def create(self, path: str, obj: dict[str, Any], resource: str) -> None:
        for attempt in range(5):
            status, raw = self.request("POST", path, obj, "POST", resource)
            if status in (201, 409):  # 409: made by a try that timed out on our side
                return
            if status == 429 or status >= 500:
                time.sleep(0.2 * (attempt + 1))
                continue
            raise RuntimeError(f"create {path}: {status} {raw[:300]!r}")
        raise RuntimeError(f"create {path}: still refused after 5 tries")


# --- the objects ---------------------------------------------------------------------------

def namespaces(count: int) -> list[str]:
    return [f"bench-{index:03d}" for index in range(count)]


def pod_spec(latest: bool) -> dict[str, Any]:
    image = "registry.example.com/app:latest" if latest else "registry.example.com/app:1.4.2"
    return {"securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
            "containers": [{"name": "app", "image": image, "resources": {
                "requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "64Mi"}}}]}


def name_of(index: int, spaces: int) -> str:
    return f"legacy-{index}" if (index // spaces) % 20 == 7 else f"app-{index}"


def is_latest(index: int, spaces: int) -> bool:
    """Whether object `index` is made with a `:latest` image (the legacy ones excepted)."""
    number = index // spaces
    return number % 5 == 0 or number % 20 == 7


def made(index: int, spaces: list[str]) -> tuple[str, dict[str, Any], str]:
    """Object number `index`: (its collection's path, the object, its resource). Objects go
    round the namespaces; each namespace gets the same mix, by the object's number in it."""
    namespace, number = spaces[index % len(spaces)], index // len(spaces)
    name = name_of(index, len(spaces))
    labels = {} if number % 10 == 3 else {"app": name}
    metadata = {"name": name, "namespace": namespace, "labels": labels}
    latest = is_latest(index, len(spaces))
    if number % 2:
        return (f"/api/v1/namespaces/{namespace}/pods",
                {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
                 "spec": pod_spec(latest)}, "pods")
    selector = {"matchLabels": {"bench": name}}
    template = {"metadata": {"labels": {**labels, "bench": name}}, "spec": pod_spec(latest)}
    return (f"/apis/apps/v1/namespaces/{namespace}/deployments",
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
             "spec": {"replicas": 0, "selector": selector, "template": template}},
            "deployments")


def exception() -> dict[str, Any]:
    expires = (datetime.now(UTC) + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"apiVersion": "quickq.io/v1", "kind": "PolicyException",
            "metadata": {"name": "legacy", "namespace": GRANTS},
            "spec": {"policies": [{"id": "disallow-latest-tag"}],
                     "match": {"namespaces": ["bench-*"], "names": ["legacy-*"]},
                     "expires": expires, "reason": "the legacy apps move next quarter"}}


def populate(plane: ControlPlane, api: Api, count: int, spaces: list[str],
             threads: int) -> float:
    """The CRDs, namespaces, the exception and `count` objects; the seconds the objects took."""
    crds = subprocess.run([sys.executable, "-m", "webhook.cli", "crd"], cwd=REPO,
                          capture_output=True, text=True, check=True).stdout
    plane.kubectl("apply", "-f", "-", input=crds)
    install_report_crds(plane)
    plane.kubectl("wait", "--for=condition=established", "--timeout=60s",
                  "crd/policyexceptions.quickq.io")
    for name in [*spaces, GRANTS]:
        api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": name}}, "namespaces")
        api.create(f"/api/v1/namespaces/{name}/serviceaccounts",
                   {"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "default", "namespace": name}}, "serviceaccounts")
    api.create(f"/apis/quickq.io/v1/namespaces/{GRANTS}/policyexceptions", exception(),
               "policyexceptions")

    def one(index: int) -> None:
        path, obj, resource = made(index, spaces)
        api.create(path, obj, resource)

    started = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(one, range(count), chunksize=64):
            pass
    return time.monotonic() - started


def bulk_config() -> str:
    """The config the audit and `check` run with: the system namespaces left out, the
    exceptions read from GRANTS."""
    return yaml.safe_dump({
        "excludeNamespaces": ["kube-system", "kube-public", "kube-node-lease"],
        "exceptionNamespaces": [GRANTS]})


def reports_present(api: Api) -> set[str]:
    """The namespaces that hold a report of ours (metadata only: cheap to ask often)."""
    status, raw = api.request(
        "GET", "/apis/openreports.io/v1alpha1/reports?labelSelector="
        "app.kubernetes.io%2Fmanaged-by%3Dquickq-guard", verb="LIST", resource="reports",
        accept="application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")
    if status != 200:
        return set()
    return {item["metadata"]["namespace"] for item in json.loads(raw)["items"] or ()}
