"""CEL policies as Kubernetes ValidatingAdmissionPolicies, so a cluster keeps its guardrails
when the webhook is down: a ValidatingAdmissionPolicy and its binding per CEL validate policy.

What quickq-guard has and ValidatingAdmissionPolicy lacks is written out in the policy:

- `params` become a variable `params` holding them as a CEL literal (in `dyn()`, so that
  they are typed as the engine types them): every value YAML can give (maps, lists,
  strings, numbers, booleans, null, .inf) has one, and the exported policy is then
  complete by itself. A params object (paramKind and paramRef) would add an object to
  create beside each policy, and a kind for it (a ConfigMap holds strings only, so it would
  change the types), for nothing the literal cannot say: params are fixed when the policy
  is exported, as the rest of it is.
- `podSpec` becomes a variable that finds the pod spec wherever the kind keeps it.
- `scope: container` becomes, per validation, `.all(container, ...)` over the containers,
  initContainers and ephemeralContainers (and a NodeTemplate's spec), with `containerGroup`
  written in as each list's name; a variable that reads the container is written into the
  expressions that use it; the message names each failing container as the webhook does.
- The action becomes the binding's validationActions (enforce: Deny, warn: Warn, audit:
  Audit; dry-run mode turns Deny into Warn and Audit). Kinds and operations become
  resourceRules, `match.selector` the objectSelector, exact namespace names a
  namespaceSelector on `kubernetes.io/metadata.name`; namespace globs, excluded users and
  groups and mirror pods become matchConditions.

A built-in rule (Python), a mutate policy or a policy that is off cannot be exported; the
reason says why. Nor can a policy whose CEL Kubernetes' CEL does not compile (quickq-guard's
own functions, such as cel.bind or math; webhook/export/kubernetes_cel.py): the reason names
the expression, what Kubernetes' CEL says of it and the versions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.engine.cel import lex
from webhook.engine.evaluate import MIRROR_POD_ANNOTATION
from webhook.engine.globs import glob_regex
from webhook.engine.policy import Config, Policy, PolicySet
from webhook.engine.rules.cel import Each
from webhook.engine.workload import BUILT_IN, IN_TEMPLATE, api_group
from webhook.export import forms, kubernetes_cel
from webhook.export.forms import PYTHON_ONLY

API_VERSION = "admissionregistration.k8s.io/v1"  # GA since Kubernetes 1.30
NAME_PREFIX = "quickq-guard-"
# The API group and resource of each judged built-in kind.
RESOURCES = {kind: (api_group(built.api_version), built.resource)
             for kind, built in BUILT_IN.items()}
# podSpec: where each kind keeps it (the usual place, a template's, last).
POD_SPEC = " : ".join(
    [*(f"object.kind == '{kind}' ? object.{'.'.join(built.pod_spec)}"
       for kind, built in BUILT_IN.items() if built.pod_spec != IN_TEMPLATE),
     "object.kind == 'NodeTemplate' ? {}", f"object.{'.'.join(IN_TEMPLATE)}"])
# (list in the pod spec, how a finding names a container of it)
CONTAINER_GROUPS = (("containers", "container"), ("initContainers", "initContainer"),
                    ("ephemeralContainers", "ephemeralContainer"))
EXPORTED_KINDS = frozenset({*RESOURCES, "NodeTemplate"})
_CONTAINER_NAMES = frozenset({"container", "containerGroup"})


class NotExportable(ValueError):
    """A policy ValidatingAdmissionPolicy cannot express; the message says why."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """A policy not exported, and why. `expected` is true for what is never exported (a
    built-in rule, a mutate policy, a policy that is off), false for a CEL validate policy
    in force that ValidatingAdmissionPolicy cannot express."""

    policy: str
    reason: str
    expected: bool


@dataclass(frozen=True, slots=True)
class Exported:
    """The objects written, the policies not exported, and what a reader should know."""

    objects: list[dict[str, Any]]
    refusals: list[Refusal]
    notes: list[str]


def export(policies: PolicySet) -> Exported:
    """The ValidatingAdmissionPolicy and binding of each exportable policy, why each of the
    others is not exported, and what the exported ones leave out."""
    objects: list[dict[str, Any]] = []
    refusals: list[Refusal] = []
    notes: list[str] = []
    every_kind = False
    for policy in policies.policies:
        try:
            objects += translate(policy, policies.config)
        except NotExportable as error:
            expected = policy.cel is None or policy.type != "validate" or policy.action == "off"
            refusals.append(Refusal(policy.id, str(error), expected))
            continue
        left_to_webhook = forms.gap(policy)
        if left_to_webhook:
            notes.append(f"{policy.id}: {left_to_webhook}")
        left_out = [kind for kind in policy.match.kinds if kind not in EXPORTED_KINDS]
        if left_out:
            notes.append(f"{policy.id}: exported for {', '.join(_exported_kinds(policy))} "
                         f"only, not for {', '.join(left_out)}")
        every_kind = every_kind or not policy.match.kinds
    if every_kind:
        notes.append("a policy that names no kinds is exported for Pods, the built-in pod "
                     "controllers and NodeTemplates; the ML workload kinds and custom kinds "
                     "quickq-guard also judges keep their pod specs where only the webhook "
                     "finds them")
    return Exported(objects, refusals, notes)


def _exported_kinds(policy: Policy) -> list[str]:
    return [kind for kind in policy.match.kinds if kind in EXPORTED_KINDS]



def translate(policy: Policy, config: Config) -> list[dict[str, Any]]:
    """The policy as a ValidatingAdmissionPolicy and its binding. Raises NotExportable."""
    program = policy.cel
    if program is None:
        name = policy.rule.name if policy.rule is not None else policy.id
        why = PYTHON_ONLY.get(name)
        raise NotExportable(f"built-in rule {name} is written in Python, not CEL"
                            + (f": {why}" if why else ""))
    if policy.type != "validate":
        raise NotExportable("a mutate policy: ValidatingAdmissionPolicy only validates")
    if policy.action == "off":
        raise NotExportable("its action is off")
    refuse_exceptions(config)
    uncompilable = kubernetes_cel.refusal(program, mutating=False)
    if uncompilable:
        raise NotExportable(uncompilable)
    defined = {variable.name for variable in program.variables}
    reserved_names = ("params", "podSpec", "containers") if program.scope == "container" \
        else ("params", "podSpec")
    for reserved in reserved_names:
        if reserved in defined:
            raise NotExportable(f"it defines a variable named {reserved}, the name the "
                                f"export gives quickq-guard's {reserved}")
    for variable in program.variables:
        if variable.name in kubernetes_cel.RESERVED:
            raise NotExportable(f"it defines a variable named {variable.name}, a word "
                                f"{kubernetes_cel.KUBERNETES_VERSIONS} reserve in CEL: the API "
                                "server refuses it as a variable's name")
    rules = _resource_rules(policy, config)
    if not rules:
        raise NotExportable(f"it judges only {', '.join(policy.match.kinds)}: the export "
                            "finds pod specs in Pods, the built-in pod controllers and "
                            "NodeTemplates")
    node_templates = any(rule["resources"] == ["nodetemplates"] for rule in rules)
    params = params_literal(program.params)
    as_variables = {"params": "variables.params", "podSpec": "variables.podSpec"}

    # A variable that reads the container (directly or through another) is written into the
    # expressions that use it; the others stay variables of the policy.
    inline: dict[str, str] = {}
    variables: list[dict[str, str]] = []
    for variable in program.variables:
        text = _rewrite(variable.expression.text, as_variables, inline)
        if program.scope == "container" and _reads(text, _CONTAINER_NAMES):
            inline[variable.name] = text
        else:
            variables.append({"name": variable.name, "expression": text})

    item_name = _free_name([v.expression.text for v in program.variables] + [
        text for v in program.validations for text in (
            v.expression.text, v.message_expression.text if v.message_expression else "")],
        "item")
    validations = []
    any_per_container = False
    for validation in program.validations:
        expression = _rewrite(validation.expression.text, as_variables, inline)
        each = validation.each
        message = validation.message or \
            f"failed expression: {each.check if each else validation.expression.text}"
        message_expression = (_rewrite(validation.message_expression.text, as_variables, inline)
                              if validation.message_expression is not None else None)
        item: dict[str, str] = {}
        per_container = program.scope == "container" and any(
            _reads(text, _CONTAINER_NAMES) for text in (expression, message_expression or ""))
        any_per_container = any_per_container or per_container
        if each is not None:
            item["expression"], item["messageExpression"] = _for_each(
                each, as_variables, inline, message, item_name if per_container else None)
        elif per_container:
            item["expression"], item["messageExpression"] = _per_container(
                expression, message_expression, message, item_name)
        else:
            item["expression"] = expression
            if message_expression is not None:
                item["messageExpression"] = message_expression
        item["message"] = " ".join(message.split())
        if validation.reason:
            item["reason"] = validation.reason
        validations.append(item)

    texts = [v["expression"] for v in variables] + [
        text for item in validations for key, text in item.items()
        if key in ("expression", "messageExpression")]
    used = {name for name in ("params", "podSpec")
            if any(_reads(text, {f"variables.{name}"}) for text in texts)}
    prelude = []
    if "podSpec" in used or any_per_container:
        prelude.append({"name": "podSpec", "expression": POD_SPEC})
    if any_per_container:
        prelude.append({"name": "containers", "expression": _containers(node_templates)})
    if "params" in used:
        prelude.append({"name": "params", "expression": params})

    inlined = {"params": f"({params})", "podSpec": f"({POD_SPEC})"}
    conditions = _exclusions(policy, config) + [
        {"name": condition.name,
         "expression": _rewrite(condition.expression.text, inlined, {})}
        for condition in program.match_conditions]

    name = f"{NAME_PREFIX}{policy.id}"
    spec: dict[str, Any] = {"failurePolicy": "Ignore" if config.mode == "dry-run" else "Fail",
                            "matchConstraints": match_constraints(policy, rules)}
    if conditions:
        spec["matchConditions"] = conditions
    if prelude or variables:
        spec["variables"] = prelude + variables
    spec["validations"] = validations
    labels = {"app.kubernetes.io/managed-by": "quickq-guard"}
    metadata = {"name": name, "labels": labels,
                "annotations": {"quickq.io/policy": policy.id,
                                "quickq.io/description": policy.description}}
    binding_spec: dict[str, Any] = {"policyName": name,
                                    "validationActions": _actions(policy.action, config)}
    excluded = _namespace_selector(("*",), config.excludeNamespaces)
    if excluded:
        binding_spec["matchResources"] = {"namespaceSelector": excluded}
    return [
        {"apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicy", "metadata": metadata,
         "spec": spec},
        {"apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": name, "labels": dict(labels),
                      "annotations": {"quickq.io/policy": policy.id}},
         "spec": binding_spec},
    ]


def refuse_exceptions(config: Config) -> None:
    """A native policy cannot read PolicyExceptions: it would deny what one allows."""
    if config.exceptionNamespaces:
        raise NotExportable(
            f"PolicyExceptions are honoured from {', '.join(config.exceptionNamespaces)}, and "
            "a native admission policy cannot read them: it would deny what an exception "
            "allows")


def _actions(action: str, config: Config) -> list[str]:
    if action == "enforce":
        return ["Warn", "Audit"] if config.mode == "dry-run" else ["Deny"]
    return ["Warn"] if action == "warn" else ["Audit"]


def _resource_rules(policy: Policy, config: Config) -> list[dict[str, Any]]:
    """One rule per API group of the kinds the policy judges (all judged kinds when it names
    none); NodeTemplates in each group the config accepts, in any version."""
    kinds = policy.match.kinds or (*RESOURCES, "NodeTemplate")
    operations = list(policy.match.operations)
    by_group: dict[str, list[str]] = {}
    for kind in RESOURCES:
        if kind in kinds:
            group, resource = RESOURCES[kind]
            by_group.setdefault(group, []).append(resource)
    rules = [{"apiGroups": [group], "apiVersions": ["v1"], "operations": list(operations),
              "resources": resources} for group, resources in by_group.items()]
    if "NodeTemplate" in kinds and config.nodeTemplateGroups:
        rules.append({"apiGroups": list(config.nodeTemplateGroups), "apiVersions": ["*"],
                      "operations": list(operations), "resources": ["nodetemplates"]})
    return rules


def _namespace_selector(include: Iterable[str], exclude: Iterable[str]) -> dict[str, Any]:
    """Exact namespace names as a selector on kubernetes.io/metadata.name; a list with a glob
    is left to matchConditions (see _exclusions)."""
    expressions = []
    include = tuple(include)
    if include != ("*",) and not any(_is_glob(name) for name in include):
        expressions.append({"key": "kubernetes.io/metadata.name", "operator": "In",
                            "values": sorted(set(include))})
    names = [name for name in exclude if not _is_glob(name)]
    if names:
        expressions.append({"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                            "values": sorted(set(names))})
    return {"matchExpressions": expressions} if expressions else {}


def _exclusions(policy: Policy, config: Config) -> list[dict[str, str]]:
    """matchConditions for what a selector cannot say: namespace globs, excluded users and
    groups, mirror pods."""
    conditions = []
    namespaces = policy.match.namespaces
    globs = [name for name in namespaces if _is_glob(name)]
    if namespaces != ("*",) and globs:
        exact = [name for name in namespaces if not _is_glob(name)]
        tests = [_matches("request.namespace", globs)]
        if exact:
            tests.append(f"request.namespace in {_literal(sorted(exact))}")
        conditions.append({"name": "quickq-guard-namespaces", "expression": " || ".join(tests)})
    excluded = [*config.excludeNamespaces, *policy.match.excludeNamespaces]
    globs = [name for name in excluded if _is_glob(name)]
    if globs:
        conditions.append({"name": "quickq-guard-exclude-namespaces",
                           "expression": f"!({_matches('request.namespace', globs)})"})
    if config.excludeUsers:
        conditions.append({"name": "quickq-guard-exclude-users", "expression":
                           f"!({_matches('request.userInfo.username', config.excludeUsers)})"})
    if config.excludeGroups:
        groups = _matches("g", config.excludeGroups)
        conditions.append({"name": "quickq-guard-exclude-groups",
                           "expression": f"!request.userInfo.groups.exists(g, {groups})"})
    pods = not policy.match.kinds or "Pod" in policy.match.kinds
    if pods:
        # Only a kubelet makes mirror pods (webhook.engine.evaluate.is_node).
        conditions.append({"name": "quickq-guard-not-mirror-pod", "expression": (
            "!(object.kind == 'Pod' && has(object.metadata.annotations)"
            f" && {_literal(MIRROR_POD_ANNOTATION)} in object.metadata.annotations"
            " && has(request.userInfo.username)"
            " && request.userInfo.username.startsWith('system:node:')"
            " && has(request.userInfo.groups) && 'system:nodes' in request.userInfo.groups)")})
    return conditions


def _containers(node_templates: bool) -> str:
    """Every container of the object, whatever its kind, as {group, label, container}. The
    API server's CEL wants every value of a map literal of one type: the strings are dyn()."""
    lists = [f"(has(variables.podSpec.{group}) ? variables.podSpec.{group}.map(c, "
             f"{{'group': dyn({_literal(group)}), "
             f"'label': dyn({_literal(label + ' ' + chr(39))} + c.name + {_literal(chr(39))}), "
             f"'container': c}}) : [])"
             for group, label in CONTAINER_GROUPS]
    if node_templates:
        lists.append("(object.kind == 'NodeTemplate' ? [{'group': dyn('nodeTemplate'), "
                     "'label': dyn('spec'), 'container': object.spec}] : [])")
    return " + ".join(lists)


def _per_container(expression: str, message_expression: str | None, message: str,
                   item: str) -> tuple[str, str]:
    """A container-scope validation over every container of the object, and a message that
    names each failing container as the webhook's findings do."""
    names = {"container": f"{item}.container", "containerGroup": f"{item}.group"}
    bound = _rewrite(expression, names, {})
    text = (_rewrite(message_expression, names, {}) if message_expression is not None
            else _literal(" ".join(message.split())))
    return (f"variables.containers.all({item}, {bound})",
            f"variables.containers.filter({item}, !({bound}))"
            f".map({item}, {item}.label + ': ' + ({text})).join('; ')")


def _for_each(each: Each, as_variables: Mapping[str, str], inline: Mapping[str, str],
              message: str, item: str | None) -> tuple[str, str]:
    """A forEach validation: every item of the list or map checked (over every container of
    the object with `item`, the name of one), and a message that gives each failing item's
    message, after its container's name in container scope, as the engine's findings do."""
    names = {} if item is None else {"container": f"{item}.container",
                                     "containerGroup": f"{item}.group"}

    def written(text: str) -> str:
        return _rewrite(_rewrite(text, as_variables, inline), names, {})

    items, check = f"({written(each.items)})", f"({written(each.check)})"
    text = f"({written(each.message)})" if each.message is not None \
        else _literal(" ".join(message.split()))
    every = f"{items}.all(each, {check})"
    if item is None:
        return every, f"{items}.filter(each, !{check}).map(each, {text}).join('; ')"
    return (f"variables.containers.all({item}, {every})",
            f"variables.containers.filter({item}, !({every})).map({item}, "
            f"{items}.filter(each, !{check}).map(each, {item}.label + ': ' + {text})"
            f".join('; ')).join('; ')")


def _free_name(texts: Iterable[str], wanted: str) -> str:
    """`wanted`, or it with underscores added until no expression uses that name."""
    used = {value for text in texts for kind, value in lex(text) if kind == "name"}
    while wanted in used:
        wanted += "_"
    return wanted


def _rewrite(text: str, names: Mapping[str, str], inline: Mapping[str, str]) -> str:
    """The expression with each free name in `names` replaced (a field `x.name` is no free
    name) and each `variables.<name>` in `inline` replaced by its expression in brackets;
    spaces, comments and strings stay as written."""
    parts = lex(text)
    out: list[str] = []
    recent: list[str] = []  # the last two significant tokens written
    index = 0
    while index < len(parts):
        kind, value = parts[index]
        index += 1
        if kind == "space":
            out.append(value)
            continue
        if kind == "name" and not _is_field(recent):
            ahead = [i for i in range(index, len(parts)) if parts[i][0] != "space"][:2]
            if value == "variables" and len(ahead) == 2 and parts[ahead[0]][1] == "." \
                    and parts[ahead[1]][1] in inline:
                value = f"({inline[parts[ahead[1]][1]]})"
                index = ahead[1] + 1
            elif value in names:
                value = names[value]
        out.append(value)
        recent = [*recent[-1:], value]
    return "".join(out)


def _is_field(recent: list[str]) -> bool:
    """Whether a name after these tokens is a field or method (`x.name`, `x.?name`)."""
    return recent[-1:] == ["."] or recent == [".", "?"]


def _reads(text: str, names: Iterable[str]) -> bool:
    """Whether the expression reads one of the free names (`variables.x` counts as one)."""
    wanted = set(names)
    parts = [(kind, value) for kind, value in lex(text) if kind != "space"]
    for index, (kind, value) in enumerate(parts):
        if kind != "name" or _is_field([v for _, v in parts[max(0, index - 2):index]]):
            continue
        if value in wanted:
            return True
        if value == "variables" and index + 2 < len(parts) and parts[index + 1][1] == "." \
                and f"variables.{parts[index + 2][1]}" in wanted:
            return True
    return False


def _is_glob(pattern: str) -> bool:
    return any(char in pattern for char in "*?[")


def match_constraints(policy: Policy, rules: list[dict[str, Any]]) -> dict[str, Any]:
    """A policy's `match` as an admission policy's matchConstraints (validating or
    mutating): the resources, the namespaces by name, the object's labels."""
    constraints: dict[str, Any] = {"resourceRules": rules}
    selector = _namespace_selector(policy.match.namespaces, policy.match.excludeNamespaces)
    if selector:
        constraints["namespaceSelector"] = selector
    if policy.match.selector is not None:
        constraints["objectSelector"] = policy.match.selector.model_dump(exclude_defaults=True)
    return constraints


def _matches(subject: str, patterns: Iterable[str]) -> str:
    """A CEL test that `subject` matches one of the globs (as fnmatch, in RE2)."""
    return " || ".join(f"{subject}.matches({_literal('^' + glob_regex(p) + '$')})"
                       for p in patterns)


def params_literal(params: Mapping[str, Any]) -> str:
    """A policy's params as the expression of the variable `params`: a literal inside
    `dyn()`, so that Kubernetes types `params.x` as the engine does (dyn), and refuses or
    accepts an expression over params as the engine does (`params.names[0] + 1` compiles
    in both and fails when it runs; with the literal's own types Kubernetes would refuse it)."""
    return f"dyn({_literal(dict(params))})"


def _literal(value: Any) -> str:
    """Plain data (params) as a CEL literal Kubernetes accepts: its CEL wants the items of a
    list literal, and the keys and the values of a map literal, of one type each, so where
    they differ (`{"registries": ["a/"], "max": 200}`) each is written as `dyn(...)`."""
    return _typed(value)[0]


def _typed(value: Any) -> tuple[str, str]:
    """(the literal, its CEL type)."""
    if value is None:
        return "null", "null"
    if isinstance(value, bool):
        return ("true" if value else "false"), "bool"
    if isinstance(value, int):
        return str(value), "int"
    if isinstance(value, float):
        if not math.isfinite(value):  # YAML's .inf and .nan
            written = "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
            return f"double('{written}')", "double"
        return repr(value), "double"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False), "string"
    if isinstance(value, list | tuple):
        items, kind = _one_type([_typed(item) for item in value])
        return "[" + ", ".join(items) + "]", f"list({kind})"
    if isinstance(value, Mapping):
        keys, key_kind = _one_type([_typed(key) for key in value])
        items, kind = _one_type([_typed(item) for item in value.values()])
        return "{" + ", ".join(f"{key}: {item}" for key, item in zip(keys, items, strict=True)
                               ) + "}", f"map({key_kind}, {kind})"
    raise NotExportable(f"params hold a {type(value).__name__}, which CEL cannot write")


def _one_type(typed: list[tuple[str, str]]) -> tuple[list[str], str]:
    """The literals as they are when they have one type, else each as `dyn(...)`."""
    kinds = {kind for _, kind in typed}
    if len(kinds) == 1:
        return [literal for literal, _ in typed], kinds.pop()
    return [f"dyn({literal})" for literal, _ in typed], "dyn"
