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
    assert lines[2] == "['/spec/tolerations/-', '/spec/containers/0/startupProbe']"


def test_readme_names_the_test_command_that_ci_runs() -> None:
    ci = (README.parent / ".ci" / "run").read_text()
    assert "scripts/test" in README.read_text()
    assert "scripts/test" in ci and "scripts/setup" in ci


def test_every_check_command_in_the_readme_parses() -> None:
    """The commands the README shows (CI snippets, examples) use options that exist."""
    import shlex

    import yaml

    from webhook.cli.main import parser

    text = README.read_text()
    ci = text[text.index("### In CI"):text.index("## Library API")]
    for block in re.findall(r"```yaml\n(.*?)```", ci, re.S):
        assert yaml.safe_load(block)
    commands = re.findall(r"quickq-guard (check [^`|>\n#]*)", text)
    checked: list[str] = []
    for command in commands:
        words = [w for w in shlex.split(command.replace("\\", "").rstrip(") "))
                 if w not in ("...", "|")]
        if len(words) < 2 or words[-1].startswith("[") or "PATH..." in words \
                or re.fullmatch(r"check (-o|--output) \w+\s*", command):
            continue  # prose ("`quickq-guard check --output json` prints") or the synopsis
        args = parser().parse_args(words)
        checked.append(command)
        assert args.output in ("table", "json", "sarif", "junit", "github", "policyreport")
    assert any("-o sarif" in c for c in checked) and any("-o junit" in c for c in checked)
    assert len(checked) >= 8


def test_the_writing_a_policy_walkthrough_works(tmp_path: Path) -> None:
    """The shell blocks of "Writing a policy", run as a reader would, from a checkout."""
    import shutil
    import subprocess
    import sys

    section = README.read_text().split("## Writing a policy", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    script = "\n".join(block for block in blocks if "quickq-guard check" not in block)
    shutil.copytree(README.parent / "policies", tmp_path / "policies")
    bin_dir = Path(sys.executable).parent
    done = subprocess.run(["bash", "-euc", script], cwd=tmp_path, capture_output=True,
                          text=True, env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, check=False)
    assert done.returncode == 0, done.stderr
    assert "allowed-registries" in done.stdout
    assert done.stdout.rstrip().endswith("2 passed, 0 failed")
