"""pyproject.toml declares the uvicorn range the server is tested on; both ends run here.

scripts/setup installs the newest release of the range into the virtualenv and the lowest
into .tools/uvicorn-min, which this test puts first on the server's PYTHONPATH.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import uvicorn
from server_helpers import Server, pod, post, review

REPO = Path(__file__).resolve().parents[2]
MIN_DIR = REPO / ".tools" / "uvicorn-min"


def declared_range() -> tuple[str, str]:
    text = (REPO / "pyproject.toml").read_text()
    found = re.search(r'"uvicorn\[standard\]>=([0-9.]+),<([0-9.]+)"', text)
    assert found, "pyproject.toml must declare uvicorn[standard]>=LOW,<HIGH"
    return found.group(1), found.group(2)


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_the_installed_uvicorn_is_inside_the_declared_range() -> None:
    low, high = declared_range()
    assert version_tuple(low) <= version_tuple(uvicorn.__version__) < version_tuple(high)


def test_the_lowest_declared_uvicorn_serves_with_two_workers(tmp_path: Path,
                                                              certs_dir: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    low, _ = declared_range()
    if not (MIN_DIR / "uvicorn").is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"{MIN_DIR} is missing: scripts/setup installs uvicorn=={low} there")
        pytest.skip(f"run scripts/setup to install uvicorn=={low} into {MIN_DIR}")
    probe = subprocess.run([sys.executable, "-c", "import uvicorn; print(uvicorn.__version__)"],
                           env={**os.environ, "PYTHONPATH": str(MIN_DIR)},
                           capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == low
    monkeypatch.setenv("PYTHONPATH", f"{MIN_DIR}{os.pathsep}{REPO}")
    server = Server(tmp_path, certs_dir, workers=2)
    try:
        with server.client() as client:
            assert post(client, "/validate", review(pod()))["allowed"] is True
        server.signal(signal.SIGHUP)  # reloads in each worker, replaces none
        with server.client() as client:
            assert post(client, "/mutate", review(pod()))["allowed"] is True
    finally:
        assert server.stop() == 0
    started = [line for line in server.logs()
               if line.get("message", "").startswith("Started server process")]
    assert len(started) == 2
