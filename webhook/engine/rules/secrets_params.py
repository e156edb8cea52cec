"""The plaintext-secret policy's parameters, and how a variable's name is read: which names
hold a secret (webhook.engine.rules.secrets holds the rule; webhook.engine.hidden hides the
values of such names everywhere).

A module of their own, as webhook.engine.rules.gpu_params: the rule is compiled by mypyc in
the image (setup.py), and a pydantic model with methods cannot be in a compiled module.
"""

from __future__ import annotations

import itertools
from functools import cached_property

from webhook.engine.rules._base import Params

__all__ = ["PlaintextSecretParams", "name_words"]

_SEPARATORS = str.maketrans("-.", "__")
_NO_DIGITS = str.maketrans("", "", "0123456789")


class PlaintextSecretParams(Params):
    words: tuple[str, ...] = ("PASSWORD", "PASSWD", "SECRET", "TOKEN", "APIKEY",
                              "CREDENTIAL", "CREDENTIALS")
    pairs: tuple[str, ...] = ("API KEY", "PRIVATE KEY", "ACCESS KEY")
    # A name ending in one of these refers to a secret (SECRET_NAME) instead of holding one.
    referenceSuffixes: tuple[str, ...] = ("NAME", "PATH", "FILE", "DIR", "REF", "URL", "URI",
                                          "ENDPOINT", "HEADER")
    # A name with one of these words holds a key when its value looks like key material
    # (ENCRYPTION_KEY=<64 hex digits>), while KEY alone says nothing (CACHE_KEY=user-id).
    keyWords: tuple[str, ...] = ("KEY",)

    @cached_property
    def _words(self) -> frozenset[str]:
        return frozenset(word.upper() for word in self.words)

    @cached_property
    def _pairs(self) -> frozenset[tuple[str, ...]]:
        return frozenset(tuple(pair.upper().split()) for pair in self.pairs)

    @cached_property
    def _suffixes(self) -> frozenset[str]:
        return frozenset(suffix.upper() for suffix in self.referenceSuffixes)

    @cached_property
    def _key_words(self) -> frozenset[str]:
        return frozenset(word.upper() for word in self.keyWords)

    def names_key(self, name: str) -> bool:
        """ENCRYPTION_KEY, HMAC_KEY_V2 do; KEY_PATH (a reference) doesn't."""
        words = name_words(name)
        return bool(words) and words[-1] not in self._suffixes \
            and not self._key_words.isdisjoint(words)

    def ends_in_secret(self, name: str) -> bool:
        """DB_PASSWORD, API_KEY, AWS_SECRET_ACCESS_KEY do; PASSWORD_MIN_LENGTH, TOKEN_TTL
        (settings about a secret) don't."""
        words = name_words(name)
        return bool(words) and (words[-1] in self._words or words[-2:] in self._pairs)

    def names_secret(self, name: str) -> bool:
        """DB_PASSWORD, GITHUB_TOKEN, AWS_SECRET_ACCESS_KEY do; TOKENIZER_PATH, SECRET_NAME
        don't. Words split on `_`, `-`, `.` and camelCase, compared case-insensitively."""
        words = name_words(name)
        if not words or words[-1] in self._suffixes:
            return False
        return not self._words.isdisjoint(words) \
            or not self._pairs.isdisjoint(itertools.pairwise(words))


def name_words(name: str) -> tuple[str, ...]:
    """The words of a variable name, upper-cased: split on `_`, `-`, `.` and camelCase
    (`dbPassword`, `apiKey2Value`: a new word at an upper-case letter after a lower-case one
    or a digit). String methods only: linear in the name, and nothing kept between calls (a
    cache keyed by names would be memory any object could fill)."""
    parts = name.translate(_SEPARATORS).split("_")
    # A name in one case has no camelCase boundary, unless a digit comes before a capital.
    if not name.islower() and not (name.isupper() and name.translate(_NO_DIGITS) == name):
        parts = [word for part in parts for word in _camel_words(part)]
    return tuple(word.upper() for word in parts if word)


def _camel_words(part: str) -> list[str]:
    """`dbPassword` -> db, Password; `HTTPToken` stays one word (no lower case before T)."""
    words, start = [], 0
    for index in range(1, len(part)):
        before = part[index - 1]
        if "A" <= part[index] <= "Z" and ("a" <= before <= "z" or "0" <= before <= "9"):
            words.append(part[start:index])
            start = index
    words.append(part[start:])
    return words
