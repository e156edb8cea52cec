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
    # A word of a name that names a secret, a word ending in one (libpq's PGPASSWORD,
    # DBPASSWORD), or the plural of either (TOKENS, OPENAI_API_KEYS).
    words: tuple[str, ...] = ("PASSWORD", "PASSWD", "SECRET", "TOKEN", "APIKEY",
                              "CREDENTIAL", "CREDENTIALS")
    pairs: tuple[str, ...] = ("API KEY", "PRIVATE KEY", "ACCESS KEY")
    # A last word that names a secret (MySQL's MYSQL_PWD, RabbitMQ's RABBITMQ_DEFAULT_PASS,
    # DB_PASS, GPG_PASSPHRASE), though PASS elsewhere (PASS_THROUGH) says nothing.
    lastWords: tuple[str, ...] = ("PASS", "PWD", "PASSPHRASE")
    # Names of clients' credential variables without any such word in them.
    names: tuple[str, ...] = ("REDISCLI_AUTH", "AZURE_STORAGE_CONNECTION_STRING")
    # A name ending in one of these refers to a secret (SECRET_NAME) instead of holding one.
    referenceSuffixes: tuple[str, ...] = ("NAME", "PATH", "FILE", "DIR", "REF", "URL", "URI",
                                          "ENDPOINT", "HEADER")
    # A name ending in one of these is a setting about a secret, or about the tokens a
    # language model counts (TOKEN_TTL, ROUTER_TOKEN_TRACKER_TIME_UNIT=seconds).
    settingSuffixes: tuple[str, ...] = ("UNIT", "UNITS", "LIMIT", "LIMITS", "COUNT", "SIZE",
                                        "TTL", "TIMEOUT", "LENGTH", "INTERVAL", "MODE", "TYPE",
                                        "ENABLED", "BUDGET", "RATIO")
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
    def _compound(self) -> tuple[str, ...]:
        return tuple(self._words)

    @cached_property
    def _stems(self) -> tuple[str, ...]:
        """What a word naming a secret ends in: a secret word, or its plural."""
        return (*self._words, *(word + "S" for word in self._words))

    @cached_property
    def _all_pairs(self) -> frozenset[tuple[str, ...]]:
        """The pairs and their plurals (API KEYS)."""
        return self._pairs | {(*pair[:-1], pair[-1] + "S") for pair in self._pairs}

    @cached_property
    def _not_holding(self) -> frozenset[str]:
        """Last words of names that refer to a secret or are a setting about one."""
        return self._suffixes | self._settings

    @cached_property
    def _last_words(self) -> frozenset[str]:
        return frozenset(word.upper() for word in self.lastWords)

    @cached_property
    def _names(self) -> frozenset[tuple[str, ...]]:
        return frozenset(name_words(name) for name in self.names)

    @cached_property
    def _suffixes(self) -> frozenset[str]:
        return frozenset(suffix.upper() for suffix in self.referenceSuffixes)

    @cached_property
    def _settings(self) -> frozenset[str]:
        return frozenset(suffix.upper() for suffix in self.settingSuffixes)

    @cached_property
    def _key_words(self) -> frozenset[str]:
        return frozenset(word.upper() for word in self.keyWords)

    def names_key(self, name: str) -> bool:
        """ENCRYPTION_KEY, HMAC_KEY_V2 do; KEY_PATH (a reference) doesn't."""
        words = name_words(name)
        return bool(words) and words[-1] not in self._suffixes \
            and not self._key_words.isdisjoint(words)

    def ends_in_secret(self, name: str) -> bool:
        """DB_PASSWORD, API_KEY, AWS_SECRET_ACCESS_KEY, PGPASSWORD, MYSQL_PWD do;
        PASSWORD_MIN_LENGTH, TOKEN_TTL (settings about a secret) and MAX_TOKENS (a plural:
        how many) don't."""
        words = name_words(name)
        if not words:
            return False
        last = words[-1]
        return (last.endswith(self._compound) or words[-2:] in self._pairs
                or last in self._last_words or words in self._names)

    def names_secret(self, name: str) -> bool:
        """DB_PASSWORD, GITHUB_TOKEN, AWS_SECRET_ACCESS_KEY, OPENAI_API_KEYS, PGPASSWORD,
        MYSQL_PWD do; TOKENIZER_PATH, SECRET_NAME, TOKEN_TTL don't. Words split on `_`, `-`,
        `.` and camelCase, compared case-insensitively."""
        words = name_words(name)
        if not words or words[-1] in self._not_holding:
            return False
        if words[-1] in self._last_words or not self._words.isdisjoint(words) \
                or words in self._names:
            return True
        stems = self._stems
        for word in words:
            if word.endswith(stems):
                return True
        return len(words) > 1 and not self._all_pairs.isdisjoint(itertools.pairwise(words))


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
