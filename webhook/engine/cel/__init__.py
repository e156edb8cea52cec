"""CEL expressions: compiled when policies load, evaluated once per object or per container.

The one place CEL lives, for the engine and the exporter: this module compiles and runs;
`library` holds the Kubernetes CEL libraries (quantity, url, ip, regex...), `go` guards the
calls whose cel-go semantics the runtime does not have, `formatting` writes format() and
string() as Kubernetes does, `moments` keeps timestamps and durations exact (and a
timestamp's offset) where they meet Python, and `checked` reads the type-checked program for
what Kubernetes' CEL refuses. webhook.engine.rules.cel turns a policy's expressions into findings.

The runtime is cel-expr-python, Google's C++ CEL runtime (chosen by measurement: see
benchmarks/cel_runtimes.py). It type-checks at compile time, names the line and column of
every problem, matches regular expressions with RE2 (linear time, no catastrophic
backtracking), and stops any evaluation that runs more than 10,000 comprehension iterations,
which is what bounds the time a policy can take on a hostile object.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

from cel_expr_python import cel as _cel
from cel_expr_python.ext import (
    ext_bindings,
    ext_encoders,
    ext_math,
    ext_optional,
    ext_strings,
)

from webhook.engine.cel import moments
from webhook.engine.cel.checked import (
    branch_types,
    checked_problem,
    problem_in,
    read,
    sum_zeros,
    time_arithmetic,
)
from webhook.engine.cel.go import GUARD_CONFIG, GUARDS, ZERO_WIDTH, carried, guarded
from webhook.engine.cel.library import (
    KUBERNETES_FUNCTIONS,
    LISTS,
    PYTHON_FUNCTIONS,
    config,
)
from webhook.engine.cel_errors import CelError as CelError
from webhook.engine.cel_errors import EvaluationError as EvaluationError
from webhook.engine.linear import Pattern

# The variables of ValidatingAdmissionPolicy, and what quickq-guard adds for its scopes.
OBJECT_VARIABLES = ("object", "oldObject", "request", "params", "namespaceObject",
                    "variables", "podSpec")
CONTAINER_VARIABLES = (*OBJECT_VARIABLES, "container", "containerGroup")
MAX_EXPRESSION_LENGTH = 10_000  # characters; a policy is read by people
Scope = Literal["object", "container"]
Kind = Literal["bool", "string", "any"]




# A policy's expressions share one program (compile_policy): its variables are bound in it by
# `cel.bind`, which the runtime evaluates lazily (only when an expression reads the variable)
# and at most once per evaluation, and `qq__expression()` is the index of the expression to
# evaluate, set around each evaluation.
#
# A container-scope expression runs once per container. A review's lone container is the
# activation's `container`; where there are several (in any of its pod specs), the program
# reads `container` and `containerGroup` from the lists `qq__containers` and `qq__groups`,
# at `qq__container()`: an activation per container converted `podSpec` (and `object`) once
# per container, which grows with the square of the containers. Reading `container` from a
# list costs a lone container's evaluations about a third more (three Pod Security
# expressions on one container: 28 us against 21 us), hence a second program for several
# containers, compiled at load (PolicyProgram).
#
# One activation serves a whole review (review_activation, webhook.engine.rules.cel_review):
# every CEL policy reads the same `object`, `oldObject`, `request` and `podSpec` from it (the
# runtime converts a variable when an evaluation first reads it, and keeps it). What differs
# by policy is bound by its program: `params` from the map of every policy's params (PARAMS)
# at its key (with_params); in the program for several containers, `container` and
# `containerGroup` from the lists, and `podSpec` from PODS when the container is in another
# pod spec than the first (POD_OF).
CONTAINERS, GROUPS = "qq__containers", "qq__groups"
PODS, POD_OF, PARAMS = "qq__pods", "qq__pod_of", "qq__params"
_CONTAINER_INDEX: ContextVar[int] = ContextVar("qq__container")
_EXPRESSION_INDEX: ContextVar[int] = ContextVar("qq__expression")
_WANTED_ITEMS: ContextVar[frozenset[int]] = ContextVar("qq__wanted", default=frozenset())
_CONTAINER_FUNCTION = _cel.FunctionDecl("qq__container", [
    _cel.Overload("qq__container_int", _cel.Type.INT, [],
                  impl=lambda: _CONTAINER_INDEX.get())])
_EXPRESSION_FUNCTION = _cel.FunctionDecl("qq__expression", [
    _cel.Overload("qq__expression_int", _cel.Type.INT, [],
                  impl=lambda: _EXPRESSION_INDEX.get())])
# Whether an item of a masked batch (see Batch) is evaluated by this evaluation.
_WANTED_FUNCTION = _cel.FunctionDecl("qq__wanted", [
    _cel.Overload("qq__wanted_int", _cel.Type.BOOL, [_cel.Type.INT],
                  impl=lambda item: item in _WANTED_ITEMS.get())])


def _environment(variables: tuple[str, ...], *functions: Any) -> Any:
    declared, served = config(LISTS, GUARD_CONFIG)  # the functions with type parameters
    return _cel.NewEnv(
        config=declared, function_impls=served,
        variables=dict.fromkeys(variables, _cel.Type.DYN),
        extensions=[ext_strings.ExtStrings(), ext_optional.ExtOptional(),
                    ext_bindings.ExtBindings(), ext_math.ExtMath(), ext_encoders.ExtEncoders()],
        functions=[*KUBERNETES_FUNCTIONS, *GUARDS, *functions],
    )


# Built once: an environment only declares names and functions and is never changed.
_ENVIRONMENTS = {"object": _environment((*OBJECT_VARIABLES, PARAMS), _EXPRESSION_FUNCTION,
                                        _WANTED_FUNCTION),
                 "container": _environment((*CONTAINER_VARIABLES, PARAMS),
                                           _EXPRESSION_FUNCTION, _WANTED_FUNCTION)}
# Where a container-scope policy's program runs for a review of several containers.
_EACH_CONTAINER = _environment((*OBJECT_VARIABLES, CONTAINERS, GROUPS, PODS, POD_OF, PARAMS),
                               _CONTAINER_FUNCTION, _EXPRESSION_FUNCTION, _WANTED_FUNCTION)
_WANTED = {"bool": ("bool",), "string": ("string",), "any": ()}


@dataclass(frozen=True, slots=True)
class PolicyProgram:
    """A container-scope policy's program for a review of several containers (see above),
    compiled at load beside the policy's own: `container`, `containerGroup` and `podSpec`
    bound from the activation's lists at qq__container()."""

    each: Any

    @classmethod
    def of(cls, text: str) -> PolicyProgram:
        """Raises RuntimeError where the runtime refuses it (it compiles wherever the
        policy's program compiled)."""
        at = "qq__container()"
        if _names(text, "podSpec"):  # each binding nests the text one deeper
            text = (f"cel.bind(podSpec, {POD_OF}[{at}] == 0 ? podSpec : "
                    f"{PODS}[{POD_OF}[{at}]], {text})")
        for name, values in (("containerGroup", GROUPS), ("container", CONTAINERS)):
            text = f"cel.bind({name}, {values}[{at}], {text})"
        return cls(_EACH_CONTAINER.compile(text))


@dataclass(frozen=True, slots=True)
class Batch:
    """Expressions of a policy (indices into its sources, two or more) also evaluated
    together, as the list of their values: one evaluation, in which a variable they read is
    evaluated once. `masked`: only the items evaluate() is told it `wanted` are evaluated,
    the others are null (the messages of the validations that failed)."""

    indices: tuple[int, ...]
    masked: bool = False


def with_params(text: str, key: str) -> str:
    """The text with `params` bound to the policy's own params, at `key` in the PARAMS map of
    a review's activation, when it reads them (see above)."""
    if not key or not _names(text, "params"):
        return text
    return f"cel.bind(params, {PARAMS}[{json.dumps(key)}], {text})"


@dataclass(frozen=True, slots=True)
class Expression:
    """A compiled expression, the `variables.<name>` it reads and the top-level names it
    uses (so that an evaluation converts only the variables it reads). In a policy
    (compile_policy), `program` is the policy's, `index` picks this expression in it, and
    `policy` has the program for several containers."""

    text: str
    program: Any
    references: frozenset[str]
    names: frozenset[str]
    # The text with the variables it reads bound in it by cel.bind, as the program runs it:
    # what the cost estimate (webhook.engine.cost) and the cleaning of messages read.
    bound: str = ""
    index: int | None = None
    policy: PolicyProgram | None = None
    # It makes timestamps (its evaluations keep their offsets: webhook.engine.cel.moments).
    moments: bool = False


@dataclass(frozen=True, slots=True)
class Source:
    """One expression of a policy as written, for compile_policy: `field` names it in a
    problem; `kind` and `literals` as compile_expression takes them."""

    field: str
    text: str
    kind: Kind = "any"
    literals: bool = True


def compile_expression(text: str, scope: Scope, kind: Kind = "any",
                       literals: bool = True, key: str = "") -> Expression:
    """Compile for the scope's variables; a bool or string `kind` is checked as far as the
    types are known (fields of the object are dynamic). `literals`: refuse a list or map
    literal of mixed types, as Kubernetes' CEL does (a mutation's patches may be plain maps,
    which only quickq-guard reads). `key`: the policy's, whose params it reads from a
    review's activation (with_params). Raises CelError."""
    _check_length(text)
    program, compiled = _compiled(text, _ENVIRONMENTS[scope], scope)
    problem = checked_problem(program, compiled, PYTHON_FUNCTIONS)
    if problem and (literals or "expected type" not in problem):
        # said where the text as written has it, when it compiles as written (where no
        # list of the lists library is bound: that is the guard's, which it was)
        if compiled != text:
            problem = checked_problem(_compiled_as_written(text, scope), text,
                                      PYTHON_FUNCTIONS - LISTS.keys()) or problem
        raise CelError(problem)
    result = program.return_type().name().lower()
    wanted = _WANTED[kind]
    if wanted and result not in (*wanted, "dyn"):
        raise CelError(f"the expression must yield a {kind}, but it yields {result}")
    wrapped = with_params(compiled, key)  # checked as written, run with its params
    if wrapped != compiled:
        try:
            program = _ENVIRONMENTS[scope].compile(wrapped)
        except RuntimeError:
            raise CelError(TOO_DEEP) from None
    return Expression(text, program, frozenset(variable_references(text)),
                      frozenset(_top_level_names(text)), moments=_makes_time(compiled))


def _makes_time(compiled: str) -> bool:
    """Whether a compiled text makes timestamps (go.py's guard of timestamp())."""
    return "qq__written(" in compiled


def _carrying(program: Any, compiled: str, environment: Any, scope: Scope) -> tuple[Any, str]:
    """The program and its text with each timestamp arithmetic written so that its result
    keeps its operand's offset (webhook.engine.cel.go's carried), where the text makes
    timestamps and has any. Raises CelError."""
    if not _makes_time(compiled):
        return program, compiled
    offsets = time_arithmetic(read(program))
    if not offsets:
        return program, compiled
    text = carried(lex(compiled), offsets)
    if text is None:
        raise CelError("quickq-guard cannot tell the operands of this expression's timestamp "
                       "arithmetic apart, to keep the offset Kubernetes keeps through it; "
                       "bind them with variables or parentheses")
    try:
        return environment.compile(text), text
    except RuntimeError as error:
        raise CelError(TOO_DEEP if _NESTING.search(str(error))
                       else _compile_problem(str(error), scope)) from None


def _check_length(text: str) -> None:
    if not isinstance(text, str) or not text.strip():
        raise CelError("the expression is empty")
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise CelError(f"the expression is {len(text)} characters long; "
                       f"at most {MAX_EXPRESSION_LENGTH} are allowed")


def _compiled(text: str, environment: Any, scope: Scope) -> tuple[Any, str]:
    """The program and the text compiled: with the calls the runtime gets wrong guarded
    (webhook.engine.cel.go), or as written when a guard does not fit (the runtime's own
    function then). What does not compile is said as written. Raises CelError."""
    compiled = guarded(lex(text))
    try:
        program, compiled = _zeroed(environment.compile(compiled), compiled, environment)
    except RuntimeError as error:
        if compiled == text:
            raise CelError(_compile_problem(str(error), scope)) from None
        try:
            program = environment.compile(text)
        except RuntimeError as as_written:
            raise CelError(_compile_problem(str(as_written), scope)) from None
        if _NESTING.search(str(error)):  # as written it would give the runtime's answers
            raise CelError(TOO_DEEP) from None
        return program, text
    return _carrying(program, compiled, environment, scope)


def _zeroed(program: Any, compiled: str, environment: Any) -> tuple[Any, str]:
    """The program and its text with the zero Kubernetes gives a sum of an empty list written
    in the sum's guard where the checker found the list's items ints, uints, doubles or
    durations (`0`, `0u`, `0.0`, `duration('0s')`: the overload Kubernetes picks by the list's
    type), so that the sum is typed as there too; each written in the width of the `dyn(0)` it
    replaces, so offsets into the text stay. Raises RuntimeError where the typed sum does not
    compile (`[1, 2].sum() == 'a'`, as in Kubernetes)."""
    if "qq__total(" not in compiled:
        return program, compiled
    zeros = sum_zeros(read(program))
    if not zeros:
        return program, compiled
    for offset, zero in zeros:
        if compiled[offset:offset + ZERO_WIDTH].strip() != "dyn(0)":
            raise RuntimeError("quickq-guard could not find the zero of a sum() it guards")
        compiled = compiled[:offset] + zero + compiled[offset + ZERO_WIDTH:]
    return environment.compile(compiled), compiled


_NESTING = re.compile(r"recursion (?:depth|limit)")
TOO_DEEP = ("the expression nests too deep for quickq-guard to give Kubernetes' answers: it "
            "writes some calls (string(), format(), timestamp(), the lists library) as more "
            "CEL, and the runtime's parser stops at 32 levels of nesting; nest it less")


def _compiled_as_written(text: str, scope: Scope) -> Any:
    try:
        return _ENVIRONMENTS[scope].compile(text)
    except RuntimeError:
        return None


def compile_policy(scope: Scope, variables: Sequence[tuple[str, Source]],
                   sources: Sequence[Source], batches: Sequence[Batch] = (), key: str = ""
                   ) -> tuple[list[Expression], list[Expression | None]]:
    """The expressions of one policy, compiled together, once: one program binds the
    variables (each compiled once, however many expressions read it) and holds every
    expression, each an Expression with its `index`. As in Kubernetes, a variable is
    evaluated only when an expression reads it, at most once per evaluation, and its error
    fails only the expressions that read it. A variable reads only the ones before it.
    `batches`: each also evaluated together (see Batch), its Expression returned second
    (None for a batch of fewer than two): one evaluation in place of several (the
    validations of a container), which the caller falls back from when it fails. `key`: the
    policy's, for its params (with_params). Raises CelError, starting with the field of the
    expression at fault."""
    for source in [*(source for _, source in variables), *sources]:
        try:
            _check_length(source.text)
        except CelError as error:
            raise CelError(f"{source.field}: {error}") from None
    if not sources:
        return [], [None] * len(batches)
    kept = [batch for batch in batches if len(batch.indices) > 1]
    environment = _ENVIRONMENTS[scope]
    unguarded: set[str] = set()  # the fields whose guards do not fit (see _compiled)
    named = {source.field: bound_names(source.text)
             for source in [*(source for _, source in variables), *sources]}
    written = _policy_text(variables, sources, named, unguarded, kept, key)
    try:
        program = environment.compile(written)
    except RuntimeError:
        unguarded = _diagnosed(scope, variables, sources)
        written = _policy_text(variables, sources, named, unguarded, kept, key)
        try:
            program = environment.compile(written)
        except RuntimeError as error:
            raise CelError(f"{sources[0].field}: {_compile_problem(str(error), scope)}"
                           ) from None
    exempt = [span for source in sources if not source.literals
              for span in _spans(written, named[source.field])]
    try:  # the spans stay where they are
        program, written = _zeroed(program, written, environment)
    except RuntimeError as error:
        _diagnosed(scope, variables, sources)  # raises what is wrong, as written
        raise CelError(f"{sources[0].field}: {_compile_problem(str(error), scope)}") from None
    checked = read(program)
    problem = problem_in(checked, written, PYTHON_FUNCTIONS, lambda offset, said: (
        said.startswith("expected type") and any(start <= offset < end
                                                 for start, end in exempt)))
    kinds = branch_types(checked, "qq__e", len(sources) + len(kept))
    if problem or any(_WANTED[source.kind] and found not in (*_WANTED[source.kind], "dyn")
                      for source, found in zip(sources, kinds, strict=False)):
        _diagnosed(scope, variables, sources)  # raises what is wrong, as written
        raise CelError(f"{sources[0].field}: {problem or 'does not compile'}")
    try:
        program, written = _carrying(program, written, environment, scope)
    except CelError as error:
        _diagnosed(scope, variables, sources)  # the expression at fault, when alone it is
        raise CelError(f"{sources[0].field}: {error}") from None
    # What each variable reads and uses, with the variables it reads, worked out once.
    reads: dict[str, set[str]] = {}
    uses: dict[str, set[str]] = {}
    for name, source in variables:  # a variable reads only earlier ones
        reads[name] = variable_references(source.text)
        uses[name] = _top_level_names(source.text)
        for earlier in list(reads[name]):
            reads[name] |= reads.get(earlier, set())
    texts = [(name, source.text) for name, source in variables]
    shared = None
    if scope == "container":
        try:
            shared = PolicyProgram.of(written)
        except RuntimeError as error:
            raise CelError(f"{sources[0].field}: for several containers: "
                           f"{_compile_problem(str(error), scope)}") from None
    several = len(sources) > 1 or bool(kept)
    timed = _makes_time(written)
    expressions = []
    for index, source in enumerate(sources):
        references = variable_references(source.text)
        names = _top_level_names(source.text)
        for name in references:  # and what the variables it reads use
            for other in {name, *reads.get(name, ())}:
                names |= uses.get(other, set())
        expressions.append(Expression(
            source.text, program, frozenset(references), frozenset(names),
            bound_text(source.text, texts) if references else "",
            index if several else None, shared, timed))
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
            "\n".join(e.bound or e.text for e in parts), len(sources) + kept.index(batch),
            shared, timed))
    return expressions, together


def variable(text: str) -> Expression:
    """A policy's variable, as the policy keeps it: it is compiled in the program of the
    policy's expressions (compile_policy), not alone, so it has no program of its own."""
    return Expression(text, None, frozenset(variable_references(text)),
                      frozenset(_top_level_names(text)))


def _policy_text(variables: Sequence[tuple[str, Source]], sources: Sequence[Source],
                 named: Mapping[str, str], unguarded: set[str],
                 batches: Sequence[Batch] = (), key: str = "") -> str:
    """The text of a policy's program: its variables bound in order around a choice of its
    expressions by qq__expression() (halves, so that the nesting stays shallow), the last
    choices the lists of the `batches`' values (see Batch); the policy's params
    bound around it all (with_params). `named`: each text with `variables.<name>` as the name
    cel.bind gives it."""
    def piece(source: Source) -> str:
        text = named[source.field]
        return text if source.field in unguarded else guarded(lex(text))

    def choice(pieces: list[str], start: int) -> str:
        if len(pieces) == 1:  # dyn: the expressions' types differ (bool, string...)
            return f"(\n{pieces[0]}\n)" if count == 1 else f"dyn(\n{pieces[0]}\n)"
        half = len(pieces) // 2
        return (f"(qq__e < {start + half} ? {choice(pieces[:half], start)} "
                f": {choice(pieces[half:], start + half)})")

    # The batches' expressions are bound too, each once in the text: the choice of one of
    # them and the list of its batch read it by name (qq__b<index>), evaluated when read.
    batched = sorted({index for batch in batches for index in batch.indices})
    pieces = [f"qq__b{index}" if index in batched else piece(source)
              for index, source in enumerate(sources)]
    for batch in batches:
        pieces.append("[" + ", ".join(
            f"qq__wanted({number}) ? dyn(qq__b{index}) : dyn(null)" if batch.masked
            else f"dyn(qq__b{index})" for number, index in enumerate(batch.indices)) + "]")
    count = len(pieces)
    text = choice(pieces, 0)
    if count > 1:
        text = f"cel.bind(qq__e, qq__expression(), {text})"
    for index in reversed(batched):
        text = f"cel.bind(qq__b{index}, (\n{piece(sources[index])}\n), {text})"
    for name, source in reversed(variables):
        text = f"cel.bind({BOUND}{name}, (\n{piece(source)}\n), {text})"
    return with_params(text, key)


def _spans(written: str, named: str) -> list[tuple[int, int]]:
    """Where an expression (`named` as in _policy_text) sits in a policy's program, in code
    points: guarded or as written."""
    spans = []
    for candidate in dict.fromkeys((guarded(lex(named)), named)):
        start = written.find(candidate)
        while start >= 0:
            spans.append((start, start + len(candidate)))
            start = written.find(candidate, start + 1)
    return spans


def _diagnosed(scope: Scope, variables: Sequence[tuple[str, Source]],
               sources: Sequence[Source]) -> set[str]:
    """What is wrong, said as each expression alone says it (raised as CelError, the
    first); when nothing is, the fields whose guards do not fit. Only when a policy's
    program does not compile or is refused: each expression is compiled once more alone
    and, if it reads variables, with them bound in it."""
    texts = [(name, source.text) for name, source in variables]
    unguarded = set()
    for source in [*(source for _, source in variables), *sources]:
        bound = bound_text(source.text, texts)
        try:
            compile_expression(source.text, scope, source.kind, source.literals)
            if bound != source.text:
                try:
                    compile_expression(bound, scope, source.kind, source.literals)
                except CelError as error:
                    raise CelError(f"with the variables it reads bound in it: {error}"
                                   ) from None
        except CelError as error:
            raise CelError(f"{source.field}: {error}") from None
        if _compiled(bound, _ENVIRONMENTS[scope], scope)[1] != guarded(lex(bound)):
            unguarded.add(source.field)
    return unguarded


def bound_text(text: str, variables: Sequence[tuple[str, str]]) -> str:
    """The expression with the variables it reads, and the ones they read, bound in it by
    `cel.bind`, as a policy's program evaluates it: the text the cost estimate reads."""
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


_STATUS = Pattern(r"^[A-Z_]+: |\s*\[[A-Z_]+\]$")
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


def review_activation(data: Mapping[str, Any]) -> Any:
    """The variables of every CEL evaluation of a review (see PolicyProgram), each converted
    when an evaluation first reads it, once for all of them: `data` holds either `container`
    and `containerGroup` (the review's one container), or CONTAINERS, GROUPS, POD_OF and PODS
    for the programs of PolicyProgram.each, and PARAMS (see with_params)."""
    return _activation(_EACH_CONTAINER, data)


def _activation(environment: Any, data: Mapping[str, Any]) -> Any:
    try:
        return environment.Activation(data)
    except (RuntimeError, TypeError, ValueError, OverflowError):
        # The runtime's message quotes the value, which may be anything in the object.
        raise EvaluationError(UNREPRESENTABLE) from None


def evaluate(expression: Expression, bound: Any, container: int | None = None,
             wanted: frozenset[int] | None = None) -> Any:
    """The expression's value as plain Python data (a timestamp or duration in it exact, as a
    webhook.engine.cel.moments Timestamp or Duration); with `container`, the index of the
    container judged in a review_activation's lists; `wanted`: the items of a masked Batch
    to evaluate. Raises EvaluationError."""
    written = moments.begin() if expression.moments else None
    items = None if wanted is None else _WANTED_ITEMS.set(wanted)
    try:
        value = _value(expression, bound, container)
        try:
            return moments.exported_value(value)
        except ValueError as error:
            raise EvaluationError(str(error)) from None
    finally:
        if items is not None:
            _WANTED_ITEMS.reset(items)
        if written is not None:
            moments.end(written)


def evaluate_value(expression: Expression, bound: Any, container: int | None = None) -> Any:
    """evaluate(), but the runtime's own Value (cel_expr_python's, with CEL's types: a uint is
    no int there), for tools that need them. Raises EvaluationError."""
    written = moments.begin() if expression.moments else None
    try:
        return _value(expression, bound, container)
    finally:
        if written is not None:
            moments.end(written)


def _value(expression: Expression, bound: Any, container: int | None) -> Any:
    program = expression.program
    at = None
    if container is not None:
        if expression.policy is None:
            raise EvaluationError("the expression is not a container-scope policy's")
        program = expression.policy.each
        at = _CONTAINER_INDEX.set(container)
    which = None if expression.index is None else _EXPRESSION_INDEX.set(expression.index)
    try:
        value = program.eval(bound)
    except RuntimeError as error:  # the iteration budget, a failed function
        raise EvaluationError(_clean(error, expression.bound or expression.text)) from None
    finally:
        if which is not None:
            _EXPRESSION_INDEX.reset(which)
        if at is not None:
            _CONTAINER_INDEX.reset(at)
    if value.type().name() == "ERROR":
        try:
            message = value.value()
        except TypeError:  # an optional, which the runtime's binding has no Python value for
            raise EvaluationError(moments.OPTIONAL) from None
        raise EvaluationError(_clean(message, expression.bound or expression.text))
    return value


UNREPRESENTABLE = ("the object holds a value CEL cannot represent (a number beyond 64 bits, "
                   "or a map key that is not a string, an int or a bool)")
_UNREPRESENTABLE = Pattern(r"out of range for '|^Non-CEL value type|^Invalid map key type")
_MISSING_KEY = Pattern(r'(?s)^Key not found in map ?: ?"(.*)"$')
_BAD_PATTERN = Pattern(r"(?s)^(invalid regular expression: [^:]*): (.*)$")


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
