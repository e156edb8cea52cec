"""A short coverage-guided run of atheris_fuzz.py (skipped when atheris is not installed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def test_atheris_finds_no_crash_in_a_short_run(tmp_path: Path) -> None:
    pytest.importorskip("atheris")
    corpus = tmp_path / "corpus"
    process = subprocess.run(
        [sys.executable, str(HERE / "atheris_fuzz.py"), "-max_total_time=8", "-timeout=5",
         "-rss_limit_mb=1024", f"-artifact_prefix={tmp_path}/", str(corpus)],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)
    report = process.stderr[-4000:]
    assert process.returncode == 0, report
    assert "Done" in report and " runs in " in report, report
    assert list(tmp_path.glob("crash-*")) == []
