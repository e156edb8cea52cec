"""`check` of one small file with the default policies loads only what those policies need:
no CEL runtime (none of them is a CEL policy), no server stack and no event loop (issue 38's
pre-commit case; benchmarks/small_file.py times it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What `check` of a Deployment under the default policies must not import.
UNNEEDED = ("webhook.engine.cel", "ctypes",
            "webhook.engine.rules.cel", "uvicorn", "starlette", "lightkube", "cryptography",
            "prometheus_client", "webhook.server", "jinja2", "ruamel", "multiprocessing",
            "asyncio")

PROGRAM = """
import json, sys
from webhook.cli.main import main
code = main(["check", sys.argv[1]])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def loaded_by_check(path: Path) -> tuple[int, list[str]]:
    done = subprocess.run([sys.executable, "-c", PROGRAM, str(path)], capture_output=True,
                          text=True, check=True, cwd=ROOT)
    report = json.loads(done.stdout.splitlines()[-1])
    return report["code"], report["modules"]


def test_check_of_a_small_file_imports_no_cel_runtime_nor_server() -> None:
    code, modules = loaded_by_check(ROOT / "examples/good/deployment.yaml")
    assert code == 0
    unneeded = [name for name in modules
                if any(name == prefix or name.startswith(prefix + ".") for prefix in UNNEEDED)]
    assert unneeded == []


def test_a_cel_policy_still_loads_the_runtime(tmp_path: Path) -> None:
    """The other side: with a CEL policy in use, its runtime is there (the test above would
    pass as well if nothing could ever load it)."""
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "named.yaml").write_text(
        "id: named\ndescription: objects have a name\ntype: validate\naction: enforce\n"
        "validations:\n- expression: has(object.metadata.name)\n  message: no name\n")
    program = PROGRAM.replace('["check", sys.argv[1]]',
                              '["check", "--policies", sys.argv[2], sys.argv[1]]')
    done = subprocess.run([sys.executable, "-c", program,
                           str(ROOT / "examples/good/deployment.yaml"), str(policies)],
                          capture_output=True, text=True, check=True, cwd=ROOT)
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["code"] == 0
    assert "webhook.engine.cel.kubecel" in report["modules"] and "ctypes" in report["modules"]
