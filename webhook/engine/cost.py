"""A cost budget for CEL, with Kubernetes' numbers, since the runtime keeps none.

cel-expr-python stops an evaluation after 10,000 comprehension iterations and nothing else:
three chained `replace()` on a 250 KB annotation took 3.5 s, and it holds the GIL, so the
whole worker waits. Kubernetes counts a cost (about one unit per step of an evaluation, a
tenth per character a string function scans) and has three limits, used here as they are:

- STATIC_LIMIT, per expression, estimated at load for the worst object within the body
  limit (3 MiB): a policy past it is refused, naming file and expression (Kubernetes'
  StaticEstimatedCostLimit);
- PER_CALL_LIMIT, per evaluation of one expression (Kubernetes' PerCallLimit), and
- REVIEW_BUDGET, for all the CEL of one review (Kubernetes' RuntimeCELCostBudget), both
  estimated before each evaluation from the sizes of what it reads, since the runtime
  cannot be stopped once started. A container-scope policy's evaluations of a pod spec are
  all estimated before the first runs (Meter.afford): past the budget it is refused at once.

A unit is about 100 ns here (benchmarks/hostile_load.py), as Kubernetes intends, so the
budget is about a second. The estimate is deterministic, so `check` and the webhook agree.
Past a limit the policy's result is an error ("too costly to evaluate"), which follows the
policy's failure action like any evaluation error.

The estimate, from the expression's tokens and the sizes of its data:
- every token costs one unit per time it runs: once, or inside a comprehension (all, exists,
  exists_one, map, filter...) as many times as the longest list, nested ones multiplied,
  at most the runtime's 10,000 iterations;
- converting the variables a policy reads costs CONVERT_COST per node (measured: the
  runtime converts all of a variable when it is first read, 0.5 us a node), charged to each
  policy and pod spec as if it converted them alone, though a review converts them once for
  all its policies (webhook.engine.rules.cel_review): podSpec and object are charged once
  per pod spec, not once per container;
- an evaluation of a container-scope expression is estimated on the sizes of what it can
  read: the shared variables and its own container, not the other containers;
- a string function costs a tenth of a unit per character, as Kubernetes counts (measured:
  join, lowerAscii, matches, indexOf stay under it), replace and split BUILD_COST (measured
  0.2-0.85), of the longest string in the data, each `replace` multiplying that by its
  longest literal (its output may grow so); on a comprehension's element the strings read
  over all iterations are at most all of the data's characters.

What this runtime does beyond its tokens, charged at evaluation only (`runtime`), on the
sizes of this object: Kubernetes' own runtime does not do it, and a policy the API server
accepts must load here too.
- map() and filter() (and transformList, transformMap) copy the list built so far at every
  element, and keep each copy until the evaluation ends: over n elements n*n/2 copies, at
  ACCUMULATE_COST each (measured: 8,000 elements took 5.8 s and 758 MiB);
- `+` copies its operands: CONCAT_COST per character of the longest string and
  ACCUMULATE_COST per item of the longest list, once more for each earlier term of a chain,
  unless its terms are literals, params or the comprehension's element (a 2 MB annotation
  joined to 10,000 container names: 159 s and 19 GB; the containers joined to one more, per
  container: 6.6 s and 3.2 GB);
- `in` compares with every item of a list: MEMBER_COST each, unless the list is a literal
  (written out, or a variable that holds one) or params (one container in a pod's 3,000
  compared with each, per container: 3.8 s); so does `==` (or `!=`) of two of the object's
  lists, and of two of its strings CONCAT_COST per character (the pod's containers compared
  with themselves once per container: 3,000 took 10.6 s).
Where the list or string is not known from the tokens, the longest of the data is used: an
object whose lists are over about a thousand items is too costly for a policy that maps or
filters any of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, NamedTuple

from webhook.engine.cel_errors import TooCostly

STATIC_LIMIT = 10_000_000
PER_CALL_LIMIT = 1_000_000
REVIEW_BUDGET = 10_000_000
ITERATIONS_MAX = 10_000  # the runtime's own comprehension limit
BODY_MAX = 3 * 1024 * 1024  # the largest review; no string or list in one is longer
CONVERT_COST = 10  # per node: conversion (0.5 us) and the activation's own work, measured
BUILD_COST = 0.5  # per character, replace and split (measured 0.2-0.85 us per 10)
ACCUMULATE_COST = 2  # per element map() or filter() copies (measured 0.18 us)
CONCAT_COST = 0.1  # per character `+` copies, as Kubernetes counts a string's traversal
MEMBER_COST = 4  # per item `in` compares with (measured 0.4 us comparing two containers)

MACROS = frozenset({"all", "exists", "exists_one", "existsOne", "map", "filter",
                    "transformList", "transformMap", "transformMapEntry", "sortBy"})
# (startsWith, endsWith, size and charAt cost what their argument does, or nothing)
SCANS = frozenset({"contains", "matches", "indexOf", "lastIndexOf", "find", "findAll",
                   "substring", "isSorted"})
BUILDS = frozenset({"replace", "join", "split", "format", "lowerAscii", "upperAscii", "trim",
                    "reverse", "quote", "string", "encode", "decode"})
ACCUMULATING = frozenset({"map", "filter", "transformList", "transformMap",
                          "transformMapEntry"})
# Tokens that end a term of `+` or `in` (at its own bracket level).
_ENDS_TERM = frozenset(",?:&|=!<>+-")
_OPENING, _CLOSING = frozenset("([{"), frozenset(")]}")
_LITERAL_NAMES = frozenset({"true", "false", "null"})
_NUMERIC_CALLS = frozenset({"size", "int", "uint", "double"})


class Sizes(NamedTuple):
    """What bounds an evaluation's work: nodes to convert, the longest list (or map) and
    string, and all the characters; and `keyed`, by the key a value is stored under
    (`env`, `volumes`, `sysctls`), what the runtime's own costs depend on (see Keyed): the
    parts' entries one after the other, a key in several of them merged when it is read
    (`of`), so that adding sizes up, once per container, costs no more than a tuple."""

    nodes: int = 0
    longest_list: int = 0
    longest_string: int = 0
    chars: int = 0
    keyed: tuple[tuple[str, int, int, int], ...] = ()  # (key, *Keyed), see `of`

    def __add__(self, other: Any) -> Sizes:
        assert isinstance(other, Sizes)
        return Sizes(self.nodes + other.nodes, max(self.longest_list, other.longest_list),
                     max(self.longest_string, other.longest_string), self.chars + other.chars,
                     self.keyed + other.keyed)

    def of(self, key: str) -> Keyed:
        """What is stored under `key` (nothing: all zero)."""
        found = _NOTHING
        for name, longest, items, widest in self.keyed:
            if name == key:
                found = found.merged(Keyed(longest, items, widest))
        return found


class Keyed(NamedTuple):
    """What the lists (and maps) stored under one key hold: the longest, the items of all of
    them, the widest item of one (a volume's fields)."""

    longest: int = 0
    items: int = 0
    widest_item: int = 0

    def merged(self, other: Keyed) -> Keyed:
        return Keyed(max(self.longest, other.longest), self.items + other.items,
                     max(self.widest_item, other.widest_item))


_NOTHING = Keyed()


WORST = Sizes(nodes=BODY_MAX, longest_list=ITERATIONS_MAX, longest_string=BODY_MAX,
              chars=BODY_MAX)


def combined(parts: Iterable[Sizes]) -> Sizes:
    """The sizes of several values together (as `+`, merging what is keyed once)."""
    nodes = longest_list = longest_string = chars = 0
    keyed: list[tuple[str, int, int, int]] = []
    for part in parts:
        nodes += part.nodes
        longest_list = max(longest_list, part.longest_list)
        longest_string = max(longest_string, part.longest_string)
        chars += part.chars
        keyed += part.keyed
    return Sizes(nodes, longest_list, longest_string, chars, tuple(keyed))


def measure(value: Any) -> Sizes:
    """The sizes of a JSON-like value, in one walk (on every review: the exact types are
    tested first, since isinstance() against Mapping costs several times as much)."""
    nodes = longest_list = longest_string = chars = 0
    lists: dict[str, list[int]] = {}  # by key: the longest list, all items, widest item
    stack = [value]
    pop, extend = stack.pop, stack.extend
    while stack:
        item = pop()
        nodes += 1
        kind = type(item)
        if kind is str:
            size = len(item)
            chars += size
            if size > longest_string:
                longest_string = size
        elif kind is dict or (kind is not list and isinstance(item, Mapping)):
            if len(item) > longest_list:
                longest_list = len(item)
            for key, child in item.items():
                if type(key) is not str and not isinstance(key, str):
                    continue
                chars += len(key)
                held = type(child)
                if held is list or held is dict:
                    size = len(child)
                    widest = 0
                    if held is list and size and type(child[0]) in (dict, list):
                        for entry in child:
                            if (type(entry) is dict or type(entry) is list) and \
                                    len(entry) > widest:
                                widest = len(entry)
                    known = lists.get(key)
                    if known is None:
                        lists[key] = [size, size, widest]
                    else:
                        if size > known[0]:
                            known[0] = size
                        known[1] += size
                        if widest > known[2]:
                            known[2] = widest
            extend(item.values())
        elif kind is list or isinstance(item, (list, tuple)):
            if len(item) > longest_list:
                longest_list = len(item)
            extend(item)
        elif isinstance(item, str):
            longest_string = max(longest_string, len(item))
            chars += len(item)
    # in the order of the walk: the same for equal values, so equal Sizes compare equal
    keyed = tuple([(key, stored[0], stored[1], stored[2]) for key, stored in lists.items()])
    return Sizes(nodes, longest_list, longest_string, chars, keyed)


def estimate(text: str, sizes: Sizes, runtime: bool = True) -> int:
    """The cost of one evaluation of the expression `text` on data of `sizes`; `runtime`:
    with what this runtime does beyond Kubernetes' (see the module's docstring)."""
    profile = _profile(text)
    per_list = max(1, sizes.longest_list)

    def runs(depth: int) -> int:
        return min(per_list ** depth, ITERATIONS_MAX) if depth else 1

    total = sum(count * runs(depth) for depth, count in enumerate(profile.depths))
    growth = profile.growth
    for depth, per_char, replaces, joins, element in profile.functions:
        longest = sizes.longest_string * growth ** replaces
        if joins:
            longest = max(longest, sizes.chars)
        characters = min(runs(depth) * longest, sizes.chars * growth ** replaces) \
            if element else runs(depth) * longest
        total += int(characters * per_char)
    if not runtime:
        return total
    for depth, element, key, inside in profile.accumulations:
        # n*n/2 copies over a list of n: the longest stored under the key it names, else
        # the longest there is; on an element's own lists, at most the longest of them
        # times all their items
        if key is not None:
            stored = sizes.of(key)
            copies = runs(depth) * (stored.longest * (stored.longest + 1) // 2)
            if element:
                copies = min(copies, stored.longest * stored.items)
        elif inside is not None:  # the element itself: an item of the list it ranges over
            width = sizes.of(inside).widest_item
            copies = runs(depth) * (width * (width + 1) // 2)
        else:
            copies = runs(depth) * (per_list * (per_list + 1) // 2)
            if element:
                copies = min(copies, per_list * sizes.nodes)
        total += ACCUMULATE_COST * copies
    for depth, terms, replaces, element, keys, lists in profile.concatenations:
        # strings, a tenth of a unit per character of the longest; lists, ACCUMULATE_COST
        # per item of the longest stored under the keys joined
        items = max((sizes.of(key).longest for key in keys), default=0) \
            if keys is not None else per_list
        longest = sizes.longest_string * growth ** replaces
        characters = min(runs(depth) * longest, sizes.chars * growth ** replaces) \
            if element else runs(depth) * longest
        copied = 0 if not lists else min(runs(depth) * items, sizes.nodes) if element \
            else runs(depth) * items
        total += int(characters * CONCAT_COST * terms) + ACCUMULATE_COST * copied * terms
    for depth, element, key in profile.memberships:
        length = sizes.of(key).longest if key is not None else per_list
        total += MEMBER_COST * (min(runs(depth) * length, sizes.nodes) if element
                                else runs(depth) * length)
    for depth, keys in profile.comparisons:
        # item by item, character by character, as far as the shorter goes
        items = max((sizes.of(key).longest for key in keys), default=0) \
            if keys is not None else per_list
        total += runs(depth) * (MEMBER_COST * items
                                + int(CONCAT_COST * sizes.longest_string))
    return total


class _Profile(NamedTuple):
    """What estimate() needs of an expression, read once from its tokens: how many tokens
    run at each comprehension depth; each string function's depth, cost per character,
    the `replace` calls before it, whether it joins, whether it works on an element of an
    enclosing comprehension; the growth factor of a `replace` (its longest literal); and,
    for the runtime's own costs, each accumulating comprehension's (depth, on an element,
    the key its list is stored under, or when it ranges over an element itself the key of
    what that element is an item of), each `+`'s (depth, terms copied, replaces before it,
    on elements only, the keys of what it joins, whether that may be a list) and each
    `in`'s (depth, on an
    element, the key of its list) and each `==` or `!=` of two of the object's values
    (depth, the keys of what they are stored under). A key is None where the tokens do not
    tell."""

    depths: tuple[int, ...]
    functions: tuple[tuple[int, float, int, bool, bool], ...]
    growth: int
    accumulations: tuple[tuple[int, bool, str | None, str | None], ...] = ()
    concatenations: tuple[tuple[int, int, int, bool, tuple[str, ...] | None, bool], ...] = ()
    memberships: tuple[tuple[int, bool, str | None], ...] = ()
    comparisons: tuple[tuple[int, tuple[str, ...] | None], ...] = ()

    @property
    def keyed(self) -> bool:
        """Whether the estimate reads Sizes.keyed."""
        return bool(self.accumulations or self.concatenations or self.memberships
                    or self.comparisons)


@cache
def _profile(text: str) -> _Profile:
    """An expression's _Profile."""
    from webhook.engine.cel import tokens  # the CEL runtime: only where CEL policies are

    kinds = list(tokens(text))
    significant = [value for _, value in kinds]
    literals = [len(value) for kind, value in kinds if kind == "string"]
    growth = max(2, *literals) if literals else 2
    depths: list[int] = []
    functions: list[tuple[int, float, int, bool, bool]] = []
    accumulations: list[tuple[int, bool, str | None, str | None]] = []
    concatenations: list[tuple[int, int, int, bool, tuple[str, ...] | None, bool]] = []
    memberships: list[tuple[int, bool, str | None]] = []
    comparisons: list[tuple[int, tuple[str, ...] | None]] = []
    open_: list[str | None] = []  # per open ( or [: the comprehension's variable, or None
    ranges: dict[str, str | None] = {}  # a comprehension variable: the key of its list
    replaces = 0
    constant, bound = _bindings(kinds)
    for index, value in enumerate(significant):
        variables = {entry for entry in open_ if entry is not None}
        depth = sum(1 for entry in open_ if entry is not None)
        depths.extend([0] * (depth + 1 - len(depths)))
        depths[depth] += 1
        before = significant[index - 1] if index else ""
        after = significant[index + 1] if index + 1 < len(significant) else ""
        if value in ("(", "["):
            macro = value == "(" and before in MACROS and index > 1 and \
                significant[index - 2] == "."
            open_.append(after if macro else None)
            if macro:
                receiver = _operand(significant, index - 1)
                key = _list_key(receiver, bound)
                ranges[after] = key
                if before in ACCUMULATING:
                    itself = receiver[0] if len(receiver) == 1 and receiver[0] in variables \
                        else None
                    accumulations.append((depth, bool(receiver) and receiver[0] in variables,
                                          key, ranges.get(itself) if itself else None))
        elif value in (")", "]") and open_:
            open_.pop()
        elif after == "(" and (value in SCANS or value in BUILDS) and \
                (before == "." or value == "string"):
            per_char = BUILD_COST if value in ("replace", "split") else 0.1
            element = bool(variables.intersection(_operand(significant, index)))
            functions.append((depth, per_char, replaces, value == "join", element))
            replaces += value == "replace"
        elif value == "+" and kinds[index][0] == "other":
            left, earlier, keys, lists = _term_before(kinds, index, variables, constant,
                                                      bound)
            term = _term_after(kinds, index)
            right = _term_kind(term, variables, constant)
            if right == _DATA:
                key = _list_key([value for _, value in term], bound)
                keys = None if keys is None or key is None else (*keys, key)
            lists = lists or (right != _SMALL and _may_be_list(term))
            worst = max(left, right)
            if worst:
                concatenations.append((depth, earlier + 2, replaces, worst == _ELEMENT,
                                       keys if worst == _DATA else None, lists))
        elif value in ("=", "!") and after == "=" and before not in ("=", "!", "<", ">"):
            left, _, keys, _ = _term_before(kinds, index, variables, constant, bound)
            term = _term_after(kinds, index + 1)
            if left == _DATA and _term_kind(term, variables, constant) == _DATA:
                key = _list_key([value for _, value in term], bound)
                comparisons.append((depth, None if keys is None or key is None
                                    else (*keys, key)))
        elif value == "in" and kinds[index][0] == "name":
            term = _term_after(kinds, index)
            kind = _term_kind(term, variables, constant)
            if kind:
                memberships.append((depth, kind == _ELEMENT,
                                    _list_key([value for _, value in term], bound)))
    return _Profile(tuple(depths), tuple(functions), growth, tuple(accumulations),
                    tuple(concatenations), tuple(memberships), tuple(comparisons))


_SMALL, _ELEMENT, _DATA = 0, 1, 2  # what a term of `+` or `in` may hold


def _term_kind(term: list[tuple[str, str]], variables: set[str],
               constant: frozenset[str]) -> int:
    """_SMALL: literals, params, a variable holding a literal, a size or a number;
    _ELEMENT: what an enclosing comprehension's element holds; else _DATA."""
    names = [value for kind, value in term if kind == "name"]
    if not names or all(name in _LITERAL_NAMES for name in names):
        return _SMALL
    root = names[0]
    if root in variables:
        return _ELEMENT
    if root == "params" or root in constant or root in _NUMERIC_CALLS or \
            [value for _, value in term[-3:]] == ["size", "(", ")"]:
        return _SMALL
    return _DATA


# Functions whose result is a string: a `+` of them joins strings, never lists.
_STRING_RESULTS = frozenset({"join", "lowerAscii", "upperAscii", "trim", "replace",
                             "substring", "format", "string", "quote", "reverse", "charAt",
                             "encode"})


def _may_be_list(term: list[tuple[str, str]]) -> bool:
    """Whether a term of `+` may be a list: not when it is a string literal or ends with a
    call whose result is a string (`.join(', ')`, `.orValue('')`)."""
    if len(term) == 1 and term[0][0] == "string":
        return False
    if len(term) < 3 or term[-1][1] != ")":
        return True
    level, start = 0, len(term) - 1
    while start >= 0:
        level += term[start][1] == ")"
        level -= term[start][1] == "("
        if level == 0:
            break
        start -= 1
    name = term[start - 1][1] if start > 0 else ""
    if name == "orValue":
        return not (start + 2 == len(term) - 1 and term[start + 1][0] == "string")
    return name not in _STRING_RESULTS


def _ends_term(kinds: list[tuple[str, str]], index: int) -> bool:
    """Whether the token at `index` ends a term: an operator, `in`, or `?` of a conditional
    (not the `?` of an optional field, `.?name` or `[?key]`)."""
    kind, value = kinds[index]
    if kind == "name":
        return value == "in"
    if value == "?" and index and kinds[index - 1][1] in (".", "["):
        return False
    return kind == "other" and value in _ENDS_TERM


def _term_after(kinds: list[tuple[str, str]], index: int) -> list[tuple[str, str]]:
    """The tokens of the term after the operator at `index`, at its bracket level."""
    return kinds[index + 1:_term_edge(kinds, index + 1, 1)]


def _term_edge(kinds: list[tuple[str, str]], position: int, step: int) -> int:
    """Where the term that starts at `position` ends, going right (`step` 1) or left (-1) at
    its bracket level: the index of the first token past it."""
    opening, closing = (_OPENING, _CLOSING) if step > 0 else (_CLOSING, _OPENING)
    level = 0
    while 0 <= position < len(kinds):
        value = kinds[position][1]
        if value in opening:
            level += 1
        elif value in closing:
            if level == 0:
                break
            level -= 1
        elif level == 0 and _ends_term(kinds, position):
            break
        position += step
    return position


def _term_before(kinds: list[tuple[str, str]], index: int, variables: set[str],
                 constant: frozenset[str], bound: dict[str, str | None],
                 ) -> tuple[int, int, tuple[str, ...] | None, bool]:
    """What the left side of the `+` at `index` may hold (the worst of a chain's terms), how
    many `+` come before it in the chain (each copies what the earlier ones built), the
    keys of its terms that hold the object's values (None: one of them is not known), and
    whether one of those may be a list."""
    worst, earlier, end = _SMALL, 0, index
    keys: tuple[str, ...] | None = ()
    lists = False
    while True:
        start = _term_edge(kinds, end - 1, -1)
        term = kinds[start + 1:end]
        held = _term_kind(term, variables, constant)
        if held == _DATA:
            key = _list_key([value for _, value in term], bound)
            keys = None if keys is None or key is None else (*keys, key)
        lists = lists or (held != _SMALL and _may_be_list(term))
        worst = max(worst, held)
        if start < 0 or kinds[start] != ("other", "+"):
            return worst, earlier, keys, lists
        earlier += 1
        end = start


def _bindings(kinds: list[tuple[str, str]]) -> tuple[frozenset[str],
                                                      dict[str, str | None]]:
    """What the variables an expression binds hold (`cel.bind(name, (value), ...)`, how a
    policy's variables are bound): those bound to a literal (a list or map written out),
    and the key each one's value is read from (see _list_key)."""
    constant = set()
    bound: dict[str, str | None] = {}
    for index in range(len(kinds) - 6):
        if [value for _, value in kinds[index:index + 4]] != ["cel", ".", "bind", "("] or \
                kinds[index + 5][1] != ",":
            continue
        level, position, literal = 0, index + 6, True
        while position < len(kinds):
            kind, value = kinds[position]
            level += value in _OPENING
            level -= value in _CLOSING
            if level < 0 or (level == 0 and value == ","):
                break
            literal = literal and (kind != "name" or value in _LITERAL_NAMES)
            position += 1
        name = kinds[index + 4][1]
        if literal:
            constant.add(name)
        bound[name] = _list_key([value for _, value in kinds[index + 6:position]], bound)
    return frozenset(constant), bound


def _list_key(term: list[str], bound: dict[str, str | None]) -> str | None:
    """The key the value of `term` is stored under, where its tokens say so: the last field
    it selects (`podSpec.?volumes.orValue([])`: volumes; `m['a']`: a), past the
    comprehensions applied to it (a map or filter keeps or shrinks its list), or the key of
    the variable it is (a bound one); None otherwise."""
    end = len(term)
    while end and term[end - 1] == ")":  # `.name(...)` at the end: a macro, or orValue
        level, start = 0, end - 1
        while start >= 0:
            level += term[start] == ")"
            level -= term[start] == "("
            if level == 0:
                break
            start -= 1
        if start < 2 or term[start - 2] != "." or \
                term[start - 1] not in (*MACROS, "orValue", "value"):
            break
        end = start - 2
    found: str | None = None
    for position in range(end):
        value = term[position]
        following = term[position + 1] if position + 1 < end else ""
        if position and term[position - 1] in (".", "?") and following != "(" and \
                re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            found = value
        elif position and term[position - 1] in ("[", "?") and value[:1] in ("'", '"') and \
                following == "]" and "\\" not in value:
            found = value[1:-1]
    if found is None and end and term[0] in bound:
        return bound[term[0]]
    return found


def _operand(significant: list[str], index: int) -> list[str]:
    """The tokens a string function at `index` works on: the receiver of a method
    (`c.image` in `c.image.contains(...)`, `m[k]` in `m[k].contains(...)`), the argument of
    a function (`string(x)`)."""
    if index == 0 or significant[index - 1] != ".":
        level, end = 0, index + 1
        while end < len(significant):
            level += significant[end] in ("(", "[")
            level -= significant[end] in (")", "]")
            if level == 0:
                break
            end += 1
        return significant[index + 2:end]
    position = index - 2  # before the `.`
    while position >= 0:
        value = significant[position]
        if value in (")", "]"):
            closing, opening = value, "(" if value == ")" else "["
            level = 0
            while position >= 0:
                level += significant[position] == closing
                level -= significant[position] == opening
                if level == 0:
                    break
                position -= 1
            position -= 1
            continue
        if value == "?" or (position > 0 and significant[position - 1] == "."):
            position -= 1 if value == "?" else 2
            continue
        break
    return significant[max(position, 0):index - 1]


def static_problem(text: str) -> str:
    """Why the expression may cost too much on some object within the body limit, or ''."""
    cost = estimate(text, WORST, runtime=False)
    if cost <= STATIC_LIMIT:
        return ""
    return (f"estimated worst-case cost {cost:,} exceeds the per-expression limit of "
            f"{STATIC_LIMIT:,} (as Kubernetes refuses such a policy): a comprehension "
            "over a string or list that is not its element, nested comprehensions with "
            "string functions, or chained replace() on the object's strings grow with the "
            "square of the object")


@dataclass(slots=True)
class Budget:
    """One review's CEL budget; `sizes` remembers what is measured (by identity: the
    review's values live as long as it does)."""

    left: int = REVIEW_BUDGET
    measured: dict[int, tuple[Any, Sizes]] = field(default_factory=dict)
    views: dict[tuple[int, frozenset[str]], tuple[Any, dict[str, Any]]] = \
        field(default_factory=dict)

    def without(self, value: Mapping[str, Any], left_out: frozenset[str]) -> dict[str, Any]:
        """`value` without the keys `left_out`, one copy per review (so it is measured once
        whatever the number of policies that read it so)."""
        known = self.views.get((id(value), left_out))
        if known is None or known[0] is not value:
            known = (value, {key: item for key, item in value.items() if key not in left_out})
            self.views[id(value), left_out] = known
        return known[1]

    def sizes(self, data: Mapping[str, Any]) -> Sizes:
        parts = []
        for value in data.values():
            known = self.measured.get(id(value))
            if known is None or known[0] is not value:
                known = (value, measure(value))
                self.measured[id(value)] = known
            parts.append(known[1])
        return combined(parts)

    def spend(self, cost: int, what: str) -> None:
        self.left -= cost
        if self.left < 0:
            raise _spent(what)


def _spent(what: str) -> TooCostly:
    return TooCostly(f"too costly to evaluate: the review's CEL cost budget of "
                     f"{REVIEW_BUDGET:,} (about a second) is spent ({what}); the object is "
                     "too large for this policy: make it smaller or the policy cheaper")


class Meter:
    """The cost of one activation: its conversion when made, each expression before it runs."""

    def __init__(self, budget: Budget | None, data: Mapping[str, Any]) -> None:
        self.budget = budget
        self.data_sizes = budget.sizes(data) if budget is not None else Sizes()
        self.costs: dict[tuple[str, tuple[Any, ...]], int] = {}
        if budget is not None:
            budget.spend(CONVERT_COST * self.data_sizes.nodes, "converting the variables")

    def sizes(self, data: Mapping[str, Any]) -> Sizes:
        """The sizes of more variables (a pod spec's containers), or none without a
        budget."""
        return self.budget.sizes(data) if self.budget is not None else Sizes()

    def convert(self, sizes: Sizes) -> None:
        """Charge converting more variables into the activation."""
        if self.budget is not None:
            self.budget.spend(CONVERT_COST * sizes.nodes, "converting the variables")

    def before(self, text: str, where: str, sizes: Sizes | None = None) -> None:
        """Charge an evaluation of `text` (on `sizes`, else the activation's); raise when it
        alone is past PER_CALL_LIMIT."""
        if self.budget is None:
            return
        self.budget.spend(_limited(estimate(text, self.data_sizes)) if sizes is None else
                          self._cost(text, sizes), where)

    def afford(self, evaluations: Iterable[tuple[str, str, Sizes]]) -> None:
        """Raise, before any of them runs, what before() would raise on the way through these
        evaluations (text, where, sizes): a review past its budget is refused at once, where
        running until the budget is spent took its whole second. Charges nothing."""
        if self.budget is None:
            return
        left = self.budget.left
        for text, where, sizes in evaluations:
            left -= self._cost(text, sizes)
            if left < 0:
                raise _spent(where)

    def _cost(self, text: str, sizes: Sizes) -> int:
        """estimate(), once per expression and sizes (containers alike have the same; what
        is keyed counts only for an expression whose estimate reads it)."""
        known = (text, sizes if _profile(text).keyed else sizes[:4])
        cost = self.costs.get(known)
        if cost is None:
            cost = self.costs[known] = estimate(text, sizes)
        return _limited(cost)


def _limited(cost: int) -> int:
    """The cost of one evaluation, when it is within PER_CALL_LIMIT."""
    if cost > PER_CALL_LIMIT:
        raise TooCostly(f"too costly to evaluate: its estimated cost on this object is "
                        f"{cost:,}, past the per-expression limit of {PER_CALL_LIMIT:,}; "
                        "make the object's strings and lists smaller or the expression "
                        "cheaper")
    return cost
