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
- converting the variables for an activation costs CONVERT_COST per node (measured: the
  runtime converts all of what it is given, 0.5 us a node); the containers of a pod spec
  share one activation, so podSpec and object are charged once, not once per container;
- an evaluation of a container-scope expression is estimated on the sizes of what it can
  read: the shared variables and its own container, not the other containers;
- a string function costs a tenth of a unit per character, as Kubernetes counts (measured:
  join, lowerAscii, matches, indexOf stay under it), replace and split BUILD_COST (measured
  0.2-0.85), of the longest string in the data, each `replace` multiplying that by its
  longest literal (its output may grow so); on a comprehension's element the strings read
  over all iterations are at most all of the data's characters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, NamedTuple

from webhook.engine.cel import EvaluationError, tokens

STATIC_LIMIT = 10_000_000
PER_CALL_LIMIT = 1_000_000
REVIEW_BUDGET = 10_000_000
ITERATIONS_MAX = 10_000  # the runtime's own comprehension limit
BODY_MAX = 3 * 1024 * 1024  # the largest review; no string or list in one is longer
CONVERT_COST = 10  # per node: conversion (0.5 us) and the activation's own work, measured
BUILD_COST = 0.5  # per character, replace and split (measured 0.2-0.85 us per 10)

MACROS = frozenset({"all", "exists", "exists_one", "existsOne", "map", "filter",
                    "transformList", "transformMap", "transformMapEntry", "sortBy"})
# (startsWith, endsWith, size and charAt cost what their argument does, or nothing)
SCANS = frozenset({"contains", "matches", "indexOf", "lastIndexOf", "find", "findAll",
                   "substring", "isSorted"})
BUILDS = frozenset({"replace", "join", "split", "format", "lowerAscii", "upperAscii", "trim",
                    "reverse", "quote", "string", "encode", "decode"})


class TooCostly(EvaluationError):
    """Past a limit of the budget; the message quotes nothing of the object."""


class Sizes(NamedTuple):
    """What bounds an evaluation's work: nodes to convert, the longest list (or map) and
    string, and all the characters."""

    nodes: int = 0
    longest_list: int = 0
    longest_string: int = 0
    chars: int = 0

    def __add__(self, other: Any) -> Sizes:
        assert isinstance(other, Sizes)
        return Sizes(self.nodes + other.nodes, max(self.longest_list, other.longest_list),
                     max(self.longest_string, other.longest_string), self.chars + other.chars)


WORST = Sizes(nodes=BODY_MAX, longest_list=ITERATIONS_MAX, longest_string=BODY_MAX,
              chars=BODY_MAX)


def measure(value: Any) -> Sizes:
    """The sizes of a JSON-like value, in one walk (on every review: the exact types are
    tested first, since isinstance() against Mapping costs several times as much)."""
    nodes = longest_list = longest_string = chars = 0
    stack = [value]
    pop, extend = stack.pop, stack.extend
    while stack:
        item = pop()
        nodes += 1
        kind = type(item)
        if kind is str:
            size = len(item)
            chars += size
            longest_string = max(longest_string, size)
        elif kind is dict or (kind is not list and isinstance(item, Mapping)):
            longest_list = max(longest_list, len(item))
            for key in item:
                if type(key) is str or isinstance(key, str):
                    chars += len(key)
            extend(item.values())
        elif kind is list or isinstance(item, (list, tuple)):
            longest_list = max(longest_list, len(item))
            extend(item)
        elif isinstance(item, str):
            longest_string = max(longest_string, len(item))
            chars += len(item)
    return Sizes(nodes, longest_list, longest_string, chars)


def estimate(text: str, sizes: Sizes) -> int:
    """The cost of one evaluation of the expression `text` on data of `sizes`."""
    depths, functions, growth = _profile(text)
    per_list = max(1, sizes.longest_list)

    def runs(depth: int) -> int:
        return min(per_list ** depth, ITERATIONS_MAX) if depth else 1

    total = sum(count * runs(depth) for depth, count in enumerate(depths))
    for depth, per_char, replaces, joins, element in functions:
        longest = sizes.longest_string * growth ** replaces
        if joins:
            longest = max(longest, sizes.chars)
        characters = min(runs(depth) * longest, sizes.chars * growth ** replaces) \
            if element else runs(depth) * longest
        total += int(characters * per_char)
    return total


@cache
def _profile(text: str) -> tuple[tuple[int, ...], tuple[tuple[int, float, int, bool, bool],
                                                        ...], int]:
    """What estimate() needs of an expression, read once from its tokens: how many tokens
    run at each comprehension depth; each string function's depth, cost per character,
    the `replace` calls before it, whether it joins, whether it works on an element of an
    enclosing comprehension; and the growth factor of a `replace` (its longest literal)."""
    significant = [value for _, value in tokens(text)]
    literals = [len(value) for kind, value in tokens(text) if kind == "string"]
    growth = max(2, *literals) if literals else 2
    depths: list[int] = []
    functions: list[tuple[int, float, int, bool, bool]] = []
    open_: list[str | None] = []  # per open ( or [: the comprehension's variable, or None
    replaces = 0
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
        elif value in (")", "]") and open_:
            open_.pop()
        elif after == "(" and (value in SCANS or value in BUILDS) and \
                (before == "." or value == "string"):
            per_char = BUILD_COST if value in ("replace", "split") else 0.1
            element = bool(variables.intersection(_operand(significant, index)))
            functions.append((depth, per_char, replaces, value == "join", element))
            replaces += value == "replace"
    return tuple(depths), tuple(functions), growth


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
    cost = estimate(text, WORST)
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

    def sizes(self, data: Mapping[str, Any]) -> Sizes:
        total = Sizes()
        for value in data.values():
            known = self.measured.get(id(value))
            if known is None or known[0] is not value:
                known = (value, measure(value))
                self.measured[id(value)] = known
            total = total + known[1]
        return total

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
        self.costs: dict[tuple[str, Sizes], int] = {}
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
        """estimate(), once per expression and sizes (containers alike have the same)."""
        cost = self.costs.get((text, sizes))
        if cost is None:
            cost = self.costs[text, sizes] = estimate(text, sizes)
        return _limited(cost)


def _limited(cost: int) -> int:
    """The cost of one evaluation, when it is within PER_CALL_LIMIT."""
    if cost > PER_CALL_LIMIT:
        raise TooCostly(f"too costly to evaluate: its estimated cost on this object is "
                        f"{cost:,}, past the per-expression limit of {PER_CALL_LIMIT:,}; "
                        "make the object's strings and lists smaller or the expression "
                        "cheaper")
    return cost
