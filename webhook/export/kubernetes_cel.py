"""What Kubernetes' own CEL compiles, so that `export` refuses a policy the API server would
refuse, naming the policy, the expression and the version, instead of writing it out.

quickq-guard's CEL has more than Kubernetes' (cel.bind, math, base64, `'abc'.reverse()`,
`quantity(...).sign()`, the engine's own guard functions), and it keeps quantities, URLs, IPs
and CIDRs as strings, where Kubernetes gives them types of their own (`quantity('1') == '1'`
and `string(url(u))` do not compile there). Each expression a policy wrote is compiled here
once more, by the same runtime, against the declarations of Kubernetes' admission policy
environment: the strings extension at its version 2 (no reverse), optionals, Kubernetes'
quantity, URL, IP, CIDR, regex and list libraries with their own types and methods,
JSONPatch and `jsonpatch.escapeKey` in a MutatingAdmissionPolicy only, no cel.bind, math or
base64; and its list and map literals are held to one type each
(webhook.engine.cel.checked). The calls the engine guards are guarded here too
(webhook.engine.cel.go), since they are Kubernetes' functions with Kubernetes' semantics.

As in Kubernetes, `variables.<name>` has the type of the variable's expression when that is
made of CEL's own types (each variable compiled in order, seeing the ones before it): it is
read here as the identifier `variables__<name>`, declared with that type, so that
`variables.query.x.exists(v, v > 1)` is refused when query is a URL's getQuery(), a map of
lists of strings (the engine's own is a map of lists of dyn, so only this check sees it).

KUBERNETES_VERSIONS are the versions this holds for: tests/cluster/test_export_refusals.py
creates each refused construct and a sample of the accepted ones as a
ValidatingAdmissionPolicy on 1.36.3 and 1.35.4 and sees the API server refuse or accept it,
the same on both (so there is no option to pick a version).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from cel_expr_python import cel as _cel
from cel_expr_python.ext import ext_optional, ext_strings

from webhook.engine.cel import BOUND, bound_names, jsonpatch_literals, lex
from webhook.engine.cel.checked import MIXED_HINT, checked_problem
from webhook.engine.cel.go import GUARD_CONFIG, GUARDS, guarded
from webhook.engine.cel.library import LISTS, Declarations, config
from webhook.engine.rules.cel import CelPolicy

KUBERNETES_VERSIONS = "Kubernetes 1.35 and 1.36"
# The words an admission policy's variable may not be named (CEL's reserved words, which the
# API server checks a variable's name against).
RESERVED = frozenset({"true", "false", "null", "in", "as", "break", "const", "continue", "else",
                      "for", "function", "if", "import", "let", "loop", "package", "namespace",
                      "return", "var", "void", "while"})
T = _cel.Type
S, B, N, D, DYN = T.STRING, T.BOOL, T.INT, T.DOUBLE, T.DYN  # N: an int
Q = T.AbstractType("kubernetes.Quantity")
URL = T.AbstractType("kubernetes.URL")
IP, CIDR = T.AbstractType("net.IP"), T.AbstractType("net.CIDR")
JSON_PATCH = T.AbstractType("JSONPatch")
# name -> (result, parameters, member): Kubernetes' library as quickq-guard's engine has it,
# each of its types a type of its own (string() takes an IP or a CIDR, not a quantity or URL).
_LIBRARY: dict[str, list[tuple[Any, list[Any], bool]]] = {
    "quantity": [(Q, [S], False)], "isQuantity": [(B, [S], False)],
    "compareTo": [(N, [Q, Q], True)], "isGreaterThan": [(B, [Q, Q], True)],
    "isLessThan": [(B, [Q, Q], True)], "add": [(Q, [Q, Q], True), (Q, [Q, N], True)],
    "sub": [(Q, [Q, Q], True), (Q, [Q, N], True)], "asInteger": [(N, [Q], True)],
    "asApproximateFloat": [(D, [Q], True)], "isInteger": [(B, [Q], True)],
    "url": [(URL, [S], False)], "isURL": [(B, [S], False)],
    **{name: [(S, [URL], True)]
       for name in ("getScheme", "getHost", "getHostname", "getPort", "getEscapedPath")},
    "getQuery": [(T.Map(S, T.List(S)), [URL], True)],
    "ip": [(IP, [S], False), (IP, [CIDR], True)], "isIP": [(B, [S], False)],
    "ip.isCanonical": [(B, [S], False)], "family": [(N, [IP], True)],
    **{name: [(B, [IP], True)]
       for name in ("isUnspecified", "isLoopback", "isLinkLocalMulticast",
                    "isLinkLocalUnicast", "isGlobalUnicast")},
    "cidr": [(CIDR, [S], False)], "isCIDR": [(B, [S], False)],
    "containsIP": [(B, [CIDR, IP], True), (B, [CIDR, S], True)],
    "containsCIDR": [(B, [CIDR, CIDR], True), (B, [CIDR, S], True)],
    "masked": [(CIDR, [CIDR], True)], "prefixLength": [(N, [CIDR], True)],
    # string(): the runtime's own cannot be given more overloads, so it is renamed here
    "qq__str": [(S, [kind], False) for kind in (
        N, T.UINT, D, B, T.BYTES, S, T.TIMESTAMP, T.DURATION, IP, CIDR)],
    "find": [(S, [S, S], True)], "findAll": [(T.List(S), [S, S], True),
                                              (T.List(S), [S, S, N], True)],
}
_MUTATING: dict[str, list[tuple[Any, list[Any], bool]]] = {
    "jsonpatch.escapeKey": [(S, [S], False)],
    "qq__jsonpatch": [(JSON_PATCH, [T.Map(S, DYN)], False)],  # a JSONPatch{...} literal
}
# cel-go's optional library (version 2, which Kubernetes has) beyond the runtime's
_OPTIONALS: Declarations = {
    "optional.unwrap": [("k8s_optional_unwrap", "optional\\.unwrap(list<optional_type<~T>>)",
                         "list<~T>", None)],
    "unwrapOpt": [("k8s_unwrap_opt", "list<optional_type<~T>>.unwrapOpt()", "list<~T>", None)],
}
_VARIABLES = ("object", "oldObject", "request", "params", "namespaceObject", "variables",
              "podSpec", "container", "containerGroup")  # the last three: quickq-guard's


def _declared(library: dict[str, list[tuple[Any, list[Any], bool]]]) -> list[Any]:
    return [_cel.FunctionDecl(name, [
        _cel.Overload(f"k8s_{name}_{index}", result, parameters, is_member=member)
        for index, (result, parameters, member) in enumerate(overloads)])
        for name, overloads in library.items()]


def _environment(mutating: bool, variables: tuple[tuple[str, Any], ...] = ()) -> Any:
    """Kubernetes' admission policy environment; `variables`: (name, type) of the policy's
    variables defined so far, declared as BOUND + name."""
    functions = _declared({**_LIBRARY, **(_MUTATING if mutating else {})})
    declared, served = config(LISTS, GUARD_CONFIG, _OPTIONALS)  # with type parameters
    return _cel.NewEnv(config=declared, function_impls=served,
                       variables={**dict.fromkeys(_VARIABLES, DYN),
                                  **{BOUND + name: type_ for name, type_ in variables}},
                       extensions=[ext_strings.ExtStrings(version=2),
                                   ext_optional.ExtOptional()],
                       functions=[*functions, *GUARDS])


_ENVIRONMENTS = {False: _environment(False), True: _environment(True)}
_ERROR = re.compile(r"ERROR: <input>:(\d+):(\d+): (.*?)(?: \(in container ''\))?$", re.M)


def problem(text: str, mutating: bool = False, environment: Any = None) -> str | None:
    """Why Kubernetes' CEL does not compile the expression, or None when it does. In a
    mutation (`mutating`), the expression must yield a list of JSONPatch{...}.
    `environment`: one of _environment's, with the policy's variables typed."""
    return _compiled(text, mutating, environment)[1]


def _compiled(text: str, mutating: bool, environment: Any) -> tuple[Any, str | None]:
    """(the program, None), or (None, why Kubernetes' CEL does not compile the text)."""
    own = [value for kind, value in lex(text) if kind == "name" and value.startswith("qq__")]
    if own:
        return None, f"undeclared reference to '{own[0]}'"
    if environment is None:
        environment = _ENVIRONMENTS[mutating]
    compiled = _renamed_string(guarded(lex(bound_names(
        jsonpatch_literals(text, "qq__jsonpatch") if mutating else text)), strings=False))
    try:
        program = environment.compile(compiled)
    except RuntimeError as error:
        return None, _said(str(error))
    literal = checked_problem(program, compiled)
    if literal:
        return None, literal.replace(f" {MIXED_HINT}", "").split(": ", 1)[-1]
    return program, None


def _renamed_string(text: str) -> str:
    """Every call of string() as qq__str()."""
    pieces = lex(text)
    significant = [i for i, (kind, _) in enumerate(pieces) if kind != "space"]
    out = [value for _, value in pieces]
    for position, index in enumerate(significant):
        before = pieces[significant[position - 1]][1] if position else ""
        after = pieces[significant[position + 1]][1] if position + 1 < len(significant) else ""
        if pieces[index] == ("name", "string") and after == "(" and before != ".":
            out[index] = "qq__str"
    return "".join(out)


def _said(message: str) -> str:
    """The checker's problems in the order of the text (`undeclared reference to 'cel'`
    before the `x` it binds), each once, without the runtime's guard names."""
    found = sorted((int(line), int(column),
                    text.replace("qq__str", "string").replace("qq__", "")
                    .replace(BOUND, "variables."))
                   for line, column, text in _ERROR.findall(message))
    said = list(dict.fromkeys(text for _, _, text in found))
    return "; ".join(said[:3]) or message.strip().splitlines()[0]


def expressions(program: CelPolicy) -> Iterator[tuple[str, str, bool]]:
    """(field, the expression as the policy wrote it, whether it is a mutation's patch)."""
    for index, variable in enumerate(program.variables):
        yield f"variables[{index}] ({variable.name}).expression", variable.expression.text, False
    for index, condition in enumerate(program.match_conditions):
        yield (f"matchConditions[{index}] ({condition.name}).expression",
               condition.expression.text, False)
    for index, validation in enumerate(program.validations):
        yield f"validations[{index}].expression", validation.expression.text, False
        if validation.message_expression is not None:
            yield (f"validations[{index}].messageExpression",
                   validation.message_expression.text, False)
    for index, mutation in enumerate(program.mutations):
        yield (f"mutations[{index}].jsonPatch.expression",
               mutation.source or mutation.expression.text, True)


def refusal(program: CelPolicy, mutating: bool) -> str | None:
    """Why the API server would refuse the policy's CEL, or None: the first expression that
    Kubernetes' CEL does not compile, with what it says. Each variable is typed by its
    expression, as the API server types it, for the expressions after it (declared dyn
    until then: a policy reads only the variables defined before, webhook.engine.policy)."""
    types = {variable.name: DYN for variable in program.variables}
    environment = _environment(mutating, tuple(types.items())) if types \
        else _ENVIRONMENTS[mutating]
    pending = list(types)  # expressions() yields the variables first, in order
    for field, text, patch in expressions(program):
        compiled, why = _compiled(text, mutating, environment)
        if why is None and patch:
            why = _not_patches(compiled)
        if why:
            return (f"{field}: `{' '.join(text.split())}` does not compile in the CEL of "
                    f"{KUBERNETES_VERSIONS}: {why}")
        if pending:
            name = pending.pop(0)
            found = compiled.return_type()
            if found.name() != "DYN" and _declarable(found.name()):
                types[name] = found
                environment = _environment(mutating, tuple(types.items()))
    return None


# The types Kubernetes gives a variable: its expression's when that is made of CEL's own
# types (primitives, lists, maps); dyn when it holds a type of a library (a Quantity, URL, IP
# or CIDR: tests/cluster/test_export_refusals.py shows the API server compiling
# `variables.v == '1'` with v a quantity), and here also for an optional or a type value,
# whose types the runtime does not take back as declarations (dyn refuses nothing more).
_DECLARABLE = frozenset({"INT", "UINT", "DOUBLE", "STRING", "BOOL", "BYTES", "DURATION",
                         "TIMESTAMP", "NULL", "DYN", "LIST", "MAP"})


def _declarable(name: str) -> bool:
    return set(re.findall(r"[A-Za-z_.]+", name)) <= _DECLARABLE


def _not_patches(program: Any) -> str | None:
    """Why a mutation's compiled expression is not a list of JSONPatch."""
    result = program.return_type().name()
    if result in ("DYN", "LIST<DYN>", "LIST<JSONPatch>"):
        return None
    return (f"it yields {result.lower()}, and a MutatingAdmissionPolicy's JSONPatch "
            "expression must yield a list of JSONPatch{...} (write each operation as "
            "JSONPatch{op: ..., path: ..., value: ...}, not as a map)")
