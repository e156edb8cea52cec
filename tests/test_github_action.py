"""The GitHub Action (action.yml) run as a runner runs it: each `run` step's script with
bash, the step's env with the inputs filled in, GITHUB_ACTION_PATH a copy of this checkout,
GITHUB_PATH and GITHUB_OUTPUT files. The install builds quickq-guard from that copy with
nothing fetched (pip is told to use no index; the dependencies are this test environment's)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
BAD = (ROOT / "examples/bad/pod.yaml").read_text()
GOOD = (ROOT / "examples/good/deployment.yaml").read_text()


def checkout_copy(tmp_path: Path) -> Path:
    """The files git tracks in this checkout, as actions/checkout leaves the action's repo."""
    copy = tmp_path / "action"
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, names):
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    return copy


def expand(text: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    """The `${{ inputs.X }}` and `${{ steps.check.outputs.X }}` of a value, as the runner
    fills them in."""
    def value(match: re.Match[str]) -> str:
        scope, _, name = match.group(1).partition(".")
        if scope == "inputs":
            return inputs[name]
        assert match.group(1).startswith("steps.check.outputs."), match.group(1)
        return outputs[match.group(1).rsplit(".", 1)[1]]
    return re.sub(r"\$\{\{\s*([\w.-]+)\s*\}\}", value, text)


def run_action(tmp_path: Path, workspace: Path, **given: str) -> tuple[list[int], dict, str]:
    """Each run step's exit code until one fails, the step outputs, the log."""
    inputs = {name: spec.get("default", "") for name, spec in ACTION["inputs"].items()}
    inputs.update(given)
    action_path = checkout_copy(tmp_path)
    github_path, github_output = tmp_path / "path", tmp_path / "output"
    github_path.write_text("")
    github_output.write_text("")
    site = sysconfig.get_paths()["purelib"]  # this environment's dependencies, offline
    base = {**os.environ, "GITHUB_ACTION_PATH": str(action_path),
            "RUNNER_TEMP": str(tmp_path / "runner"), "GITHUB_PATH": str(github_path),
            "GITHUB_OUTPUT": str(github_output), "PIP_NO_INDEX": "1", "PIP_NO_DEPS": "1",
            "PIP_NO_BUILD_ISOLATION": "0", "PYTHONPATH": site,
            # the runner's PATH after actions/setup-go: this machine's Go in front
            "PATH": os.pathsep.join([str(Path(shutil.which("go") or "go").resolve().parent),
                                     "/usr/bin", "/bin"])}
    (tmp_path / "runner").mkdir()
    codes: list[int] = []
    log = ""
    outputs: dict[str, str] = {}
    for step in ACTION["runs"]["steps"]:
        if "run" not in step:
            continue
        assert "${{" not in step["run"]  # inputs reach the script through env only
        env = {**base, **{k: expand(str(v), inputs, outputs)
                          for k, v in step.get("env", {}).items()}}
        extra = [line for line in github_path.read_text().splitlines() if line]
        env["PATH"] = os.pathsep.join([*reversed(extra), env["PATH"]])
        done = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=workspace, env=env,
                              capture_output=True, text=True, timeout=600)
        log += done.stdout + done.stderr
        codes.append(done.returncode)
        outputs = dict(line.split("=", 1) for line in github_output.read_text().splitlines())
        if done.returncode:
            break
    return codes, outputs, log


def test_the_action_installs_checks_and_writes_sarif(tmp_path):
    assert ACTION["runs"]["using"] == "composite"
    workspace = tmp_path / "repo"
    (workspace / "deploy").mkdir(parents=True)
    (workspace / "deploy" / "pod.yaml").write_text(BAD)
    codes, outputs, log = run_action(tmp_path, workspace, paths="deploy/",
                                     args="--fail-on deny", **{"upload-sarif": "true"})
    assert codes == [0, 0, 1], log  # installed, checked, then the job fails with check's 1
    assert outputs == {"exit-code": "1"}
    assert "DENY" in log and "disallow-latest-tag" in log  # the table, in the log
    sarif = json.loads((workspace / "quickq-guard.sarif").read_text())
    assert any(r["ruleId"] == "disallow-latest-tag" for r in sarif["runs"][0]["results"])
    go = next(s for s in ACTION["runs"]["steps"] if "uses" in s)
    assert go["uses"].startswith("actions/setup-go@") and go["with"]["go-version"] >= "1.26"
    upload = next(s for s in ACTION["runs"]["steps"] if "uses" in s and s is not go)
    assert upload["uses"].startswith("github/codeql-action/upload-sarif@")
    assert expand(upload["with"]["sarif_file"], {"sarif-file": "quickq-guard.sarif"}, {}) == \
        "quickq-guard.sarif"
    assert "always()" in upload["if"]  # uploaded even though the check failed


def test_the_action_passes_a_clean_repository(tmp_path):
    workspace = tmp_path / "repo"
    workspace.mkdir()
    (workspace / "deployment.yaml").write_text(GOOD)
    codes, outputs, log = run_action(tmp_path, workspace)
    assert codes == [0, 0, 0], log
    assert outputs == {"exit-code": "0"}
    assert not (workspace / "quickq-guard.sarif").exists()  # not asked for


