"""Regular expressions that read an object's content, in time linear in the text.

Python's `re` backtracks: `[?&][\\w.-]*key[\\w.-]*=` took 76 s on a 300 KB env value, with the
GIL held. RE2 (the engine of Kubernetes' CEL `matches()`) never does. What an object hands
the engine goes through one of these or through plain string methods, never through `re`
(tests/hardening/test_linear.py holds every built-in rule to it).
"""

from __future__ import annotations

from typing import Any

import re2

__all__ = ["Pattern", "error"]

error = re2.error  # a pattern RE2 refuses


class Pattern:
    """A compiled RE2 expression with the `re.Pattern` methods the engine uses. RE2's `\\w`,
    `\\d` and `\\s` are ASCII only: write `[\\pL\\pN_]` where a Unicode word is meant."""

    __slots__ = ("_regex",)

    def __init__(self, pattern: str) -> None:
        options = re2.Options()
        options.log_errors = False
        self._regex = re2.compile(pattern, options)

    def fullmatch(self, text: str) -> Any:
        return _call(self._regex.fullmatch, text)

    def match(self, text: str) -> Any:
        return _call(self._regex.match, text)

    def search(self, text: str) -> Any:
        return _call(self._regex.search, text)

    def sub(self, replacement: str, text: str) -> str:
        result: str = _call(lambda t: self._regex.sub(replacement, t), text)
        return result


def _call(method: Any, text: str) -> Any:
    try:
        return method(text)
    except UnicodeEncodeError:  # a lone surrogate, which UTF-8 cannot hold: RE2 reads UTF-8
        return method(text.encode("utf-8", "replace").decode("utf-8"))
