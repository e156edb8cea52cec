"""What Kubernetes' own CEL compiles, so that `export` refuses a policy the API server would
refuse, naming the policy, the expression and the version, instead of writing it out.

The engine's CEL is Kubernetes' (webhook.engine.cel), so a policy that loads compiles on the
API server, but for what quickq-guard adds: `podSpec`, `container` and `containerGroup`, which
the export rewrites. Here each expression is compiled once more by the same library with the
declarations of an admission policy (its `authorizer` too), so that what the export writes is
held to the API server's compiler, not to a list of ours.

KUBERNETES_VERSIONS are the versions this holds for: the library compiles for 1.35, the
compatibility version of kube-apiserver 1.36 (tests/cluster/test_export_refusals.py creates
refused and accepted constructs on 1.36.3 and 1.35.4).
"""

from __future__ import annotations

from collections.abc import Iterator

from webhook.engine.cel import compile_problem, kubecel
from webhook.engine.rules.cel import CelPolicy

KUBERNETES_VERSIONS = "Kubernetes 1.35 and 1.36"
# The words an admission policy's variable may not be named (CEL's reserved words, which the
# API server checks a variable's name against).
RESERVED = frozenset({"true", "false", "null", "in", "as", "break", "const", "continue", "else",
                      "for", "function", "if", "import", "let", "loop", "package", "namespace",
                      "return", "var", "void", "while"})


def expressions(program: CelPolicy) -> Iterator[tuple[str, str, str]]:
    """(field, the expression as the policy wrote it, what it must yield)."""
    for index, condition in enumerate(program.match_conditions):
        yield (f"matchConditions[{index}] ({condition.name}).expression",
               condition.expression.text, "bool")
    for index, validation in enumerate(program.validations):
        yield f"validations[{index}].expression", validation.expression.text, "bool"
        # (a forEach's messageExpression is quickq-guard's, per item: the export writes it
        # out in its own form)
        if validation.message_expression is not None and validation.each is None:
            yield (f"validations[{index}].messageExpression",
                   validation.message_expression.text, "string")
    for index, mutation in enumerate(program.mutations):
        yield (f"mutations[{index}].jsonPatch.expression",
               mutation.source or mutation.expression.text, "jsonpatch")


def refusal(program: CelPolicy, mutating: bool) -> str | None:
    """Why the API server would refuse the policy's CEL, or None: the first expression that
    Kubernetes' CEL does not compile, with what it says. `mutating`: a
    MutatingAdmissionPolicy's (its JSONPatch types), else a ValidatingAdmissionPolicy's."""
    checked = list(expressions(program))
    if mutating != bool(program.mutations):
        checked = [item for item in checked if item[2] != "jsonpatch"]
    spec = {"scope": program.scope, "params": True, "authorizer": True,
            "variables": [{"name": variable.name, "expression": variable.expression.text}
                          for variable in program.variables],
            "expressions": [{"expression": text, "kind": kind} for _, text, kind in checked]}
    compiled = kubecel.compile_policy(spec)
    kubecel.release(int(compiled["handle"]))
    fields = [(f"variables[{index}] ({variable.name}).expression", variable.expression.text)
              for index, variable in enumerate(program.variables)]
    fields += [(field, text) for field, text, _ in checked]
    for (field, text), why in zip(fields, [*compiled["variableErrors"], *compiled["errors"]],
                                  strict=True):
        if why:
            return (f"{field}: `{' '.join(text.split())}` does not compile in the CEL of "
                    f"{KUBERNETES_VERSIONS}: {compile_problem(why, program.scope)}")
    return None
