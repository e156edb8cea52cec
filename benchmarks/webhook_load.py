"""Load test of the admission webhook on loopback, against a floor for this machine.

Starts `quickq-guard serve` (one worker, then two) and, as the floor, a bare Starlette
endpoint on the same stock uvicorn[standard] stack (httptools, uvloop) and TLS settings that
reads the body and answers a constant AdmissionReview. A client in its own process (on
uvloop, so it takes as little of the shared cores as it can) drives each over keep-alive TLS
connections:

- saturation: every connection sends back to back (closed loop): the most each server does;
- fixed rates: requests start on a fixed schedule whatever the answers do (open loop), and
  latency counts from the scheduled start, so a slow answer cannot hide the queue behind it
  (`lag p99` says how late the client itself started them). The floor and the webhook's
  endpoints take turns for `--rounds` rounds, and each row gives the medians, so a burst of
  other work on a shared machine falls on all of them alike; `wait us/req` is the time the
  server was ready to run but waited for a CPU, which only the machine's other work causes.

Targets: /validate and /mutate throughput at saturation >= 40% of the floor's; p99 <= 5 ms
at 500 requests/s for a typical Pod; server resident memory <= 128 MiB under that load;
`--workers 2` >= 1.6x one worker at saturation (on a 2-core machine the client shares the
cores, so this one is reported against what the machine allows).

    .venv/bin/python benchmarks/webhook_load.py            # about two minutes
    .venv/bin/python benchmarks/webhook_load.py --quick    # a smoke run of a few seconds
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import uvloop

from webhook.testing import typical_pod

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"


# The requests ---------------------------------------------------------------------------------

UID = "00000000-0000-0000-0000-000000000000"


def request_template(path: str) -> tuple[bytes, int]:
    """The HTTP request bytes with a fixed-width uid placeholder, and the placeholder's offset."""
    review = {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": UID, "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "ml-serving", "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller",
                         "uid": str(uuid.uuid4()),
                         "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system",
                                    "system:authenticated"]},
            "object": typical_pod(), "oldObject": None, "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }
    body = json.dumps(review, separators=(",", ":")).encode()
    head = (f"POST {path}?timeout=10s HTTP/1.1\r\nHost: quickq-guard.quickq-guard.svc\r\n"
            f"User-Agent: kube-apiserver-admission\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, */*\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    data = head + body
    return data, data.index(UID.encode())


# The client (its own process) -----------------------------------------------------------------

class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def call(self, data: bytes) -> None:
        self.writer.write(data)
        head = await self.reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(head.split(b"\r\n", 1)[0].decode())
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        body = await self.reader.readexactly(length)
        if b'"response"' not in body:
            raise RuntimeError("not an AdmissionReview answer")


async def _connect(port: int, ca: str, count: int) -> list[Connection]:
    context = ssl.create_default_context(cafile=ca)
    connections = []
    for _ in range(count):
        reader, writer = await asyncio.open_connection(
            HOST, port, ssl=context, server_hostname="quickq-guard.quickq-guard.svc")
        writer.transport.get_extra_info("socket").setsockopt(
            socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connections.append(Connection(reader, writer))
    return connections


def _fresh(template: bytes, offset: int) -> bytes:
    uid = str(uuid.uuid4()).encode()
    return template[:offset] + uid + template[offset + len(uid):]


async def _drive(spec: dict[str, Any]) -> dict[str, Any]:
    template, offset = request_template(spec["path"])
    connections = await _connect(spec["port"], spec["ca"], spec["connections"])
    latencies: list[float] = []
    lags: list[float] = []  # open loop: how late the client's own loop started each request
    errors = 0
    rate = spec["rate"]
    duration = spec["duration"]
    cpu_start = time.process_time()
    start = time.perf_counter()
    if rate == 0:  # closed loop: each connection sends as soon as it has its answer
        async def loop(connection: Connection) -> None:
            nonlocal errors
            while time.perf_counter() - start < duration:
                sent = time.perf_counter()
                try:
                    await connection.call(_fresh(template, offset))
                except (RuntimeError, OSError, asyncio.IncompleteReadError):
                    errors += 1
                    return
                latencies.append(time.perf_counter() - sent)
        await asyncio.gather(*(loop(c) for c in connections))
    else:  # open loop: request i starts at start + i/rate, on whichever connection is idle
        idle: asyncio.Queue[Connection] = asyncio.Queue()
        for connection in connections:
            idle.put_nowait(connection)

        async def one(due: float) -> None:
            nonlocal errors
            lags.append(time.perf_counter() - due)
            connection = await idle.get()
            try:
                await connection.call(_fresh(template, offset))
            except (RuntimeError, OSError, asyncio.IncompleteReadError):
                errors += 1
                return
            latencies.append(time.perf_counter() - due)
            idle.put_nowait(connection)

        tasks = []
        total = int(rate * duration)
        for index in range(total):
            due = start + index / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(due)))
        await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    for connection in connections:
        connection.writer.close()
    count = len(latencies)
    return {"requests": count, "errors": errors, "rps": count / elapsed,
            "p50": quantile(latencies, 0.50), "p99": quantile(latencies, 0.99),
            "lag_p99": quantile(lags, 0.99), "client_cpu": cpu / elapsed}


def quantile(values: list[float], q: float) -> float:
    """The q-quantile of `values` (seconds), in milliseconds."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered \
        else float("nan")


def client_main(spec_json: str) -> None:
    # uvloop, as the server has: the client shares the machine's 2 cores with the server,
    # so the less CPU it takes per request the less it disturbs what it measures.
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        print(json.dumps(runner.run(_drive(json.loads(spec_json)))))


def run_client(port: int, ca: str, path: str, rate: float, duration: float,
               connections: int) -> dict[str, Any]:
    spec = {"port": port, "ca": ca, "path": path, "rate": rate, "duration": duration,
            "connections": connections}
    out = subprocess.run([sys.executable, __file__, "--client", json.dumps(spec)],
                         check=True, capture_output=True, text=True, start_new_session=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


# The floor server -----------------------------------------------------------------------------

def floor_main(port: int, cert: str, key: str) -> None:
    """A bare starlette TLS endpoint: read the body, answer a constant AdmissionReview."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from webhook.server.certs import server_context

    answer = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                         "response": {"uid": UID, "allowed": True}}).encode()

    async def review(request: Request) -> Response:
        await request.body()
        return Response(answer, media_type="application/json")

    app = Starlette(routes=[Route("/validate", review, methods=["POST"]),
                            Route("/mutate", review, methods=["POST"])])
    context = server_context(cert, key)
    config = uvicorn.Config(app, host=HOST, port=port, access_log=False, log_level="warning",
                            server_header=False, lifespan="off",
                            ssl_context_factory=lambda config, default: context)
    uvicorn.Server(config).run()


# Orchestration --------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def wait_for(port: int, ca: str, process: subprocess.Popen[bytes]) -> None:
    context = ssl.create_default_context(cafile=ca)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            with socket.create_connection((HOST, port), timeout=1) as raw, \
                    context.wrap_socket(raw, server_hostname="localhost"):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("server did not start")


class RssSampler(threading.Thread):
    """Peak VmRSS of a process (and its children), sampled every 100 ms."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak_kib, self.running = pid, 0, True

    def run(self) -> None:
        while self.running:
            self.peak_kib = max(self.peak_kib, rss_kib(self.pid))
            time.sleep(0.1)


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_webhook(port: int, files: Any, workdir: Path, workers: int) -> subprocess.Popen[bytes]:
    log = (workdir / f"server-{port}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "webhook.cli", "serve", "--host", HOST, "--port", str(port),
         "--cert", str(files.cert), "--key", str(files.key), "--workers", str(workers)],
        stdout=log, stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True)


def process_tree(pid: int) -> list[int]:
    """The process and its children (the workers of `--workers 2`)."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        return [pid, *(int(c) for c in children.read_text().split())]
    except OSError:
        return [pid]


def tree_cpu_seconds(pid: int) -> float:
    return sum(cpu_seconds(p) for p in process_tree(pid))


def run_queue_seconds(pid: int) -> float:
    """Time the process's threads (and its children's) spent runnable but waiting for a CPU
    (/proc/PID/task/TID/schedstat, second field): the share of latency the machine's other
    work adds, whatever the server does."""
    total = 0
    for process in process_tree(pid):
        try:
            tasks = list(Path(f"/proc/{process}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            with contextlib.suppress(OSError, IndexError, ValueError):
                total += int((task / "schedstat").read_text().split()[1])
    return total / 1e9


def measure(port: int, ca: str, process: subprocess.Popen[bytes], path: str, rate: float,
            duration: float, connections: int) -> dict[str, Any]:
    """One phase: the client's figures, with the server's CPU, run-queue wait and peak RSS."""
    sampler = RssSampler(process.pid)
    sampler.start()
    cpu, waited = tree_cpu_seconds(process.pid), run_queue_seconds(process.pid)
    result = run_client(port, ca, path, rate, duration, connections)
    result["server_cpu"] = (tree_cpu_seconds(process.pid) - cpu) / duration
    result["run_queue"] = run_queue_seconds(process.pid) - waited
    sampler.running = False
    sampler.join()
    result["rss_kib"] = sampler.peak_kib
    result["duration"] = duration
    return result


def combined(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The rounds of one fixed-rate phase as one row: medians, and every round's p99."""
    row = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    row["requests"] = sum(r["requests"] for r in rounds)
    row["errors"] = sum(r["errors"] for r in rounds)
    row["rss_kib"] = max(r["rss_kib"] for r in rounds)
    row["per_request"] = statistics.median(
        r["server_cpu"] * r["duration"] / max(1, r["requests"]) for r in rounds)
    row["waits"] = statistics.median(r["run_queue"] / max(1, r["requests"]) for r in rounds)
    row["p99s"] = [r["p99"] for r in rounds]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 s per phase: a smoke run")
    parser.add_argument("--duration", type=float, default=6.0, help="seconds per phase")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--rates", default="500", help="open-loop rates, requests/s")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of the fixed-rate phases, servers taking turns")
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--floor", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        client_main(args.client)
        return 0
    if args.floor:
        floor_main(int(args.floor[0]), args.floor[1], args.floor[2])
        return 0

    from webhook.server.certs import ensure_certs

    duration = 1.0 if args.quick else args.duration
    rounds = 1 if args.quick else max(1, args.rounds)
    rates = [float(r) for r in args.rates.split(",") if r]
    workdir = Path(tempfile.mkdtemp(prefix="quickq-guard-bench-"))
    files = ensure_certs(workdir / "certs", "quickq-guard", "quickq-guard", 1)
    ca = str(files.ca_cert)
    floor_port, guard_port, pair_port = free_port(), free_port(), free_port()
    floor = subprocess.Popen([sys.executable, __file__, "--floor", str(floor_port),
                              str(files.cert), str(files.key)], start_new_session=True)
    guard = start_webhook(guard_port, files, workdir, 1)
    pair = start_webhook(pair_port, files, workdir, 2)
    servers = (("floor", floor_port, floor, ("/validate",)),
               ("webhook", guard_port, guard, ("/validate", "/mutate")),
               ("2 workers", pair_port, pair, ("/validate",)))
    # The fixed rates run in rounds, the floor and the webhook's endpoints taking turns, so
    # a burst of other work on a shared machine falls on all of them alike; the medians of
    # the rounds are compared.
    paced = [(name, port, process, path) for name, port, process, paths in servers[:2]
             for path in paths]
    rows: list[tuple[str, str, dict[str, Any]]] = []
    try:
        for _, port, process, _ in servers:
            wait_for(port, ca, process)
        for name, port, process, paths in servers:
            run_client(port, ca, "/validate", 0, min(1.0, duration), args.connections)  # warm
            for path in paths:
                result = measure(port, ca, process, path, 0, duration, args.connections)
                rows.append((label_of(name, path), "saturation", combined([result])))
        for rate in rates:
            phases: dict[str, list[dict[str, Any]]] = {}
            for _ in range(rounds):
                for name, port, process, path in paced:
                    result = measure(port, ca, process, path, rate, duration, args.connections)
                    phases.setdefault(label_of(name, path), []).append(result)
            rows += [(label, f"{rate:g}/s", combined(results))
                     for label, results in phases.items()]
    finally:
        for process in (floor, guard, pair):
            process.terminate()
            process.wait(30)

    # us/req: server CPU time per request, the figure least disturbed by other processes
    # on the machine; wait us/req: time the server was ready to run but waited for a CPU
    # (the machine's other work); lag: how late the client started its requests; cpu
    # columns are shares of one core over the phase.
    print(f"\n{'server':<20}{'load':<11}{'requests':>9}{'err':>4}{'req/s':>7}{'p50 ms':>8}"
          f"{'p99 ms':>8}{'srv cpu':>8}{'cli cpu':>8}{'us/req':>7}{'wait us/req':>12}"
          f"{'lag p99':>8}{'RSS MiB':>8}  p99 of each round")
    for label, phase, r in rows:
        lag = f"{r['lag_p99']:>8.2f}" if phase != "saturation" else f"{'':>8}"
        rounds_p99 = ", ".join(f"{x:.1f}" for x in r["p99s"]) if len(r["p99s"]) > 1 else ""
        print(f"{label:<20}{phase:<11}{r['requests']:>9}{r['errors']:>4}{r['rps']:>7.0f}"
              f"{r['p50']:>8.2f}{r['p99']:>8.2f}{r['server_cpu']:>8.0%}{r['client_cpu']:>8.0%}"
              f"{r['per_request'] * 1e6:>7.0f}{r['waits'] * 1e6:>12.0f}{lag}"
              f"{r['rss_kib'] / 1024:>8.1f}  {rounds_p99}")

    def row(label: str, phase: str) -> dict[str, Any]:
        return next(r for name, kind, r in rows if name == label and kind == phase)

    floor_rps = row("floor", "saturation")["rps"]
    print()
    ok = all(r["errors"] == 0 for _, _, r in rows)
    for path in ("/validate", "/mutate"):
        ratio = row(f"webhook {path}", "saturation")["rps"] / floor_rps
        line = f"{path}: throughput {ratio:.0%} of the bare Starlette endpoint (target >= 40%)"
        ok &= ratio >= 0.40
        if 500 in rates:
            paced_row, bare = row(f"webhook {path}", "500/s"), row("floor", "500/s")
            line += (f"; at 500/s p99 {paced_row['p99']:.2f} ms (target <= 5; the bare "
                     f"endpoint's in the same rounds {bare['p99']:.2f} ms), RSS "
                     f"{paced_row['rss_kib'] / 1024:.1f} MiB (target <= 128)")
            ok &= paced_row["p99"] <= 5 and paced_row["rss_kib"] / 1024 <= 128
        print(line)
    scaling = row("2 workers /validate", "saturation")["rps"] / row(
        "webhook /validate", "saturation")["rps"]
    print(f"--workers 2: {scaling:.2f}x one worker at saturation (target >= 1.6x; the client "
          f"takes {row('2 workers /validate', 'saturation')['client_cpu']:.0%} of a core "
          "of the 2)")
    print("all targets met" if ok and scaling >= 1.6 else "TARGETS MISSED")
    return 0 if ok else 1


def label_of(name: str, path: str) -> str:
    return name if name == "floor" else f"{name} {path}"


if __name__ == "__main__":
    sys.exit(main())
