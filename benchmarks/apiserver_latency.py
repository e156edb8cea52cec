"""Create latency through a real kube-apiserver, without and with quickq-guard's webhooks.

The shape of Kyverno's published admission load test: Pod creates through the API server,
one client in sequence and 50 concurrent clients, p50 and p99 per create; first with no
webhook registered, then with the chart's rendered webhook configurations calling a
`quickq-guard serve` by URL. Goal: the webhooks add <= 3 ms to the p99 at 50 clients.

etcd and kube-apiserver come from the envtest assets of the cluster tests (KUBEBUILDER_ASSETS,
else .tools/envtest: run scripts/install-tools). Everything runs in a network namespace with
loopback only: as root the script re-runs itself under `unshare --net`; elsewhere it stops.

    .venv/bin/python benchmarks/apiserver_latency.py                  # 400 + 50 x 40 creates
    .venv/bin/python benchmarks/apiserver_latency.py --rate 150       # 50 clients, paced
    .venv/bin/python benchmarks/apiserver_latency.py --sequential 50 --per-client 4   # smoke
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from webhook.envtest import (  # noqa: E402
    HOW_TO_GET,
    ApiClient,
    ControlPlane,
    Webhook,
    assets_dir,
    interfaces,
    missing_assets,
    pod,
    release_values,
    rendered,
    wait_until,
    webhook_certs,
)

ENV_MARK = "QUICKQ_LOOPBACK_ONLY"


def in_loopback_namespace(argv: list[str]) -> int | None:
    """Re-run under `unshare --net` when this process can see more than loopback."""
    if interfaces() == ["lo"]:
        return None
    if os.geteuid() != 0 or os.environ.get(ENV_MARK) or not shutil.which("unshare"):
        print("apiserver_latency: run as root (it makes a loopback-only network namespace) "
              f"or inside one; this process sees {', '.join(interfaces())}", file=sys.stderr)
        return 2
    command = ["unshare", "--net", "--", "env", f"{ENV_MARK}=1", "sh", "-c",
               'ip link set lo up && exec "$@"', "sh", sys.executable, __file__, *argv]
    return subprocess.run(command, check=False).returncode


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def creates(plane: ControlPlane, namespace: str, prefix: str, count: int,
            latencies: list[float], failures: list[str], interval: float = 0,
            offset: float = 0) -> None:
    """`count` Pod creates on one kept-alive connection, each one timed; with an `interval`,
    one starts every `interval` seconds at most, the first after `offset` (a paced client)."""
    client = ApiClient(plane)
    next_start = time.perf_counter() + offset
    try:
        for index in range(count):
            obj = pod(f"{prefix}-{index}", namespace)
            pause = next_start - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            next_start += interval
            started = time.perf_counter()
            status, answer = client.create(obj)
            latencies.append((time.perf_counter() - started) * 1000)
            if status != 201:
                failures.append(f"{status}: {answer.get('message')}")
    finally:
        client.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def clients_run(plane: ControlPlane, namespace: str, prefix: str, clients: int,
                per_client: int, rate: float) -> tuple[list[float], list[str], float]:
    """`clients` threads of `per_client` creates each: (latencies, failures, wall seconds)."""
    latencies: list[float] = []
    failures: list[str] = []
    interval = clients / rate if rate > 0 else 0
    threads = [threading.Thread(target=creates,
                                args=(plane, namespace, f"{prefix}{n}", per_client, latencies,
                                      failures, interval, interval * n / clients))
               for n in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, failures, time.perf_counter() - started


def measure(plane: ControlPlane, namespace: str, clients: int, per_client: int,
            warmup: int, rate: float, processes: dict[str, int]) -> dict[str, Any]:
    """Latencies of `clients` clients doing `per_client` creates each; `rate` > 0 paces them
    to that many creates per second in all (0: each as fast as it can). A warm-up of
    `warmup` creates per client first, not counted: the API server opens its connections to
    the webhook as concurrency grows, and the TLS handshakes of that first burst are a
    start-up cost, not the steady state. Also the CPU time each server process spent per
    create: what the machine pays, whatever else runs on it."""
    plane.namespace(namespace)
    clients_run(plane, namespace, "warmup", clients, warmup, rate)
    cpu_before = {name: cpu_seconds(pid) for name, pid in processes.items()}
    latencies, failures, wall = clients_run(plane, namespace, "c", clients, per_client, rate)
    cpu = {name: round(1000 * (cpu_seconds(pid) - cpu_before[name]) / len(latencies), 2)
           for name, pid in processes.items()}
    return {"clients": clients, "creates": len(latencies), "failed": len(failures),
            "p50_ms": round(statistics.median(latencies), 2),
            "p99_ms": round(percentile(latencies, 0.99), 2),
            "creates_per_s": round(len(latencies) / wall, 1), "paced_per_s": rate,
            "cpu_ms_per_create": cpu}


def webhook_call_means(plane: ControlPlane) -> dict[str, float]:
    """Mean milliseconds per call of each webhook, from the API server's own metrics."""
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for line in plane.kubectl("get", "--raw", "/metrics").stdout.splitlines():
        for suffix, into in (("_sum{", sums), ("_count{", counts)):
            metric = f"apiserver_admission_webhook_admission_duration_seconds{suffix}"
            if line.startswith(metric):
                name = line.split('name="', 1)[1].split('"', 1)[0]
                into[name] = into.get(name, 0) + float(line.rsplit(" ", 1)[1])
    return {name: round(1000 * sums[name] / counts[name], 2) for name in sums if counts[name]}


def register(plane: ControlPlane, webhook: Webhook, certs: Path) -> None:
    """Apply the chart's rendered webhook configurations, calling `webhook` by URL."""
    bundle = base64.b64encode((certs / "ca.crt").read_bytes()).decode()
    documents = rendered(plane, "quickq-guard", "quickq-system",
                         release_values(webhook.url, bundle, **{"crd.install": "false"}))
    configs = [doc for doc in documents
               if doc["kind"] in ("ValidatingWebhookConfiguration",
                                  "MutatingWebhookConfiguration")]
    plane.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                        "items": configs}))
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe",
                                                             "namespace": "default"},
             "spec": {"containers": [{"name": "c", "image": "nginx:latest"}]}}

    def judged() -> bool:
        done = plane.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(probe),
                             check=False)
        return "denied the request" in done.stderr
    wait_until(judged, what="the webhooks to be called")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sequential", type=int, default=400, help="creates by one client")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--per-client", type=int, default=40, help="creates per client")
    parser.add_argument("--rate", type=float, default=0, metavar="N",
                        help="pace the concurrent clients to N creates/s in all (default: "
                             "unpaced, each client as fast as it can: the machine saturates)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    rerun = in_loopback_namespace(list(argv if argv is not None else sys.argv[1:]))
    if rerun is not None:
        return rerun
    missing = missing_assets(assets_dir())
    if missing:
        print(f"apiserver_latency: no {', '.join(missing)} in {assets_dir()}: {HOW_TO_GET}",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="quickq-apiserver-bench-") as tmp:
        workdir = Path(tmp)
        plane = ControlPlane(assets_dir(), workdir)
        webhook = None
        try:
            plane.start()
            plane.service_account("default")
            rows: list[dict[str, Any]] = []
            shapes = [(1, args.sequential, 20, 0.0),
                      (args.clients, args.per_client, 4, args.rate)]
            for label, shape in (("without webhook", "a"), ("with webhook", "b")):
                processes = {"etcd": plane.processes[0].pid,
                             "kube-apiserver": plane.processes[1].pid}
                if shape == "b":
                    certs = webhook_certs(workdir / "webhook-certs")
                    webhook = Webhook(workdir, certs)
                    register(plane, webhook, certs)
                    processes["webhook"] = webhook.process.pid
                for clients, per_client, warmup, rate in shapes:
                    row = measure(plane, f"bench-{shape}-{clients}", clients, per_client,
                                  warmup, rate, processes)
                    rows.append({"webhook": label, **row})
            calls = webhook_call_means(plane)
        finally:
            if webhook is not None:
                webhook.stop()
            plane.stop()
    if args.json:
        print(json.dumps({"rows": rows, "webhook_call_mean_ms": calls}, indent=2))
        return 0
    print(f"{'':16} {'clients':>7} {'creates':>7} {'failed':>6} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'creates/s':>9}  CPU ms per create")
    for row in rows:
        cpu = ", ".join(f"{name} {ms}" for name, ms in row["cpu_ms_per_create"].items())
        print(f"{row['webhook']:16} {row['clients']:>7} {row['creates']:>7} {row['failed']:>6} "
              f"{row['p50_ms']:>7} {row['p99_ms']:>7} {row['creates_per_s']:>9}  {cpu}")
    by = {(row["webhook"], row["clients"]): row for row in rows}
    for clients in (1, args.clients):
        without, with_ = by["without webhook", clients], by["with webhook", clients]
        print(f"added by the webhooks, {clients} client(s): "
              f"p50 {with_['p50_ms'] - without['p50_ms']:+.2f} ms, "
              f"p99 {with_['p99_ms'] - without['p99_ms']:+.2f} ms")
    for name, mean in sorted(calls.items()):
        print(f"the API server's mean per call of {name}: {mean} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
