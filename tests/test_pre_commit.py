"""The pre-commit hooks of .pre-commit-hooks.yaml, run by pre-commit itself against a scratch
repository, and the check options they rely on (--skip-non-manifests, --exclude on files named
on the command line)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from builders import run_cli as run

ROOT = Path(__file__).resolve().parents[1]
GOOD = (ROOT / "examples/good/deployment.yaml").read_text()
BAD = (ROOT / "examples/bad/deployment-latest.yaml").read_text()
WORKFLOW = "name: ci\non: [push]\njobs:\n  test:\n    runs-on: ubuntu-latest\n"
PRE_COMMIT = shutil.which("pre-commit", path=os.path.dirname(sys.executable))


def test_exclude_applies_to_files_named(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "legacy").mkdir()
    (tmp_path / "legacy/bad.yaml").write_text(BAD)
    (tmp_path / "good.yaml").write_text(GOOD)
    assert run(capsys, "check", "legacy/bad.yaml", "good.yaml")[0] == 1
    code, out, _ = run(capsys, "check", "-o", "json", "--exclude", "legacy/",
                       "legacy/bad.yaml", "good.yaml")
    assert code == 0
    assert "legacy/bad.yaml" not in out and "good.yaml" in out


def test_skip_non_manifests_named(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ci.yaml").write_text(WORKFLOW)
    (tmp_path / "good.yaml").write_text(GOOD)
    assert run(capsys, "check", "ci.yaml", "good.yaml")[0] == 2  # named: an error by default
    code, _, err = run(capsys, "check", "--skip-non-manifests", "ci.yaml", "good.yaml")
    assert code == 0
    assert "skipped 1 file with no Kubernetes object" in err  # quiet: counted in one note
    code, _, err = run(capsys, "check", "--skip-non-manifests", "--verbose", "ci.yaml",
                       "good.yaml")
    assert code == 0
    assert "skipped ci.yaml: no Kubernetes object" in err  # --verbose names each file
    # broken YAML stays an error: only a file that parses and holds no object is skipped
    (tmp_path / "broken.yaml").write_text("kind: [\n")
    assert run(capsys, "check", "--skip-non-manifests", "broken.yaml", "good.yaml")[0] == 2


def hook_repo(tmp_path: Path) -> tuple[Path, str]:
    """A repository holding this checkout's .pre-commit-hooks.yaml, committed: what a
    `repo:` line names (the installed hook needs nothing else of it)."""
    repo = tmp_path / "hooks"
    repo.mkdir()
    shutil.copy(ROOT / ".pre-commit-hooks.yaml", repo)
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "hooks")
    return repo, git(repo, "rev-parse", "HEAD").strip()


def git(where: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=where, env=env, check=True,
                          capture_output=True, text=True).stdout


def pre_commit(project: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """`pre-commit run --all-files` in `project`, quickq-guard on PATH, nothing fetched."""
    env = {**os.environ, "PRE_COMMIT_HOME": str(home),
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    return subprocess.run([PRE_COMMIT or "pre-commit", "run", "--all-files", "--verbose",
                           "--color", "never"], cwd=project, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.skipif(PRE_COMMIT is None, reason="pre-commit is in the test extras")
def test_pre_commit_runs_the_hook(tmp_path):
    repo, rev = hook_repo(tmp_path)
    project = tmp_path / "project"
    (project / ".github/workflows").mkdir(parents=True)
    (project / "legacy").mkdir()
    (project / ".github/workflows/ci.yaml").write_text(WORKFLOW)
    (project / "values.json").write_text('{"replicas": 2}\n')
    (project / "deploy.yaml").write_text(GOOD)
    (project / "legacy/old.yaml").write_text(BAD)
    config = {"repos": [{"repo": str(repo), "rev": rev, "hooks": [
        {"id": "quickq-guard-installed", "args": ["--exclude", "legacy/"]}]}]}
    (project / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    git(project, "init", "-q")
    git(project, "add", ".")
    home = tmp_path / "cache"

    passed = pre_commit(project, home)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "quickq-guard (installed)" in passed.stdout
    # the files pre-commit names that hold no object (a workflow, values.json and
    # .pre-commit-config.yaml) are skipped, counted in one note
    assert "skipped 3 files with no Kubernetes object" in passed.stdout

    (project / "deploy.yaml").write_text(BAD)  # a policy denies: check's exit code 1
    git(project, "add", ".")
    denied = pre_commit(project, home)
    assert denied.returncode == 1
    assert "exit code: 1" in denied.stdout and "deploy.yaml" in denied.stdout

    (project / "deploy.yaml").write_text("kind: [\n")  # broken input: check's exit code 2
    git(project, "add", ".")
    broken = pre_commit(project, home)
    assert broken.returncode == 1
    assert "exit code: 2" in broken.stdout and "invalid YAML" in broken.stdout


def test_hooks_agree():
    """The two hooks differ only in how quickq-guard gets installed."""
    hooks = {hook["id"]: hook for hook in yaml.safe_load(
        (ROOT / ".pre-commit-hooks.yaml").read_text())}
    python, installed = hooks["quickq-guard"], hooks["quickq-guard-installed"]
    assert python["language"] == "python" and installed["language"] == "unsupported"
    for key in ("entry", "types_or", "require_serial"):
        assert python[key] == installed[key]
