"""Load test of the admission webhook on loopback, against a floor for this machine.

Starts `quickq-guard serve` (one worker, then two) and, as the floor, a bare Starlette
endpoint on the same stock uvicorn[standard] stack (httptools, uvloop) and TLS settings that
reads the body and answers a constant AdmissionReview. A client in its own process drives
each over keep-alive TLS connections:

- saturation: every connection sends back to back (closed loop): the most each server does;
- fixed rates: requests start on a fixed schedule whatever the answers do (open loop), and
  latency counts from the scheduled start, so a slow answer cannot hide the queue behind it.

Targets: /validate and /mutate throughput at saturation >= 40% of the floor's; p99 <= 5 ms
at 500 requests/s for a typical Pod; server resident memory <= 128 MiB under that load;
`--workers 2` >= 1.6x one worker at saturation (on a 2-core machine the client shares the
cores, so this one is reported against what the machine allows).

    .venv/bin/python benchmarks/webhook_load.py            # about a minute
    .venv/bin/python benchmarks/webhook_load.py --quick    # a smoke run of a few seconds
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

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
    latencies.sort()
    count = len(latencies)

    def quantile(q: float) -> float:
        return latencies[min(count - 1, int(q * count))] * 1000 if count else float("nan")

    return {"requests": count, "errors": errors, "rps": count / elapsed,
            "p50": quantile(0.50), "p99": quantile(0.99), "client_cpu": cpu / elapsed}


def client_main(spec_json: str) -> None:
    print(json.dumps(asyncio.run(_drive(json.loads(spec_json)))))


def run_client(port: int, ca: str, path: str, rate: float, duration: float,
               connections: int) -> dict[str, Any]:
    spec = {"port": port, "ca": ca, "path": path, "rate": rate, "duration": duration,
            "connections": connections}
    out = subprocess.run([sys.executable, __file__, "--client", json.dumps(spec)],
                         check=True, capture_output=True, text=True)
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
        stdout=log, stderr=subprocess.STDOUT, cwd=workdir)


def process_tree(pid: int) -> list[int]:
    """The process and its children (the workers of `--workers 2`)."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        return [pid, *(int(c) for c in children.read_text().split())]
    except OSError:
        return [pid]


def tree_cpu_seconds(pid: int) -> float:
    return sum(cpu_seconds(p) for p in process_tree(pid))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 s per phase: a smoke run")
    parser.add_argument("--duration", type=float, default=6.0, help="seconds per phase")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--rates", default="500", help="open-loop rates, requests/s")
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
    rates = [float(r) for r in args.rates.split(",") if r]
    workdir = Path(tempfile.mkdtemp(prefix="quickq-guard-bench-"))
    files = ensure_certs(workdir / "certs", "quickq-guard", "quickq-guard", 1)
    ca = str(files.ca_cert)
    floor_port, guard_port, pair_port = free_port(), free_port(), free_port()
    floor = subprocess.Popen([sys.executable, __file__, "--floor", str(floor_port),
                              str(files.cert), str(files.key)])
    guard = start_webhook(guard_port, files, workdir, 1)
    pair = start_webhook(pair_port, files, workdir, 2)
    rows: list[tuple[str, str, dict[str, Any], float, int]] = []
    servers = (("floor", floor_port, floor, ("/validate",)),
               ("webhook", guard_port, guard, ("/validate", "/mutate")),
               ("2 workers", pair_port, pair, ("/validate",)))
    try:
        for _, port, process, _ in servers:
            wait_for(port, ca, process)
        for name, port, process, paths in servers:
            run_client(port, ca, "/validate", 0, min(1.0, duration), args.connections)  # warm
            for path in paths:
                phases = [("saturation", 0.0)]
                if name == "webhook":
                    phases += [(f"{r:g}/s", r) for r in rates]
                for phase, rate in phases:
                    sampler = RssSampler(process.pid)
                    sampler.start()
                    cpu = tree_cpu_seconds(process.pid)
                    result = run_client(port, ca, path, rate, duration, args.connections)
                    server_cpu = (tree_cpu_seconds(process.pid) - cpu) / duration
                    sampler.running = False
                    sampler.join()
                    label = f"{name} {path}" if name != "floor" else "floor"
                    rows.append((label, phase, result, server_cpu, sampler.peak_kib))
    finally:
        for process in (floor, guard, pair):
            process.terminate()
            process.wait(30)

    # us/req: server CPU time per request, the figure least disturbed by other processes
    # on the machine; cpu columns are shares of one core over the phase.
    print(f"\n{'server':<22}{'load':<12}{'requests':>9}{'err':>5}{'req/s':>9}{'p50 ms':>9}"
          f"{'p99 ms':>9}{'srv cpu':>9}{'cli cpu':>9}{'us/req':>8}{'RSS MiB':>9}")
    for label, phase, r, server_cpu, peak in rows:
        per_request = server_cpu * duration / max(1, r["requests"]) * 1e6
        print(f"{label:<22}{phase:<12}{r['requests']:>9}{r['errors']:>5}{r['rps']:>9.0f}"
              f"{r['p50']:>9.2f}{r['p99']:>9.2f}{server_cpu:>9.0%}{r['client_cpu']:>9.0%}"
              f"{per_request:>8.0f}{peak / 1024:>9.1f}")

    def saturation(label: str) -> dict[str, Any]:
        return next(r for name, phase, r, *_ in rows if name == label and phase == "saturation")

    floor_rps = saturation("floor")["rps"]
    print()
    ok = all(r["errors"] == 0 for _, _, r, _, _ in rows)
    for path in ("/validate", "/mutate"):
        ratio = saturation(f"webhook {path}")["rps"] / floor_rps
        line = f"{path}: throughput {ratio:.0%} of the bare Starlette endpoint (target >= 40%)"
        ok &= ratio >= 0.40
        for label, phase, r, _, peak in rows:
            if label == f"webhook {path}" and phase == "500/s":
                line += (f"; at 500/s p99 {r['p99']:.2f} ms (target <= 5), RSS "
                         f"{peak / 1024:.1f} MiB (target <= 128)")
                ok &= r["p99"] <= 5 and peak / 1024 <= 128
        print(line)
    scaling = saturation("2 workers /validate")["rps"] / saturation("webhook /validate")["rps"]
    print(f"--workers 2: {scaling:.2f}x one worker at saturation (target >= 1.6x; the client "
          f"takes {saturation('2 workers /validate')['client_cpu']:.0%} of a core of the 2)")
    print("all targets met" if ok and scaling >= 1.6 else "TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
