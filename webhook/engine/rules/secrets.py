"""Secrets in plain env values end up in Git, in `kubectl get -o yaml` and in every backup.

So do values read from a ConfigMap. Messages name the variable and never echo its value.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from functools import cached_property, lru_cache
from typing import Any

from webhook.engine.results import Finding
from webhook.engine.rules._base import Params, finding
from webhook.engine.workload import Workload

_SEPARATORS = re.compile(r"[_\-.]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# Values that are settings about a secret, not one: ALLOW_EMPTY_PASSWORD "yes",
# PASSWORD_MIN_LENGTH "12", and DB_PASSWORD "$(POSTGRES_PASSWORD)", which the kubelet fills
# in from another variable of the container (typically itself from a secretKeyRef).
_BOOLEAN_WORDS = frozenset({"true", "false", "yes", "no", "on", "off"})
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
_REFERENCES = re.compile(r"(?:\$\([^()$\s]+\))+")


class PlaintextSecretParams(Params):
    words: tuple[str, ...] = ("PASSWORD", "PASSWD", "SECRET", "TOKEN", "APIKEY",
                              "CREDENTIAL", "CREDENTIALS")
    pairs: tuple[str, ...] = ("API KEY", "PRIVATE KEY", "ACCESS KEY")
    # A name ending in one of these refers to a secret (SECRET_NAME) instead of holding one.
    referenceSuffixes: tuple[str, ...] = ("NAME", "PATH", "FILE", "DIR", "REF")

    @cached_property
    def _words(self) -> frozenset[str]:
        return frozenset(word.upper() for word in self.words)

    @cached_property
    def _pairs(self) -> frozenset[tuple[str, ...]]:
        return frozenset(tuple(pair.upper().split()) for pair in self.pairs)

    @cached_property
    def _suffixes(self) -> frozenset[str]:
        return frozenset(suffix.upper() for suffix in self.referenceSuffixes)

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
        if any(word in self._words for word in words):
            return True
        return any(pair in self._pairs for pair in itertools.pairwise(words))


@lru_cache(maxsize=4096)
def name_words(name: str) -> tuple[str, ...]:
    """The words of a variable name, upper-cased: splitting on `_`, `-`, `.` and camelCase
    is most of this rule's work, and the same few names come back in every object."""
    return tuple(w.upper() for w in _SEPARATORS.split(_CAMEL.sub("_", name)) if w)


def holds_a_secret(value: Any, names_the_secret: bool) -> bool:
    """False for what cannot be a secret: empty, a boolean word (any case), or only `$(VAR)`
    references to other variables. A plain number is a setting (PASSWORD_MIN_LENGTH "12",
    TOKEN_TTL "3600") unless the name ends in the secret itself (DB_PASSWORD "123456": a
    PIN-like password). True for any other literal."""
    if value is None or isinstance(value, bool | int | float):
        return False
    if not isinstance(value, str):
        return True  # refused by the API server; still never echoed
    text = value.strip()
    if text == "" or text.lower() in _BOOLEAN_WORDS or _REFERENCES.fullmatch(text):
        return False
    if _NUMBER.fullmatch(text):
        return names_the_secret
    return True


def no_plaintext_secrets(workload: Workload, params: PlaintextSecretParams) -> list[Finding]:
    """No env variable whose name names a secret carries a literal value or reads a
    ConfigMap."""
    findings = []
    for container in workload.containers:
        for index, entry in enumerate(container.data.get("env") or ()):
            name, value = entry.get("name"), entry.get("value")
            from_config_map = False
            if value in (None, ""):
                source = entry.get("valueFrom")
                if source is None or not isinstance(source, Mapping) \
                        or source.get("configMapKeyRef") is None:
                    continue  # most valueFrom entries: secretKeyRef, fieldRef
                from_config_map = True
            if not isinstance(name, str) or not params.names_secret(name):
                continue
            if from_config_map:
                findings.append(finding(
                    container, f"env {name} is read from a ConfigMap, which is stored and "
                    "shown in plaintext; put it in a Secret and reference it with "
                    "valueFrom.secretKeyRef",
                    container.field_path("env", index, "valueFrom", "configMapKeyRef")))
            elif holds_a_secret(value, params.ends_in_secret(name)):
                findings.append(finding(
                    container, f"env {name} holds a literal value; move it into a Secret and "
                    "reference it with valueFrom.secretKeyRef",
                    container.field_path("env", index, "value")))
    return findings
