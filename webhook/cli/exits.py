"""Exit codes, and the one way the CLI tells people about problems: a line on stderr.

| code | meaning |
| 0 | nothing fails that `--fail-on` counts |
| 1 | something fails that `--fail-on` counts (by default: an enforced policy denies) |
| 2 | an input, policy or usage error: something could not be read or judged |
| 3 | `serve` could not start (the port is taken, say) |
"""

from __future__ import annotations

import sys

EXIT_OK, EXIT_FAILED, EXIT_ERROR, EXIT_CANNOT_START = 0, 1, 2, 3


class CliError(Exception):
    """A problem that ends the command with exit 2 and one message (no traceback)."""


def error(message: str) -> None:
    print(f"quickq-guard: error: {message}", file=sys.stderr)


def note(message: str) -> None:
    print(f"quickq-guard: note: {message}", file=sys.stderr)


def hint(problem: str, data_has_template: bool = False) -> str:
    """What to do about a problem reading or judging a manifest."""
    if data_has_template or "{{" in problem:
        return ("this looks like an unrendered Helm template: render it first "
                "(helm template CHART | quickq-guard check -)")
    if problem == "no such file or directory":
        return "check the path"
    if problem.startswith("cannot read"):
        return "check the file's permissions"
    if "; did you mean " in problem and "knows no kind" in problem:
        return "fix the kind"
    if problem.startswith("invalid JSON"):
        return ("fix the JSON at the line shown: a .json file is read as kubectl reads it, "
                "strict JSON (no trailing comma, no comment)")
    if problem.startswith("invalid YAML"):
        return "fix the YAML at the line shown"
    if "no 'kind'" in problem or ("got a" in problem and "Kubernetes object" in problem):
        return ("a manifest needs apiVersion and kind; leave this file out with --exclude "
                "if it is not a manifest")
    return "fix the field named"
