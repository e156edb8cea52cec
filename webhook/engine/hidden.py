"""Values of an object that no message may show: env values, whatever a secret key holds, and
the values of probe `httpHeaders` whose names look secret (Authorization, X-API-Key).

A denial, a warning or an audit annotation goes to the client, the API server's audit log and
the webhook's log. A policy's messageExpression is the user's code, so instead of trusting it
it is evaluated on the object with these values replaced by HIDDEN: whatever it does with a
value (concatenate, slice, base64) it does with HIDDEN. Error texts, which can quote what an
expression read, have the values cut out with `hide`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from webhook.engine.rules.secrets import PlaintextSecretParams

HIDDEN = "(hidden)"
_NAMES = PlaintextSecretParams()  # the default words: DB_PASSWORD, api-key, tls.key...
# A shorter value matches as a whole word only: "1" or "no" would match most texts anyway.
_SHORT = 4


# HTTP headers that carry credentials though their names hold none of the secret words.
_SECRET_HEADERS = frozenset({"AUTHORIZATION", "PROXY-AUTHORIZATION", "COOKIE", "SET-COOKIE"})
HEADERS = "httpHeaders"  # a probe's httpGet headers: a list of {name, value}


def _names_secret(key: Any) -> bool:
    return isinstance(key, str) and _NAMES.names_secret(key)


def secret_header(name: Any) -> bool:
    """Authorization, Cookie, X-API-Key, X-Auth-Token, PRIVATE-TOKEN... : a probe header whose
    value is a credential (the injected startupProbe copies the liveness probe's headers)."""
    return isinstance(name, str) and (name.strip().upper() in _SECRET_HEADERS
                                      or _NAMES.names_secret(name))


def _redacted_headers(headers: Any) -> Any:
    """The headers with the value of each secret-named one hidden; the same list otherwise."""
    if not isinstance(headers, list):
        return headers
    items = [{**entry, "value": redacted(entry["value"], True)}
             if isinstance(entry, Mapping) and "value" in entry and secret_header(entry.get("name"))
             else entry for entry in headers]
    return items if any(a is not b for a, b in zip(items, headers, strict=True)) else headers


def redacted(value: Any, secret: bool = False) -> Any:
    """`value` with every hidden string replaced by HIDDEN: each string of an `env` entry but
    its name, and each string under a key that names a secret. Only what changes is copied."""
    if isinstance(value, str):
        return HIDDEN if secret and value else value
    if isinstance(value, Mapping):
        changed = {}
        for key, item in value.items():
            if key == "env":
                new = _redacted_env(item)
            elif key == HEADERS and not secret:
                new = _redacted_headers(item)
            else:
                new = redacted(item, secret or _names_secret(key))
            if new is not item:
                changed[key] = new
        return {**value, **changed} if changed else value
    if isinstance(value, list):
        items = [redacted(item, secret) for item in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    return value


def _redacted_env(env: Any) -> Any:
    if not isinstance(env, list):
        return redacted(env, True)
    items = [{key: item if key == "name" else redacted(item, True)
              for key, item in entry.items()} if isinstance(entry, Mapping)
             else redacted(entry, True) for entry in env]
    return items


def redacted_at(path: Sequence[str], value: Any) -> Any:
    """`value` as `redacted` would show it at `path` (a JSON pointer's tokens) in an object:
    under an env entry but its name, or under a key that names a secret, every string is
    hidden. For a difference between two objects (a patch), whose values sit deep inside."""
    secret = False
    for position, key in enumerate(path):
        if key == "env":
            rest = path[position + 1:]
            if not rest:
                return _redacted_env(value)
            if len(rest) == 1:
                return _redacted_env([value])[0] if isinstance(value, Mapping) \
                    else redacted(value, True)
            return value if len(rest) == 2 and rest[1] == "name" else redacted(value, True)
        if key == HEADERS:  # a header's name may be out of sight: hide all but names
            rest = path[position + 1:]
            if not rest:
                return _redacted_headers(value)
            if len(rest) == 1:
                return _redacted_headers([value])[0]
            return value if rest[1] == "name" else redacted(value, True)
        secret = secret or _names_secret(key)
    return redacted(value, secret)


def hidden_values(*objects: Any) -> frozenset[str]:
    """The strings `redacted` replaces, found in one pass over each object."""
    found: set[str] = set()
    stack: list[tuple[Any, bool]] = [(obj, False) for obj in objects]
    while stack:
        node, secret = stack.pop()
        if isinstance(node, str):
            if secret and node.strip():
                found.add(node.strip())
        elif isinstance(node, Mapping):
            for key, item in node.items():
                if key == "env" and isinstance(item, list):
                    for entry in item:
                        if isinstance(entry, Mapping):
                            stack.extend((v, True) for k, v in entry.items() if k != "name")
                        else:
                            stack.append((entry, True))
                elif key == HEADERS and isinstance(item, list):
                    stack.extend((entry.get("value"), True) for entry in item
                                 if isinstance(entry, Mapping)
                                 and secret_header(entry.get("name")))
                else:
                    stack.append((item, secret or key == "env" or _names_secret(key)))
        elif isinstance(node, list):
            stack.extend((item, secret) for item in node)
    return frozenset(found)


def hidden_in(value: Any, conceal: Callable[[str], str]) -> Any:
    """`value` (a patch) with each of its strings passed through `conceal` (made by `hiding`);
    the same object when none changes. Only what changes is copied."""
    return value if conceal is _unchanged else _hidden_in(value, conceal)


def _hidden_in(value: Any, conceal: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return conceal(value)
    if isinstance(value, Mapping):
        changed = {key: _hidden_in(item, conceal) for key, item in value.items()}
        return value if all(changed[key] is item for key, item in value.items()) \
            else changed
    if isinstance(value, list | tuple):
        items = [_hidden_in(item, conceal) for item in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return tuple(items) if isinstance(value, tuple) else items
    return value


def hide(text: str, values: Iterable[str]) -> str:
    """`text` with each of `values` in it replaced by HIDDEN, in one pass: the leftmost value
    first, the longest there, so a value inside another goes with it."""
    return hiding(values)(text)


def hiding(values: Iterable[str]) -> Callable[[str], str]:
    """`hide` with `values` fixed, in time linear in the text and the values together.

    An Aho-Corasick automaton of the values read backwards: reading a text from its end, the
    state at each position names the values that start there (the longest of at least
    `_SHORT` characters, and the lengths of the shorter ones, both worked out per state once).
    A substring test and an alternation per value took their number times the text's length:
    20,000 values against 1 MB, hours. An Aho-Corasick library's leftmost-longest matching
    cannot skip a short value that sits inside a word and look again at the next position
    without searching anew from there, which is quadratic at worst; its overlapping matches
    can be as many as the text's length times the values' distinct lengths.
    """
    goto: list[dict[str, int]] = [{}]
    ends: list[int] = [0]  # the length of the value a state spells, 0 for none
    for value in set(values):
        state = 0
        for char in reversed(value):
            following = goto[state].get(char)
            if following is None:
                following = goto[state][char] = len(goto)
                goto.append({})
                ends.append(0)
            state = following
        ends[state] = len(value)
    if len(goto) == 1:
        return _unchanged
    fail = [0] * len(goto)
    longest = [0] * len(goto)  # the longest value of _SHORT characters or more starting here
    shorts: list[tuple[int, ...]] = [()] * len(goto)  # the shorter ones' lengths, longest first
    queue = deque([0])
    while queue:  # breadth first: a state's failure link is shallower than it
        state = queue.popleft()
        for char, child in goto[state].items():
            link = fail[state]
            while link and char not in goto[link]:
                link = fail[link]
            fail[child] = goto[link].get(char, 0) if state else 0
            own = ends[child]
            longest[child] = own if own >= _SHORT else longest[fail[child]]
            shorts[child] = ((own,) if 0 < own < _SHORT else ()) + shorts[fail[child]]
            queue.append(child)

    def conceal(text: str) -> str:
        starts = []  # (position, state) where some value starts, from the end
        state = 0
        for position in range(len(text) - 1, -1, -1):
            char = text[position]
            while state and char not in goto[state]:
                state = fail[state]
            state = goto[state].get(char, 0)
            if longest[state] or shorts[state]:
                starts.append((position, state))
        parts: list[str] = []
        done = 0
        for position, state in reversed(starts):
            if position < done:
                continue
            size = longest[state] or next(
                (size for size in shorts[state] if _alone(text, position, position + size)), 0)
            if size:
                parts += (text[done:position], HIDDEN)
                done = position + size
        return "".join((*parts, text[done:])) if parts else text

    return conceal


def _alone(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] is no part of a longer word of `[\\w-]` (`\\w` as Python's
    `re` reads it: what `str.isalnum` accepts, and `_`)."""
    return (start == 0 or not _in_word(text[start - 1])) \
        and (end == len(text) or not _in_word(text[end]))


def _in_word(char: str) -> bool:
    return char.isalnum() or char in "_-"


def _unchanged(text: str) -> str:
    return text
