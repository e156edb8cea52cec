"""Secrets in plain env values end up in Git, in `kubectl get -o yaml` and in every backup.

So do values read from a ConfigMap. Messages name the variable and never echo its value.
"""

from __future__ import annotations

from typing import Any

from webhook.engine.linear import Pattern
from webhook.engine.results import Finding
from webhook.engine.rules._base import finding
from webhook.engine.rules.secrets_params import PlaintextSecretParams
from webhook.engine.schema import is_mapping
from webhook.engine.workload import Workload

# Values that are settings about a secret, not one: ALLOW_EMPTY_PASSWORD "yes",
# PASSWORD_MIN_LENGTH "12", and DB_PASSWORD "$(POSTGRES_PASSWORD)", which the kubelet fills
# in from another variable of the container (typically itself from a secretKeyRef).
_BOOLEAN_WORDS = frozenset({"true", "false", "yes", "no", "on", "off"})
# RE2 (webhook.engine.linear): each runs in time linear in the value, whatever it holds.
# `\pL\pN_` is Python's Unicode `\w`, which RE2's ASCII-only `\w` is not.
_NUMBER = Pattern(r"[+-]?(?:\p{Nd}+(?:\.\p{Nd}*)?|\.\p{Nd}+)")
_REFERENCES = Pattern(r"(?:\$\([^()$\s]+\))+")
# A file a Secret is mounted at (GOOGLE_APPLICATION_CREDENTIALS=/var/secrets/google/key.json):
# an absolute path of at least two plain segments.
_PATH = Pattern(r"/[\pL\pN_.@+-]+(?:/[\pL\pN_.@+-]+)+/?")
# A URL: with credentials in it (scheme://user:password@host), it holds a secret whatever
# the variable is called; without, a secret-named variable holding it (TOKEN_URL) names
# where a secret is fetched, not the secret. `$(VAR)` as the password is filled in by the
# kubelet from another variable.
_URL = Pattern(r"[A-Za-z][A-Za-z0-9+.-]*://(?P<userinfo>[^/?#@\s]*@)?[^\s]*")
_SECRET_QUERY = Pattern(r"(?i)[?&](?:[\pL\pN_.-]*(?:password|passwd|secret|token|key|sig|"
                        r"signature|credential)s?[\pL\pN_.-]*)=[^&#\s]")
# Key material: 32 or more hex digits (128 bits), or 32 or more base64 characters with letters
# of both cases and digits.
_HEX_KEY = Pattern(r"(?:0x)?[0-9a-fA-F]{32,}")
_BASE64_KEY = Pattern(r"[A-Za-z0-9+/_-]{32,}={0,2}")


def holds_a_secret(value: Any, names_the_secret: bool) -> bool:
    """False for what cannot be a secret: empty, a boolean word (any case), only `$(VAR)`
    references to other variables, the path of a mounted file, or a URL without
    credentials. A plain number is a setting (PASSWORD_MIN_LENGTH "12", TOKEN_TTL "3600")
    unless the name ends in the secret itself (DB_PASSWORD "123456": a PIN-like password).
    True for any other literal."""
    if value is None or isinstance(value, bool | int | float):
        return False
    if not isinstance(value, str):
        return True  # refused by the API server; still never echoed
    text = value.strip()
    if text == "" or text.lower() in _BOOLEAN_WORDS or _REFERENCES.fullmatch(text):
        return False
    if _NUMBER.fullmatch(text):
        return names_the_secret
    if _PATH.fullmatch(text) and not looks_like_key(text):
        return False
    url = _URL.fullmatch(text)
    if url is not None:  # in a secret-named variable, any userinfo is suspect
        return bool(url.group("userinfo")) or url_has_credentials(text)
    return True


def url_has_credentials(text: str) -> bool:
    """scheme://user:password@host (a literal password) or a secret in the query string."""
    url = _URL.fullmatch(text)
    if url is None:
        return False
    userinfo = (url.group("userinfo") or "")[:-1]
    password = userinfo.partition(":")[2]
    if password and not _REFERENCES.fullmatch(password):
        return True
    return _SECRET_QUERY.search(text) is not None


def looks_like_key(text: str) -> bool:
    """32+ hex digits, or 32+ base64 characters mixing upper case, lower case and digits."""
    if len(set(text)) < 8:
        return False  # a placeholder (000..., xxxx...), not a key
    if _HEX_KEY.fullmatch(text):
        return True
    return (_BASE64_KEY.fullmatch(text) is not None and any(c.isupper() for c in text)
            and any(c.islower() for c in text) and any(c.isdigit() for c in text))


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
                if not is_mapping(source) or source.get("configMapKeyRef") is None:
                    continue  # most valueFrom entries: secretKeyRef, fieldRef
                from_config_map = True
            if not isinstance(name, str):
                continue
            if not params.names_secret(name):
                problem = _value_problem(name, value, params) if isinstance(value, str) \
                    and (len(value) >= 32 or "://" in value) else ""
                if problem:
                    findings.append(finding(container, problem,
                                            container.field_path("env", index, "value")))
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


def _value_problem(name: str, value: Any, params: PlaintextSecretParams) -> str:
    """What makes the literal value of a variable whose name names no secret one all the
    same: a URL with a password (DATABASE_URL), key material in a key (ENCRYPTION_KEY)."""
    if not isinstance(value, str) or not value:
        return ""  # most entries: no literal, or one read from a ConfigMap
    text = value.strip()
    if "://" in text and url_has_credentials(text):
        return (f"env {name} holds a URL with credentials in it; move the URL (or its "
                "password) into a Secret and reference it with valueFrom.secretKeyRef")
    if len(text) >= 32 and params.names_key(name) and looks_like_key(text):
        return (f"env {name} holds what looks like key material; move it into a Secret and "
                "reference it with valueFrom.secretKeyRef")
    return ""
