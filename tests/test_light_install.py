"""A plain install (no `server` extra) runs check, test, validate-nodetemplates, policies and
export; serve says which extra it needs instead of a traceback. The webhook's dependencies are
made unimportable in a child interpreter, as they are where they were never installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from webhook.cli.main import SERVER_MODULES

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = f"""
import importlib.abc, runpy, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {sorted(SERVER_MODULES)!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Absent())
sys.argv = ["quickq-guard", *sys.argv[1:]]
runpy.run_module("webhook.cli", run_name="__main__")
"""


def without_server(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCKED, *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=120)


@pytest.mark.parametrize("args", [
    ("check", "examples/good/"),
    ("check", "-o", "sarif", "examples/bad/pod.yaml"),
    ("test", "policies/tests/require-labels.yaml"),
    ("validate-nodetemplates", "examples/good/nodetemplate.yaml"),
    ("policies",),
    ("export", "-o", "vap"),
])
def test_the_ci_commands_need_no_server_dependency(args):
    done = without_server(*args)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode in (0, 1), done.stderr[-3000:]


@pytest.mark.parametrize("args", [
    ("serve", "--cert", "x", "--key", "y"),
    ("cluster", "remove", "--validating", "x", "--server", "http://127.0.0.1:9"),
])
def test_the_blocker_blocks(args):
    done = without_server(*args)
    assert done.returncode == 2
    assert "pip install 'quickq-guard[server]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_server_extra_is_what_serve_needs():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {d.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower()
             for d in project["dependencies"]}
    server = {d.split("[")[0].split(">")[0].strip().lower()
              for d in project["optional-dependencies"]["server"]}
    assert server == {"starlette", "uvicorn", "cryptography", "prometheus-client", "lightkube"}
    assert not names & server
