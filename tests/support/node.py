"""A one-node Kubernetes for the node tests: the control plane of tests/support/controlplane.py
plus kube-controller-manager, kube-scheduler and a kubelet (one binary built from
tools/controlplane/node), Debian's containerd with runc, and a CNI bridge, all inside the
network namespace the tests run in (scripts/test makes a fresh one with loopback only).

Inside that namespace the node puts its address and the `kubernetes` Service's ClusterIP on
loopback, and the bridge plugin adds the pod network: pods reach the
API server at its ClusterIP (it listens on 443 there, so no kube-proxy is needed), and the API
server reaches webhook pods through their Service's endpoints. Nothing has a route out.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import yaml

from support.controlplane import ControlPlane
from webhook.testing import REPO, free_port, stop_process, wait_until

NODE_TOOLS = REPO / ".tools" / "node"
NODE_BINARY = NODE_TOOLS / "node"  # kubelet, kube-controller-manager, kube-scheduler by name
IMAGES = NODE_TOOLS / "images"  # docker-archive tars that tests/support/images.py writes
NODE_FAILED = NODE_TOOLS / "build-failed.txt"
CNI_BIN = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
NODE_NAME = "quickq-node"
NODE_IP = "10.243.0.1"
SERVICE_IP = "10.0.0.1"  # the first address of --service-cluster-ip-range: `kubernetes`
POD_CIDR = "10.244.0.0/24"
BRIDGE = "qq-cni0"
PAUSE_IMAGE = "localhost/quickq-pause:1"
GUARD_IMAGE = "localhost/quickq-guard:node-test"
RUNTIME = os.environ.get("QUICKQ_NODE_RUNTIME", "runc")  # the OCI runtime containerd runs
PRIVATE_DIRECTORIES = ("/run/containerd", "/var/lib/cni", "/var/lib/kubelet")
COMPONENTS = ("kubelet", "kube-controller-manager", "kube-scheduler")
API_NAMES = (SERVICE_IP, NODE_IP, "kubernetes", "kubernetes.default", "kubernetes.default.svc",
             "kubernetes.default.svc.cluster.local")


def node_problem() -> str | None:
    """Why a node cannot start here, naming what is missing and how to get it; None when
    everything it needs is in place."""
    if NODE_FAILED.is_file():
        return NODE_FAILED.read_text().strip()
    if os.geteuid() != 0:
        return "the node runs containers, which needs root"
    wanted = {"containerd": shutil.which("containerd"), "runc": shutil.which("runc"),
              "ctr": shutil.which("ctr"), "ip": shutil.which("ip"),
              "CNI bridge plugin": str(CNI_BIN / "bridge") if (CNI_BIN / "bridge").exists()
              else None}
    missing = [name for name, path in wanted.items() if not path]
    if missing:
        return (f"no {', '.join(missing)}: scripts/node-packages installs Debian's containerd, "
                "runc and containernetworking-plugins (as root)")
    if not os.access(NODE_BINARY, os.X_OK):
        return (f"no {NODE_BINARY.relative_to(REPO)}: scripts/test builds it "
                "(tests/support/assets.py --node)")
    for name in ("pause.tar", "quickq-guard.tar"):
        if not (IMAGES / name).is_file():
            return (f"no image {IMAGES.relative_to(REPO) / name}: scripts/test builds it "
                    "(tests/support/images.py)")
    return None


def _containerd_config(work: Path) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{work}/root"
state = "{work}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
                    "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{work}/containerd.sock"
[ttrpc]
  address = "{work}/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{work}/opt"
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  enable_selinux = false
  netns_mounts_under_state_dir = true
  # The kubelet asks for -998 on a pod's sandbox, which the runtime writes after taking the
  # pod's user, and the kernel refuses that (runc: "can't get final child's PID from pipe",
  # crun: "write to /proc/self/oom_score_adj: Permission denied"): keep containerd's own.
  restrict_oom_score_adj = true
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{RUNTIME}"
  [{cri}.cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{work}/net.d"
"""


def _cni_config(work: Path) -> dict[str, object]:
    """One bridge, no masquerade (nothing is to leave), host-local addresses."""
    return {"cniVersion": "1.0.0", "name": "quickq-node", "plugins": [
        {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False,
         "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]],
                  "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(work / "ipam")}}]}


def _kubelet_config(work: Path, socket: Path, port: int) -> dict[str, object]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        # cgroup v1 only on these machines: kubelet >= 1.35 refuses it unless told not to.
        "failCgroupV1": False, "cgroupDriver": "cgroupfs",
        # The pods go straight under the runtime's cgroup: no QoS tree for this one node.
        "cgroupsPerQOS": False, "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{socket}",
        "address": NODE_IP, "port": port, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": 0,
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        # The test images exist only here: never collect them, never evict for disk.
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "0%", "nodefs.available": "0%",
                         "imagefs.available": "0%", "nodefs.inodesFree": "0%"},
        "localStorageCapacityIsolation": False,
        "resolvConf": str(work / "resolv.conf"),
        "serializeImagePulls": False,
        "syncFrequency": "10s", "fileCheckFrequency": "10s",
        "nodeStatusUpdateFrequency": "4s", "nodeStatusReportFrequency": "10s",
        "podPidsLimit": -1,
    }


class Node(ControlPlane):
    """The control plane with one node: containerd, kubelet, controller-manager, scheduler."""

    def __init__(self, assets: Path, workdir: Path) -> None:
        super().__init__(assets, workdir, port=443, advertise=NODE_IP, names=API_NAMES)
        # Logs and exec go to the node's address: never a DNS lookup of its name.
        self.apiserver_flags = ["--kubelet-preferred-address-types=InternalIP"]
        self.containerd_dir = workdir / "containerd"
        self.socket = self.containerd_dir / "containerd.sock"
        self.mountpoints: list[Path] = []

    def start(self) -> None:
        self._private_directories()
        self._network()
        super().start()
        self._start_containerd()
        pki = self.workdir / "pki"
        binary = self.workdir / "bin"
        binary.mkdir()
        for name in COMPONENTS:
            (binary / name).symlink_to(NODE_BINARY)
        self._spawn("kube-controller-manager", [
            str(binary / "kube-controller-manager"), f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={self.ca.cert}", "--use-service-account-credentials=false",
            "--concurrent-job-syncs=2", "--v=1"])
        self._spawn("kube-scheduler", [
            str(binary / "kube-scheduler"), f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            "--v=1"])
        kubelet = self.workdir / "kubelet"
        kubelet.mkdir()
        (kubelet / "resolv.conf").write_text("")  # pods resolve nothing: there is no DNS
        config = kubelet / "config.yaml"
        config.write_text(yaml.safe_dump(_kubelet_config(kubelet, self.socket, free_port())))
        self._spawn("kubelet", [
            str(binary / "kubelet"), f"--config={config}", f"--kubeconfig={self.kubeconfig}",
            f"--root-dir={kubelet / 'root'}", f"--cert-dir={kubelet / 'pki'}",
            f"--hostname-override={NODE_NAME}", f"--node-ip={NODE_IP}", "--v=1"])
        wait_until(self.node_ready, timeout=180, interval=1,
                   what=f"node {NODE_NAME} to be Ready (see {self.workdir}/kubelet.log)")

    def _private_directories(self) -> None:
        """A tmpfs over the few host paths the runtime and the kubelet write whatever they
        are told (runc's and the shims' state, the CNI cache, the device plugin socket
        directory), when the tests run in a mount namespace of their own (scripts/test makes
        one and says so in QUICKQ_PRIVATE_MOUNTS): they vanish with it. Elsewhere nothing is
        mounted."""
        if os.environ.get("QUICKQ_PRIVATE_MOUNTS") != "1":
            return
        for path in PRIVATE_DIRECTORIES:
            if not Path(path).exists():
                Path(path).mkdir(parents=True)
                self.mountpoints.append(Path(path))  # made here: removed again on stop
            subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0700", "tmpfs", path],
                           check=True, capture_output=True, text=True)

    def _network(self) -> None:
        """The node's address and the `kubernetes` ClusterIP on loopback (this kernel has no
        dummy interfaces): local to this namespace, so a pod's packet to the API server
        crosses the bridge and goes no further."""
        for address in (NODE_IP, SERVICE_IP):
            subprocess.run(["ip", "addr", "add", f"{address}/32", "dev", "lo"], check=True,
                           capture_output=True, text=True)

    def _start_containerd(self) -> None:
        work = self.containerd_dir
        (work / "net.d").mkdir(parents=True)
        (work / "net.d" / "10-quickq.conflist").write_text(json.dumps(_cni_config(work)))
        config = work / "config.toml"
        config.write_text(_containerd_config(work))
        self._spawn("containerd", ["containerd", "--config", str(config)])
        wait_until(lambda: self.ctr("version", check=False).returncode == 0, timeout=60,
                   what=f"containerd to answer (see {self.workdir}/containerd.log)")
        for tar in ("pause.tar", "quickq-guard.tar"):
            self.ctr("images", "import", str(IMAGES / tar), timeout=300)

    def ctr(self, *args: str, check: bool = True,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["ctr", "--address", str(self.socket), "--namespace", "k8s.io",
                               *args], capture_output=True, text=True, timeout=timeout,
                              check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"ctr {' '.join(args)} exited {done.returncode}: {done.stderr}")
        return done

    def node_ready(self) -> bool:
        done = self.kubectl("get", "node", NODE_NAME, "-o", "json", check=False)
        if done.returncode != 0:
            return False
        conditions = json.loads(done.stdout)["status"].get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def stop(self) -> None:
        """Pods first (their containers and mounts go with them), then the node, then the
        control plane; the shims containerd started, and their cgroups, last."""
        # The processes are stopped whatever happened to the pods (a kubectl that fails).
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            self._delete_pods()
        for process in reversed(self.processes):
            stop_process(process, 20)
        self._stop_shims()
        _remove_empty_cgroups()
        for mountpoint in self.mountpoints:
            subprocess.run(["umount", "--lazy", str(mountpoint)], capture_output=True,
                           check=False)
            with contextlib.suppress(OSError):
                mountpoint.rmdir()

    def _delete_pods(self) -> None:
        if not self.processes or self.processes[0].poll() is not None:
            return
        self.kubectl("delete", "pods", "--all", "--all-namespaces", "--grace-period=1",
                     "--wait=false", check=False)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.kubectl(
                "get", "pods", "-A", "-o", "name", check=False).stdout.strip():
            time.sleep(1)

    def _stop_shims(self) -> None:
        """containerd's runc shims and their containers outlive it by design: end those of
        this node (the containers its state directory names, the shims whose command line
        names its socket), never any other."""
        tasks = self.containerd_dir / "state" / "io.containerd.runtime.v2.task" / "k8s.io"
        for container in tasks.glob("*") if tasks.is_dir() else []:
            procs = Path("/sys/fs/cgroup/pids/k8s.io") / container.name / "cgroup.procs"
            with contextlib.suppress(OSError):
                for pid in procs.read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), 9)
        marker = str(self.containerd_dir).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"containerd-shim" in command and marker in command:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(entry.name), 9)


def _remove_empty_cgroups() -> None:
    """The cgroups runc made for the pods (containerd's `k8s.io` parent), deepest first:
    rmdir removes only those no process is in any more."""
    for parent in Path("/sys/fs/cgroup").glob("*/k8s.io"):
        for directory in sorted(parent.rglob("*/"), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            parent.rmdir()
