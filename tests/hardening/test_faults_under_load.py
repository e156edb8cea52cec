"""The short CI version of benchmarks/faults_under_load.py: 12 s of paced load through two
certificate rotations, a valid and a broken policy reload and SIGTERM (windows scaled)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_faults_under_load_short_run() -> None:
    process = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "faults_under_load.py"), "--seconds", "12",
         "--json"], capture_output=True, text=True, timeout=120, cwd=REPO, check=False)
    assert process.stdout.strip(), process.stderr[-3000:]
    result = json.loads(process.stdout.strip().splitlines()[-1])
    print(json.dumps(result["figures"], indent=1))
    failed = [name for name, ok in result["checks"].items() if not ok]
    assert failed == [], (failed, result["failures"], result["figures"])
    assert result["figures"]["requests"] >= 500
    assert process.returncode == 0
