"""`hide` cuts every hidden value out of a text exactly as the alternation it replaced did:
the leftmost value first, the longest there, a short one (under `_SHORT` characters) only as a
whole word of `[\\w-]`. The old implementation is kept here as the reference."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable

from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.engine.hidden import _SHORT, HIDDEN, hidden_in, hide, hiding


def reference(text: str, values: Iterable[str]) -> str:
    """hide as it was: a substring test per value, then one `re` alternation."""
    present = sorted((value for value in values if value in text), key=len, reverse=True)
    if not present:
        return text
    pattern = "|".join(re.escape(value) if len(value) >= _SHORT
                       else rf"(?<![\w-]){re.escape(value)}(?![\w-])" for value in present)
    return re.sub(pattern, HIDDEN, text)


def test_pinned_examples() -> None:
    assert hide("k2z in k2zz and [k2z]", {"k2z"}) == "(hidden) in k2zz and [(hidden)]"
    assert hide("token=hunter2-S3cret;", {"hunter2-S3cret"}) == "token=(hidden);"
    assert hide("abcdefgh", {"bcdefg", "abc"}) == "a(hidden)h"  # "abc" is inside a word
    assert hide("xabcdefy", {"abcdef", "cde"}) == "x(hidden)y"  # the longer goes first
    assert hide("abcd-abcd abcdx", {"abcd"}) == "(hidden)-(hidden) (hidden)x"
    assert hide("-ab- ab ab_ é ab", {"ab"}) == "-ab- (hidden) ab_ é (hidden)"
    assert hide("éab ab", {"ab"}) == "éab (hidden)"  # \w is Unicode: é is a word character
    assert hide("nothing here", {"secret-value"}) == "nothing here"
    assert hide("anything", ()) == "anything"
    assert hide("a b a", {"a b", "a"}) == "(hidden) (hidden)"


def test_hidden_in_hides_every_string_of_a_patch() -> None:
    patch = ({"op": "add", "path": "/metadata/annotations/k", "value": ["x hunter2x", 3]},)
    assert hidden_in(patch, hiding({"hunter2x"})) == (
        {"op": "add", "path": "/metadata/annotations/k", "value": ["x (hidden)", 3]},)
    same = ({"op": "remove", "path": "/a"},)
    assert hidden_in(same, hiding({"hunter2x"})) is same


def test_word_characters_are_pythons() -> None:
    """The boundary of a short value is `[\\w-]` as Python's `re` reads `\\w` on str."""
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        shown = hide(f"{char}ab", {"ab"})
        assert (shown == f"{char}ab") == bool(re.match(r"[\w-]", char)), hex(code)


_ALPHABET = "ab-_ .é1"
_values = st.frozensets(st.text(_ALPHABET, min_size=1, max_size=7), max_size=8)


@settings(max_examples=1500, deadline=None)
@given(st.text(_ALPHABET, max_size=60), _values)
def test_as_the_reference_on_random_texts(text: str, values: frozenset[str]) -> None:
    assert hide(text, values) == reference(text, values)


@settings(max_examples=800, deadline=None)
@given(st.lists(st.sampled_from(["ab", "ba", "abab", "aab", "-", " ", "ababa", "b_"]),
                max_size=20),
       st.frozensets(st.sampled_from(["a", "ab", "aba", "abab", "bab", "baba", "ababab",
                                      "b", "abba", "aab", "b_a", "-ab"]), max_size=6))
def test_as_the_reference_on_overlapping_values(words: list[str],
                                                values: frozenset[str]) -> None:
    text = "".join(words)
    assert hide(text, values) == reference(text, values)


@settings(max_examples=300, deadline=None)
@given(st.text(_ALPHABET, min_size=1, max_size=40), st.data())
def test_as_the_reference_on_values_taken_from_the_text(text: str, data: st.DataObject) -> None:
    """Values cut from the text itself, so that most of them are found."""
    spans = data.draw(st.lists(st.tuples(st.integers(0, len(text) - 1), st.integers(1, 9)),
                               max_size=6))
    values = {text[start:start + size] for start, size in spans} - {""}
    assert hide(text, values) == reference(text, values)
