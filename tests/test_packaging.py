"""An installed wheel carries the default policies, the Pod Security Standards profiles and
the NodeTemplate schema."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_ships_policies_and_finds_them_outside_a_checkout(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "-w", str(tmp_path / "dist"), str(ROOT)],
                   check=True, capture_output=True)
    wheel = next((tmp_path / "dist").glob("quickq_guard-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(n for n in names if n.startswith("webhook/policies/"))
    expected = sorted(f"webhook/policies/{p.relative_to(ROOT / 'policies')}"
                      for p in (ROOT / "policies").rglob("*.yaml"))
    assert shipped == expected
    assert "webhook/policies/pod-security/restricted/capabilities.yaml" in shipped
    assert "webhook/schemas/nodetemplate.schema.json" in names

    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    probe = ("import webhook.engine.policy as p, webhook; "
             "print(p.default_policies_dir()); "
             "print(len(webhook.load_policies().policies)); "
             "print(len(webhook.load_policies(config=webhook.Config.model_validate("
             "{'podSecurity': {'enforce': 'restricted'}})).policies))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, check=True,
                         capture_output=True, text=True,
                         env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}).stdout
    where, count, with_restricted = out.split()
    assert Path(where).is_relative_to(target)
    assert int(count) == len(list((ROOT / "policies").glob("*.yaml")))
    # restricted: the 11 baseline controls, 3 of them replaced, and 6 restricted ones
    assert int(with_restricted) == int(count) + 11 - 3 + 6
