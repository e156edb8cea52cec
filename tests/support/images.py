"""The images the node tests run, built without a Docker engine: quickq-guard from the
project's own Dockerfile, and the sandbox ("pause") image containerd needs for every pod.

The builder is Debian's buildah with `--isolation chroot`: no daemon, and no runtime or user
namespace of its own, so the build's RUN steps work as plain root processes in the build
root, with the host's network (they fetch from the package registries, so this runs before
the tests enter their loopback-only namespace). The Dockerfile's base images are its
PYTHON_IMAGE and GO_IMAGE build arguments: no registry serves python:*-slim or golang:* here,
so stand-ins are made, from Debian packages (debootstrap, python3, pip), and that base with a
C compiler and the host's Go toolchain (`go env GOROOT`) for the Go stage, and every line of
the Dockerfile runs on them as written (the Go stage with the host's module and build caches
mounted, so that it fetches only what they lack). The results go into `.tools/node/images/`
as docker-archive tars the node loads into containerd (`ctr images import`).

`python tests/support/images.py` builds what is missing (the base and pause images once; the
quickq-guard image on every run, which buildah's layer cache makes quick when nothing
changed). A failure is written to `.tools/node/build-failed.txt` and printed in one line,
and the node tests skip with it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NODE_TOOLS = REPO / ".tools" / "node"
IMAGES = NODE_TOOLS / "images"
FAILED = NODE_TOOLS / "build-failed.txt"
BASE_IMAGE = "localhost/quickq-guard-base:bookworm"
GO_IMAGE = "localhost/quickq-guard-go:bookworm"
PAUSE_IMAGE = "localhost/quickq-pause:1"
GUARD_IMAGE = "localhost/quickq-guard:node-test"
MIRROR = "http://deb.debian.org/debian"
TIMEOUT = 30 * 60


class BuildFailed(Exception):
    """A build step exited non-zero; the message names the command and its error."""


def _run(command: list[str], cwd: Path = REPO, timeout: float = TIMEOUT) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          check=False)
    if done.returncode != 0:
        raise BuildFailed(f"`{' '.join(command)}` exited {done.returncode}: "
                          f"{_what_failed(done.stderr or done.stdout)}")
    return done.stdout.strip()


def _what_failed(output: str) -> str:
    """The lines that say what went wrong (a build's last lines are pip's and buildah's
    wrappers around it): the first few that name an error, then the last one."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()
              and "subprocess-exited-with-error" not in line and line != lines[-1]]
    return "\n".join([*errors[:3], *lines[-1:]])


def buildah(*args: str, timeout: float = TIMEOUT) -> str:
    """buildah with its storage in .tools/node (git-ignored), apart from any other."""
    return _run(["buildah", "--root", str(NODE_TOOLS / "buildah" / "root"),
                 "--runroot", str(NODE_TOOLS / "buildah" / "run"),
                 "--storage-driver", "overlay", *args], timeout=timeout)


def has_image(name: str) -> bool:
    try:
        buildah("inspect", "--type", "image", name)
    except BuildFailed:
        return False
    return True


def build_base() -> None:
    """A stand-in for python:3.11-slim-bookworm: Debian bookworm's minbase with python3 and
    pip. Debian marks its Python externally managed (PEP 668); the official image does not,
    and the Dockerfile pip-installs as root, so the marker goes."""
    rootfs = NODE_TOOLS / "base-rootfs"
    partial = NODE_TOOLS / "base-rootfs.partial"
    if not rootfs.is_dir():
        shutil.rmtree(partial, ignore_errors=True)
        _run(["debootstrap", "--variant=minbase", "--include=python3,python3-pip,ca-certificates",
              "bookworm", str(partial), MIRROR])
        (partial / "usr/lib/python3.11/EXTERNALLY-MANAGED").unlink(missing_ok=True)
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for path in (partial / cache).glob("*"):
                if path.is_file():
                    path.unlink()
        partial.rename(rootfs)
    container = buildah("from", "scratch")
    try:
        mounted = buildah("mount", container)
        _run(["cp", "-a", f"{rootfs}/.", mounted])
        buildah("umount", container)
        buildah("config", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                "/sbin:/bin", "--env", "LANG=C.UTF-8", "--cmd", '["python3"]', container)
        buildah("commit", "--quiet", container, BASE_IMAGE)
    finally:
        buildah("rm", container)


def build_go() -> None:
    """A stand-in for golang:1.26-bookworm: the base with gcc (cgo builds the library) and
    the host's Go toolchain."""
    goroot = _run(["go", "env", "GOROOT"])
    container = buildah("from", BASE_IMAGE)
    try:
        buildah("run", container, "--", "sh", "-c",
                "apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc "
                "libc6-dev >/dev/null && rm -rf /var/lib/apt/lists/*")
        buildah("copy", container, goroot, "/usr/local/go")
        buildah("config", "--env", "PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:"
                "/usr/sbin:/usr/bin:/sbin:/bin", "--env", "GOPATH=/go", container)
        buildah("commit", "--quiet", container, GO_IMAGE)
    finally:
        buildah("rm", container)


def build_pause(binary: Path) -> None:
    """The sandbox image: the pause program of tools/controlplane/pause, alone."""
    container = buildah("from", "scratch")
    try:
        buildah("copy", container, str(binary), "/pause")
        buildah("config", "--entrypoint", '["/pause"]', "--user", "65535:65535", container)
        buildah("commit", "--quiet", container, PAUSE_IMAGE)
    finally:
        buildah("rm", container)


HOST_CAS = Path("/etc/ssl/certs/ca-certificates.crt")


def build_guard() -> None:
    """The Dockerfile, as written, on the stand-in base. Its RUN steps see the host's CA
    bundle (mounted for the build only, never in a layer): where the machine reaches the
    registries through a TLS-inspecting proxy, pip trusts what the host trusts."""
    trust = (["--volume", f"{HOST_CAS}:{HOST_CAS}:ro"] if HOST_CAS.is_file() else [])
    caches = [f"--volume={_run(['go', 'env', name])}:{inside}" for name, inside in
              (("GOMODCACHE", "/go/pkg/mod"), ("GOCACHE", "/root/.cache/go-build"))]
    buildah("bud", "--isolation", "chroot", "--layers", "--quiet", *trust, *caches,
            "--build-arg", f"PYTHON_IMAGE={BASE_IMAGE}", "--build-arg", f"GO_IMAGE={GO_IMAGE}",
            "--tag", GUARD_IMAGE,
            "--file", str(REPO / "Dockerfile"), str(REPO))


def export(name: str, tar: Path) -> None:
    """A docker-archive that `ctr images import` names `name`."""
    partial = tar.with_name(tar.name + ".partial")
    partial.unlink(missing_ok=True)
    buildah("push", "--quiet", name, f"docker-archive:{partial}:{name}")
    partial.replace(tar)


def ensure(pause_binary: Path) -> str | None:
    """Build the images; None when they are ready, else the one-line reason the node tests
    will not run (kept in .tools/node/build-failed.txt for them)."""
    missing = [tool for tool in ("buildah", "debootstrap", "go") if not shutil.which(tool)]
    if missing:
        return _failed(f"no {', '.join(missing)}: scripts/node-packages installs them (root)")
    IMAGES.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        if not has_image(BASE_IMAGE):
            print("building the stand-in base image from Debian packages (debootstrap)",
                  file=sys.stderr, flush=True)
            build_base()
        if not has_image(GO_IMAGE):
            print("building the stand-in Go image (the base, gcc and the host's Go)",
                  file=sys.stderr, flush=True)
            build_go()
        build_pause(pause_binary)
        export(PAUSE_IMAGE, IMAGES / "pause.tar")
        build_guard()
        export(GUARD_IMAGE, IMAGES / "quickq-guard.tar")
    except (BuildFailed, subprocess.TimeoutExpired, OSError) as error:
        return _failed(f"the node tests' images could not be built: {error}")
    print(f"built the images from the Dockerfile with buildah in "
          f"{time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return None


def _failed(reason: str) -> str:
    NODE_TOOLS.mkdir(parents=True, exist_ok=True)
    FAILED.write_text(f"{reason}\n")
    return reason
