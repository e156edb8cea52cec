"""benchmarks/apiserver_latency.py still runs (tiny sizes: its figures are not tested)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from cluster_helpers import REPO, assets_dir, loopback_problem, missing_assets, skip_or_fail


def test_the_apiserver_latency_benchmark_prints_every_shape_with_and_without() -> None:
    problem = loopback_problem() or (
        f"no {', '.join(missing_assets(assets_dir()))}" if missing_assets(assets_dir()) else None)
    if problem:
        skip_or_fail(problem)
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "apiserver_latency.py"), "--sequential", "4",
         "--clients", "3", "--per-client", "2", "--rounds", "2", "--rate", "50", "--json"],
        capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout)
    rows = figures["rows"]
    assert figures["pinned"] is False
    assert set(figures["webhook_call_mean_ms"]) == {"mutate.quickq-guard.quickq.io",
                                                    "validate.quickq-guard.quickq.io"}
    assert [(row["shape"], row["webhook"], row["clients"], row["creates"]) for row in rows] == [
        ("sequential", "without webhook", 1, 4), ("sequential", "with webhook", 1, 4),
        ("paced", "without webhook", 3, 6), ("paced", "with webhook", 3, 6),
        ("unpaced", "without webhook", 3, 6), ("unpaced", "with webhook", 3, 6)]
    assert all(row["failed"] == 0 and row["p99_ms"] >= row["p50_ms"] > 0 for row in rows)
    # The API server's own view of each create comes from its audit log, which has them all.
    assert all(row["apiserver_p99_ms"] >= row["apiserver_p50_ms"] > 0 for row in rows)
    assert all(set(row["cpu_ms_per_create"]) == {"etcd", "kube-apiserver", "webhook"}
               for row in rows)
    # The benchmark stops unless the webhooks judge one arm's namespace and leave the other's
    # out; each arm counts the connections accepted beyond the clients' own.
    for without, with_ in zip(rows[::2], rows[1::2], strict=True):
        assert with_["cpu_ms_per_create"]["webhook"] > 0
        assert without["new_webhook_connections"] >= 0 and with_["new_webhook_connections"] >= 0


def test_pin_gives_the_webhook_a_cpu_of_its_own_and_the_rest_the_others() -> None:
    problem = loopback_problem() or (
        f"no {', '.join(missing_assets(assets_dir()))}" if missing_assets(assets_dir()) else None)
    if problem:
        skip_or_fail(problem)
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "apiserver_latency.py"), "--pin",
         "--sequential", "2", "--clients", "2", "--per-client", "1", "--rounds", "1",
         "--rate", "0", "--json"],
        capture_output=True, text=True, check=False, timeout=600)
    if len(os.sched_getaffinity(0)) < 2:
        assert done.returncode != 0 and "--pin needs two CPUs" in done.stderr
        return
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout)
    assert figures["pinned"] is True
    cpus = {name: set(on) for name, on in figures["cpus"].items()}
    assert len(cpus["webhook"]) == 1
    for name in ("etcd", "kube-apiserver", "clients"):
        assert cpus[name] and not cpus[name] & cpus["webhook"], figures["cpus"]
    assert all(row["failed"] == 0 for row in figures["rows"])
