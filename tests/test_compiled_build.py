"""The compiled build (setup.py: the engine's hot modules through mypyc, as the image ships
it). scripts/test runs the suite a second time on it with QUICKQ_EXPECT_COMPILED=1; then the
first test here fails unless every listed module really came from a compiled extension, so that
run cannot quietly test the checkout's Python instead."""

from __future__ import annotations

import ast
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def compiled_modules() -> list[str]:
    """setup.py's COMPILED list, as module names."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    (listed,) = [node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "COMPILED" for t in node.targets)]
    paths = ast.literal_eval(listed)
    return [path.removesuffix(".py").replace("/", ".") for path in paths]


@pytest.mark.skipif(os.environ.get("QUICKQ_EXPECT_COMPILED") != "1",
                    reason="the pure-Python run (scripts/test runs the compiled one)")
def test_the_compiled_run_imports_every_listed_module_compiled() -> None:
    for name in compiled_modules():
        module = importlib.import_module(name)
        assert str(module.__file__).endswith(".so"), f"{name} came from {module.__file__}"


# Besides the engine and the YAML reader, what `check` runs per file and per object.
CHECK_MODULES = ("webhook.yaml_events", "webhook.manifests", "webhook.cli.judge",
                 "webhook.cli.kustomize", "webhook.cli.formats.json")


def test_every_listed_module_is_a_module_of_the_engine_or_of_checks_path() -> None:
    names = compiled_modules()
    assert "webhook.engine.normalize" in names and "webhook.engine.evaluate" in names
    for name in names:
        assert name.startswith("webhook.engine.") or name in CHECK_MODULES, name
        assert (ROOT / (name.replace(".", "/") + ".py")).is_file(), name


@pytest.mark.skipif(os.environ.get("QUICKQ_EXPECT_COMPILED") != "1",
                    reason="the pure-Python run (scripts/test runs the compiled one)")
def test_both_builds_give_the_same_report_on_the_benchmark_corpus(tmp_path: Path) -> None:
    """`check -o json` on 1,000 corpus objects (good, bad, GPU, patched) and the examples, by
    this compiled build and by the checkout's pure Python: byte for byte the same."""
    corpus = tmp_path / "corpus"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "corpus.py"), str(corpus),
                    "--count", "1000"], check=True, capture_output=True)
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    reports = []
    compiled_path = os.pathsep.join(str(Path(entry).resolve())
                                    for entry in os.environ["PYTHONPATH"].split(os.pathsep))
    for pythonpath in (compiled_path, ""):
        env = {**os.environ, "PYTHONPATH": pythonpath}
        done = subprocess.run([sys.executable, "-c", BUILD_AND_CHECK, "corpus", "examples"],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              check=False)
        assert done.returncode == 1, done.stderr[-2000:]  # the examples' bad files are denied
        build, _, report = done.stdout.partition("\n")
        reports.append((build, report))
    (compiled, first), (pure, second) = reports
    assert compiled.endswith(".so") and pure.endswith(".py"), (compiled, pure)
    assert json.loads(first)["summary"]["resources"] >= 1000
    assert first == second


# Which file the engine came from, then the report, from one process.
BUILD_AND_CHECK = """
import sys
import webhook.engine.normalize
from webhook.cli import main
print(webhook.engine.normalize.__file__, flush=True)
sys.exit(main(["check", "--output", "json", *sys.argv[1:]]))
"""
