"""Secrets in plain env values end up in Git, in `kubectl get -o yaml` and in every backup.

Messages name the variable and never echo its value.
"""

from __future__ import annotations

import itertools
import re
from functools import cached_property

from webhook.engine.results import Finding
from webhook.engine.rules._base import Params, finding
from webhook.engine.workload import Workload

_SEPARATORS = re.compile(r"[_\-.]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


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

    def names_secret(self, name: str) -> bool:
        """DB_PASSWORD, GITHUB_TOKEN, AWS_SECRET_ACCESS_KEY do; TOKENIZER_PATH, SECRET_NAME
        don't. Words split on `_`, `-`, `.` and camelCase, compared case-insensitively."""
        words = [w.upper() for w in _SEPARATORS.split(_CAMEL.sub("_", name)) if w]
        if not words or words[-1] in self._suffixes:
            return False
        if any(word in self._words for word in words):
            return True
        return any(pair in self._pairs for pair in itertools.pairwise(words))


def no_plaintext_secrets(workload: Workload, params: PlaintextSecretParams) -> list[Finding]:
    """No env variable whose name names a secret carries a literal value."""
    findings = []
    for container in workload.containers:
        for index, entry in enumerate(container.data.get("env") or ()):
            name, value = entry.get("name"), entry.get("value")
            if not isinstance(name, str) or value in (None, ""):
                continue
            if params.names_secret(name):
                findings.append(finding(
                    container, f"env {name} holds a literal value; move it into a Secret and "
                    "reference it with valueFrom.secretKeyRef",
                    container.field_path("env", index, "value")))
    return findings
