"""The envtest assets the cluster tests run: kube-apiserver and etcd built from the Go wrapper
module in tools/controlplane/, and kubectl, in `.tools/envtest/<version>/` (git-ignored).

One modfile is one Kubernetes release: `go.mod` is the default (newest tested minor),
`go-<minor>.mod` each further one. etcd is built from the same module graph, so each release
runs with the etcd its own go.mod names. `python -m support.assets [--all]` builds what
is missing and prints each assets directory (default first); a second run with the same pins
does nothing. When Go or the build fails, the
reason is written into the assets directory and printed in one line, so the cluster tests skip
with that reason and the rest of the suite still runs.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from webhook.testing import REPO

MODULE = REPO / "tools" / "controlplane"
ENVTEST = REPO / ".tools" / "envtest"
STAMP = ".built-from"
FAILED = "build-failed.txt"  # why the last build failed; the cluster tests skip with it
BUILD_TIMEOUT = 40 * 60
_KUBERNETES = re.compile(r"^\s*k8s\.io/kubernetes (v(\d+)\.(\d+)\.\d+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Release:
    """One Kubernetes release the cluster tests can run on, as its modfile pins it."""

    version: str  # v1.36.3
    modfile: Path

    @property
    def major(self) -> str:
        return self.version[1:].split(".")[0]

    @property
    def minor(self) -> str:
        return self.version[1:].split(".")[1]

    @property
    def directory(self) -> Path:
        return ENVTEST / self.version

    @property
    def sumfile(self) -> Path:
        return self.modfile.with_suffix(".sum")


def _release(modfile: Path) -> Release:
    found = _KUBERNETES.search(modfile.read_text())
    if not found:
        raise SystemExit(f"{modfile}: no `k8s.io/kubernetes vX.Y.Z` requirement")
    return Release(found.group(1), modfile)


def releases() -> list[Release]:
    """Every release the repository pins, the default (go.mod) first, then newest to oldest."""
    others = sorted((_release(path) for path in MODULE.glob("go-*.mod")),
                    key=lambda release: int(release.minor), reverse=True)
    return [_release(MODULE / "go.mod"), *others]


def default_release() -> Release:
    return releases()[0]


def _fingerprint(release: Release, go: str) -> str:
    """What a build depends on: the pins, the wrapper's source and the Go toolchain."""
    digest = hashlib.sha256()
    for path in (release.modfile, release.sumfile, MODULE / "main.go"):
        digest.update(path.read_bytes())
    version = subprocess.run([go, "version"], capture_output=True, text=True, check=True)
    digest.update(version.stdout.encode())
    return f"{release.version} {digest.hexdigest()}\n"


def is_built(release: Release) -> bool:
    stamp = release.directory / STAMP
    go = shutil.which("go")
    return (go is not None and stamp.is_file()
            and stamp.read_text() == _fingerprint(release, go)
            and all(os.access(release.directory / name, os.X_OK)
                    for name in ("kube-apiserver", "etcd")))


def _go_build(release: Release, go: str, package: str, output: Path, ldflags: str,
              static: bool = False) -> None:
    """`go build` into a partial file, so an interrupted build never leaves half a binary."""
    partial = output.with_name(output.name + ".partial")
    command = [go, "build", f"-modfile={release.modfile.name}", "-trimpath",
               f"-ldflags=-s -w {ldflags}".strip(), "-o", str(partial), package]
    env = {**os.environ, "CGO_ENABLED": "0"} if static else None
    done = subprocess.run(command, cwd=MODULE, capture_output=True, text=True, env=env,
                          timeout=BUILD_TIMEOUT, check=False)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise BuildFailed(f"`cd tools/controlplane && {' '.join(command)}` exited "
                          f"{done.returncode}:\n{tail}")
    partial.replace(output)


class BuildFailed(Exception):
    """The Go toolchain is missing or refused the build; the message says which command."""


def build(release: Release) -> None:
    """Build kube-apiserver (version stamped, so `kubectl version` reports it) and etcd."""
    go = shutil.which("go")
    if go is None:
        raise BuildFailed("no `go` on PATH: the control plane is built from Go modules "
                          "(tools/controlplane/); install Go 1.26 or point KUBEBUILDER_ASSETS "
                          "at kube-apiserver, etcd and kubectl of your own")
    target = release.directory
    target.mkdir(parents=True, exist_ok=True)
    version = "k8s.io/component-base/version"
    stamped = " ".join(f"-X {version}.{name}={value}" for name, value in (
        ("gitVersion", release.version), ("gitMajor", release.major),
        ("gitMinor", release.minor), ("gitTreeState", "clean")))
    _go_build(release, go, ".", target / "kube-apiserver", stamped)
    _go_build(release, go, "go.etcd.io/etcd/server/v3", target / "etcd", "")
    kubectl = target / "kubectl"
    if not kubectl.is_symlink():  # the kubectl of .tools/bin, within one minor of the server
        kubectl.unlink(missing_ok=True)
        kubectl.symlink_to(Path("..") / ".." / "bin" / "kubectl")
    (target / STAMP).write_text(_fingerprint(release, go))


def ensure(release: Release) -> str | None:
    """Build `release` unless it is built; None when ready, else the one-line reason why the
    cluster tests will not run on it (also kept in the assets directory for them)."""
    failed = release.directory / FAILED
    if is_built(release):
        failed.unlink(missing_ok=True)
        return None
    started = time.monotonic()
    print(f"building kube-apiserver and etcd {release.version} from tools/controlplane "
          f"(a cold build takes about 6 minutes here)", file=sys.stderr, flush=True)
    try:
        build(release)
    except (BuildFailed, subprocess.TimeoutExpired, OSError) as error:
        release.directory.mkdir(parents=True, exist_ok=True)
        failed.write_text(f"{error}\n")
        return f"cluster tests will not run on Kubernetes {release.version}: {error}"
    failed.unlink(missing_ok=True)
    print(f"built {release.version} into {release.directory.relative_to(REPO)} in "
          f"{time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return None


def build_problem(directory: Path) -> str | None:
    """Why the assets in `directory` could not be built, if a build said so."""
    failed = directory / FAILED
    return failed.read_text().strip() if failed.is_file() else None


NODE = REPO / ".tools" / "node"


def _node_fingerprint(release: Release, go: str) -> str:
    digest = hashlib.sha256()
    for path in (release.modfile, release.sumfile, MODULE / "node" / "main.go",
                 MODULE / "pause" / "main.go"):
        digest.update(path.read_bytes())
    version = subprocess.run([go, "version"], capture_output=True, text=True, check=True)
    digest.update(version.stdout.encode())
    return f"{release.version} {digest.hexdigest()}\n"


def build_node(release: Release) -> None:
    """kubelet, kube-controller-manager and kube-scheduler (one binary, tools/controlplane/node,
    run under each name) at the release's pin, and the sandbox image's pause program."""
    go = shutil.which("go")
    if go is None:
        raise BuildFailed("no `go` on PATH: the node is built from Go modules "
                          "(tools/controlplane/node); install Go 1.26")
    NODE.mkdir(parents=True, exist_ok=True)
    stamp = NODE / STAMP
    if stamp.is_file() and stamp.read_text() == _node_fingerprint(release, go):
        return
    print(f"building kubelet, kube-controller-manager and kube-scheduler {release.version} "
          "from tools/controlplane/node", file=sys.stderr, flush=True)
    version = "k8s.io/component-base/version"
    stamped = " ".join(f"-X {version}.{name}={value}" for name, value in (
        ("gitVersion", release.version), ("gitMajor", release.major),
        ("gitMinor", release.minor), ("gitTreeState", "clean")))
    _go_build(release, go, "./node", NODE / "node", stamped)
    _go_build(release, go, "./pause", NODE / "pause", "", static=True)  # alone in its image
    stamp.write_text(_node_fingerprint(release, go))


def ensure_node() -> str | None:
    """Build the node (binaries and images) for the default release; None when ready, else
    the one-line reason the node tests will not run (they skip with it)."""
    from support import images  # buildah and debootstrap: needed by the node tests only

    failed = NODE / FAILED
    failed.unlink(missing_ok=True)
    started = time.monotonic()
    try:
        build_node(default_release())
    except (BuildFailed, subprocess.TimeoutExpired, OSError) as error:
        NODE.mkdir(parents=True, exist_ok=True)
        failed.write_text(f"{error}\n")
        return f"the node tests will not run: {error}"
    problem = images.ensure(NODE / "pause")
    if problem:
        return f"the node tests will not run: {problem}"
    print(f"the node and its images are ready ({time.monotonic() - started:.0f} s)",
          file=sys.stderr, flush=True)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m support.assets",
        description="Build the control plane the cluster tests run (kube-apiserver and etcd "
                    "from tools/controlplane/) into .tools/envtest/<version>/.")
    parser.add_argument("--all", action="store_true",
                        help="every pinned release, not only the default")
    parser.add_argument("--node", action="store_true",
                        help="only the node tests' kubelet, controller-manager, scheduler and "
                             "images (into .tools/node/)")
    args = parser.parse_args(argv)
    if args.node:
        problem = ensure_node()
        if problem:
            print(problem.splitlines()[0], file=sys.stderr)
        return 0  # the node tests skip with the reason
    for release in releases() if args.all else [default_release()]:
        problem = ensure(release)
        if problem:
            print(problem.splitlines()[0], file=sys.stderr)
        print(release.directory)  # the assets directory, for KUBEBUILDER_ASSETS
    return 0  # a failed build skips the cluster tests with its reason; it fails nothing else


if __name__ == "__main__":
    sys.exit(main())
