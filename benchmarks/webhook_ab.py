"""`quickq-guard serve` of this checkout against other checkouts', timed alternately.

Each checkout's server runs at once (one worker, the same certificates and TLS settings) with
the bare Starlette endpoint of webhook_load.py beside them; each round drives every server
at saturation in turn with the same client, so a shared machine's noise moves them alike.
The figure to compare is server CPU time per review (user + system), the median of the
rounds; req/s follows whatever else the machine is doing.

    git worktree add --detach /tmp/before <commit>
    .venv/bin/python benchmarks/webhook_ab.py /tmp/before            # /validate, 3 rounds
    .venv/bin/python benchmarks/webhook_ab.py /tmp/before --path /mutate --rounds 5
    .venv/bin/python benchmarks/webhook_ab.py /tmp/before --rate 500   # at a fixed rate
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import webhook_load as load

from webhook.server.certs import CertFiles, ensure_certs

REPO = Path(__file__).resolve().parents[1]


def start(checkout: Path | None, port: int, files: CertFiles,
          workdir: Path) -> subprocess.Popen[bytes]:
    """The floor (checkout None) or a checkout's `quickq-guard serve`, imported from there."""
    cert, key = str(files.cert), str(files.key)
    if checkout is None:
        return subprocess.Popen([sys.executable, load.__file__, "--floor", str(port), cert, key])
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    log = (workdir / f"server-{port}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "webhook.cli", "serve", "--host", load.HOST, "--port", str(port),
         "--cert", cert, "--key", key, "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, cwd=workdir, env=env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("others", nargs="+", type=Path, help="other checkouts to compare")
    parser.add_argument("--path", default="/validate", choices=["/validate", "/mutate"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=4.0,
                        help="seconds per server and round")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--rate", type=float, default=0.0,
                        help="requests/s on a fixed schedule (open loop); 0: saturation")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="quickq-guard-ab-"))
    files = ensure_certs(workdir / "certs", "quickq-guard", "quickq-guard", 1)
    ca = str(files.ca_cert)
    names = ["bare endpoint", f"this checkout ({REPO})", *(str(o) for o in args.others)]
    servers = []
    for checkout in (None, REPO, *args.others):
        port = load.free_port()
        servers.append((port, start(checkout, port, files, workdir)))
    per_review: list[list[float]] = [[] for _ in servers]
    rates: list[list[float]] = [[] for _ in servers]
    tails: list[list[float]] = [[] for _ in servers]
    try:
        for port, process in servers:
            load.wait_for(port, ca, process)
            load.run_client(port, ca, args.path, 0, 1.0, args.connections)  # warm up
        for _ in range(args.rounds):
            for index, (port, process) in enumerate(servers):
                before = load.cpu_seconds(process.pid)
                result = load.run_client(port, ca, args.path, args.rate, args.duration,
                                         args.connections)
                used = load.cpu_seconds(process.pid) - before
                per_review[index].append(used / max(1, result["requests"]) * 1e6)
                rates[index].append(result["rps"])
                tails[index].append(result["p99"])
    finally:
        for _, process in servers:
            process.terminate()
            process.wait(30)
    load_name = f"{args.rate:g}/s" if args.rate else "saturation"
    print(f"{args.path} at {load_name}, {args.rounds} rounds of {args.duration:g} s, "
          "one worker each")
    print(f"{'server':<60}{'us/review':>10}{'req/s':>9}{'p99 ms':>8}  us/review per round")
    floor = statistics.median(per_review[0])
    for name, us, rps, p99 in zip(names, per_review, rates, tails, strict=True):
        print(f"{name[:59]:<60}{statistics.median(us):>10.0f}{statistics.median(rps):>9.0f}"
              f"{statistics.median(p99):>8.2f}  {', '.join(f'{x:.0f}' for x in us)}")
    for name, us in zip(names[1:], per_review[1:], strict=True):
        print(f"{name[:59]}: bare endpoint / this = {floor / statistics.median(us):.0%} "
              "(a throughput share at equal CPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
