"""The wheel's one build step beyond pyproject.toml: Kubernetes' CEL, a Go library
(webhook/engine/cel/kubecel/) built with `go build -buildmode=c-shared` beside its Python
binding. A source install therefore needs Go 1.26 or later on PATH; the wheel is
platform-specific."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Command, setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parent
SOURCE = ROOT / "webhook" / "engine" / "cel" / "kubecel"
LIBRARY = SOURCE.parent / "_kubecel.so"


def build_library(target: Path) -> None:
    """`go build` into `target` unless it is newer than every source; a clear error without Go."""
    sources = [*SOURCE.glob("*.go"), SOURCE / "go.mod", SOURCE / "go.sum"]
    if target.is_file() and target.stat().st_mtime >= max(p.stat().st_mtime for p in sources):
        return
    go = shutil.which("go")
    if go is None:
        raise SystemExit("quickq-guard: building Kubernetes' CEL library needs Go 1.26 or later "
                         "on PATH (https://go.dev/dl/); then run the install again")
    partial = target.with_name(target.name + ".partial")
    env = {**os.environ, "CGO_ENABLED": "1", "GOFLAGS": os.environ.get("GOFLAGS", "-mod=mod")}
    subprocess.run([go, "build", "-buildmode=c-shared", "-trimpath", "-ldflags=-s -w",
                    "-o", str(partial), "."], cwd=SOURCE, env=env, check=True)
    partial.with_suffix(".h").unlink(missing_ok=True)
    partial.replace(target)


class BuildKubecel(Command):
    """`python setup.py build_kubecel`: the library in the source tree (scripts/setup)."""

    description = "build Kubernetes' CEL library with Go"
    user_options: list[tuple[str, str | None, str]] = []

    def initialize_options(self) -> None:
        pass

    def finalize_options(self) -> None:
        pass

    def run(self) -> None:
        build_library(LIBRARY)


class BuildPy(build_py):
    """The wheel's build: the library built first, then copied in as package data."""

    def run(self) -> None:
        build_library(LIBRARY)
        super().run()


class Platform(Distribution):
    """A wheel that holds a native library is tagged for its platform."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildPy, "build_kubecel": BuildKubecel}, distclass=Platform)
