"""Create latency through a real kube-apiserver, without and with quickq-guard's webhooks.

The shape of Kyverno's published admission load test: Pod creates through the API server,
one client in sequence and 50 concurrent clients (paced, then unpaced), p50 and p99 per
create, with and without the chart's rendered webhook configurations calling
`quickq-guard serve` by URL. Goal: the webhooks add <= 3 ms to the p99 at 50 clients.

The two arms run in alternating rounds against one control plane, so whatever else the
machine runs meanwhile falls on both alike: "with webhook" creates go to a namespace the
webhooks judge, "without webhook" creates to one the chart leaves out (config.excludeNamespaces,
so the API server's namespaceSelector never calls the webhooks there). Each row also gives
the API server's own p50 and p99 (from its audit log, free of the clients' thread scheduling),
the connections it opened to the webhook, the CPU time and the run-queue wait (ready to run,
but no CPU free) per create of etcd, the API server and the webhook, and the CPU the rest of
the machine took meanwhile: on a shared machine those decide the tail.

etcd and kube-apiserver come from the envtest assets of the cluster tests (KUBEBUILDER_ASSETS,
else .tools/envtest/<default release>: `scripts/test` or `python -m support.assets`
builds them from Go modules). Everything runs in a network namespace with
loopback only: as root the script re-runs itself under `unshare --net`; elsewhere it stops.

`--pin` models a cluster's placement, where the webhook's pods run on other nodes than the
control plane: the webhook's processes (the `serve` parent and its workers) get one CPU of
their own, and etcd, kube-apiserver and the benchmark's client threads the other CPU(s), in
both arms alike. It does not give any of them a machine of its own: other sessions' processes
still run on every CPU, and the control plane has one CPU fewer than unpinned (on two CPUs,
one; the Go runtimes size themselves to it), in the arm without webhook too.

    .venv/bin/python benchmarks/apiserver_latency.py                  # 400 + 2 x 50 x 40 creates
    .venv/bin/python benchmarks/apiserver_latency.py --workers 1      # one webhook process
    .venv/bin/python benchmarks/apiserver_latency.py --pin            # webhook on a CPU of its own
    .venv/bin/python benchmarks/apiserver_latency.py --sequential 4 --per-client 2 --rounds 2
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # support.controlplane: the tests' own runner

from support.controlplane import (  # noqa: E402
    ApiClient,
    ControlPlane,
    Webhook,
    assets_dir,
    pod,
    release_values,
    rendered,
    wait_until,
    webhook_certs,
    where_a_control_plane_starts,
)

PLAIN = "bench-plain"  # left out by the webhooks' namespaceSelector: no webhook call
GUARDED = "bench-guarded"  # judged by both webhooks
ARMS = (("without webhook", PLAIN), ("with webhook", GUARDED))


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


# --- which CPUs our processes may run on ---------------------------------------------------

def split_cpus() -> tuple[set[int], set[int]]:
    """(the webhook's CPU, every other CPU this process may use) for `--pin`."""
    available = sorted(os.sched_getaffinity(0))
    if len(available) < 2:
        raise SystemExit(f"apiserver_latency: --pin needs two CPUs; this process may use "
                         f"{len(available)}")
    return {available[-1]}, set(available[:-1])


@contextmanager
def this_thread_on(cpus: set[int]) -> Iterator[None]:
    """Run the calling thread on `cpus` meanwhile: the processes it starts inherit them, and
    so do their threads and child processes (the webhook's workers)."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def cpus_of(pid: int) -> list[int]:
    """The CPUs any thread of a process, or of its child processes, may run on."""
    cpus: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:  # gone meanwhile
        return []
    for task in tasks:
        try:
            cpus |= os.sched_getaffinity(int(task))
        except OSError:  # a thread that ended meanwhile
            continue
    for child in children:
        cpus.update(cpus_of(int(child)))
    return sorted(cpus)


# --- what the machine did meanwhile (Linux /proc) --------------------------------------------

def usage(pid: int) -> tuple[float, float]:
    """(seconds on a CPU, seconds runnable but waiting for one) of a process's threads and of
    its child processes (the webhook's workers) so far, from the scheduler's own counts."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:  # gone meanwhile
        return 0.0, 0.0
    ran = waited = 0.0
    for task in tasks:
        try:
            on_cpu, queued, _ = Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()
        except (OSError, ValueError):  # a thread that ended meanwhile
            continue
        ran += int(on_cpu) / 1e9
        waited += int(queued) / 1e9
    for child in children:
        child_ran, child_waited = usage(int(child))
        ran += child_ran
        waited += child_waited
    return ran, waited


def machine_busy_seconds() -> float:
    """CPU time every process on the machine has used so far (all CPUs, not idle or iowait)."""
    first = Path("/proc/stat").read_text().split("\n", 1)[0]
    fields = [int(value) for value in first.split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def passive_opens() -> int:
    """TCP connections accepted so far in this network namespace: the benchmark's own clients
    and the API server's connections to the webhook are the only ones opened while it runs."""
    lines = [line.split() for line in Path("/proc/net/snmp").read_text().splitlines()
             if line.startswith("Tcp:")]
    return int(dict(zip(lines[0], lines[1], strict=True))["PassiveOpens"])


@dataclass
class Arm:
    """What one arm of one shape measured, summed over its rounds."""

    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    wall: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)
    waited: dict[str, float] = field(default_factory=dict)
    others_cpu: float = 0.0
    new_connections: int = 0

    def run(self, plane: ControlPlane, namespace: str, prefix: str, clients: int,
            per_client: int, rate: float, processes: dict[str, int]) -> None:
        before = {name: usage(pid) for name, pid in processes.items()}
        own_before = time.process_time()  # the clients' threads
        busy_before, opens_before = machine_busy_seconds(), passive_opens()
        latencies, failures, wall = clients_run(plane, namespace, prefix, clients, per_client,
                                                rate)
        ours = time.process_time() - own_before
        for name, pid in processes.items():
            ran, waited = usage(pid)
            self.cpu[name] = self.cpu.get(name, 0.0) + ran - before[name][0]
            self.waited[name] = self.waited.get(name, 0.0) + waited - before[name][1]
            ours += ran - before[name][0]
        self.others_cpu += machine_busy_seconds() - busy_before - ours
        # Each client opens one connection to the API server; any other was the webhook's.
        self.new_connections += passive_opens() - opens_before - clients
        self.latencies += latencies
        self.failures += failures
        self.wall += wall

    def row(self, shape: str, label: str, clients: int, rate: float) -> dict[str, Any]:
        count = len(self.latencies)
        return {"shape": shape, "webhook": label, "clients": clients, "creates": count,
                "failed": len(self.failures), "paced_per_s": rate,
                "p50_ms": round(statistics.median(self.latencies), 2),
                "p99_ms": round(percentile(self.latencies, 0.99), 2),
                "creates_per_s": round(count / self.wall, 1),
                "new_webhook_connections": self.new_connections,
                "other_processes_cpu": round(max(0.0, self.others_cpu) / self.wall, 2),
                "cpu_ms_per_create": {name: round(1000 * spent / count, 2)
                                      for name, spent in self.cpu.items()},
                "run_queue_wait_ms_per_create": {name: round(1000 * spent / count, 2)
                                                 for name, spent in self.waited.items()}}


def server_side(plane: ControlPlane, rows: list[dict[str, Any]]) -> None:
    """Add each row's p50 and p99 as the API server saw them (its audit log: from receiving
    the request to the end of the response), free of the clients' own thread scheduling."""
    arm_of = {namespace: label for label, namespace in ARMS}
    seen: dict[tuple[str, str], list[float]] = {}
    for event in plane.audit_events():
        ref = event.get("objectRef", {})
        shape, _, rest = str(ref.get("name", "")).partition("-")
        if (event.get("verb") != "create" or event.get("stage") != "ResponseComplete"
                or ref.get("namespace") not in arm_of or not rest.split("-")[0].isdigit()):
            continue  # not a counted create (warm-ups are named <shape>-warmup...)
        took = (_instant(event["stageTimestamp"]) - _instant(event["requestReceivedTimestamp"]))
        seen.setdefault((shape, arm_of[ref["namespace"]]), []).append(took * 1000)
    for row in rows:
        latencies = seen.get((row["shape"], row["webhook"]), [])
        if latencies:
            row["apiserver_p50_ms"] = round(statistics.median(latencies), 2)
            row["apiserver_p99_ms"] = round(percentile(latencies, 0.99), 2)


def _instant(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def measure(plane: ControlPlane, shape: str, clients: int, per_client: int, rounds: int,
            warmup: int, rate: float, processes: dict[str, int]) -> list[dict[str, Any]]:
    """Both arms of one shape in alternating rounds (ABBA...), `per_client` creates per client
    in all; `rate` > 0 paces the clients to that many creates per second in all. A warm-up of
    `warmup` creates per client and arm first, not counted: the API server opens its
    connections to the webhook as concurrency first grows."""
    rounds = max(1, min(rounds, per_client))
    for _, namespace in ARMS:
        clients_run(plane, namespace, f"{shape}-warmup", clients, warmup, rate)
    arms = {label: Arm() for label, _ in ARMS}
    for index in range(rounds):
        share = per_client // rounds + (1 if index < per_client % rounds else 0)
        for label, namespace in (ARMS if index % 2 == 0 else ARMS[::-1]):
            arms[label].run(plane, namespace, f"{shape}-{index}-", clients, share, rate,
                            processes)
    return [arms[label].row(shape, label, clients, rate) for label, _ in ARMS]


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


def denied(plane: ControlPlane, namespace: str) -> bool:
    """Whether quickq-guard denies a Pod with the latest tag in `namespace` (server dry run)."""
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe",
                                                             "namespace": namespace},
             "spec": {"containers": [{"name": "c", "image": "nginx:latest"}]}}
    done = plane.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(probe),
                         check=False)
    return "denied the request" in done.stderr


def register(plane: ControlPlane, webhook: Webhook, certs: Path) -> None:
    """Apply the chart's rendered webhook configurations, calling `webhook` by URL and leaving
    PLAIN out, as a user leaves a namespace out; wait until the API server calls them."""
    bundle = base64.b64encode((certs / "ca.crt").read_bytes()).decode()
    excluded = ["kube-system", "kube-public", "kube-node-lease", PLAIN]
    documents = rendered(plane, "quickq-guard", "quickq-system",
                         release_values(webhook.url, bundle, **{
                             "crd.install": "false", "config.excludeNamespaces": excluded}))
    configs = [doc for doc in documents
               if doc["kind"] in ("ValidatingWebhookConfiguration",
                                  "MutatingWebhookConfiguration")]
    plane.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                        "items": configs}))
    wait_until(lambda: denied(plane, GUARDED), what="the webhooks to be called")
    if denied(plane, PLAIN):
        raise RuntimeError(f"the webhooks judge {PLAIN}, which the chart was told to leave out")


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sequential", type=int, default=400, help="creates by one client")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--per-client", type=int, default=40, help="creates per client")
    parser.add_argument("--rate", type=float, default=150, metavar="N",
                        help="the paced shape: N creates/s in all (default 150; 0 leaves it out)")
    parser.add_argument("--rounds", type=int, default=6,
                        help="alternating rounds of the two arms per shape")
    parser.add_argument("--workers", type=int, default=2,
                        help="webhook worker processes (default 2: the chart's two replicas)")
    parser.add_argument("--pin", action="store_true",
                        help="the webhook's processes on a CPU of their own, the rest of ours "
                             "on the other CPU(s)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    ended = where_a_control_plane_starts(__file__,
                                         list(argv if argv is not None else sys.argv[1:]))
    if ended is not None:
        return ended
    webhook_cpus = set(os.sched_getaffinity(0))
    if args.pin:
        # Before any thread or process of ours starts: etcd, kube-apiserver, kubectl and the
        # client threads inherit the other CPUs from this thread.
        webhook_cpus, rest = split_cpus()
        os.sched_setaffinity(0, rest)
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="quickq-apiserver-bench-") as tmp:
        workdir = Path(tmp)
        plane = ControlPlane(assets_dir(), workdir)
        webhook = None
        try:
            plane.start()
            for namespace in ("default", PLAIN, GUARDED):
                plane.namespace(namespace)
            certs = webhook_certs(workdir / "webhook-certs")
            with this_thread_on(webhook_cpus):
                webhook = Webhook(workdir, certs, workers=args.workers)
            register(plane, webhook, certs)
            processes = {"etcd": plane.processes[0].pid,
                         "kube-apiserver": plane.processes[1].pid,
                         "webhook": webhook.process.pid}
            cpus = {name: cpus_of(pid) for name, pid in processes.items()}
            cpus["clients"] = sorted(os.sched_getaffinity(0))
            shapes = [("sequential", 1, args.sequential, 20, 0.0)]
            if args.rate > 0:
                shapes.append(("paced", args.clients, args.per_client, 4, args.rate))
            shapes.append(("unpaced", args.clients, args.per_client, 4, 0.0))
            rows: list[dict[str, Any]] = []
            for shape, clients, per_client, warmup, rate in shapes:
                rows += measure(plane, shape, clients, per_client, args.rounds, warmup, rate,
                                processes)
            calls = webhook_call_means(plane)
            server_side(plane, rows)
        finally:
            if webhook is not None:
                webhook.stop()
            plane.stop()
    load = [load_before, load_average()]
    if args.json:
        print(json.dumps({"rows": rows, "webhook_call_mean_ms": calls, "workers": args.workers,
                          "load_average": load, "pinned": args.pin, "cpus": cpus}, indent=2))
        return 0
    print(f"{'':10} {'':16} {'clients':>7} {'creates':>7} {'failed':>6} {'p50 ms':>7} "
          f"{'p99 ms':>7} {'API server p50/p99':>18} {'creates/s':>9}")
    for row in rows:
        server = f"{row.get('apiserver_p50_ms', '-')} / {row.get('apiserver_p99_ms', '-')}"
        print(f"{row['shape']:10} {row['webhook']:16} {row['clients']:>7} {row['creates']:>7} "
              f"{row['failed']:>6} {row['p50_ms']:>7} {row['p99_ms']:>7} {server:>18} "
              f"{row['creates_per_s']:>9}")
    print(f"\n{'':10} {'':16} {'new conns':>9} {'others':>6}  ms per create: CPU; run-queue wait")
    for row in rows:
        cpu = ", ".join(f"{name} {ms}" for name, ms in row["cpu_ms_per_create"].items())
        wait = ", ".join(f"{name} {ms}"
                         for name, ms in row["run_queue_wait_ms_per_create"].items())
        print(f"{row['shape']:10} {row['webhook']:16} {row['new_webhook_connections']:>9} "
              f"{row['other_processes_cpu']:>6}  {cpu}; {wait}")
    for without, with_ in zip(rows[::2], rows[1::2], strict=True):
        added = {key: with_.get(key, 0) - without.get(key, 0)
                 for key in ("p50_ms", "p99_ms", "apiserver_p50_ms", "apiserver_p99_ms")}
        print(f"added by the webhooks, {with_['shape']} ({with_['clients']} client(s)): "
              f"p50 {added['p50_ms']:+.2f} ms, p99 {added['p99_ms']:+.2f} ms; as the API "
              f"server saw it: p50 {added['apiserver_p50_ms']:+.2f} ms, "
              f"p99 {added['apiserver_p99_ms']:+.2f} ms")
    for name, mean in sorted(calls.items()):
        print(f"the API server's mean per call of {name}: {mean} ms")
    print("CPUs each may run on: " + "; ".join(f"{name} {','.join(map(str, on))}"
                                               for name, on in cpus.items()))
    print(f"webhook workers: {args.workers}; load average {load[0]} before, {load[1]} after. "
          "new conns: connections the API server opened to the webhook; others: CPU cores the "
          "rest of the machine used meanwhile; run-queue wait: time a process was ready to run "
          "but waited for a CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
