"""Globs: the engine's matching is fnmatchcase's, and its one translation reads the same in
RE2, the regular expressions of Kubernetes' CEL (the exported policies' matches())."""

from __future__ import annotations

import fnmatch

import re2
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.engine.globs import glob_regex, matches_any

PATTERN = st.text(alphabet="ab-*?[]!^\\.", max_size=8)
NAME = st.text(alphabet="ab-.[]!^\\\n", max_size=8)


@settings(max_examples=3000, deadline=None)
@given(PATTERN, NAME)
def test_a_glob_matches_as_fnmatchcase_does(pattern: str, name: str) -> None:
    assert matches_any(name, (pattern,)) == fnmatch.fnmatchcase(name, pattern)  # stdlib's own


@settings(max_examples=3000, deadline=None)
@given(PATTERN, NAME)
def test_re2_reads_the_translation_as_python_does(pattern: str, name: str) -> None:
    anchored = "^" + glob_regex(pattern) + "$"
    try:
        compiled = re2.compile(anchored)
    except re2.error:
        # RE2 refuses what Python merely warns about (a reversed range, say): no glob a
        # user writes for names; it must then be refused, never read differently.
        return
    assert (compiled.search(name) is not None) == fnmatch.fnmatchcase(name, pattern)


def test_globs_of_names_as_users_write_them() -> None:
    assert matches_any("team-ml", ("team-*",)) and not matches_any("xteam-ml", ("team-*",))
    assert matches_any("nvidia.com/mig-1g.10gb", ("nvidia.com/mig-*",))
    assert not matches_any("nvidiaxcom/gpu", ("nvidia.com/gpu",))  # '.' is a dot
    assert not matches_any("team-a\n", ("team-a",))  # the whole name, to its very end
