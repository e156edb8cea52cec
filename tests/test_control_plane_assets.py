"""The control plane the cluster tests run is built from Go modules, not shipped: the pins in
tools/controlplane/, the build's failure path (the cluster tests skip with the command and
its error), and a repository that tracks no binary and ignores what the build writes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from support import assets

REPO = Path(__file__).resolve().parents[1]


def test_the_pins_are_kubernetes_1_36_then_older_releases_each_with_its_sum_file() -> None:
    releases = assets.releases()
    assert releases[0].version.startswith("v1.36.")
    assert releases[0].modfile.name == "go.mod"
    assert [int(release.minor) for release in releases] == sorted(
        (int(release.minor) for release in releases), reverse=True)
    for release in releases:
        text = release.modfile.read_text()
        assert release.sumfile.is_file()
        assert "tool go.etcd.io/etcd/server/v3" in text  # etcd from the same module graph
        # every staging module the release replaces with a local path, pinned to v0.<minor>
        for line in text.splitlines():
            if " => k8s.io/" in line:
                assert line.strip().endswith(f" v0.{release.minor}.{release.version.split('.')[2]}")
        assert release.directory == REPO / ".tools" / "envtest" / release.version


def test_a_modfile_without_a_kubernetes_requirement_is_named(tmp_path: Path) -> None:
    modfile = tmp_path / "go-1.99.mod"
    modfile.write_text("module example\n\ngo 1.26\n")
    with pytest.raises(SystemExit, match=r"go-1\.99\.mod: no `k8s\.io/kubernetes vX\.Y\.Z`"):
        assets._release(modfile)


def test_without_go_the_build_leaves_its_reason_for_the_cluster_tests(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(assets, "ENVTEST", tmp_path)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    release = assets.default_release()
    problem = assets.ensure(release)
    assert problem is not None
    assert problem.startswith(f"cluster tests will not run on Kubernetes {release.version}: "
                              "no `go` on PATH")
    assert assets.build_problem(tmp_path / release.version) == problem.split(": ", 1)[1]
    assert assets.build_problem(tmp_path / "elsewhere") is None


def test_a_failed_go_build_names_the_command_and_its_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_go = tmp_path / "bin" / "go"
    fake_go.parent.mkdir()
    fake_go.write_text("#!/bin/sh\n[ \"$1\" = version ] && { echo 'go version go0.0'; exit 0; }\n"
                       "echo 'go: k8s.io/api@v0.0.0: unknown revision v0.0.0' >&2\nexit 1\n")
    fake_go.chmod(0o755)
    monkeypatch.setattr(assets, "ENVTEST", tmp_path / "envtest")
    monkeypatch.setenv("PATH", f"{fake_go.parent}:/usr/bin:/bin")
    release = assets.default_release()
    problem = assets.ensure(release)
    assert problem is not None
    assert "`cd tools/controlplane && " in problem and " build -modfile=go.mod " in problem
    assert "exited 1:\ngo: k8s.io/api@v0.0.0: unknown revision v0.0.0" in problem
    assert not (release.directory / "kube-apiserver").exists()  # no half-written binary
    assert not assets.is_built(release)


def test_git_tracks_no_binary_and_ignores_what_the_build_writes() -> None:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    binaries = []
    for name in filter(None, listed):
        path = REPO / name
        if path.is_file():
            with path.open("rb") as handle:
                if handle.read(4) == b"\x7fELF":
                    binaries.append(name)
    assert binaries == []
    for built in (".tools/envtest/v1.36.3/kube-apiserver", ".tools/envtest/v1.35.4/etcd"):
        ignored = subprocess.run(["git", "check-ignore", "-q", built], cwd=REPO, check=False)
        assert ignored.returncode == 0, built
