"""Secrets in plain env values end up in Git, in `kubectl get -o yaml` and in every backup.

So do values read from a ConfigMap, and so does a ConfigMap's own data. A variable is judged
as the kubelet fills it in (`$(VAR)` references to earlier variables expanded), and a value
in a well-known credential format (an OpenAI or GitHub key, a private key, a JWT) is a
secret whatever it is called, in env values, `args` and `command` alike. Messages name the
variable, the argument or the data key and never echo the value.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from webhook.engine.linear import Pattern
from webhook.engine.results import Finding
from webhook.engine.rules._base import Params, finding
from webhook.engine.schema import is_mapping
from webhook.engine.workload import Container, Workload

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
# RE2's (?i) folds as Unicode does, so the dotted and dotless i (which Python's re and the CEL
# form take as an i) are named in the pattern.
_I = r"[i\x{130}\x{131}]"
_SECRET_QUERY = Pattern(rf"(?i)[?&](?:[\pL\pN_.-]*(?:password|passwd|secret|token|key|s{_I}g|"
                        rf"s{_I}gnature|credent{_I}al)s?[\pL\pN_.-]*)=[^&#\s]")
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


# Well-known credential formats, recognized by value wherever they are: (what a message calls
# it, a substring every such value holds, its RE2 pattern). RE2 runs in time linear in the
# value; the substring test spares most values the search.
_FORMATS: tuple[tuple[str, str, Any], ...] = tuple(
    (what, marker, Pattern(pattern)) for what, marker, pattern in (
        ("an Anthropic API key", "sk-ant-", r"\bsk-ant-[a-z]+[0-9]*-[A-Za-z0-9_-]{32,}"),
        ("an OpenAI API key", "sk-", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]*[0-9]"
                                     r"[A-Za-z0-9_-]*[A-Za-z][A-Za-z0-9_-]*"),
        ("a Hugging Face token", "hf_", r"\bhf_[A-Za-z0-9]{30,}"),
        ("a GitHub token", "gh", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})"),
        ("an AWS access key", "A", r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"),  # A: any
        ("a Google Cloud API key", "AIza", r"\bAIza[0-9A-Za-z_-]{35}"),
        ("a Slack token", "xox", r"\bxox[abposr]-[0-9A-Za-z-]{10,}"),
        ("a Slack webhook URL", "hooks.slack.com", r"hooks\.slack\.com/services/T[0-9A-Za-z_/]+"),
        ("a private key", "PRIVATE KEY", r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY"),
        ("a JSON Web Token", "eyJ",
         r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    ))
_OPENAI_LENGTH = 32  # an sk- key is long; sk-learn-1 is a package name
_SHORTEST = 15  # no format above is shorter (xoxb- and 10 characters): most values are


def credential_format(text: str) -> str:
    """What well-known credential `text` holds (an OpenAI API key, a private key), or ''."""
    if len(text) < _SHORTEST:
        return ""
    for what, marker, pattern in _FORMATS:
        if marker in text:
            found = pattern.search(text)
            if found is not None and (what != "an OpenAI API key"
                                      or len(found.group()) >= _OPENAI_LENGTH):
                return what
    return ""


# At most this many characters of values filled in by $(VAR) per object: each reference can
# repeat a long value (B="$(A)$(A)...", C="$(B)$(B)..." grows without end), so beyond it
# values are judged as written.
EXPANSION_BUDGET = 1 << 20


def expand(value: str, defined: Mapping[str, str | None],
           limit: int = EXPANSION_BUDGET) -> str:
    """`value` as the kubelet fills it in: `$(VAR)` of a variable defined before it is its
    value, `$$` is `$`, and anything else stays as written. A variable whose value is not a
    literal (valueFrom) is None in `defined` and stays a reference. One pass, no regex;
    `value` itself when the result would be longer than `limit`."""
    if "$" not in value:
        return value
    out: list[str] = []
    position, size, length = 0, len(value), 0
    while position < size:
        dollar = value.find("$", position)
        if dollar < 0 or dollar + 1 >= size:
            out.append(value[position:])
            break
        out.append(value[position:dollar])
        following = value[dollar + 1]
        if following == "$":
            out.append("$")
            position = dollar + 2
            continue
        close = value.find(")", dollar + 2) if following == "(" else -1
        if following == "(" and close < 0:  # no `)` further on: nothing more to fill in
            out.append(value[dollar:])
            break
        name = value[dollar + 2:close] if close > 0 else ""
        replacement = defined.get(name) if name else None
        if replacement is None:
            out.append(value[dollar:close + 1] if close > 0 else "$")
            position = close + 1 if close > 0 else dollar + 1
            continue
        length += len(replacement)
        if length > limit:
            return value
        out.append(replacement)
        position = close + 1
    return "".join(out)


def no_plaintext_secrets(workload: Workload, params: PlaintextSecretParams) -> list[Finding]:
    """No env variable whose name names a secret carries a literal value (as the kubelet
    expands it) or reads a ConfigMap; no env value, argument or command holds a credential
    of a well-known format; a ConfigMap's data keys named like secrets hold no literal."""
    if workload.kind == "ConfigMap":
        return _config_map(workload, params)
    findings = []
    budget = [EXPANSION_BUDGET]  # what $(VAR) may still fill in, for the whole object
    for container in workload.containers:
        defined: dict[str, str | None] = {}
        for index, entry in enumerate(container.data.get("env") or ()):
            name, value = entry.get("name"), entry.get("value")
            from_config_map = False
            if value in (None, ""):
                source = entry.get("valueFrom")
                if isinstance(name, str):  # valueFrom: not a literal the rule can read
                    defined[name] = None if source is not None else ""
                if not is_mapping(source) or source.get("configMapKeyRef") is None:
                    continue  # most valueFrom entries: secretKeyRef, fieldRef
                from_config_map = True
            if not isinstance(name, str):
                continue
            expanded = value if value.__class__ is not str or "$" not in value \
                else _expanded(value, defined, budget)
            if not from_config_map:
                defined[name] = expanded if isinstance(expanded, str) else None
            if not params.names_secret(name):
                if not isinstance(expanded, str) or (len(expanded) < _SHORTEST
                                                     and "://" not in expanded):
                    continue  # most values: short settings (LOG_LEVEL=info)
                path = container.field_path("env", index, "value")
                problem = _value_problem(name, value, params) if isinstance(value, str) \
                    and (len(value) >= 32 or "://" in value) else ""
                if problem:
                    findings.append(finding(container, problem, path))
                    continue
                kind = credential_format(expanded)
                if kind:
                    findings.append(_format_finding(container, f"env {name}", kind, path,
                                                    expanded != value))
                continue
            path = container.field_path("env", index, "value")
            if from_config_map:
                findings.append(finding(
                    container, f"env {name} is read from a ConfigMap, which is stored and "
                    "shown in plaintext; put it in a Secret and reference it with "
                    "valueFrom.secretKeyRef",
                    container.field_path("env", index, "valueFrom", "configMapKeyRef")))
            elif holds_a_secret(value, params.ends_in_secret(name)):
                findings.append(finding(
                    container, f"env {name} holds a literal value; move it into a Secret and "
                    "reference it with valueFrom.secretKeyRef", path))
            elif expanded != value and holds_a_secret(expanded, params.ends_in_secret(name)):
                findings.append(Finding(
                    f"{container.label}: env {name} receives a literal value through its "
                    "$(...) references to other variables, which the kubelet fills in; move "
                    "the value into a Secret and reference it with valueFrom.secretKeyRef",
                    path, container.key, check="reference"))
        if "args" in container.data or "command" in container.data:
            findings += _arguments(container, defined, params, budget)
    return findings


def _expanded(value: Any, defined: Mapping[str, str | None], budget: list[int]) -> Any:
    """`value` expanded (see expand) within what is left of the object's budget."""
    if not isinstance(value, str) or "$" not in value:
        return value
    expanded = expand(value, defined, budget[0])
    budget[0] -= max(len(expanded) - len(value), 0)
    return expanded


def _format_finding(container: Container, what: str, kind: str, path: Any,
                    expanded: bool) -> Finding:
    through = " (through its $(...) references)" if expanded else ""
    return Finding(f"{container.label}: {what} holds {kind}{through}; move it into a Secret "
                   "and reference it with valueFrom.secretKeyRef", path, container.key,
                   check="format")


def _arguments(container: Container, defined: Mapping[str, str | None],
               params: PlaintextSecretParams, budget: list[int]) -> list[Finding]:
    """`command` and `args` as the kubelet expands them: a credential of a well-known format,
    or a literal after a flag named like a secret (`--api-key KEY`, `--password=PW`)."""
    findings = []
    for field in ("command", "args"):
        items = container.data.get(field)
        if not items or not isinstance(items, list):
            continue
        flag = ""
        for index, item in enumerate(items):
            if not isinstance(item, str):
                flag = ""
                continue
            text = _expanded(item, defined, budget)
            path = container.field_path(field, index)
            kind = credential_format(text)
            named, value = flag, text
            if not named and text.startswith("-") and "=" in text:
                option, _, given = text.partition("=")
                if params.names_secret(option.lstrip("-")):
                    named, value = option, given
            if kind:
                findings.append(_format_finding(container, f"{field}[{index}]", kind, path,
                                                text != item))
            elif named and holds_a_secret(value, _ends_in_secret(named.lstrip("-"), params)):
                findings.append(Finding(
                    f"{container.label}: {field}[{index}] gives {named} a literal value; pass "
                    "it from a Secret instead (an env variable with valueFrom.secretKeyRef, "
                    "written $(VAR) in the argument)", path, container.key, check="argument"))
            flag = text if text.startswith("-") and "=" not in text \
                and params.names_secret(text.lstrip("-")) else ""
    return findings


# A flag that starts with one of these counts what the rest names (vLLM's
# --max-num-batched-token 8192, --max-tokens): its number is a setting, not a secret.
_COUNTING = frozenset({"MAX", "MIN", "NUM"})


def _ends_in_secret(flag: str, params: PlaintextSecretParams) -> bool:
    """Whether a flag's name ends in the secret itself (--password, --api-key), so that even
    a number given it is one; not a flag that counts (--max-num-batched-token)."""
    return params.ends_in_secret(flag) and name_words(flag)[0] not in _COUNTING


# A ConfigMap key that names a file (no-plaintext-secrets.yaml, app.properties): its value is
# a file's content, judged by the credentials in it, not by its name.
_FILE_EXTENSIONS = frozenset({"yaml", "yml", "json", "toml", "ini", "conf", "cfg", "config",
                              "properties", "xml", "txt", "env", "sh", "py", "js", "tpl",
                              "j2", "md", "csv", "sql", "lua", "rego", "html"})


def _is_file(key: str) -> bool:
    return "." in key and key.rsplit(".", 1)[1].lower() in _FILE_EXTENSIONS


def _config_map(workload: Workload, params: PlaintextSecretParams) -> list[Finding]:
    """A ConfigMap's data: a key named like a secret with a literal value, or any value in a
    well-known credential format. What reads it (envFrom, configMapKeyRef, a volume) gets it
    in plaintext, so it is judged where it is written."""
    findings = []
    for field in ("data", "binaryData"):
        data = workload.obj.get(field)
        if not is_mapping(data):
            continue
        for key, value in data.items():
            if not isinstance(key, str):
                continue
            if params.names_secret(key) and not _is_file(key) \
                    and holds_a_secret(value, params.ends_in_secret(key)):
                findings.append(Finding(
                    f"{field} key {key} holds a literal value, which a ConfigMap stores and "
                    "shows in plaintext; move it into a Secret (secretKeyRef, secretRef or a "
                    "secret volume read it the same way)", (field, key), check="configmap"))
                continue
            # binaryData holds base64, in which no format is spelled out
            kind = credential_format(value) if field == "data" and isinstance(value, str) \
                else ""
            if kind:
                findings.append(Finding(
                    f"{field} key {key} holds {kind}, which a ConfigMap stores and shows in "
                    "plaintext; move it into a Secret", (field, key), check="configmap"))
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
