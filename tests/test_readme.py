"""README and the docs site say what the code does: their examples run, their commands parse,
their tables match the policies, and README stays a short front page that links the site."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def section(page: str, heading: str) -> str:
    """The text under `## heading` of a docs page, up to the next `## `."""
    text = (DOCS / page).read_text()
    assert f"\n## {heading}\n" in text, f"docs/{page} has no section {heading!r}"
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def run_printing(code: str, name: str) -> list[str]:
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(ROOT)  # the examples name files of the checkout
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, name, "exec"), {})
    finally:
        os.chdir(cwd)
    return out.getvalue().splitlines()


def test_readme_stays_a_front_page() -> None:
    assert len(README.read_bytes()) <= 15 * 1024


def test_readme_gives_the_two_commands_that_ci_runs() -> None:
    text = README.read_text()
    assert "\nscripts/setup && .venv/bin/quickq-guard check examples/   #" in text
    assert "\nscripts/test   " in text
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line and not line.startswith("#")]
    assert ci[-2:] == ["scripts/setup", "scripts/test"]


def test_the_test_command_builds_the_docs_strictly() -> None:
    script = (ROOT / "scripts" / "test").read_text()
    build = script.index("mkdocs build --strict\n")
    assert script.index(".venv/bin/mypy") < build < script.index(".venv/bin/pytest")
    assert "--quiet" not in script[build - 40:build + 40]  # --quiet turns warnings into exit 0


def test_every_docs_page_is_in_the_site() -> None:
    site = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def pages(nav: object) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        if isinstance(nav, list):
            return [page for item in nav for page in pages(item)]
        assert isinstance(nav, dict)
        return [page for value in nav.values() for page in pages(value)]

    assert sorted(pages(site["nav"])) == sorted(p.name for p in DOCS.glob("*.md"))


def test_readme_links_point_at_pages_and_sections_that_exist() -> None:
    links = re.findall(r"\]\(([^)]+)\)", README.read_text())
    local = [link for link in links if not link.startswith("http")]
    assert len(local) >= 15
    for link in local:
        path, _, anchor = link.partition("#")
        assert (ROOT / path).is_file(), link
        if anchor:
            headings = re.findall(r"^#+ (.*)$", (ROOT / path).read_text(), re.M)
            slugs = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-")
                     for h in headings}
            assert anchor in slugs, link


def test_readme_performance_lines_are_dated_and_link_the_performance_page() -> None:
    text = README.read_text().split("## Performance\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(lines) >= 4
    for line in lines:
        assert re.search(r"\b20\d\d-\d\d-\d\d\b", line), line
        assert "(docs/performance.md" in line, line


def policy_table(text: str) -> dict[str, tuple[str, str]]:
    rows = re.findall(r"^\| `([a-z0-9-]+)` \| (validate|mutate) \| (\w+) \|", text, re.M)
    return {policy: (kind, action) for policy, kind, action in rows}


def test_the_policy_tables_are_the_shipped_policies() -> None:
    """README's table and docs/policies.md's list every shipped policy with its type and
    action, and nothing else."""
    shipped = {}
    for path in sorted((ROOT / "policies").glob("*.yaml")):
        policy = yaml.safe_load(path.read_text())
        shipped[policy["id"]] = (policy["type"], policy["action"])
    assert len(shipped) >= 14
    assert policy_table(README.read_text()) == shipped
    assert policy_table((DOCS / "policies.md").read_text()) == shipped


def test_every_default_policy_has_its_parameters_said() -> None:
    params = section("policies.md", "Parameters")
    for path in sorted((ROOT / "policies").glob("*.yaml")):
        assert f"`{path.stem}`" in params, path.stem


def test_the_readme_library_example_runs() -> None:
    block = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert block is not None, "README has no Python example"
    assert len(block.group(1).strip().splitlines()) <= 6
    assert run_printing(block.group(1), "README.md") == ["False denied"]


def test_the_library_page_example_runs_and_prints_what_it_promises() -> None:
    block = re.search(r"```python\n(.*?)```", (DOCS / "library.md").read_text(), re.S)
    assert block is not None, "docs/library.md has no example"
    lines = run_printing(block.group(1), "docs/library.md")
    assert lines[0] == "True"
    assert "liveness-probe-tolerance" in lines[1]
    assert lines[2] == "['/spec/tolerations/-', '/spec/containers/0/startupProbe']"


def test_every_check_command_in_readme_and_docs_parses() -> None:
    """The commands README and the docs show (CI snippets, examples) use options that exist."""
    import shlex

    from webhook.cli.main import parser

    for block in re.findall(r"```yaml\n(.*?)```", section("cli.md", "In CI"), re.S):
        assert yaml.safe_load(block)
    texts = [README.read_text()] + [page.read_text() for page in sorted(DOCS.glob("*.md"))]
    commands = [c for text in texts for c in re.findall(r"quickq-guard (check [^`|>\n#]*)", text)]
    checked: list[str] = []
    for command in commands:
        words = [w for w in shlex.split(command.replace("\\", "").rstrip(") "))
                 if w not in ("...", "|")]
        if len(words) < 2 or words[-1].startswith("[") or "PATH..." in words \
                or re.fullmatch(r"check (-o|--output) \w+\s*", command):
            continue  # prose ("`quickq-guard check --output json` prints") or the synopsis
        args = parser().parse_args(words)
        checked.append(command)
        assert args.output in ("table", "json", "sarif", "junit", "github", "gitlab",
                               "policyreport", "html")
    assert any("-o sarif" in c for c in checked) and any("-o junit" in c for c in checked)
    assert len(checked) >= 12


def test_the_writing_a_policy_walkthrough_works(tmp_path: Path) -> None:
    """The shell blocks of docs/writing-policies.md, run as a reader would, from a checkout."""
    import shutil
    import subprocess
    import sys

    blocks = re.findall(r"```bash\n(.*?)```", section("writing-policies.md", "A policy in CEL"),
                        re.S)
    script = "\n".join(block for block in blocks if "quickq-guard check" not in block)
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    bin_dir = Path(sys.executable).parent
    done = subprocess.run(["bash", "-euc", script], cwd=tmp_path, capture_output=True,
                          text=True, env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, check=False)
    assert done.returncode == 0, done.stderr
    assert "allowed-registries" in done.stdout
    assert done.stdout.rstrip().endswith("2 passed, 0 failed")
