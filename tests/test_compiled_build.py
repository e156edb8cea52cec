"""The compiled build (setup.py: the engine's hot modules through mypyc, as the image ships
it). scripts/test runs the suite a second time on it with QUICKQ_EXPECT_COMPILED=1; then the
first test here fails unless every listed module really came from a compiled extension, so that
run cannot quietly test the checkout's Python instead."""

from __future__ import annotations

import ast
import importlib
import os
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


def test_every_listed_module_is_a_module_of_the_engine() -> None:
    names = compiled_modules()
    assert "webhook.engine.normalize" in names and "webhook.engine.evaluate" in names
    for name in names:
        assert name.startswith("webhook.engine."), name
        assert (ROOT / (name.replace(".", "/") + ".py")).is_file(), name
