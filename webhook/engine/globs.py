"""Shell-style globs (`team-*`, `nvidia.com/mig-*`) as policies and the config write them."""

from __future__ import annotations

import re
from fnmatch import translate
from functools import lru_cache


def matches_any(name: str, patterns: tuple[str, ...]) -> bool:
    """True when one of the globs matches the whole name (case-sensitive, as fnmatchcase)."""
    return bool(patterns) and _compiled(patterns).match(name) is not None


@lru_cache(maxsize=256)
def _compiled(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One regular expression for a policy's or the config's globs: they are fixed once
    loaded, so each set is compiled once."""
    return re.compile("|".join(translate(pattern) for pattern in patterns))


def glob_regex(pattern: str) -> str:
    """A glob as an RE2 regular expression (Kubernetes' CEL `matches()`) for the exported
    policies, unanchored (the export anchors it): fnmatch's translation is Python's only.
    tests/test_globs.py holds the two to the same matches wherever RE2 reads this."""
    out, index = ["(?s:"], 0
    while index < len(pattern):
        char = pattern[index]
        index += 1
        if char == "*":
            out.append(".*")
        elif char == "?":
            out.append(".")
        elif char == "[" and "]" in pattern[index + 1:]:
            end = pattern.index("]", index + 1)
            body = pattern[index:end].replace("\\", "\\\\")
            body = "^" + body[1:] if body.startswith("!") else (
                "\\" + body if body.startswith("^") else body)
            out.append("[" + body + "]")
            index = end + 1
        else:
            out.append(re.escape(char))
    return "".join(out) + ")"
