"""The background audit at scale: `quickq-guard audit` over N objects in 100 namespaces of a
real kube-apiserver.

It starts etcd and kube-apiserver (the cluster tests' envtest assets), creates the objects
in bulk, as a cluster holds them from before quickq-guard was installed: Deployments with 0
replicas and bare Pods (no scheduler or kubelet runs, so the Pods stay Pending and nothing
else is made), one in five with a `:latest` image (denied by disallow-latest-tag), one in ten
without an `app` label (require-labels, audit), one in twenty a `legacy-*` one excepted by a
PolicyException. Kubernetes takes one object per create, so they go through many kept-alive
connections at once (--threads). Then it runs `python -m webhook.cli audit` as a subprocess
and measures:

- the time from its start to the first complete set of reports (every namespace's);
- its peak RSS (VmHWM in /proc), at the end of the run;
- the API requests it made, by verb and resource, from the API server's
  `apiserver_request_total` before and after (the benchmark's own requests subtracted; the
  API server renews a Lease of its own every 10 s, counted in `PUT leases` too; a watch is
  counted when it ends, so the watches still open are not in the figures);
- the largest report, as the bytes of its JSON as the API serves it (what etcd holds of a
  custom resource is that JSON);
- its CPU in the steady state: --rate object changes per second (a Deployment's image flips
  between a pinned and a `:latest` tag) for --steady-seconds, CPU time over wall time.

Targets (issue 34): all reports within 2 minutes, peak RSS under 256 MiB, no report over
1 MiB, the steady state under 0.05 core at 10 changes per second.

Everything runs in a network namespace with loopback only: as root the script re-runs itself
under `unshare --net`, as the cluster tests do; elsewhere it stops.

    .venv/bin/python benchmarks/audit_scale.py                     # 100,000 objects
    .venv/bin/python benchmarks/audit_scale.py --objects 10000
    .venv/bin/python benchmarks/audit_scale.py --objects 200 --steady-seconds 3 --json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # support.controlplane: the tests' own runner

from support.bulk import (  # noqa: E402
    Api,
    bulk_config,
    is_latest,
    name_of,
    namespaces,
    populate,
    reports_present,
)
from support.controlplane import (  # noqa: E402
    ControlPlane,
    assets_dir,
    where_a_control_plane_starts,
)

from webhook.testing import free_port, stop_process  # noqa: E402

TARGETS = {"seconds_to_reports": 120.0, "peak_rss_mib": 256.0, "largest_report_bytes": 1 << 20,
           "steady_cores": 0.05}
_SAMPLE = re.compile(r'^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$')
_LABEL = re.compile(r'(\w+)="([^"]*)"')


# --- what the API server and the controller say ----------------------------------------------

def request_totals(api: Api) -> Counter[tuple[str, str]]:
    """apiserver_request_total summed by (verb, resource)."""
    status, raw = api.request("GET", "/metrics", accept="text/plain")
    if status != 200:
        raise RuntimeError(f"/metrics: {status}")
    totals: Counter[tuple[str, str]] = Counter()
    for line in raw.decode().splitlines():
        found = _SAMPLE.match(line)
        if found:
            labels = dict(_LABEL.findall(found["labels"]))
            resource = labels.get("resource", "")
            if not resource:  # a path such as /openapi/v3, not an object
                continue
            if labels.get("subresource"):
                resource += "/" + labels["subresource"]
            totals[(labels.get("verb", ""), resource)] += int(float(found["value"]))
    return totals


def largest_report(api: Api) -> tuple[int, int, int]:
    """(bytes of the largest report's JSON, its results, reports seen), paged."""
    largest = (0, 0)
    seen = 0
    token = ""
    while True:
        path = ("/apis/openreports.io/v1alpha1/reports?limit=10&labelSelector="
                "app.kubernetes.io%2Fmanaged-by%3Dquickq-guard")
        if token:
            path += f"&continue={token}"
        status, raw = api.request("GET", path, verb="LIST", resource="reports")
        if status != 200:
            raise RuntimeError(f"list reports: {status}")
        page = json.loads(raw)
        for item in page["items"] or ():
            seen += 1
            size = len(json.dumps(item, separators=(",", ":")).encode())
            largest = max(largest, (size, len(item.get("results") or ())))
        token = page["metadata"].get("continue", "")
        if not token:
            return largest[0], largest[1], seen


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def changes(api: Api, spaces: list[str], rate: float, seconds: float,
            count: int) -> int:
    """`rate` changes per second for `seconds`: a Deployment's image flips between a pinned
    and a `:latest` tag, each time the other way (a failure appears, or goes). The number
    made."""
    deployments = [index for index in range(min(count, 4000))
                   if (index // len(spaces)) % 2 == 0][:2000]
    made_count = 0
    latest: dict[int, bool] = {}
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        index = deployments[made_count % len(deployments)]
        namespace = spaces[index % len(spaces)]
        name = name_of(index, len(spaces))
        latest[index] = not latest.get(index, is_latest(index, len(spaces)))
        tag = "latest" if latest[index] else "2.0.0"
        patch = {"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": f"registry.example.com/app:{tag}"}]}}}}
        status, raw = api.request(
            "PATCH", f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}", patch,
            "PATCH", "deployments", content_type="application/strategic-merge-patch+json")
        if status != 200:
            raise RuntimeError(f"patch {namespace}/{name}: {status} {raw[:300]!r}")
        made_count += 1
        pause = started + made_count / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    return made_count


def difference(after: Counter[tuple[str, str]], before: Counter[tuple[str, str]],
               ours: Counter[tuple[str, str]]) -> dict[str, int]:
    """The controller's requests: the server's count between two readings, less ours."""
    found: dict[str, int] = {}
    for key in set(after) | set(before):
        verb, resource = key
        value = after[key] - before[key] - ours.get(key, 0)
        if value > 0 and resource:
            found[f"{verb} {resource}"] = value
    return dict(sorted(found.items()))


def wait_for(check: Callable[[], bool], timeout: float, what: str,
             alive: Callable[[], bool]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if not alive():
            raise RuntimeError(f"the audit exited before {what}")
        time.sleep(0.25)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


# --- the run -------------------------------------------------------------------------------

def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    plane = ControlPlane(assets_dir(), workdir)
    try:
        plane.start()
        api = Api(plane)
        spaces = namespaces(args.namespaces)
        create_seconds = populate(plane, api, args.objects, spaces, args.threads)
        config = workdir / "config.yaml"
        config.write_text(bulk_config())
        return run_audit(args, plane, api, spaces, config, create_seconds, workdir)
    finally:
        plane.stop()


def run_audit(args: argparse.Namespace, plane: ControlPlane, api: Api, spaces: list[str],
              config: Path, create_seconds: float, workdir: Path) -> dict[str, Any]:
    before = request_totals(api)
    ours_before = Counter(api.made)
    log = workdir / "quickq-guard-audit.log"  # the API server's own is audit.log
    command = [sys.executable, "-m", "webhook.cli", "audit", "--kubeconfig",
               str(plane.kubeconfig), "--config", str(config), "--metrics-port",
               str(free_port()), "--write-interval", str(args.write_interval),
               # as the chart runs it: one leader through a Lease
               "--leader-elect", "--lease-namespace", "default"]
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=REPO, stdout=log.open("wb"),
                               stderr=subprocess.STDOUT)
    alive: Callable[[], bool] = lambda: process.poll() is None  # noqa: E731
    try:
        wait_for(lambda: set(spaces) <= reports_present(api), args.timeout,
                 f"every namespace's report (log: {log})", alive)
        to_reports = time.monotonic() - started
        scanned = requests_of(request_totals(api), before, api.made, ours_before)
        size, results, seen = largest_report(api)
        time.sleep(args.settle)  # the first writes done: what follows is the steady state
        cpu_before, steady_before = cpu_seconds(process.pid), request_totals(api)
        ours_steady = Counter(api.made)
        wall = time.monotonic()
        made_changes = changes(api, spaces, args.rate, args.steady_seconds, args.objects)
        time.sleep(args.write_interval + 2)  # the last changes' reports written, in the count
        wall = time.monotonic() - wall
        cores = (cpu_seconds(process.pid) - cpu_before) / wall
        steady = requests_of(request_totals(api), steady_before, api.made, ours_steady)
        rss = peak_rss_mib(process.pid)
        if not alive():
            raise RuntimeError(f"the audit exited during the run (log: {log})")
    finally:
        stop_process(process, 20)
    events = [json.loads(line) for line in log.read_text(errors="replace").splitlines()
              if line.startswith("{")]
    scans = [e for e in events if e.get("event") == "scanned"]
    return {
        "objects": args.objects, "namespaces": len(spaces), "create_seconds": create_seconds,
        "creates_per_second": args.objects / create_seconds if create_seconds else 0,
        "seconds_to_reports": to_reports, "first_scan_seconds": scans[0].get("seconds")
        if scans else None, "peak_rss_mib": rss, "requests_to_reports": scanned,
        "largest_report_bytes": size, "largest_report_results": results, "reports": seen,
        "steady_changes": made_changes, "steady_seconds": wall, "rate": args.rate,
        "steady_cores": cores,
        "steady_requests": steady, "scan_failures": sum(
            e.get("event") == "scan-failed" for e in events),
        "targets": TARGETS, "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_average": os.getloadavg(), "cpus": os.cpu_count(),
    }


def requests_of(after: Counter[tuple[str, str]], before: Counter[tuple[str, str]],
                made_now: Counter[tuple[str, str]],
                made_before: Counter[tuple[str, str]]) -> dict[str, int]:
    ours = Counter(made_now)
    ours.subtract(made_before)
    return difference(after, before, ours)


def table(figures: dict[str, Any]) -> Iterator[str]:
    target = figures["targets"]

    def verdict(ok: bool) -> str:
        return "meets" if ok else "MISSES"

    yield (f"audit_scale: {figures['objects']:,} objects in {figures['namespaces']} "
           f"namespaces, {figures['date']}, load average "
           f"{' '.join(f'{x:.1f}' for x in figures['load_average'])}, {figures['cpus']} CPUs")
    yield (f"  created in {figures['create_seconds']:.1f} s "
           f"({figures['creates_per_second']:,.0f}/s)")
    yield (f"  first complete set of reports: {figures['seconds_to_reports']:.1f} s "
           f"(first full scan {figures['first_scan_seconds']} s)   target < "
           f"{target['seconds_to_reports']:.0f} s: "
           f"{verdict(figures['seconds_to_reports'] < target['seconds_to_reports'])}")
    yield (f"  controller peak RSS: {figures['peak_rss_mib']:.1f} MiB   target < "
           f"{target['peak_rss_mib']:.0f} MiB: "
           f"{verdict(figures['peak_rss_mib'] < target['peak_rss_mib'])}")
    yield (f"  largest report: {figures['largest_report_bytes']:,} bytes, "
           f"{figures['largest_report_results']} results ({figures['reports']} reports)   "
           f"target < 1 MiB: "
           f"{verdict(figures['largest_report_bytes'] < target['largest_report_bytes'])}")
    yield (f"  steady state: {figures['steady_cores']:.3f} core, {figures['steady_changes']} "
           f"changes at {figures['rate']:.0f}/s, over {figures['steady_seconds']:.0f} s   "
           f"target < {target['steady_cores']} core: "
           f"{verdict(figures['steady_cores'] < target['steady_cores'])}")
    yield "  API requests to the first complete set: " + ", ".join(
        f"{key} {value}" for key, value in figures["requests_to_reports"].items())
    yield "  API requests in the steady state: " + ", ".join(
        f"{key} {value}" for key, value in figures["steady_requests"].items())
    if figures["scan_failures"]:
        yield f"  scans that failed: {figures['scan_failures']}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--threads", type=int, default=24, help="creates at once")
    parser.add_argument("--rate", type=float, default=10.0, help="changes/s, steady state")
    parser.add_argument("--steady-seconds", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=10.0,
                        help="seconds after the first reports before the steady state")
    parser.add_argument("--write-interval", type=float, default=5.0,
                        help="the audit's --write-interval")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds to wait for the reports")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="run in DIR (new) and keep it: the audit's log, etcd's data")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    ended = where_a_control_plane_starts(__file__,
                                         list(argv if argv is not None else sys.argv[1:]))
    if ended is not None:
        return ended
    if args.objects < args.namespaces:
        print("audit_scale: --objects must be at least --namespaces", file=sys.stderr)
        return 2
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=False)
        figures = measure(args, args.keep)
    else:
        with tempfile.TemporaryDirectory(prefix="quickq-audit-scale-") as tmp:
            figures = measure(args, Path(tmp))
    print(json.dumps(figures, indent=2) if args.json else "\n".join(table(figures)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
