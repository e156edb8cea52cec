"""Shell-style globs (`team-*`, `nvidia.com/mig-*`) as policies and the config write them.

Matched in time linear in the name (names come from the object: an image, a resource name):
a glob of plain text and `*` with string methods, any other in RE2 (webhook.engine.linear).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fnmatch import translate
from functools import lru_cache

from webhook.engine.linear import Pattern, error

Matcher = Callable[[str], bool]


def matches_any(name: str, patterns: tuple[str, ...]) -> bool:
    """True when one of the globs matches the whole name (case-sensitive, as fnmatchcase)."""
    if patterns:
        for match in _compiled(patterns):
            if match(name):
                return True
    return False


@lru_cache(maxsize=256)
def _compiled(patterns: tuple[str, ...]) -> tuple[Matcher, ...]:
    """The matchers of a policy's or the config's globs: they are fixed once loaded, so each
    set is compiled once (keyed by policy text, never by what an object holds)."""
    plain = frozenset(p for p in patterns if not any(c in p for c in "*?["))
    starred = tuple(p.split("*") for p in patterns if "*" in p and "?" not in p and "[" not in p)
    others = [p for p in patterns if "?" in p or "[" in p]
    matchers: list[Matcher] = []
    if plain:
        matchers.append(plain.__contains__)
    matchers.extend(_starred(parts) for parts in starred)
    if others:
        matchers.append(_classes(others))
    return tuple(matchers)


def _starred(parts: list[str]) -> Matcher:
    """`a*b*c` as [a, b, c]: the name starts with a, ends with c, and holds b between them
    (the leftmost b is as good as any: `*` takes whatever is left)."""
    first, middle, last = parts[0], parts[1:-1], parts[-1]
    fixed = len(first) + len(last)

    def match(name: str) -> bool:
        if len(name) < fixed or not name.startswith(first) or not name.endswith(last):
            return False
        position, end = len(first), len(name) - len(last)
        for part in middle:
            found = name.find(part, position, end)
            if found < 0:
                return False
            position = found + len(part)
        return True

    return match


def _classes(patterns: list[str]) -> Matcher:
    """Globs with `?` or `[...]`, in RE2. One RE2 refuses (a reversed range, `[b-a]`) keeps
    fnmatch's translation, which CPython writes to match in linear time."""
    try:
        regex = Pattern("(?:" + "|".join(glob_regex(p) for p in patterns) + ")")
    except error:
        fallback = re.compile("|".join(translate(pattern) for pattern in patterns))
        return lambda name: fallback.match(name) is not None
    return lambda name: regex.fullmatch(name) is not None


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
