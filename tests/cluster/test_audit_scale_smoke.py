"""benchmarks/audit_scale.py still runs end to end (tiny sizes: its figures are not tested,
but that it creates what it says, and measures each thing, is)."""

from __future__ import annotations

import json
import subprocess
import sys

from cluster_helpers import REPO, assets_dir, loopback_problem, missing_assets, skip_or_fail


def test_the_audit_scale_benchmark_creates_its_objects_and_measures_each_figure() -> None:
    problem = loopback_problem() or (
        f"no {', '.join(missing_assets(assets_dir()))}" if missing_assets(assets_dir()) else None)
    if problem:
        skip_or_fail(problem)
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "audit_scale.py"), "--objects", "250",
         "--namespaces", "5", "--steady-seconds", "3", "--settle", "1", "--write-interval",
         "0.5", "--json"], capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout)
    assert (figures["objects"], figures["namespaces"], figures["reports"]) == (250, 5, 5)
    assert 0 < figures["seconds_to_reports"] < 120 and figures["scan_failures"] == 0
    assert 30 < figures["peak_rss_mib"] < 256
    # 50 objects a namespace: 10 :latest (2 of them legacy-, excepted), 5 unlabelled
    assert figures["largest_report_results"] >= 10
    assert 0 < figures["largest_report_bytes"] < 1 << 20
    requests = figures["requests_to_reports"]
    assert requests["LIST pods"] == 1 and requests["LIST deployments"] == 1
    assert requests["POST reports"] == 5
    assert figures["steady_changes"] >= 25 and figures["steady_cores"] >= 0
    assert figures["steady_requests"].get("PATCH deployments", 0) == 0  # ours, subtracted
