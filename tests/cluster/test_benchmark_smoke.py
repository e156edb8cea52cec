"""benchmarks/apiserver_latency.py still runs (tiny sizes: its figures are not tested)."""

from __future__ import annotations

import json
import subprocess
import sys

from cluster_helpers import REPO, assets_dir, loopback_problem, missing_assets, skip_or_fail


def test_the_apiserver_latency_benchmark_prints_both_shapes_with_and_without() -> None:
    problem = loopback_problem() or (
        f"no {', '.join(missing_assets(assets_dir()))}" if missing_assets(assets_dir()) else None)
    if problem:
        skip_or_fail(problem)
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "apiserver_latency.py"), "--sequential", "5",
         "--clients", "3", "--per-client", "2", "--json"],
        capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout)
    rows = figures["rows"]
    assert set(figures["webhook_call_mean_ms"]) == {"mutate.quickq-guard.quickq.io",
                                                    "validate.quickq-guard.quickq.io"}
    assert [(row["webhook"], row["clients"], row["creates"]) for row in rows] == [
        ("without webhook", 1, 5), ("without webhook", 3, 6),
        ("with webhook", 1, 5), ("with webhook", 3, 6)]
    assert all(row["failed"] == 0 and row["p99_ms"] >= row["p50_ms"] > 0 for row in rows)
    assert set(rows[-1]["cpu_ms_per_create"]) == {"etcd", "kube-apiserver", "webhook"}
