"""The CLI reads regular files only where it finds them (a directory, a test suite), and
every YAML it reads through the bounded reader: a checkout (or a test suite) may hold a
symlink to /dev/zero, a FIFO, or a kustomization nested thousands of levels deep. Each is an
error naming the file (exit 2) within seconds and well under 1 GB, never a MemoryError, a
wait for ever or a traceback. What the user names may be a pipe or a device, read up to a
bound."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

POD = ("apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\n"
       "spec:\n  containers: [{name: app, image: 'registry.example.com/app:1.0'}]\n")


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # 1 GiB


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "webhook.cli", *args], capture_output=True,
                          text=True, check=False, timeout=60, preexec_fn=_limit_memory,
                          cwd=cwd)


def _special(tmp_path: Path, kind: str) -> Path:
    """A path that is not a regular file: a symlink to /dev/zero, or a FIFO."""
    path = tmp_path / "special.yaml"
    if kind == "zero":
        path.symlink_to("/dev/zero")
    else:
        os.mkfifo(path)
    return path


@pytest.mark.parametrize("kind", ["zero", "fifo"])
def test_check_refuses_what_is_not_a_regular_file_in_a_directory(tmp_path: Path,
                                                                 kind: str) -> None:
    special = _special(tmp_path, kind)
    (tmp_path / "pod.yaml").write_text(POD)
    done = _cli("check", "--output", "json", str(tmp_path))
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"{special}" in done.stderr and "not a regular file" in done.stderr
    assert "Traceback" not in done.stderr
    assert f"{tmp_path / 'pod.yaml'}:1" in done.stdout  # the rest is still judged


def test_a_device_the_user_names_is_read_up_to_a_bound(tmp_path: Path) -> None:
    """What the user names may be a device (`--config /dev/null`) or a pipe; /dev/zero,
    which never ends, is an error past NAMED_MAX."""
    from webhook.manifests import NAMED_MAX

    done = _cli("check", "/dev/zero")
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"more than {NAMED_MAX // 1024 // 1024} MiB" in done.stderr
    assert "Traceback" not in done.stderr
    (tmp_path / "pod.yaml").write_text(POD)
    done = _cli("check", "--config", "/dev/null", str(tmp_path / "pod.yaml"))
    assert done.returncode in (0, 1) and "1 resources:" in done.stdout, done.stderr


@pytest.mark.parametrize("kind", ["zero", "fifo"])
@pytest.mark.parametrize("field", ["file", "oldFile", "patchedFile"])
def test_a_test_suite_naming_one_is_an_error(tmp_path: Path, kind: str, field: str) -> None:
    special = _special(tmp_path, kind)
    (tmp_path / "pod.yaml").write_text(POD)
    resource_ = {"file": "pod.yaml"} if field != "file" else {"file": str(special)}
    if field == "oldFile":
        resource_ |= {"operation": "UPDATE", "oldFile": str(special)}
    case = {"resource": "web", "outcome": "allowed"}
    if field == "patchedFile":
        case["patchedFile"] = str(special)
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump({
        "apiVersion": "quickq.io/v1", "kind": "PolicyTest", "name": "special",
        "resources": [resource_], "cases": [case]}))
    done = _cli("test", str(tmp_path / "suite.yaml"))
    assert done.returncode == 2, done.stderr[-2000:]
    assert "not a regular file" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("kind", ["zero", "fifo"])
def test_a_test_directory_holding_one_is_walked_past(tmp_path: Path, kind: str) -> None:
    _special(tmp_path, kind)
    done = _cli("test", str(tmp_path))
    assert done.returncode == 2 and "no PolicyTest file found" in done.stderr, done.stderr


@pytest.mark.parametrize("where", ["config", "gitignore", "policies"])
def test_config_gitignore_and_policy_files_too(tmp_path: Path, where: str) -> None:
    """A --config that is not a regular file is an error; a .gitignore that is not one holds
    no patterns, and a policy folder's is not a policy file: the manifests are judged."""
    (tmp_path / "pod.yaml").write_text(POD)
    args = ["check", str(tmp_path / "pod.yaml")]
    if where == "config":
        (tmp_path / "config.yaml").symlink_to("/dev/zero")
        args += ["--config", str(tmp_path / "config.yaml")]
    elif where == "gitignore":
        (tmp_path / ".gitignore").symlink_to("/dev/zero")
        args = ["check", str(tmp_path)]
    else:
        folder = tmp_path / "policies"
        folder.mkdir()
        (folder / "zero.yaml").symlink_to("/dev/zero")
        os.mkfifo(folder / "fifo.yaml")
        (folder / "latest.yaml").write_text(
            (Path(__file__).parents[2] / "policies" / "disallow-latest-tag.yaml").read_text())
        args += ["--policies", str(folder)]
    done = _cli(*args)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    if where == "config":  # named by the user: read, up to a bound
        assert done.returncode == 2 and "more than" in done.stderr, done.stderr
    else:
        assert done.returncode in (0, 1), done.stderr[-2000:]
        assert "1 resources:" in done.stdout


def test_a_kustomization_nested_deep_is_read_with_the_yaml_bounds(tmp_path: Path) -> None:
    """Whether a kustomization lists a file as a patch is read from it; nested 5,000 levels
    deep, it was a RecursionError traceback."""
    (tmp_path / "kustomization.yaml").write_text("patches: " + "[" * 5000 + "]" * 5000 + "\n")
    (tmp_path / "pod.yaml").write_text(POD)
    done = _cli("check", str(tmp_path))
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode in (0, 1) and "1 resources:" in done.stdout, done.stderr[-2000:]
