"""CEL expressions: compiled when policies load, evaluated once per object or per container.

The one place CEL lives, for the engine and the exporter: this module compiles and runs;
`library` holds the Kubernetes CEL libraries (quantity, url, ip, regex...), `go` guards the
calls whose cel-go semantics the runtime does not have, `formatting` writes format() and
string() as Kubernetes does, and `checked` reads the type-checked program for what
Kubernetes' CEL refuses. webhook.engine.rules.cel turns a policy's expressions into findings.

The runtime is cel-expr-python, Google's C++ CEL runtime (chosen by measurement: see
benchmarks/cel_runtimes.py). It type-checks at compile time, names the line and column of
every problem, matches regular expressions with RE2 (linear time, no catastrophic
backtracking), and stops any evaluation that runs more than 10,000 comprehension iterations,
which is what bounds the time a policy can take on a hostile object.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, Literal

from cel_expr_python import cel as _cel
from cel_expr_python.ext import (
    ext_bindings,
    ext_encoders,
    ext_math,
    ext_optional,
    ext_strings,
)

from webhook.engine.cel.checked import checked_problem
from webhook.engine.cel.go import GUARDS, guarded
from webhook.engine.cel.library import KUBERNETES_FUNCTIONS, PYTHON_FUNCTIONS

# The variables of ValidatingAdmissionPolicy, and what quickq-guard adds for its scopes.
OBJECT_VARIABLES = ("object", "oldObject", "request", "params", "namespaceObject",
                    "variables", "podSpec")
CONTAINER_VARIABLES = (*OBJECT_VARIABLES, "container", "containerGroup")
MAX_EXPRESSION_LENGTH = 10_000  # characters; a policy is read by people
Scope = Literal["object", "container"]
Kind = Literal["bool", "string", "any"]


class CelError(ValueError):
    """An expression that does not compile; the message gives line, column and a caret."""


class EvaluationError(ValueError):
    """An expression that failed on this object (a missing field, no matching overload, the
    iteration budget); the message says why, never the values it read."""


# A container-scope expression runs once per container, but all the containers of a pod spec
# share one activation (see for_each_container): `qq__containers` holds them, and
# `qq__container()` is the index of the one being judged, set around each evaluation.
CONTAINERS = "qq__containers"
_CONTAINER_INDEX: ContextVar[int] = ContextVar("qq__container")
_CONTAINER_FUNCTION = _cel.FunctionDecl("qq__container", [
    _cel.Overload("qq__container_int", _cel.Type.INT, [],
                  impl=lambda: _CONTAINER_INDEX.get())])


def _environment(variables: tuple[str, ...], *functions: Any) -> Any:
    return _cel.NewEnv(
        variables=dict.fromkeys(variables, _cel.Type.DYN),
        extensions=[ext_strings.ExtStrings(), ext_optional.ExtOptional(),
                    ext_bindings.ExtBindings(), ext_math.ExtMath(), ext_encoders.ExtEncoders()],
        functions=[*KUBERNETES_FUNCTIONS, *GUARDS, *functions],
    )


# Built once: an environment only declares names and functions and is never changed.
_ENVIRONMENTS = {"object": _environment(OBJECT_VARIABLES),
                 "container": _environment(CONTAINER_VARIABLES)}
# Where the programs of for_each_container run; no policy is compiled in it as written.
_EACH_CONTAINER = _environment((*OBJECT_VARIABLES, CONTAINERS), _CONTAINER_FUNCTION)
_WANTED = {"bool": ("bool",), "string": ("string",), "any": ()}


@dataclass(frozen=True, slots=True)
class Expression:
    """A compiled expression, the `variables.<name>` it reads and the top-level names it
    uses (so that an evaluation converts only the variables it reads)."""

    text: str
    program: Any
    references: frozenset[str]
    names: frozenset[str]
    compiled: str = ""  # what was compiled, when not `text`: with its variables bound in it
    per_container: Any = None  # the program of for_each_container, in container scope


def compile_expression(text: str, scope: Scope, kind: Kind = "any",
                       literals: bool = True) -> Expression:
    """Compile for the scope's variables; a bool or string `kind` is checked as far as the
    types are known (fields of the object are dynamic). `literals`: refuse a list or map
    literal of mixed types, as Kubernetes' CEL does (a mutation's patches may be plain maps,
    which only quickq-guard reads). Raises CelError."""
    if not isinstance(text, str) or not text.strip():
        raise CelError("the expression is empty")
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise CelError(f"the expression is {len(text)} characters long; "
                       f"at most {MAX_EXPRESSION_LENGTH} are allowed")
    # Compiled with the calls the runtime gets wrong guarded (webhook.engine.cel.go); what
    # does not compile is compiled as written again, so that errors name what it wrote.
    compiled = guarded(lex(text))
    try:
        program = _ENVIRONMENTS[scope].compile(compiled)
    except RuntimeError as error:
        if compiled == text:
            raise CelError(_compile_problem(str(error), scope)) from None
        try:
            program = _ENVIRONMENTS[scope].compile(text)
        except RuntimeError as as_written:
            raise CelError(_compile_problem(str(as_written), scope)) from None
        compiled = text  # a guard that does not fit: the runtime's own function
    problem = checked_problem(program, compiled, PYTHON_FUNCTIONS)
    if problem and (literals or "expected type" not in problem):
        # said where the text as written has it, when it compiles as written
        if compiled != text:
            problem = checked_problem(_compiled_as_written(text, scope), text,
                                      PYTHON_FUNCTIONS) or problem
        raise CelError(problem)
    result = program.return_type().name().lower()
    wanted = _WANTED[kind]
    if wanted and result not in (*wanted, "dyn"):
        raise CelError(f"the expression must yield a {kind}, but it yields {result}")
    return Expression(text, program, frozenset(_variable_references(text)),
                      frozenset(_top_level_names(text)), compiled if compiled != text else "")


def _compiled_as_written(text: str, scope: Scope) -> Any:
    try:
        return _ENVIRONMENTS[scope].compile(text)
    except RuntimeError:
        return None


def with_variables(expression: Expression, variables: Sequence[tuple[str, Expression]],
                   scope: Scope, kind: Kind = "any", literals: bool = True) -> Expression:
    """The expression with the variables it reads, and the ones they read, bound in it by
    `cel.bind`: one activation then serves every expression of a container, where
    evaluating each variable apart needs a new one (and a new conversion of the object) for
    each variable that reads another. `text` stays the expression as written.
    Raises CelError."""
    needed = set(expression.references)
    for name, variable in reversed(variables):  # a variable reads only earlier ones
        if name in needed:
            needed |= variable.references
    if not needed:
        return expression
    text = f"(\n{_bound_names(expression.text)}\n)"
    for name, variable in reversed(variables):
        if name in needed:
            text = f"cel.bind({_BOUND}{name}, (\n{_bound_names(variable.text)}\n), {text})"
    try:
        inlined = compile_expression(text, scope, kind, literals)
    except CelError as error:
        raise CelError(f"with the variables it reads bound in it: {error}") from None
    return Expression(expression.text, inlined.program, expression.references, inlined.names,
                      text)


def for_each_container(expression: Expression) -> Expression:
    """The expression with a second program, that reads `container` and `containerGroup`
    from the activation's list of containers at the index evaluate() is given. Converting a
    variable is most of an evaluation's cost, and an activation converts each variable it
    reads once: an activation per container converted `podSpec` (and `object`) once per
    container, which grows with the square of the containers; one per pod spec converts them
    once. Each container is still its own evaluation (its own iteration limit, its own
    errors). Raises CelError."""
    # As written (with_variables keeps its bound text unguarded in `compiled`), then
    # guarded as compile_expression guards it, falling back to as written as it does.
    text = f"(\n{expression.compiled if expression.references else expression.text}\n)"
    for name, key in (("containerGroup", "group"), ("container", "container")):
        if name in expression.names:
            text = f"cel.bind({name}, {CONTAINERS}[qq__container()].{key}, {text})"
    program = None
    for attempt in dict.fromkeys((guarded(lex(text)), text)):
        try:
            program = _EACH_CONTAINER.compile(attempt)
            break
        except RuntimeError as error:
            problem = _compile_problem(str(error), "container")
    if program is None:
        raise CelError(f"for each container: {problem}")
    return replace(expression, per_container=program)


_BOUND = "variables__"  # variables.name is read as variables__name


def _bound_names(text: str) -> str:
    """`variables.name` written as the identifier `variables__name`."""
    pieces = [[match.lastgroup or "other", match.group()] for match in _TOKEN.finditer(text)]
    significant = [i for i, (kind, _) in enumerate(pieces) if kind != "space"]
    for before, first, dot, name in zip([None, *significant], significant, significant[1:],
                                        significant[2:], strict=False):
        if (pieces[first][1] == "variables" and pieces[dot][1] == "."
                and pieces[name][0] == "name"
                and (before is None or pieces[before][1] != ".")):
            pieces[first][1] = _BOUND + pieces[name][1]
            pieces[dot][1] = pieces[name][1] = ""
    return "".join(value for _, value in pieces)


_STATUS = re.compile(r"^[A-Z_]+: |\s*\[[A-Z_]+\]$")
_POSITION = re.compile(r"ERROR: <input>:(\d+):(\d+): ")


def _compile_problem(message: str, scope: Scope) -> str:
    """The runtime's message with its status codes removed and positions in words:
    `line 1, column 12: undeclared reference to 'x'` and the caret lines below it."""
    text = _STATUS.sub("", message.strip())
    text = _POSITION.sub(lambda m: f"line {m.group(1)}, column {m.group(2)}: ", text)
    # The type checker goes on past an unknown name and reports each use of its '*error*'
    # type as well; only the first report says what to fix.
    issues = re.split(r"\n(?=line \d+, column \d+: )", text)
    text = "\n".join(issue for issue in issues if "'*error*'" not in issue) or text
    if scope == "object" and "undeclared reference to 'container" in text:
        text += "\n(`container` exists only in a policy with `scope: container`)"
    return text


def activation(scope: Scope, data: Mapping[str, Any]) -> Any:
    """The variables of one evaluation, converted once and shared by its expressions."""
    return _activation(_ENVIRONMENTS[scope], data)


def containers_activation(data: Mapping[str, Any]) -> Any:
    """The variables of the evaluations of a pod spec's containers (for_each_container):
    `data` holds CONTAINERS, a list of {container, group}, in place of `container` and
    `containerGroup`."""
    return _activation(_EACH_CONTAINER, data)


def _activation(environment: Any, data: Mapping[str, Any]) -> Any:
    try:
        return environment.Activation(data)
    except (RuntimeError, TypeError, ValueError, OverflowError):
        # The runtime's message quotes the value, which may be anything in the object.
        raise EvaluationError(UNREPRESENTABLE) from None


def evaluate(expression: Expression, bound: Any, container: int | None = None) -> Any:
    """The expression's value as plain Python data; with `container`, its per_container
    program for that index of a containers_activation. Raises EvaluationError."""
    try:
        if container is None:
            value = expression.program.eval(bound)
        else:
            token = _CONTAINER_INDEX.set(container)
            try:
                value = expression.per_container.eval(bound)
            finally:
                _CONTAINER_INDEX.reset(token)
    except RuntimeError as error:  # the iteration budget, a failed function
        raise EvaluationError(_clean(error, expression.compiled or expression.text)) from None
    if value.type().name() == "ERROR":
        raise EvaluationError(_clean(value.value(), expression.compiled or expression.text))
    return value.plain_value()


UNREPRESENTABLE = ("the object holds a value CEL cannot represent (a number beyond 64 bits, "
                   "or a map key that is not a string, an int or a bool)")
_UNREPRESENTABLE = re.compile(r"out of range for '|^Non-CEL value type|^Invalid map key type")
_MISSING_KEY = re.compile(r'^Key not found in map ?: ?"(.*)"$', re.S)
_BAD_PATTERN = re.compile(r"^(invalid regular expression: [^:]*): (.*)$", re.S)


def _clean(error: object, source: str) -> str:
    """The runtime's message, without what it quotes from the object: a missing key or a
    pattern stays only when the expression itself spells it, since a value read from the
    object may be a secret."""
    text = _STATUS.sub("", str(error).strip())
    if text == "Iteration budget exceeded":
        return "more than 10,000 comprehension iterations (the evaluation limit)"
    if _UNREPRESENTABLE.search(text):  # converting the object: the message quotes a value
        return UNREPRESENTABLE
    missing = _MISSING_KEY.match(text)
    if missing:
        key = missing.group(1)
        return f"no such key: {key}" if key in _spelled(source) else \
            "no such key (a key taken from the object)"
    pattern = _BAD_PATTERN.match(text)
    if pattern:
        return text if pattern.group(2) in _spelled(source) else pattern.group(1)
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


def jsonpatch_literals(text: str) -> str:
    """MutatingAdmissionPolicy writes `JSONPatch{op: "add", path: ..., value: ...}`; the
    runtime has no such type, so each becomes the map `{"op": "add", ...}` it stands for."""
    pieces = [(match.lastgroup or "other", match.group()) for match in _TOKEN.finditer(text)]
    significant = [i for i, (kind, _) in enumerate(pieces) if kind != "space"]
    following = dict(itertools.pairwise(significant))
    depth = 0  # braces open inside the current JSONPatch literal
    expect_key = False
    for index, (kind, value) in enumerate(pieces):
        if kind == "space":
            continue
        if depth == 0:
            after = following.get(index)
            if kind == "name" and value == "JSONPatch" and after is not None \
                    and pieces[after][1] == "{":
                pieces[index] = ("space", "")
                depth, expect_key = -1, True  # the literal's `{` comes next
            continue
        if value in "{[(":
            depth = 1 if depth == -1 else depth + 1
        elif value in "}])":
            depth -= 1
        elif value == "," and depth == 1:
            expect_key = True
        elif kind == "name" and expect_key and depth == 1:
            pieces[index] = (kind, f'"{value}"')
            expect_key = False
    return "".join(value for _, value in pieces)


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


def _variable_references(text: str) -> set[str]:
    found = set()
    window: list[str] = []
    for kind, value in tokens(text):
        window = [*window[-2:], value if kind != "string" else ""]
        if len(window) == 3 and window[0] == "variables" and window[1] == "." \
                and kind == "name":
            found.add(value)
    return found
