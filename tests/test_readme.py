"""The README's library example runs, and prints what its comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_library_example_runs_and_prints_what_it_promises() -> None:
    text = README.read_text()
    block = re.search(r"## Library API.*?```python\n(.*?)```", text, re.S)
    assert block is not None, "README has no Library API example"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block.group(1), "README.md", "exec"), {})
    lines = out.getvalue().splitlines()
    assert lines[0] == "True"
    assert "liveness-probe-tolerance" in lines[1]
    assert lines[2] == "['/spec/tolerations', '/spec/containers/0/startupProbe']"


def test_readme_names_the_test_command_that_ci_runs() -> None:
    ci = (README.parent / ".ci" / "run").read_text()
    assert "scripts/test" in README.read_text()
    assert "scripts/test" in ci and "scripts/setup" in ci
