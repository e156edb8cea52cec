"""The container image recipe. No Docker engine here, so the Dockerfile is
checked as text, and its build stage is replayed with the same files and
the same `pip wheel` command to prove the COPYs are enough to build."""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from chart_helpers import CHART, REPO

DOCKERFILE = REPO / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            pairs.append((word.upper(), rest.strip()))
    return pairs


def stages() -> list[list[tuple[str, str]]]:
    """Instructions grouped by FROM."""
    groups: list[list[tuple[str, str]]] = []
    for word, rest in instructions():
        if word == "FROM":
            groups.append([])
        if groups:
            groups[-1].append((word, rest))
    return groups


def base_image(name: str = "PYTHON_IMAGE") -> str:
    (arg,) = [rest for word, rest in instructions() if word == "ARG"
              and rest.startswith(f"{name}=")]
    return arg.split("=", 1)[1]


def test_base_images_are_pinned_slim_python_and_go_on_the_same_debian() -> None:
    python, go = base_image(), base_image("GO_IMAGE")
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-[a-z]+", python), python
    assert re.fullmatch(r"golang:\d+\.\d+(\.\d+)?-[a-z]+", go), go
    # The Go library links against the glibc of the image it runs in.
    assert python.rsplit("-", 1)[1] == go.rsplit("-", 1)[1]
    froms = [rest.split()[0] for word, rest in instructions() if word == "FROM"]
    assert froms == ["${GO_IMAGE}", "${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]


def test_multi_stage_installs_only_the_wheel() -> None:
    kubecel, build, final = stages()
    assert kubecel[0][1].endswith("AS kubecel")
    assert any(w == "RUN" and "-buildmode=c-shared" in r for w, r in kubecel)
    assert build[0][1].endswith("AS build")
    assert ("COPY", "--from=kubecel /out/_kubecel.so webhook/engine/cel/_kubecel.so") in build
    assert any(w == "RUN" and "pip wheel --no-deps" in r for w, r in build)
    final_runs = " ".join(r for w, r in final if w == "RUN")
    assert 'wheel="$(echo /tmp/dist/quickq_guard-*.whl)"' in final_runs
    assert 'pip install "${wheel}[server]"' in final_runs  # the webhook's dependencies too
    assert "setuptools" not in final_runs
    # The final stage gets source only as the wheel, plus the default policies.
    copies = [r for w, r in final if w == "COPY"]
    assert copies == ["--from=build /dist/ /tmp/dist/",
                      "policies/ /etc/quickq-guard/policies/"]


def test_runs_as_numeric_non_root_user_matching_chart() -> None:
    (user,) = [r for w, r in stages()[-1] if w == "USER"]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) > 0
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["securityContext"]["runAsUser"] == int(uid)
    assert values["podSecurityContext"]["runAsUser"] == int(uid)


def test_entrypoint_and_port() -> None:
    final = dict(stages()[-1])
    assert final["ENTRYPOINT"] == '["quickq-guard", "serve"]'
    assert final["EXPOSE"] == "8443"
    assert "PYTHONDONTWRITEBYTECODE=1" in final["ENV"]


def dockerignore() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def ignored(path: str) -> bool:
    """Whether docker's context filter drops `path` (top-level patterns and **/)."""
    for pattern in dockerignore():
        bare = pattern.removeprefix("**/")
        parts = path.split("/")
        if any(fnmatch.fnmatch("/".join(parts[: i + 1]), pattern) for i in range(len(parts))):
            return True
        if pattern.startswith("**/") and any(fnmatch.fnmatch(p, bare) for p in parts):
            return True
    return False


def copied_sources() -> list[str]:
    """Context paths the Go and wheel stages COPY."""
    sources = []
    for word, rest in stages()[0] + stages()[1]:
        if word == "COPY" and not rest.startswith("--from"):
            sources += rest.split()[:-1]
    return [s.rstrip("/") for s in sources]


def test_dockerignore_keeps_what_the_build_copies() -> None:
    for source in [*copied_sources(), "policies"]:
        assert not ignored(source), source
    for heavy in (".venv", ".git", ".tools", "tests", "charts"):
        assert ignored(heavy), heavy


def test_build_stage_replayed_yields_complete_wheel(tmp_path: Path) -> None:
    """Copy exactly what the build stage copies, then run its pip wheel."""
    context = tmp_path / "src"
    context.mkdir()
    for source in copied_sources():
        src = REPO / source
        if src.is_dir():
            shutil.copytree(src, context / source, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, context / source)
    # With the build stage's ENV, as in the image.
    env = {**os.environ, **build_stage_env()}
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "-q", "--wheel-dir", str(tmp_path / "dist"),
                           str(context)], capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        pytest.fail(f"the build stage's `pip wheel` fails:\n{proc.stderr[-2000:]}")
    (wheel,) = (tmp_path / "dist").glob("quickq_guard-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        assert "quickq-guard = webhook.cli:run" in archive.read(entry_points).decode()
    shipped = {n for n in names if n.startswith("webhook/policies/")}
    # the default policies and the Pod Security Standards profiles under pod-security/
    assert shipped == {f"webhook/policies/{p.relative_to(REPO / 'policies')}"
                       for p in (REPO / "policies").rglob("*.yaml")}
    assert "webhook/export/crd.py" in names and "webhook/cli/check.py" in names
    # one build: pure Python around one library, Kubernetes' CEL, so the wheel is tagged for
    # the platform it was built on, and no compiler reaches the final image
    assert [n for n in names if n.endswith(".so")] == ["webhook/engine/cel/_kubecel.so"], names
    assert not wheel.name.endswith("-none-any.whl"), wheel.name


def build_stage_env() -> dict[str, str]:
    """The wheel stage's ENV lines (KEY=VALUE pairs)."""
    env: dict[str, str] = {}
    for word, rest in stages()[1]:
        if word == "ENV":
            for pair in rest.split():
                key, _, value = pair.partition("=")
                env[key] = value
    return env
