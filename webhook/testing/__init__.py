"""Kubernetes objects, AdmissionReviews and a served webhook for tests, benchmarks and users'
own scripts: one builder for all of them.

`pod()` and `container()` start from an object that passes every default policy; a caller
overrides the fields it cares about (a value of None removes a field). `typical_pod()` is a
Pod as the API server hands it to a webhook after defaulting. `Server` runs
`quickq-guard serve` in a subprocess on a loopback port (its `client()` needs httpx).
"""

from __future__ import annotations

import copy
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography import x509

from webhook.engine.workload import BUILT_IN

if TYPE_CHECKING:
    import httpx

GOOD_IMAGE = "registry.example.com/app:1.2.3"
# The kinds the tests build, with (apiVersion, path of the pod spec); every built-in kind but
# ReplicationController, which few clusters still run.
POD_SPEC_PATHS = {kind: (built.api_version, built.pod_spec) for kind, built in BUILT_IN.items()
                  if kind != "ReplicationController"}
CONTROLLERS = [kind for kind in POD_SPEC_PATHS if kind != "Pod"]


def _merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    for key, value in changes.items():
        if value is None:
            base.pop(key, None)
        else:
            base[key] = value
    return base


def container(name: str = "app", **changes: Any) -> dict[str, Any]:
    """A container that passes every default policy (requests set, pinned image)."""
    base: dict[str, Any] = {
        "name": name,
        "image": GOOD_IMAGE,
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                      "limits": {"memory": "256Mi"}},
    }
    return _merge(base, changes)


def gpu_container(name: str = "model", count: Any = 1, resource: str = "nvidia.com/gpu",
                  **changes: Any) -> dict[str, Any]:
    resources = {"requests": {"cpu": "1", "memory": "1Gi", resource: count},
                 "limits": {"memory": "1Gi", resource: count}}
    return container(name, resources=resources, **changes)


def probe(period: int | None = None, threshold: int | None = None,
          **extra: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"httpGet": {"path": "/healthz", "port": 8080}}
    if period is not None:
        found["periodSeconds"] = period
    if threshold is not None:
        found["failureThreshold"] = threshold
    return {**found, **extra}


def pod_spec(*containers: dict[str, Any], **changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
        "containers": list(containers) or [container()],
    }
    return _merge(base, changes)


def pod(*containers: dict[str, Any], name: str = "web", namespace: str | None = "default",
        labels: dict[str, Any] | None = None, annotations: dict[str, Any] | None = None,
        **spec_changes: Any) -> dict[str, Any]:
    """A Pod that passes every validate policy; keyword arguments change its spec."""
    return workload("Pod", *containers, name=name, namespace=namespace, labels=labels,
                    annotations=annotations, **spec_changes)


def workload(kind: str, *containers: dict[str, Any], name: str = "web",
             namespace: str | None = "default", labels: dict[str, Any] | None = None,
             annotations: dict[str, Any] | None = None, **spec_changes: Any) -> dict[str, Any]:
    """A Pod or controller of `kind` around the pod spec."""
    api_version = POD_SPEC_PATHS[kind][0]
    metadata: dict[str, Any] = {"name": name, "labels": {"app": name} if labels is None
                                else labels}
    if namespace is not None:
        metadata["namespace"] = namespace
    if annotations is not None:
        metadata["annotations"] = annotations
    obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": metadata}
    spec = pod_spec(*containers, **spec_changes)
    if kind == "Pod":
        obj["spec"] = spec
        return obj
    template = {"metadata": {"labels": {"app": name}}, "spec": spec}
    if kind == "CronJob":
        spec["restartPolicy"] = "OnFailure"
        obj["spec"] = {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": template}}}
    elif kind == "Job":
        spec["restartPolicy"] = "Never"
        obj["spec"] = {"template": template}
    elif kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"):
        obj["spec"] = {"selector": {"matchLabels": {"app": name}}, "template": template}
        if kind == "StatefulSet":
            obj["spec"]["serviceName"] = name
    return obj


def node_template(api_version: str = "quickq.io/v1", **spec_changes: Any) -> dict[str, Any]:
    """A NodeTemplate that passes every validate policy."""
    spec: dict[str, Any] = {
        "image": "registry.example.com/model-server:2.0.1",
        "resources": {"requests": {"cpu": "1", "memory": "4Gi"},
                      "limits": {"cpu": "2", "memory": "8Gi"}},
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
    }
    return {"apiVersion": api_version, "kind": "NodeTemplate",
            "metadata": {"name": "gpu-inference-01", "labels": {"app": "model-server"}},
            "spec": _merge(spec, spec_changes)}


def typical_pod() -> dict[str, Any]:
    """A Pod as the API server hands it to a webhook after defaulting: two containers, probes,
    resources, env, the service-account token volume; allowed by the shipped policies, with one
    startup probe to inject and one warning."""
    probe = {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
             "periodSeconds": 10, "failureThreshold": 3, "timeoutSeconds": 1,
             "successThreshold": 1}
    container = {
        "name": "server", "image": "ghcr.io/example/inference:2.4.1",
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
        "env": [{"name": "MODEL_NAME", "value": "llama-3-8b"},
                {"name": "LOG_LEVEL", "value": "info"},
                {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf",
                                                                    "key": "token"}}}],
        "resources": {"requests": {"cpu": "2", "memory": "8Gi"},
                      "limits": {"cpu": "4", "memory": "16Gi"}},
        "livenessProbe": probe, "readinessProbe": probe,
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                            "runAsUser": 1000},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [{"name": "kube-api-access-x7k2p", "readOnly": True,
                          "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
    }
    sidecar = {**container, "name": "metrics", "image": "ghcr.io/example/exporter:1.8.0",
               "ports": [{"containerPort": 9090, "name": "metrics", "protocol": "TCP"}],
               "env": [], "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                                        "limits": {"memory": "128Mi"}}}
    sidecar.pop("livenessProbe")
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": "inference-7d9c6b5f4-", "namespace": "ml-serving",
            "labels": {"app": "inference", "pod-template-hash": "7d9c6b5f4",
                       "app.kubernetes.io/version": "2.4.1"},
            "annotations": {"prometheus.io/scrape": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                 "name": "inference-7d9c6b5f4", "uid": str(uuid.uuid4()),
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {
            "containers": [container, sidecar],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst", "serviceAccountName": "default",
            "serviceAccount": "default", "securityContext": {"runAsNonRoot": True},
            "schedulerName": "default-scheduler", "priority": 0,
            "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300}],
            "volumes": [{"name": "kube-api-access-x7k2p", "projected": {
                "defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt",
                                   "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                        "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}],
        },
    }


SERVICE = "quickq-guard"
NAMESPACE = "quickq-guard"
SERVICE_DNS = f"{SERVICE}.{NAMESPACE}.svc"
REPO = Path(__file__).resolve().parents[2]  # the checkout (an editable install)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """`quickq-guard serve` on a loopback port; stdout (the JSON log) goes to a file."""

    def __init__(self, workdir: Path, certs: Path | None, *extra: str, workers: int = 1,
                 port: int | None = None, client_ca: Path | None = None,
                 client_cert: tuple[Path, Path] | None = None) -> None:
        """`certs` None: run with the default --cert/--key, which exist only where `extra`
        holds --self-signed (then the server makes them in `workdir/certs`).
        `client_ca`: serve with --client-ca; `client_cert` (cert, key): what this side's
        connections present then."""
        self.port = port or free_port()
        self.certs = certs or workdir / "certs"
        self.client_cert = client_cert
        files = ["--cert", str(certs / "tls.crt"), "--key", str(certs / "tls.key")] \
            if certs else []
        if client_ca is not None:
            files += ["--client-ca", str(client_ca)]
        self.log_path = workdir / f"server-{self.port}.log"
        self.err_path = workdir / f"server-{self.port}.err"
        command = [sys.executable, "-m", "webhook.cli", "serve", "--host", "127.0.0.1",
                   "--port", str(self.port), *files, "--workers", str(workers), *extra]
        env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
        self.process = subprocess.Popen(
            command, cwd=workdir, env=env, stdout=self.log_path.open("wb"),
            stderr=self.err_path.open("wb"))
        self.wait_ready()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.certs / "ca.crt"))
        if self.client_cert is not None:
            context.load_cert_chain(*self.client_cert)
        return context

    def tls(self, timeout: float = 10) -> ssl.SSLSocket:
        """A raw TLS connection to the server, checked as the API server checks it."""
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        return self.context().wrap_socket(raw, server_hostname="localhost")

    def served_serial(self) -> int:
        """The serial number of the certificate the server serves now."""
        with self.tls(timeout=5) as tls:
            der = tls.getpeercert(binary_form=True)
        assert der is not None
        return int(x509.load_der_x509_certificate(der).serial_number)

    def client(self, **kwargs: Any) -> httpx.Client:
        import httpx

        return httpx.Client(base_url=f"https://localhost:{self.port}", verify=self.context(),
                            timeout=10, **kwargs)

    def wait_ready(self, timeout: float = 20) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited {self.process.returncode}: {self.errors()}")
            try:
                with self.client() as client:
                    if client.get("/readyz").status_code == 200:
                        return
            except (httpx.TransportError, OSError):  # OSError: no CA file written yet
                pass
            time.sleep(0.05)
        raise RuntimeError(f"server not ready: {self.errors()}")

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def stop(self) -> int:
        return stop_process(self.process, 30)

    def logs(self) -> list[dict[str, Any]]:
        lines = self.log_path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def errors(self) -> str:
        return self.err_path.read_text() + self.log_path.read_text()


def stop_process(process: subprocess.Popen[bytes], timeout: float) -> int:
    """SIGTERM, then SIGKILL if it is still running after `timeout` seconds; the exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return int(process.returncode)


def review_pod(name: str = "web", **spec_changes: Any) -> dict[str, Any]:
    """A Pod in namespace team-a that every shipped enforce policy accepts, with one
    container named web: what the server tests send."""
    web = container("web", image="nginx:1.27")
    return pod(web, name=name, namespace="team-a",
               securityContext={"runAsNonRoot": True}, **spec_changes)


def with_probe(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` with a liveness probe of 30 s tolerance: the startup probe is injected and the
    warn policy liveness-probe-tolerance fires."""
    obj = copy.deepcopy(obj)
    obj["spec"]["containers"][0]["livenessProbe"] = {
        "httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10,
        "failureThreshold": 3, "timeoutSeconds": 1, "successThreshold": 1}
    return obj


def bad_pod() -> dict[str, Any]:
    obj = review_pod("bad")
    container = obj["spec"]["containers"][0]
    container["image"] = "nginx"
    container["env"] = [{"name": "DB_PASSWORD", "value": "hunter2-secret-value"}]
    del obj["spec"]["securityContext"]
    return obj


def admission_review(obj: Any, *, operation: str = "CREATE", old: Any = None,
                     namespace: str = "team-a", version: str = "admission.k8s.io/v1",
                     username: str = "alice", dry_run: bool = False) -> dict[str, Any]:
    """The AdmissionReview the API server sends for `obj`."""
    kind = obj.get("kind", "Pod") if isinstance(obj, dict) else "Pod"
    return {
        "apiVersion": version, "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": kind},
            "name": obj.get("metadata", {}).get("name", "") if isinstance(obj, dict) else "",
            "namespace": namespace, "operation": operation,
            "userInfo": {"username": username, "groups": ["system:authenticated"]},
            "object": obj, "oldObject": old, "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.title()}Options"},
        },
    }


def post(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST a review and check the parts of the answer the API server checks first."""
    answer = client.post(path, json=body)
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    assert data["apiVersion"] == body["apiVersion"]
    assert data["kind"] == "AdmissionReview"
    assert data["response"]["uid"] == body["request"]["uid"]
    assert isinstance(data["response"]["allowed"], bool)
    response: dict[str, Any] = data["response"]
    return response


def client_cert(ca: tuple[Any, Any], out: Path, name: str = "client") -> tuple[str, str]:
    """A client certificate (CN kube-apiserver, clientAuth) signed by `ca` = (key, cert),
    written as `<name>.crt` / `<name>.key`; the paths."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_key, ca_cert = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1)).not_valid_after(now + dt.timedelta(1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256()))
    (out / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (out / f"{name}.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return str(out / f"{name}.crt"), str(out / f"{name}.key")


def file_serial(path: Path) -> int:
    """The serial number of a PEM certificate file."""
    return int(x509.load_pem_x509_certificate(path.read_bytes()).serial_number)


def metric(client: httpx.Client, prefix: str) -> float:
    """The sum of the /metrics samples whose line starts with `prefix`."""
    lines = client.get("/metrics").text.splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(prefix))


def wait_until(check: Callable[[], bool], timeout: float = 20, what: str = "condition",
               interval: float = 0.2) -> None:
    """Poll `check` until it holds: servers and the API server pick changes up
    asynchronously (reloads, informers, log writes), so a test waits for the effect, never
    for a fixed time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
