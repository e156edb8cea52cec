"""An installed wheel carries the default policies, the Pod Security Standards profiles and
the NodeTemplate schema."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import yaml

import webhook

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_ships_policies_and_finds_them_outside_a_checkout(tmp_path: Path) -> None:
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--verbose",
                            "--no-build-isolation", "-w", str(tmp_path / "dist"), str(ROOT)],
                           check=True, capture_output=True, text=True)
    assert "Warning" not in built.stdout + built.stderr, "setuptools warned while building"
    [wheel] = (tmp_path / "dist").glob("quickq_guard-*.whl")
    assert wheel.name.startswith(f"quickq_guard-{webhook.__version__}-")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(n for n in names if n.startswith("webhook/policies/"))
    expected = sorted(f"webhook/policies/{p.relative_to(ROOT / 'policies')}"
                      for p in (ROOT / "policies").rglob("*.yaml"))
    assert shipped == expected
    assert "webhook/policies/pod-security/restricted/capabilities.yaml" in shipped
    assert "webhook/schemas/nodetemplate.schema.json" in names
    assert {f"webhook/cli/formats/templates/report.{ext}" for ext in ("html.j2", "css", "js")} \
        <= set(names)  # check -o html's page

    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    probe = ("import webhook.loader as p, webhook; "
             "print(p.default_policies_dir()); "
             "print(len(webhook.load_policies().policies)); "
             "print(len(webhook.load_policies(config=webhook.Config.model_validate("
             "{'podSecurity': {'enforce': 'restricted'}})).policies))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, check=True,
                         capture_output=True, text=True,
                         env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}).stdout
    where, count, with_restricted = out.split()
    page = subprocess.run([sys.executable, "-m", "webhook.cli", "check", "-o", "html",
                           str(ROOT / "examples" / "good" / "pod.yaml")], cwd=tmp_path,
                          check=True, capture_output=True, text=True,
                          env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}).stdout
    assert page.startswith("<!doctype html>") and "performance.mark(" in page  # script inlined
    assert Path(where).is_relative_to(target)
    assert int(count) == len(list((ROOT / "policies").glob("*.yaml")))
    # restricted: the 11 baseline controls, 3 of them replaced, and 6 restricted ones
    assert int(with_restricted) == int(count) + 11 - 3 + 6


def test_the_version_is_written_once_and_everything_else_agrees() -> None:
    chart = yaml.safe_load((ROOT / "charts" / "quickq-guard" / "Chart.yaml").read_text())
    assert chart["appVersion"] == webhook.__version__
    label = re.search(r'org.opencontainers.image.version="([^"]+)"',
                      (ROOT / "Dockerfile").read_text())
    assert label is not None and label.group(1) == webhook.__version__
    printed = subprocess.run([sys.executable, "-m", "webhook.cli", "--version"],
                             capture_output=True, text=True, check=True).stdout
    assert printed.strip() == f"quickq-guard {webhook.__version__}"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and project["dynamic"] == ["version"]
