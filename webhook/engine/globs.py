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
