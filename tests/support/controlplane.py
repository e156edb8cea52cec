"""A real control plane for the cluster tests and benchmarks: etcd and kube-apiserver from an
envtest assets directory (tests/support/assets.py builds them from Go modules), kubectl and helm
against it, and `quickq-guard serve` started through its CLI. Needs a checkout (the chart and
.tools/ live beside the package).

Everything listens on 127.0.0.1 and every webhook is registered by URL, so the API server
never dials anything but loopback (the tests also run in a loopback-only network namespace).
"""

from __future__ import annotations

import base64
import datetime
import http.client
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from support.assets import default_release
from webhook.engine.workload import BUILT_IN
from webhook.testing import CONTROLLERS, REPO, Server, free_port, stop_process, wait_until

CHART = REPO / "charts" / "quickq-guard"
TOOLS = REPO / ".tools"
ASSETS = ("kube-apiserver", "etcd", "kubectl")
RELEASE = "quickq-guard"
RELEASE_NAMESPACE = "quickq-system"
HOW_TO_GET = ("run scripts/test (it builds them from tools/controlplane/ with "
              "`python -m support.assets`), or point KUBEBUILDER_ASSETS at a directory "
              "with kube-apiserver, etcd and kubectl (`setup-envtest use 1.36 -p path`)")


def assets_dir() -> Path:
    """KUBEBUILDER_ASSETS when set (the envtest convention), else the default release's
    directory under .tools/envtest."""
    named = os.environ.get("KUBEBUILDER_ASSETS")
    return Path(named) if named else default_release().directory


def missing_assets(directory: Path) -> list[str]:
    return [name for name in ASSETS if not os.access(directory / name, os.X_OK)]


def helm_binary() -> Path:
    return TOOLS / "bin" / "helm"


def interfaces() -> list[str]:
    """Names of the network interfaces this process can see."""
    return sorted(name for _, name in socket.if_nameindex())


LOOPBACK_MARK = "QUICKQ_LOOPBACK_ONLY"  # set inside the namespace scripts/test makes


def in_loopback_namespace(script: str, argv: list[str]) -> int | None:
    """For a benchmark that starts a control plane: None when this process sees loopback
    alone; else the exit code of `script` run again with `argv` under `unshare --net` (as
    root), or 2 with a message where it cannot be."""
    if interfaces() == ["lo"]:
        return None
    name = Path(script).stem
    if os.geteuid() != 0 or os.environ.get(LOOPBACK_MARK) or not shutil.which("unshare"):
        print(f"{name}: run as root (it makes a loopback-only network namespace) or inside "
              f"one; this process sees {', '.join(interfaces())}", file=sys.stderr)
        return 2
    command = ["unshare", "--net", "--", "env", f"{LOOPBACK_MARK}=1", "sh", "-c",
               'ip link set lo up && exec "$@"', "sh", sys.executable, script, *argv]
    return subprocess.run(command, check=False).returncode


def where_a_control_plane_starts(script: str, argv: list[str]) -> int | None:
    """For a benchmark that starts a control plane: None to go on in this process (loopback
    alone, the assets there); else the exit code to end with, of its run again in a
    loopback-only namespace (in_loopback_namespace) or 2 with a message saying what is
    missing."""
    rerun = in_loopback_namespace(script, argv)
    if rerun is not None:
        return rerun
    missing = missing_assets(assets_dir())
    if missing:
        print(f"{Path(script).stem}: no {', '.join(missing)} in {assets_dir()}: {HOW_TO_GET}",
              file=sys.stderr)
        return 2
    return None


# --- certificates -------------------------------------------------------------------------

@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _write_pair(out: Path, stem: str, key: ec.EllipticCurvePrivateKey,
                cert: x509.Certificate) -> Pair:
    pair = Pair(out / f"{stem}.crt", out / f"{stem}.key")
    pair.key.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return pair


def make_ca(out: Path, stem: str) -> Pair:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(stem)).issuer_name(_name(stem))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return _write_pair(out, stem, key, cert)


def issue(ca: Pair, out: Path, stem: str, *, client: bool,
          organization: str | None = None, names: tuple[str, ...] = ()) -> Pair:
    """A leaf from `ca`: a serving certificate for 127.0.0.1 (and `names`, addresses or DNS
    names) or a client certificate."""
    ca_key = serialization.load_pem_private_key(ca.key.read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    builder = (x509.CertificateBuilder().subject_name(_name(stem, organization))
               .issuer_name(ca_cert.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
    if not client:
        alternatives: list[x509.GeneralName] = []
        for name in ("localhost", "127.0.0.1", *names):
            try:
                alternatives.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                alternatives.append(x509.DNSName(name))
        builder = builder.add_extension(x509.SubjectAlternativeName(alternatives),
                                        critical=False)
    return _write_pair(out, stem, key, builder.sign(ca_key, hashes.SHA256()))


def webhook_certs(out: Path) -> Path:
    """A CA and serving certificate for the webhook, made by `quickq-guard certs` as a user
    makes them (names include 127.0.0.1); run again, it keeps the CA and issues a new one."""
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "webhook.cli", "certs", "--out", str(out),
                    "--days", "2"], check=True, capture_output=True, cwd=REPO)
    return out


# --- the control plane --------------------------------------------------------------------

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "None", "nonResourceURLs": ["/*"]},
        {"level": "None", "verbs": ["get", "list", "watch"]},
        {"level": "None", "resources": [{"group": "coordination.k8s.io"}, {"group": ""},
                                        {"group": "apps"}, {"group": "batch"},
                                        {"group": "quickq.io"}],
         "namespaces": ["kube-system", "kube-public", "kube-node-lease"]},
        {"level": "Metadata", "resources": [
            {"group": "", "resources": ["pods"]},
            {"group": "apps"}, {"group": "batch"}, {"group": "quickq.io"}]},
        {"level": "None"},
    ],
}


class ControlPlane:
    """etcd + kube-apiserver on loopback ports; `kubectl` and `helm` run against it.

    A node's pods reach the API server on `advertise` (and `names` go into its serving
    certificate); without one it listens on 127.0.0.1 only."""

    def __init__(self, assets: Path, workdir: Path, *, port: int | None = None,
                 advertise: str | None = None, names: tuple[str, ...] = ()) -> None:
        self.assets = assets.resolve()  # the processes run in workdir
        self.workdir = workdir
        self.port = port or free_port()
        self.advertise = advertise
        self.apiserver_flags: list[str] = []  # what a subclass adds (the node's)
        self.etcd_port = free_port()
        self.processes: list[subprocess.Popen[bytes]] = []
        pki = workdir / "pki"
        pki.mkdir()
        self.ca = make_ca(pki, "cluster-ca")
        self.serving = issue(self.ca, pki, "kube-apiserver", client=False, names=names)
        # The API server presents this client certificate to every webhook (see admission.yaml);
        # a webhook started with --client-ca=<webhook-client-ca> accepts it.
        self.webhook_client_ca = make_ca(pki, "webhook-client-ca")
        self.webhook_client = issue(self.webhook_client_ca, pki, "kube-apiserver-webhook-client",
                                    client=True)
        self.token = base64.b32encode(os.urandom(20)).decode().lower()
        self.audit_log = workdir / "audit.log"
        self.kubeconfig = workdir / "kubeconfig"
        self._write_configs(pki)

    def _write_configs(self, pki: Path) -> None:
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (pki / "sa.key").write_bytes(sa_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        (pki / "tokens.csv").write_text(f'{self.token},admin,admin,"system:masters"\n')
        webhook_kubeconfig = {
            "apiVersion": "v1", "kind": "Config",
            # '*' is the default entry: every webhook the API server calls gets this identity.
            "users": [{"name": "*", "user": {
                "client-certificate": str(self.webhook_client.cert),
                "client-key": str(self.webhook_client.key)}}],
        }
        (pki / "webhook-kubeconfig.yaml").write_text(yaml.safe_dump(webhook_kubeconfig))
        admission = {
            "apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
            "plugins": [{"name": name, "configuration": {
                "apiVersion": "apiserver.config.k8s.io/v1",
                "kind": "WebhookAdmissionConfiguration",
                "kubeConfigFile": str(pki / "webhook-kubeconfig.yaml")}}
                for name in ("ValidatingAdmissionWebhook", "MutatingAdmissionWebhook")],
        }
        (pki / "admission.yaml").write_text(yaml.safe_dump(admission))
        (pki / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
        kubeconfig = {
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {
                "server": f"https://127.0.0.1:{self.port}",
                "certificate-authority": str(self.ca.cert)}}],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin",
                                                     "namespace": "default"}}],
        }
        self.kubeconfig.write_text(yaml.safe_dump(kubeconfig))

    def start(self) -> None:
        pki = self.workdir / "pki"
        peer = free_port()
        self._spawn("etcd", [
            str(self.assets / "etcd"), "--name", "default",
            "--data-dir", str(self.workdir / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{self.etcd_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{self.etcd_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"default=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync", "--log-level", "warn"])
        self._spawn("kube-apiserver", [
            str(self.assets / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            f"--bind-address={'0.0.0.0' if self.advertise else '127.0.0.1'}",
            f"--advertise-address={self.advertise or '127.0.0.1'}",
            f"--secure-port={self.port}", f"--cert-dir={self.workdir / 'apiserver-certs'}",
            "--endpoint-reconciler-type=none",
            # Services resolve through Endpoints, never a ClusterIP (none could be reached).
            "--enable-aggregator-routing=true",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=RBAC", "--allow-privileged=true",
            f"--token-auth-file={pki / 'tokens.csv'}",
            f"--client-ca-file={self.ca.cert}",
            f"--tls-cert-file={self.serving.cert}",
            f"--tls-private-key-file={self.serving.key}",
            f"--service-account-issuer=https://127.0.0.1:{self.port}",
            f"--service-account-key-file={pki / 'sa.key'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--admission-control-config-file={pki / 'admission.yaml'}",
            f"--audit-policy-file={pki / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}", "--audit-log-format=json",
            "--audit-log-mode=blocking", *self.apiserver_flags,
            "--v=0"])
        self.wait_ready()

    def _spawn(self, name: str, command: list[str]) -> None:
        log = (self.workdir / f"{name}.log").open("wb")
        self.processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                               cwd=self.workdir))

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")

    def wait_ready(self, timeout: float = 60) -> None:
        context = ssl.create_default_context(cafile=str(self.ca.cert))
        request = urllib.request.Request(f"https://127.0.0.1:{self.port}/readyz",
                                         headers={"Authorization": f"Bearer {self.token}"})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"control-plane process {process.pid} exited "
                                       f"{process.returncode}:\n"
                                       f"{self.log('etcd')[-3000:]}"
                                       f"{self.log('kube-apiserver')[-3000:]}")
            try:
                with urllib.request.urlopen(request, context=context, timeout=5) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"kube-apiserver not ready:\n{self.log('kube-apiserver')[-3000:]}")

    def version(self) -> str:
        """The server's gitVersion, as `kubectl version` reports it (v1.36.3)."""
        done = self.kubectl("version", "-o", "json")
        version: str = json.loads(done.stdout)["serverVersion"]["gitVersion"]
        return version

    def stop(self) -> None:
        for process in reversed(self.processes):
            stop_process(process, 20)

    # --- clients ---

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(KUBECONFIG=str(self.kubeconfig), HELM_CACHE_HOME=str(self.workdir / "helm"),
                   HELM_CONFIG_HOME=str(self.workdir / "helm"),
                   HELM_DATA_HOME=str(self.workdir / "helm"))
        return env

    def run(self, command: list[str], input: str | None = None,
            check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(command, input=input, capture_output=True, text=True,
                              env=self.env(), timeout=timeout, check=False, cwd=REPO)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(command)} exited {done.returncode}:\n"
                                 f"{done.stdout}\n{done.stderr}")
        return done

    def kubectl(self, *args: str, input: str | None = None,
                check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run([str(self.assets / "kubectl"), *args], input=input, check=check)

    def helm(self, *args: str, check: bool = True,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.run([str(helm_binary()), *args], check=check, timeout=timeout)

    def apply(self, obj: dict[str, Any] | str, *args: str,
              check: bool = False) -> subprocess.CompletedProcess[str]:
        """`kubectl apply -f -` of one object (or YAML text); not checked by default, since
        a denial is what many tests want to see."""
        text = obj if isinstance(obj, str) else json.dumps(obj)
        return self.kubectl("apply", "-f", "-", *args, input=text, check=check)

    def get(self, kind: str, name: str, namespace: str = "default") -> dict[str, Any]:
        done = self.kubectl("get", kind, name, "-n", namespace, "-o", "json")
        loaded: dict[str, Any] = json.loads(done.stdout)
        return loaded

    def namespace(self, name: str, labels: dict[str, str] | None = None) -> str:
        """Create a namespace with its `default` ServiceAccount (no controller-manager runs
        here to create it, and Pods are refused without it)."""
        manifest = {"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": name, "labels": labels or {}}}
        self.kubectl("apply", "-f", "-", input=json.dumps(manifest))
        self.service_account(name)
        return name

    def service_account(self, namespace: str) -> None:
        account = {"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "default", "namespace": namespace}}
        self.kubectl("apply", "-f", "-", input=json.dumps(account))

    def kubeconfig_as(self, namespace: str, account: str, out: Path) -> Path:
        """A kubeconfig holding a fresh token of the ServiceAccount `namespace/account`: a
        process started with it has that account's RBAC and nothing more, as its pod would."""
        token = self.kubectl("create", "token", account, "-n", namespace).stdout.strip()
        config = yaml.safe_load(self.kubeconfig.read_text())
        config["users"] = [{"name": "admin", "user": {"token": token}}]
        out.write_text(yaml.safe_dump(config))
        return out

    def audit_events(self) -> list[dict[str, Any]]:
        lines = self.audit_log.read_text().splitlines() if self.audit_log.exists() else []
        return [json.loads(line) for line in lines if line.startswith("{")]


@contextmanager
def started(assets: Path, workdir: Path, namespace: str | None = None) -> Iterator[ControlPlane]:
    """A control plane running for the `with` block (and `namespace` created in it), stopped
    after it whatever happened: the session's, or one a module needs for itself."""
    control = ControlPlane(assets, workdir)
    try:
        control.start()
        if namespace:
            control.namespace(namespace)
        yield control
    finally:
        control.stop()


class ApiClient:
    """One keep-alive HTTPS connection to the API server, for many creates in a row (kubectl
    starts a process per call, which would measure kubectl, not admission)."""

    def __init__(self, plane: ControlPlane, timeout: float = 30) -> None:
        context = ssl.create_default_context(cafile=str(plane.ca.cert))
        self.connection = http.client.HTTPSConnection("127.0.0.1", plane.port, context=context,
                                                      timeout=timeout)
        self.headers = {"Authorization": f"Bearer {plane.token}",
                        "Content-Type": "application/json", "Accept": "application/json"}

    def create(self, obj: dict[str, Any], dry_run: bool = False) -> tuple[int, dict[str, Any]]:
        """POST a namespaced core/v1 object; (HTTP status, decoded answer)."""
        namespace = obj["metadata"]["namespace"]
        plural = obj["kind"].lower() + "s"
        query = "?dryRun=All" if dry_run else ""
        self.connection.request("POST", f"/api/v1/namespaces/{namespace}/{plural}{query}",
                                body=json.dumps(obj), headers=self.headers)
        answer = self.connection.getresponse()
        body = answer.read()
        return answer.status, json.loads(body) if body else {}

    def close(self) -> None:
        self.connection.close()


# --- the webhook --------------------------------------------------------------------------

class Webhook(Server):
    """`quickq-guard serve` on a loopback port, as the cluster tests register it by URL;
    `client` is the certificate its test connections present when it runs with
    --client-ca."""

    def __init__(self, workdir: Path, certs: Path, *extra: str, workers: int = 1,
                 port: int | None = None, client_ca: Path | None = None,
                 client: Pair | None = None) -> None:
        super().__init__(workdir, certs, *extra, workers=workers, port=port,
                         client_ca=client_ca,
                         client_cert=(client.cert, client.key) if client else None)

    def output(self) -> str:
        return self.errors()

    def reload(self) -> None:
        """SIGHUP: check the policy and certificate files now."""
        self.signal(signal.SIGHUP)


@contextmanager
def running(webhook: Webhook) -> Iterator[Webhook]:
    try:
        yield webhook
    finally:
        webhook.stop()


# --- the chart ----------------------------------------------------------------------------

def release_values(url: str, ca_bundle: str, **extra: Any) -> list[str]:
    """helm --set flags: the webhooks called by URL with the test CA, the CRD installed;
    a value that is not a string goes in as JSON (--set-json)."""
    values = {"webhook.url": url, "certs.mode": "secret",
              "certs.secret.name": "quickq-guard-tls", "certs.secret.caBundle": ca_bundle,
              "crd.install": "true",
              # The hook Jobs (arming the webhooks, removing them before delete) need a
              # kubelet, and none runs here; tests run the hooks' commands themselves.
              "webhook.failSafe.enabled": "false", "cleanup.enabled": "false", **extra}
    flags: list[str] = []
    for key, value in values.items():
        flags += (["--set", f"{key}={value}"] if isinstance(value, str)
                  else ["--set-json", f"{key}={json.dumps(value)}"])
    return flags


def rendered(plane: ControlPlane, release: str, namespace: str,
             flags: list[str]) -> list[dict[str, Any]]:
    done = plane.helm("template", release, str(CHART), "--namespace", namespace,
                      "--kube-version", plane.version(), *flags)
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def chart_runtime_files(documents: list[dict[str, Any]], out: Path) -> tuple[Path, Path]:
    """The policies directory and config file the chart's ConfigMaps hold, written out as
    the pods would see them mounted: the webhook under test runs the chart's own settings."""
    policies = out / "policies"
    policies.mkdir(parents=True, exist_ok=True)
    config = out / "config.yaml"
    for doc in documents:
        if doc.get("kind") != "ConfigMap":
            continue
        name = doc["metadata"]["name"]
        if name.endswith("-policies"):
            for file, text in doc["data"].items():
                (policies / file).write_text(text)
        elif name.endswith("-config"):
            config.write_text(doc["data"]["config.yaml"])
    return policies, config


# --- what the fixtures share with the tests ----------------------------------------------

def loopback_problem() -> str | None:
    names = interfaces()
    if names == ["lo"]:
        return None
    return (f"this process sees the network interfaces {', '.join(names)}; the cluster tests "
            "run only where loopback is the only one: run them through scripts/test as root "
            "(it runs pytest under `unshare --net`)")


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

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No webhook registered for a while: objects created now are those a cluster had
        before quickq-guard was installed."""
        with self.pointed_at(self.webhook.url, lambda: not denies_bad_pod(self.plane),
                             **{"webhook.validating": "false", "webhook.mutating": "false"}):
            yield


# --- manifests ----------------------------------------------------------------------------

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# Where each controller keeps its pod template, and its apiVersion (from the engine's table).
TEMPLATE_PATH = {kind: built.pod_spec[:-1] for kind, built in BUILT_IN.items()
                 if kind != "Pod"}
API_VERSION = {kind: BUILT_IN[kind].api_version for kind in CONTROLLERS}  # those tests build


def container(name: str = "web", image: str = "registry.example.com/web:1.0",
              **fields: Any) -> dict[str, Any]:
    """A container every shipped enforce policy accepts."""
    return {"name": name, "image": image,
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                          "limits": {"memory": "64Mi"}}, **fields}


def liveness(period: int = 10, threshold: int = 6) -> dict[str, Any]:
    return {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": period,
            "failureThreshold": threshold}


def gpu_container(name: str = "model") -> dict[str, Any]:
    """A GPU model server with a liveness probe and no startup probe or toleration: the
    mutating webhook adds both."""
    return {"name": name, "image": "registry.example.com/model-server:2.0.1",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                          "limits": {"memory": "1Gi", "nvidia.com/gpu": "1"}},
            "livenessProbe": liveness()}


def pod_spec(*containers: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
            "containers": list(containers) or [container()], **fields}


def pod(name: str, namespace: str, *containers: dict[str, Any],
        **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
            "spec": pod_spec(*containers, **fields)}


def controller(kind: str, name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A pod controller of `kind` around the pod spec `spec`."""
    labels = {"app": name}
    if kind in ("Job", "CronJob"):
        spec = {"restartPolicy": "Never", **spec}
    template = {"metadata": {"labels": labels}, "spec": spec}
    body: dict[str, Any] = {"template": template}
    if kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"):
        body["selector"] = {"matchLabels": labels}
    if kind == "StatefulSet":
        body["serviceName"] = name
    if kind == "CronJob":
        body = {"schedule": "0 3 * * *", "jobTemplate": {"spec": body}}
    return {"apiVersion": API_VERSION[kind], "kind": kind,
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": body}


def template_spec(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod spec of a stored Pod or controller."""
    node = obj
    for key in TEMPLATE_PATH.get(obj["kind"], ()):
        node = node[key]
    spec: dict[str, Any] = node["spec"]
    return spec


def printed_objects(output: str) -> list[dict[str, Any]]:
    """The objects `kubectl ... -o json` printed for several inputs: one JSON document each,
    one after another, with a List's items taken apart."""
    objects: list[dict[str, Any]] = []
    decoder = json.JSONDecoder()
    index = 0
    while True:
        while index < len(output) and output[index].isspace():
            index += 1
        if index >= len(output):
            return objects
        printed, index = decoder.raw_decode(output, index)
        objects.extend(printed["items"] if printed.get("kind") == "List" else [printed])


def warnings_of(stderr: str) -> list[str]:
    """The warnings as kubectl prints them, one `Warning: <text>` line each."""
    return [line[len("Warning: "):] for line in stderr.splitlines()
            if line.startswith("Warning: ")]
