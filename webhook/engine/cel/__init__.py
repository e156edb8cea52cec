"""CEL expressions: compiled when policies load, evaluated once per object or per container.

The one place CEL lives, for the engine and the exporter. The CEL is Kubernetes' own: the Go
library beside this module (kubecel/, loaded by `kubecel`) compiles a policy's expressions as
kube-apiserver's ValidatingAdmissionPolicy and MutatingAdmissionPolicy plugins do (the
release's base environment, composited `variables`, the plugins' return types) and evaluates
them with the plugins' cost accounting: the per-call limit, and the budget of a policy's
evaluation (RuntimeCELCostBudget; its matchConditions' own). Values, errors and costs are
the API server's. webhook.engine.rules.cel turns a policy's expressions into findings.

quickq-guard's scopes add dynamic variables the export rewrites for the API server: `podSpec`,
and in `scope: container` `container` and `containerGroup`, bound per container.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from webhook.engine.cel import kubecel
from webhook.engine.cel_errors import CelError as CelError
from webhook.engine.cel_errors import EvaluationError as EvaluationError
from webhook.engine.cel_errors import TooCostly
from webhook.engine.linear import Pattern

# The variables of ValidatingAdmissionPolicy, and what quickq-guard adds for its scopes.
OBJECT_VARIABLES = ("object", "oldObject", "request", "params", "namespaceObject",
                    "variables", "podSpec")
CONTAINER_VARIABLES = (*OBJECT_VARIABLES, "container", "containerGroup")
MAX_EXPRESSION_LENGTH = 10_000  # characters; a policy is read by people
# Kubernetes' limits (k8s.io/apiserver/pkg/apis/cel): per evaluation of one expression (the
# library's environment applies it), for a policy's evaluation of one review, and for its
# matchConditions.
PER_CALL_LIMIT = 1_000_000
POLICY_BUDGET = 10_000_000
MATCH_CONDITIONS_BUDGET = 2_500_000
Scope = Literal["object", "container"]
# What an expression must yield, as the plugins' accessors declare it: a validation or
# matchCondition a bool, a messageExpression a string, a mutation a list of JSONPatch; `any`
# (a variable, quickq-guard's forEach items) anything.
Kind = Literal["bool", "string", "jsonpatch", "any"]

# The review's lists a container-scope expression reads its container from (review_activation).
CONTAINERS, GROUPS = "qq__containers", "qq__groups"
PODS, POD_OF, PARAMS = "qq__pods", "qq__pod_of", "qq__params"


@dataclass(slots=True)
class Budget:
    """What is left of a policy's cost budget for one review (each evaluation spends what
    the library counted)."""

    left: int = POLICY_BUDGET


class Program:
    """A policy's expressions, compiled in the library of the process that evaluates them
    (`handle` there): a process forked from one where the Go runtime started may hang, so
    `check` loads its policies for its workers `later()` and each worker compiles them on
    first use."""

    __slots__ = ("__weakref__", "_handle", "_pid", "key", "scope", "spec")

    def __init__(self, spec: bytes, scope: Scope, key: str) -> None:
        self.spec, self.scope, self.key = spec, scope, key
        self._handle, self._pid = 0, 0

    @property
    def handle(self) -> int:
        if self._pid != os.getpid():
            try:
                compiled = kubecel.compile_policy(orjson.loads(self.spec))
            except RuntimeError as error:
                raise EvaluationError(str(error)) from None
            self.compiled(compiled)
        return self._handle

    def compiled(self, compiled: Mapping[str, Any]) -> None:
        """The library's answer to compiling `spec` in this process."""
        self._handle, self._pid = int(compiled["handle"]), os.getpid()
        weakref.finalize(self, kubecel.release, self._handle)


_later = False  # later(): compile each policy where it is first evaluated


@contextlib.contextmanager
def later() -> Iterator[None]:
    """Policies loaded inside are compiled when first evaluated, in the process that
    evaluates them, and neither the library nor the Go runtime starts while they load. Only
    for policies already loaded once (their problems found): `check` loads them so in a
    throwaway process first (webhook.cli.judge.load_for_workers)."""
    global _later
    before, _later = _later, True
    try:
        yield
    finally:
        _later = before


def compiles_later() -> bool:
    """Whether policies loading now are compiled on first use (see later())."""
    return _later


@dataclass(frozen=True, slots=True)
class Batch:
    """Expressions of a policy (indices into its sources, two or more) also evaluated
    together, as the list of their values: one evaluation, in which a variable they read is
    evaluated once. `masked`: only the items evaluate() is told it `wanted` are evaluated,
    the others are null (the messages of the validations that failed)."""

    indices: tuple[int, ...]
    masked: bool = False


@dataclass(frozen=True, slots=True)
class Expression:
    """A compiled expression, the `variables.<name>` it reads and the top-level names it
    uses (so that an activation holds only what some expression reads). `program` is its
    policy's and `index` picks it there; `bound`: the text with the variables it reads bound
    in it, for the fast paths that read the text (selects_only)."""

    text: str
    program: Program | None
    references: frozenset[str]
    names: frozenset[str]
    bound: str = ""
    index: int = 0


@dataclass(frozen=True, slots=True)
class Source:
    """One expression of a policy as written, for compile_policy: `field` names it in a
    problem; `kind`, what it must yield."""

    field: str
    text: str
    kind: Kind = "any"


def compile_expression(text: str, scope: Scope, kind: Kind = "any", key: str = "") -> Expression:
    """One expression compiled alone, for the scope's variables. `key`: the policy's, whose
    params it reads from a review's activation. Raises CelError."""
    _check_length(text)
    expressions, _ = compile_policy(scope, (), [Source("", text, kind)], key=key)
    return expressions[0]


def _check_length(text: str) -> None:
    if not isinstance(text, str) or not text.strip():
        raise CelError("the expression is empty")
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise CelError(f"the expression is {len(text)} characters long; "
                       f"at most {MAX_EXPRESSION_LENGTH} are allowed")


def compile_policy(scope: Scope, variables: Sequence[tuple[str, Source]],
                   sources: Sequence[Source], batches: Sequence[Batch] = (), key: str = ""
                   ) -> tuple[list[Expression], list[Expression | None]]:
    """The expressions of one policy, compiled together, once, as the admission plugins
    compile a policy: its variables stored in the composited environment (each evaluated
    only when an expression reads it, at most once per evaluation; its error fails only the
    expressions that read it; a variable reads only the ones before it), each expression an
    Expression with its `index`. `batches`: each also evaluated together (see Batch), its
    Expression returned second (None for a batch of fewer than two). `key`: the policy's,
    for its params. Raises CelError, starting with the field of the expression at fault."""
    for source in [*(source for _, source in variables), *sources]:
        try:
            _check_length(source.text)
        except CelError as error:
            raise CelError(_at(source.field, str(error))) from None
    if not sources:
        return [], [None] * len(batches)
    kept = [batch for batch in batches if len(batch.indices) > 1]
    spec = {"scope": scope, "params": True,
            "variables": [{"name": name, "expression": source.text}
                          for name, source in variables],
            "expressions": [{"expression": source.text, "kind": source.kind}
                            for source in sources],
            "batches": [{"indices": list(batch.indices), "masked": batch.masked}
                        for batch in kept]}
    program = Program(orjson.dumps(spec), scope, key)
    if not _later:
        try:
            compiled = kubecel.compile_policy(spec)
        except RuntimeError as error:
            raise CelError(str(error)) from None
        program.compiled(compiled)
        problems = [(source.field, problem) for (_, source), problem
                    in zip(variables, compiled["variableErrors"], strict=True) if problem]
        problems += [(source.field, problem) for source, problem
                     in zip(sources, compiled["errors"], strict=True) if problem]
        if problems:
            where, problem = problems[0]
            raise CelError(_at(where, compile_problem(problem, scope)))
    texts = [(name, source.text) for name, source in variables]
    reads: dict[str, set[str]] = {}  # what each variable reads, with what those read
    uses: dict[str, set[str]] = {}
    for name, source in variables:  # a variable reads only earlier ones
        reads[name] = variable_references(source.text)
        uses[name] = _top_level_names(source.text)
        for earlier in list(reads[name]):
            reads[name] |= reads.get(earlier, set())
    expressions = []
    for index, source in enumerate(sources):
        references = variable_references(source.text)
        names = _top_level_names(source.text)
        for name in references:  # and what the variables it reads use
            for other in {name, *reads.get(name, ())}:
                names |= uses.get(other, set())
        expressions.append(Expression(
            source.text, program, frozenset(references), frozenset(names),
            bound_text(source.text, texts) if references else "", index))
    together: list[Expression | None] = []
    for batch in batches:
        if batch not in kept:
            together.append(None)
            continue
        parts = [expressions[index] for index in batch.indices]
        together.append(Expression(
            "\n".join(e.text for e in parts), program,
            frozenset().union(*(e.references for e in parts)),
            frozenset().union(*(e.names for e in parts)),
            "\n".join(e.bound or e.text for e in parts), len(sources) + kept.index(batch)))
    return expressions, together


def _at(field: str, problem: str) -> str:
    return f"{field}: {problem}" if field else problem


def variable(text: str) -> Expression:
    """A policy's variable, as the policy keeps it: it is compiled in the composited
    environment of the policy's expressions (compile_policy), not alone."""
    return Expression(text, None, frozenset(variable_references(text)),
                      frozenset(_top_level_names(text)))


def bound_text(text: str, variables: Sequence[tuple[str, str]]) -> str:
    """The expression with the variables it reads, and the ones they read, bound in it by
    `cel.bind`: what it reads, for selects_only."""
    needed = set(variable_references(text))
    for name, variable in reversed(variables):  # a variable reads only earlier ones
        if name in needed:
            needed |= variable_references(variable)
    if not needed:
        return text
    bound = f"(\n{bound_names(text)}\n)"
    for name, variable in reversed(variables):
        if name in needed:
            bound = f"cel.bind({BOUND}{name}, (\n{bound_names(variable)}\n), {bound})"
    return bound


BOUND = "variables__"  # variables.name is read as variables__name


def bound_names(text: str) -> str:
    """`variables.name` written as the identifier `variables__name` (BOUND + name): what
    cel.bind binds in a policy's program, and what the export's check declares with the
    variable's type."""
    pieces = [[match.lastgroup or "other", match.group()] for match in _TOKEN.finditer(text)]
    significant = [i for i, (kind, _) in enumerate(pieces) if kind != "space"]
    for before, first, dot, name in zip([None, *significant], significant, significant[1:],
                                        significant[2:], strict=False):
        if (pieces[first][1] == "variables" and pieces[dot][1] == "."
                and pieces[name][0] == "name"
                and (before is None or pieces[before][1] != ".")):
            pieces[first][1] = BOUND + pieces[name][1]
            pieces[dot][1] = pieces[name][1] = ""
    return "".join(value for _, value in pieces)


_POSITION = re.compile(r"ERROR: <input>:(\d+):(\d+): ")


def compile_problem(message: str, scope: Scope) -> str:
    """The API server's message with positions in words: `line 1, column 12: undeclared
    reference to 'x'` and the caret lines below it."""
    text = message.strip().removeprefix("compilation failed: ")
    text = _POSITION.sub(lambda m: f"line {m.group(1)}, column {m.group(2)}: ", text)
    text = text.replace(" (in container '')", "")
    if scope == "object" and "undeclared reference to 'container" in text:
        text += "\n(`container` exists only in a policy with `scope: container`)"
    return text


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Bound:
    """A review's variables, parsed once in the library (`handle` there). `known`: results
    evaluated ahead (prefetch), by (program, expression index, container)."""

    handle: int
    known: dict[tuple[Program, int, int], dict[str, Any]] = field(default_factory=dict)


def prefetch(bound: Bound, plans: Sequence[tuple[Expression, int, Sequence[int]]]) -> None:
    """Evaluate ahead, in one call, what a review's policies will ask first (their
    matchConditions and validations): (expression, the budget it starts from, the containers
    it is evaluated for, -1 for none). evaluate() takes
    a result from here only where it equals what its own evaluation would give: no error,
    and a cost within the budget it is given (evaluation is deterministic, so one that
    succeeds within a larger budget succeeds the same within any budget it fits). Anything
    else, or a failed call, is evaluated again as before."""
    calls: list[list[Any]] = []
    keys: list[list[tuple[Program, int, int]]] = []
    by_program: dict[int, int] = {}
    for expression, budget, containers in plans:
        program = expression.program
        if program is None:
            continue
        try:
            handle = program.handle
        except EvaluationError:
            continue
        at = by_program.get(handle)
        if at is None:
            at = by_program[handle] = len(calls)
            calls.append([handle, []])
            keys.append([])
        for container in containers:
            calls[at][1].append({"i": expression.index, "c": container, "p": program.key,
                                 "b": budget})
            keys[at].append((program, expression.index, container))
    if not calls:
        return
    try:
        answers = kubecel.evaluate_all(bound.handle, orjson.dumps(calls))
    except RuntimeError:
        return
    for results, named in zip(answers, keys, strict=True):
        for result, key in zip(results or (), named, strict=True):
            if not result.get("e"):
                bound.known[key] = result


UNREPRESENTABLE = ("the object holds a value CEL cannot represent (a number beyond 64 bits, "
                   "or a map key that is not a string)")


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (tuple, frozenset, set)):
        return list(value)
    raise TypeError


def activation(scope: Scope, data: Mapping[str, Any]) -> Bound:
    """The variables of evaluations, parsed once and shared by them (the scope is the
    compiled expressions'; one activation serves both). Raises EvaluationError."""
    return review_activation(data)


def review_activation(data: Mapping[str, Any]) -> Bound:
    """The variables of every CEL evaluation of a review: `object`, `oldObject`, `request`,
    `namespaceObject`, `podSpec`; either `container` and `containerGroup` (the review's one
    container), or CONTAINERS, GROUPS, POD_OF and PODS (evaluate's `container` indexes
    them); and PARAMS, every policy's params by its key. Raises EvaluationError."""
    try:
        encoded = orjson.dumps({name: value for name, value in data.items()
                                if name != "variables"}, default=_plain,
                               option=orjson.OPT_NON_STR_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        raise EvaluationError(UNREPRESENTABLE) from None
    try:
        handle = kubecel.activation(encoded)
    except RuntimeError:
        raise EvaluationError(UNREPRESENTABLE) from None
    bound = Bound(handle)
    weakref.finalize(bound, kubecel.release, handle)
    return bound


def evaluate(expression: Expression, bound: Bound, container: int | None = None,
             wanted: frozenset[int] | None = None, budget: Budget | None = None) -> Any:
    """The expression's value as JSON data (an int stays an int; a timestamp or duration in
    its JSON form); with `container`, the index of the container judged in a
    review_activation's lists; `wanted`: the items of a masked Batch to evaluate. `budget`:
    its policy's, which the evaluation spends (a fresh one without). Raises EvaluationError,
    TooCostly past the budget."""
    return _result(expression, bound, container, wanted, budget)["v"]


def evaluate_typed(expression: Expression, bound: Bound, container: int | None = None
                   ) -> tuple[str, Any]:
    """(CEL type name, value as evaluate() gives it), for tools that compare types."""
    result = _result(expression, bound, container, None, None)
    return str(result.get("t", "")), result["v"]


def _result(expression: Expression, bound: Bound, container: int | None,
            wanted: frozenset[int] | None, budget: Budget | None) -> dict[str, Any]:
    program = expression.program
    if program is None:
        raise EvaluationError("a variable is evaluated by the expressions that read it")
    if wanted is None and bound.known:
        known = bound.known.get((program, expression.index, -1 if container is None
                                 else container))
        if known is not None and (budget is None or int(known.get("c", 0)) <= budget.left):
            if budget is not None:
                budget.left -= int(known.get("c", 0))
            return known
    request: dict[str, Any] = {"i": expression.index,
                               "c": -1 if container is None else container,
                               "p": program.key}
    if budget is not None:
        request["b"] = budget.left
    if wanted is not None:
        request["w"] = sorted(wanted)
    try:
        result = kubecel.evaluate(program.handle, bound.handle, orjson.dumps([request]))[0]
    except RuntimeError as error:
        raise EvaluationError(str(error)) from None
    if budget is not None:
        budget.left -= int(result.get("c", 0))
    failure = result.get("e")
    if failure:
        if result.get("budget"):
            raise TooCostly(str(failure))
        raise EvaluationError(_clean(str(failure), expression.bound or expression.text))
    return result


_MISSING_KEY = Pattern(r"(?s)^no such key: (.*)$")
_BAD_PATTERN = Pattern(r"(?s)^(.*?error parsing regexp: [^:]*): (.*)$")


def _clean(text: str, source: str) -> str:
    """The library's message, without what it quotes from the object: a missing key or a
    pattern stays only when the expression itself spells it, since a value read from the
    object may be a secret."""
    missing = _MISSING_KEY.match(text)
    if missing:
        key = missing.group(1)
        return text if key in _spelled(source) else "no such key (a key taken from the object)"
    pattern = _BAD_PATTERN.match(text)
    if pattern:
        return text if any(part in _spelled(source) for part in pattern.group(2).split("`")
                           if part) else pattern.group(1)
    return text


def _spelled(source: str) -> set[str]:
    """The names and string literals an expression spells out."""
    return {value if kind == "name" else value.lstrip("rRbB").strip("'\"")
            for kind, value in tokens(source) if kind in ("name", "string")}


# --- a small scanner: CEL's lexical grammar is enough to find `variables.<name>` ---------

_TOKEN = re.compile(r"""
    (?P<space>\s+|//[^\n]*)
  | (?P<string>[rRbB]{0,2}(?:\"\"\"(?:\\.|[^\\])*?\"\"\"|'''(?:\\.|[^\\])*?'''
                          |"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<other>.)
""", re.VERBOSE | re.DOTALL)


def tokens(text: str) -> Iterator[tuple[str, str]]:
    """(kind, text) of each token but spaces and comments; kind is string, name or other."""
    for kind, value in lex(text):
        if kind != "space":
            yield kind, value


def lex(text: str) -> list[tuple[str, str]]:
    """(kind, text) of every token, spaces and comments included (kind `space`): joined, they
    give the expression back, so a tool can rename a variable and keep the rest as written."""
    return [(match.lastgroup or "other", match.group()) for match in _TOKEN.finditer(text)]


def jsonpatch_literals(text: str, call: str = "") -> str:
    """MutatingAdmissionPolicy writes `JSONPatch{op: "add", path: ..., value: ...}`; the
    runtime has no such type, so each becomes the map `{"op": "add", ...}` it stands for.
    With `call`, each becomes `call({"op": dyn("add"), ...})` instead: what the export's
    check declares to yield a JSONPatch, as the literal does in Kubernetes."""
    pieces = lex(text)
    significant = [i for i, (kind, _) in enumerate(pieces) if kind != "space"]
    following = dict(itertools.pairwise(significant))
    out = [value for _, value in pieces]
    depth = 0  # brackets open inside the current JSONPatch literal
    expect_key = expect_colon = in_value = False
    for index in significant:
        kind, value = pieces[index]
        if depth == 0:
            after = following.get(index)
            if kind == "name" and value == "JSONPatch" and after is not None \
                    and pieces[after][1] == "{":
                out[index] = f"{call}(" if call else ""
                depth, expect_key = -1, True  # the literal's `{` comes next
            continue
        if value in "{[(":
            depth = 1 if depth == -1 else depth + 1
        elif value in "}])":
            depth -= 1
            if depth == 0 and call:
                out[index] = (")" if in_value else "") + value + ")"
                in_value = False
        elif value == "," and depth == 1:
            if call:
                out[index] = (")" if in_value else "") + value
            in_value, expect_key = False, True
        elif kind == "name" and expect_key and depth == 1:
            out[index] = f'"{value}"'
            expect_key, expect_colon = False, True
        elif value == ":" and expect_colon and depth == 1:
            if call:
                out[index] = ": dyn("
            expect_colon, in_value = False, True
    return "".join(out)


def selects_only(text: str, name: str, left_out: frozenset[str]) -> bool:
    """Whether every use of the variable `name` in `text` selects one field spelled out
    (`podSpec.os`, `podSpec.?hostNetwork`) that is not in `left_out`: then a value without
    those fields gives the same result, since nothing else of it can be seen (no `size()`,
    no iteration, no `string()`, no key computed at run time)."""
    significant = list(tokens(text))
    for index, (kind, value) in enumerate(significant):
        if kind != "name" or value != name or (index and significant[index - 1][1] == "."):
            continue
        after = [token for _, token in significant[index + 1:index + 5]] + ["", "", "", ""]
        if after[0] != ".":
            return False
        field, following = (after[2], after[3]) if after[1] == "?" else (after[1], after[2])
        if field in left_out or following == "(" or not re.fullmatch(
                r"[A-Za-z_][A-Za-z0-9_]*", field):
            return False  # a field left out, a method (size, all, map...), not a name
    return True


def _names(text: str, name: str) -> bool:
    """Whether `text` reads the variable `name` (spelled out first: most texts do not, and
    a policy's whole program is read so when it loads)."""
    return name in text and name in _top_level_names(text)


def _top_level_names(text: str) -> set[str]:
    """Names not after a `.`: the variables an expression may read (and macro variables,
    which only make the set larger than needed)."""
    found = set()
    previous = ""
    for kind, value in tokens(text):
        if kind == "name" and previous != ".":
            found.add(value)
        previous = value if kind != "string" else ""
    return found


def variable_references(text: str) -> set[str]:
    """The names of the `variables.<name>` the expression reads."""
    found = set()
    window: list[str] = []
    for kind, value in tokens(text):
        window = [*window[-2:], value if kind != "string" else ""]
        if len(window) == 3 and window[0] == "variables" and window[1] == "." \
                and kind == "name":
            found.add(value)
    return found
