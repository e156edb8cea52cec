"""Load test of the admission webhook on loopback, against a floor for this machine.

Starts `quickq-guard serve` (one worker) and, as the floor, a bare starlette app under the same
uvicorn and TLS settings that reads the body and answers a constant AdmissionReview. A client
in its own process drives both over keep-alive TLS connections:

- saturation: every connection sends back to back (closed loop): the most each server does;
- fixed rates: requests start on a fixed schedule whatever the answers do (open loop), and
  latency counts from the scheduled start, so a slow answer cannot hide the queue behind it.

Targets: webhook throughput at saturation >= 70% of the floor's; p99 <= 10 ms at 200 requests/s
for a typical Pod; server resident memory <= 128 MiB under that load.

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

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"


# The requests ---------------------------------------------------------------------------------

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 s per phase: a smoke run")
    parser.add_argument("--duration", type=float, default=6.0, help="seconds per phase")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--rates", default="200,1000", help="open-loop rates, requests/s")
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
    floor_port, guard_port = free_port(), free_port()
    log = (workdir / "server.log").open("wb")
    floor = subprocess.Popen([sys.executable, __file__, "--floor", str(floor_port),
                              str(files.cert), str(files.key)])
    guard = subprocess.Popen(
        [sys.executable, "-c", "import sys; from webhook.cli import main; sys.exit(main())",
         "serve", "--host", HOST, "--port", str(guard_port), "--cert", str(files.cert),
         "--key", str(files.key)], stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    rows: list[tuple[str, str, dict[str, Any], float, int]] = []
    try:
        wait_for(floor_port, ca, floor)
        wait_for(guard_port, ca, guard)
        for name, port, process in (("floor", floor_port, floor), ("webhook", guard_port, guard)):
            run_client(port, ca, "/validate", 0, min(1.0, duration), args.connections)  # warm
            for path in ("/validate", "/mutate") if name == "webhook" else ("/validate",):
                phases = [("saturation", 0.0), *((f"{r:g}/s", r) for r in rates)]
                for phase, rate in phases:
                    sampler = RssSampler(process.pid)
                    sampler.start()
                    cpu = cpu_seconds(process.pid)
                    result = run_client(port, ca, path, rate, duration, args.connections)
                    server_cpu = (cpu_seconds(process.pid) - cpu) / duration
                    sampler.running = False
                    sampler.join()
                    label = f"{name} {path}" if name == "webhook" else "floor"
                    rows.append((label, phase, result, server_cpu, sampler.peak_kib))
    finally:
        for process in (floor, guard):
            process.terminate()
            process.wait(30)
        log.close()

    # srv us/req: server CPU time per request, the figure least disturbed by other processes
    # on the machine; cpu columns are shares of one core over the phase.
    print(f"\n{'server':<18}{'load':<12}{'requests':>9}{'err':>5}{'req/s':>9}{'p50 ms':>9}"
          f"{'p99 ms':>9}{'srv cpu':>9}{'cli cpu':>9}{'us/req':>8}{'RSS MiB':>9}")
    for label, phase, r, server_cpu, peak in rows:
        per_request = server_cpu * duration / max(1, r["requests"]) * 1e6
        print(f"{label:<18}{phase:<12}{r['requests']:>9}{r['errors']:>5}{r['rps']:>9.0f}"
              f"{r['p50']:>9.2f}{r['p99']:>9.2f}{server_cpu:>9.0%}{r['client_cpu']:>9.0%}"
              f"{per_request:>8.0f}{peak / 1024:>9.1f}")
    floor_rps, floor_cpu = next((r["rps"], cpu / r["rps"]) for label, phase, r, cpu, _ in rows
                                if label == "floor" and phase == "saturation")
    print()
    ok = True
    for path in ("/validate", "/mutate"):
        sat = next(r for label, phase, r, *_ in rows
                   if label == f"webhook {path}" and phase == "saturation")
        ratio = sat["rps"] / floor_rps
        cpu_ratio = floor_cpu / (next(cpu for label, phase, _, cpu, _ in rows
                                      if label == f"webhook {path}" and phase == "saturation")
                                 / sat["rps"])
        at200 = [(r, peak) for label, phase, r, _, peak in rows
                 if label == f"webhook {path}" and phase == "200/s"]
        line = (f"{path}: throughput {ratio:.0%} of the floor (target >= 70%; server CPU per "
                f"request: floor/webhook {cpu_ratio:.0%})")
        ok &= ratio >= 0.70
        if at200:
            r, peak = at200[0]
            line += (f"; at 200/s p99 {r['p99']:.2f} ms (target <= 10), RSS {peak / 1024:.1f} "
                     f"MiB (target <= 128)")
            ok &= r["p99"] <= 10 and peak / 1024 <= 128 and r["errors"] == 0
        print(line)
    print("all targets met" if ok else "TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
