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
    text = name.replace("-", "_").replace(".", "_")
    # In one case and without digits, a name has no camelCase boundary (most names).
    if not text.islower() and not (text.isupper() and text.replace("_", "").isalpha()):
        text = _camel_split(text)
    return tuple(filter(None, text.upper().split("_")))


def _camel_split(text: str) -> str:
    """`dbPassword` -> `db_Password`; `HTTPToken` stays whole (no lower case before T)."""
    cuts = [index for index in range(1, len(text)) if "A" <= text[index] <= "Z"
            and ("a" <= text[index - 1] <= "z" or "0" <= text[index - 1] <= "9")]
    if not cuts:
        return text
    return "_".join(text[start:end] for start, end in zip([0, *cuts], [*cuts, len(text)],
                                                          strict=True))
