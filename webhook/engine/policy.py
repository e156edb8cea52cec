"""Policies and the global config: pydantic models, built from parsed documents (the files
are read at the edge, by webhook.loader).

A broken policy must never be silently ignored: every problem fails the load with the file,
the field and the reason.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from webhook.engine import podsecurity
from webhook.engine.accelerators import Accelerators
from webhook.engine.claims import CLAIM_KINDS
from webhook.engine.globs import matches_any
from webhook.engine.results import Result
from webhook.engine.rules import RULES, Rule
from webhook.engine.rules._base import Params
from webhook.engine.workload import ANY, WORKLOAD_KINDS, PodSite

if TYPE_CHECKING:
    # The CEL runtime is imported where a CEL policy is built (_build_cel): a policy set
    # without one never loads it, and `check` of one small file starts in half the time.
    from webhook.engine import cel
    from webhook.engine.rules.cel import CelPolicy
    from webhook.engine.rules.cel_review import Shared

Action = Literal["enforce", "warn", "audit", "off"]
Operation = Literal["CREATE", "UPDATE"]
# Policy ids are audit-annotation keys, so they must be qualified names (at most 63 chars).
_POLICY_ID = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_NAMESPACE = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"  # a DNS label


class PolicyError(ValueError):
    """A policy file or config that cannot be loaded; the message names file, field and reason."""


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LabelSelectorRequirement(Model):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()


class LabelSelector(Model):
    matchLabels: dict[str, str] = Field(default_factory=dict)
    matchExpressions: tuple[LabelSelectorRequirement, ...] = ()

    def matches(self, labels: Mapping[str, Any]) -> bool:
        for key, wanted in self.matchLabels.items():
            if labels.get(key) != wanted:
                return False
        for expression in self.matchExpressions:
            present = expression.key in labels
            value = labels.get(expression.key)
            if expression.operator == "In" and value not in expression.values:
                return False
            if expression.operator == "NotIn" and present and value in expression.values:
                return False
            if expression.operator == "Exists" and not present:
                return False
            if expression.operator == "DoesNotExist" and present:
                return False
        return True


class Match(Model):
    """Which objects a policy judges. Namespaces are globs; an empty `kinds` means all judged."""

    kinds: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ("*",)
    excludeNamespaces: tuple[str, ...] = ()
    operations: tuple[Operation, ...] = ("CREATE", "UPDATE")
    selector: LabelSelector | None = None


_CEL_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class VariableSpec(Model):
    """A named CEL expression the others read as `variables.<name>`."""

    name: str = Field(pattern=_CEL_NAME)
    expression: str


class MatchConditionSpec(Model):
    """A CEL expression that must be true for the policy to judge the object."""

    name: str = Field(min_length=1, max_length=63)
    expression: str


class ValidationSpec(Model):
    """One CEL check, in ValidatingAdmissionPolicy's words; `fieldPath` names the field a
    finding points at, relative to the container in `scope: container`. quickq-guard's own:
    `forEach` (a list or map: the check is judged for each item, bound as `each`, a finding
    per item that fails, and a `[*]` step of fieldPath is the item's index or key) and
    `perContainer` (a fieldPath at the pod spec still gives a finding for each container,
    naming it)."""

    expression: str
    message: str | None = None
    messageExpression: str | None = None
    reason: Literal["Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge"] | None = None
    fieldPath: str | None = None
    forEach: str | None = None
    perContainer: bool = False


class JSONPatchSpec(Model):
    expression: str


class MutationSpec(Model):
    """One mutation in MutatingAdmissionPolicy's JSONPatch form: an expression yielding JSON
    Patch operations (`JSONPatch{op: "add", path: "/x", value: 1}` or plain maps)."""

    patchType: Literal["JSONPatch"]
    jsonPatch: JSONPatchSpec


class PolicyFile(Model):
    """One policy document, as written in policies/<id>.yaml: a built-in `rule` with params,
    or CEL `validations` (with `variables`, `matchConditions` and a `scope`)."""

    id: str = Field(pattern=_POLICY_ID)
    description: str = Field(min_length=1)
    type: Literal["validate", "mutate"]
    action: Action
    rule: str | None = None  # the registered rule; defaults to the id
    match: Match = Match()
    params: dict[str, Any] = Field(default_factory=dict)
    message: str | None = None
    scope: Literal["object", "container"] | None = None
    variables: tuple[VariableSpec, ...] = ()
    matchConditions: tuple[MatchConditionSpec, ...] = ()
    validations: tuple[ValidationSpec, ...] = ()
    mutations: tuple[MutationSpec, ...] = ()

    @property
    def is_cel(self) -> bool:
        return bool(self.validations or self.mutations)


class CelParams(Params):
    """A CEL policy's params: any mapping, bound to `params` in its expressions."""

    model_config = ConfigDict(extra="allow", frozen=True)


class PolicyOverride(Model):
    """What the global config may change of a policy: its action and its params."""

    action: Action | None = None
    params: dict[str, Any] = Field(default_factory=dict)


PodSecurityLevel = Literal["privileged", "baseline", "restricted"]


class PodSecurity(Model):
    """Which Pod Security Standards profile each action applies, in the words of the Pod
    Security Admission controller's namespace labels (pod-security.kubernetes.io/enforce,
    warn, audit); unset, or `privileged`, applies none."""

    enforce: PodSecurityLevel | None = None
    warn: PodSecurityLevel | None = None
    audit: PodSecurityLevel | None = None
    version: str = podsecurity.VERSION

    @field_validator("version")
    @classmethod
    def _shipped_version(cls, value: str) -> str:
        if value not in (podsecurity.VERSION, "latest"):
            raise ValueError(f"quickq-guard ships the Pod Security Standards of "
                             f"{podsecurity.VERSION} only; write {podsecurity.VERSION!r} "
                             "or 'latest'")
        return value

    @property
    def modes(self) -> dict[str, str | None]:
        return {"enforce": self.enforce, "warn": self.warn, "audit": self.audit}


_SEGMENT = re.compile(r"^[A-Za-z0-9_-]+$")


def parse_path(text: str) -> tuple[str, ...]:
    """`spec.workers[*].template` -> ("spec", "workers", "*", "template"). Raises ValueError
    naming what is wrong."""
    segments = text.replace("[*]", ".*").split(".")
    for position, segment in enumerate(segments):
        if not (_SEGMENT.match(segment) or (segment == ANY and position > 0)):
            raise ValueError(f"{text!r} is not a path: write field names joined by dots, with "
                             "* (or [*]) for every item of a list or value of a map, e.g. "
                             "spec.workers[*].template")
    return tuple(segments)


class CustomKind(Model):
    """A kind of another project that runs pods: where its pod templates live."""

    group: str = Field(min_length=1, description="API group, e.g. serving.example.com")
    kind: str
    podTemplates: tuple[str, ...] = Field(
        min_length=1, description="paths of its pod templates (PodTemplateSpec: metadata and "
                                  "spec), e.g. spec.template or spec.workers[*].template")

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", value):
            raise ValueError(f"{value!r} is not a kind: write it as the kind field of the "
                             "objects does, e.g. ModelServer")
        return value

    @field_validator("podTemplates")
    @classmethod
    def _paths(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for text in value:
            parse_path(text)
        return value

    def sites(self) -> tuple[PodSite, ...]:
        return tuple(PodSite((*parse_path(text), "spec")) for text in self.podTemplates)


class Config(Model):
    """The global config: mode, exclusions, accepted NodeTemplate groups, custom kinds, policy
    overrides, the Pod Security Standards profiles switched on, where PolicyExceptions are
    honoured from."""

    mode: Literal["enforce", "dry-run"] = "enforce"
    excludeNamespaces: tuple[str, ...] = ("kube-system", "kube-public", "kube-node-lease")
    excludeUsers: tuple[str, ...] = ()
    excludeGroups: tuple[str, ...] = ()
    # Who may create a namespace excludeNamespaces names, or set the quickq.io/ignore label
    # (webhook.engine.namespaces): the cluster's administrators (kube-apiserver's own
    # requests and system:masters certificates; kubeadm's admin.conf since 1.29).
    optOutGroups: tuple[str, ...] = ("system:masters", "kubeadm:cluster-admins")
    nodeTemplateGroups: tuple[str, ...] = ("quickq", "quickq.io")
    customKinds: tuple[CustomKind, ...] = ()
    policies: dict[str, PolicyOverride] = Field(default_factory=dict)
    podSecurity: PodSecurity = PodSecurity()
    # PolicyExceptions are honoured only from these namespaces (names, not globs: the webhook
    # watches each; the chart lists its release namespace): whoever may write there grants
    # exceptions, no one else.
    exceptionNamespaces: tuple[Annotated[str, Field(pattern=_NAMESPACE)], ...] = ()
    exceptionMaxDays: int = Field(default=90, ge=1, le=3650)
    exceptionWildcards: bool = False  # may an exception name policies by glob (`*`)?
    # The GPU resources, taint keys and DRA device classes every GPU policy reads.
    accelerators: Accelerators = Accelerators()

    @field_validator("nodeTemplateGroups")
    @classmethod
    def _groups_not_empty(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(not group for group in value):
            raise ValueError("a NodeTemplate group may not be empty")
        return value

    @field_validator("customKinds")
    @classmethod
    def _kinds_new(cls, value: tuple[CustomKind, ...]) -> tuple[CustomKind, ...]:
        seen: set[tuple[str, str]] = set()
        for custom in value:
            key = (custom.group, custom.kind)
            if key in WORKLOAD_KINDS or custom.kind == "NodeTemplate":
                raise ValueError(f"{custom.kind} of {custom.group} is judged already; "
                                 "customKinds is for kinds quickq-guard does not know")
            if key in seen:
                raise ValueError(f"{custom.kind} of {custom.group} is listed twice")
            seen.add(key)
        return value

    @cached_property
    def workload_kinds(self) -> Mapping[tuple[str, str], tuple[PodSite, ...]]:
        """The custom kinds as read_workload takes them."""
        return {(custom.group, custom.kind): custom.sites() for custom in self.customKinds}


@dataclass(frozen=True, slots=True)
class Policy:
    """A loaded policy: the file's fields, its rule and its validated params."""

    id: str
    description: str
    type: str
    action: Action
    rule: Rule | None  # None for a CEL policy
    params: Params
    match: Match
    message: str | None
    source: str
    cel: CelPolicy | None = None  # the compiled expressions of a CEL policy
    # Whether the policy judges NodeTemplates (a CEL policy's `match.kinds` decides).
    node_templates: bool = True
    # Whether it judges ResourceClaims and ResourceClaimTemplates (a CEL policy: when its
    # `match.kinds` names them), and whether it judges anything else.
    claims: bool = False
    pods: bool = True
    # Whether it judges ConfigMaps (no-plaintext-secrets: a ConfigMap's data).
    config_maps: bool = False
    # This policy's verdict on an object it has nothing to say about: one immutable value,
    # the same for every evaluation, as a constant is.
    passed: Result = field(init=False, repr=False, compare=False)
    # Whether `match` narrows nothing but the operations (most policies): then applies()
    # has nothing else to ask, and every evaluation of every policy asks it.
    everywhere: bool = field(init=False, repr=False, compare=False)
    idle: Result = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "passed", Result(self.id, self.type, self.action, "pass"))
        # What it says of an object it is not run on: off, or not its kind of object.
        idle = "the policy is off" if self.action == "off" else "" if self.pods else \
            "the policy judges ResourceClaims and ResourceClaimTemplates only"
        object.__setattr__(self, "idle", Result(self.id, self.type, self.action, "skip",
                                                reason=idle) if idle else self.passed)
        match = self.match
        object.__setattr__(self, "everywhere", not match.kinds and match.namespaces == ("*",)
                           and not match.excludeNamespaces and match.selector is None)

    def applies(self, kind: str, namespace: str, operation: str,
                labels: Mapping[str, Any]) -> bool:
        match = self.match
        if match.kinds and kind not in match.kinds:
            return False
        if operation not in match.operations:
            return False
        if match.namespaces != ("*",) and not matches_any(namespace, match.namespaces):
            return False
        if match.excludeNamespaces and matches_any(namespace, match.excludeNamespaces):
            return False
        return match.selector is None or match.selector.matches(labels)


@dataclass(frozen=True, slots=True)
class PolicySet:
    """The policies in force and the global config they run under."""

    policies: tuple[Policy, ...]
    config: Config
    # Split by type once: evaluate() runs the mutate policies first, as the mutating webhook
    # runs before the validating one.
    mutating: tuple[Policy, ...] = field(init=False, repr=False, compare=False)
    validating: tuple[Policy, ...] = field(init=False, repr=False, compare=False)
    # The validate policies a workload with pods is run through: not those that are off or
    # judge only DRA claims, whose verdict on it is known (Policy.idle) before it arrives.
    validating_pods: tuple[Policy, ...] = field(init=False, repr=False, compare=False)
    # What its CEL policies read of a review, which a review converts once for all of them
    # (webhook.engine.rules.cel_review); None without CEL policies.
    cel: Shared | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "mutating",
                           tuple(p for p in self.policies if p.type == "mutate"))
        object.__setattr__(self, "validating",
                           tuple(p for p in self.policies if p.type == "validate"))
        object.__setattr__(self, "validating_pods", tuple(
            p for p in self.validating if p.pods and p.action != "off"))
        programs = [p.cel for p in self.policies if p.cel is not None]
        shared = None
        if programs:
            from webhook.engine.rules.cel import shared_by

            shared = shared_by(programs)
        object.__setattr__(self, "cel", shared)

    def get(self, policy_id: str) -> Policy:
        for policy in self.policies:
            if policy.id == policy_id:
                return policy
        raise KeyError(policy_id)




def policy_set(policies: list[Policy], config: Config) -> PolicySet:
    """The policies read (see webhook.loader) as one set under `config`: each id once, and
    every `policies.<id>` of the config naming one of them. Raises PolicyError."""
    seen: dict[str, str] = {}
    for policy in policies:
        if policy.id in seen:
            raise PolicyError(f"{policy.source}: policy id {policy.id!r} is already defined "
                              f"in {seen[policy.id]}")
        seen[policy.id] = policy.source
    unknown = sorted(set(config.policies) - set(seen))
    if unknown:
        raise PolicyError(f"config: policies: no policy with id {', '.join(map(repr, unknown))} "
                          f"(loaded: {', '.join(sorted(seen))})")
    return PolicySet(tuple(policies), config)


def pod_security_policy(document: Any, where: str, config: Config,
                        mode: podsecurity.Mode) -> Policy:
    """A Pod Security Standards control, with the action of the strongest mode that includes
    it (see podsecurity.selected); a `policies.<id>.action` override still wins."""
    policy = build(document, where, config)
    override = config.policies.get(policy.id)
    if override is None or override.action is None:
        policy = replace(policy, action=mode)
    return policy


def config_from(documents: list[Any], where: str) -> Config:
    """The global config of a file's documents (None: an empty document). Raises
    PolicyError."""
    documents = [d for d in documents if d is not None]
    if len(documents) > 1:
        raise PolicyError(f"{where}: expected one config document, found {len(documents)}")
    data = documents[0] if documents else {}
    try:
        return Config.model_validate(data)
    except ValidationError as error:
        raise PolicyError(f"{where}: {_explain(error)}") from None


def build(document: Any, where: str, config: Config) -> Policy:
    """The policy of one parsed document (`where` names it in errors). Raises PolicyError."""
    if not isinstance(document, dict):
        raise PolicyError(f"{where}: expected a policy (a mapping), got {type(document).__name__}")
    try:
        spec = PolicyFile.model_validate(document)
    except ValidationError as error:
        raise PolicyError(f"{where}: {_explain(error)}") from None
    if spec.is_cel:
        return _build_cel(spec, where, config)
    for name in ("scope", "variables", "matchConditions"):
        if name in document:
            raise PolicyError(f"{where}: {name}: only a CEL policy (one with `validations` "
                              "or `mutations`) has it")
    rule_name = spec.rule or spec.id
    rule = RULES.get(rule_name)
    if rule is None:
        raise PolicyError(f"{where}: rule: unknown rule {rule_name!r} "
                          f"(known: {', '.join(sorted(RULES))})")
    if rule.type != spec.type:
        raise PolicyError(f"{where}: type: rule {rule_name!r} is a {rule.type} rule, "
                          f"not {spec.type}")
    override = config.policies.get(spec.id, PolicyOverride())
    params = {**spec.params, **override.params}
    if "accelerators" in rule.params.model_fields and "accelerators" not in params:
        params["accelerators"] = config.accelerators  # one setting for every GPU policy
    try:
        validated = rule.params.model_validate(params)
    except ValidationError as error:
        raise PolicyError(f"{_params_origin(rule, spec, override, where)}: "
                          f"{_explain(error)}") from None
    return Policy(id=spec.id, description=spec.description.strip(), type=spec.type,
                  action=override.action or spec.action, rule=rule, params=validated,
                  match=spec.match, message=spec.message, source=where,
                  node_templates=rule.node_templates, claims=rule.claims, pods=rule.pods,
                  config_maps=rule.config_maps)


def _build_cel(spec: PolicyFile, where: str, config: Config) -> Policy:
    """A policy of CEL expressions, compiled now so that a mistake fails the load with the
    file, the expression and the line and column in it: its matchConditions each alone, its
    variables and other expressions in one program (webhook.engine.cel.compile_policy),
    each once."""
    from webhook.engine import cel
    from webhook.engine.rules.cel import (
        CelPolicy,
        Each,
        MatchCondition,
        Mutation,
        Validation,
        Variable,
        idempotence_problem,
        parse_field_path,
    )

    if spec.rule is not None:
        raise PolicyError(f"{where}: rule: a CEL policy (one with `validations` or "
                          "`mutations`) names no rule")
    if spec.validations and spec.mutations:
        raise PolicyError(f"{where}: mutations: a policy has `validations` or `mutations`, "
                          "not both (write a validate and a mutate policy)")
    wanted, field = ("validate", "validations") if spec.validations else ("mutate", "mutations")
    if spec.type != wanted:
        raise PolicyError(f"{where}: type: a policy with `{field}` is a {wanted} policy")
    if spec.message is not None:
        raise PolicyError(f"{where}: message: a CEL policy gives a message per validation")
    scope = spec.scope or "object"
    override = config.policies.get(spec.id, PolicyOverride())
    params = {**spec.params, **override.params}

    conditions = []
    for index, condition in enumerate(spec.matchConditions):
        try:
            expression = cel.compile_expression(condition.expression, "object", "bool",
                                                key=spec.id)  # a matchCondition's: a bool
        except cel.CelError as error:
            raise PolicyError(f"{where}: matchConditions[{index}] ({condition.name})"
                              f".expression: {error}") from None
        conditions.append(MatchCondition(condition.name, expression))
    seen: set[str] = set()
    variables: list[tuple[str, cel.Source]] = []
    for index, variable in enumerate(spec.variables):
        if variable.name in seen:
            raise PolicyError(f"{where}: variables[{index}].name: {variable.name!r} is "
                              "defined twice")
        field = f"variables[{index}] ({variable.name}).expression"
        _known_variables(variable.expression, seen, where, field)
        seen.add(variable.name)
        variables.append((variable.name, cel.Source(field, variable.expression)))
    sources: list[cel.Source] = []
    for index, item in enumerate(spec.validations):
        if item.forEach is not None:
            sources += for_each_sources(item, f"validations[{index}]")
            continue
        sources.append(cel.Source(f"validations[{index}].expression", item.expression, "bool"))
        if item.messageExpression:
            sources.append(cel.Source(f"validations[{index}].messageExpression",
                                      item.messageExpression, "string"))
    for index, mutation in enumerate(spec.mutations):
        sources.append(cel.Source(f"mutations[{index}].jsonPatch.expression",
                                  mutation.jsonPatch.expression, "jsonpatch"))
    for source in sources:
        _known_variables(source.text, seen, where, source.field)
    paths: list[tuple[tuple[str | int, ...], int | None]] = []
    for index, item in enumerate(spec.validations):
        try:
            paths.append(parse_field_path(item.fieldPath, each=item.forEach is not None)
                         if item.fieldPath else ((), None))
        except ValueError as error:
            raise PolicyError(f"{where}: validations[{index}].fieldPath: {error}") from None
        if item.perContainer and scope != "container":
            raise PolicyError(f"{where}: validations[{index}].perContainer: only a policy "
                              "with `scope: container` names containers")
    # Each evaluated together, once per container (see CelPolicy): the validations, the
    # messageExpressions of those that fail (forEach's are per item), the mutations.
    numbered = list(enumerate(sources))
    batches = [cel.Batch(tuple(index for index, source in numbered if source.kind == "bool")),
               cel.Batch(tuple(index for index, source in numbered if source.kind == "string"),
                         masked=True),
               cel.Batch(tuple(range(len(sources) - len(spec.mutations), len(sources))))]
    try:
        expressions, (together, messages, mutated) = cel.compile_policy(
            scope, variables, sources, batches, key=spec.id)
    except cel.CelError as error:
        raise PolicyError(f"{where}: {error}") from None
    compiled = dict(zip((source.field for source in sources), expressions, strict=True))
    validations = [Validation(
        expression=compiled[f"validations[{index}].expression"],
        message=item.message,
        message_expression=compiled.get(f"validations[{index}].messageExpression"),
        reason=item.reason,
        field_path=paths[index][0],
        per_container=item.perContainer,
        each=None if item.forEach is None else Each(
            item.forEach, item.expression, item.messageExpression,
            compiled[f"validations[{index}].forEach"], paths[index][1]))
        for index, item in enumerate(spec.validations)]
    mutations = [Mutation(compiled[f"mutations[{index}].jsonPatch.expression"],
                          mutation.jsonPatch.expression)
                 for index, mutation in enumerate(spec.mutations)]
    program = CelPolicy(scope=scope, params=params, variables=tuple(
                            Variable(name, cel.variable(source.text))
                            for name, source in variables),
                        match_conditions=tuple(conditions), validations=tuple(validations),
                        mutations=tuple(mutations), together=together, messages=messages,
                        mutated=mutated, key=spec.id)
    # (compiled later: the probe ran when the policies loaded first, see cel.later)
    repeated = "" if cel.compiles_later() else idempotence_problem(program)
    if repeated:
        raise PolicyError(f"{where}: mutations: not idempotent: on a probe Pod, a second pass "
                          f"patches again ({repeated}); make each operation depend on what it "
                          "sets, e.g. has(container.securityContext) ? [] : [...]")
    return Policy(id=spec.id, description=spec.description.strip(), type=spec.type,
                  action=override.action or spec.action, rule=None,
                  params=CelParams.model_validate(params), match=spec.match, message=None,
                  source=where, cel=program,
                  claims=bool(CLAIM_KINDS.intersection(spec.match.kinds)))


def for_each_sources(item: ValidationSpec, field: str) -> list[cel.Source]:
    """A forEach validation as the expressions the policy's program holds: the check of every
    item (its `expression`, so that it is judged, batched and exported like any other), and,
    read only when that fails, whether the items are a map's keys and each item with its
    verdict, and with its message."""
    from webhook.engine import cel

    items, check = f"({item.forEach})", f"({item.expression})"

    def each(value: str) -> str:
        return f"[dyn(type({items}) == map), dyn({items}.map(each, [dyn(each), dyn({value})]))]"

    sources = [cel.Source(f"{field}.expression", f"{items}.all(each, {check})", "bool"),
               cel.Source(f"{field}.forEach", each(check))]
    if item.messageExpression:
        sources.append(cel.Source(f"{field}.messageExpression",
                                  each(f"({item.messageExpression})")))
    return sources


def _known_variables(text: str, defined: set[str], where: str, field: str) -> None:
    """An expression reads only the variables defined before it."""
    from webhook.engine import cel

    unknown = sorted(cel.variable_references(text) - defined)
    if unknown:
        raise PolicyError(f"{where}: {field}: reads variables.{unknown[0]}, which is not "
                          f"defined before it (defined: {', '.join(sorted(defined)) or 'none'})")


def _params_origin(rule: Rule, spec: PolicyFile, override: PolicyOverride, where: str) -> str:
    """Where bad params were written: the policy file, or the config's override of it."""
    if override.params:
        try:
            rule.params.model_validate(spec.params)
        except ValidationError:
            pass
        else:
            return f"config: policies.{spec.id}.params"
    return f"{where}: params"


def _explain(error: ValidationError) -> str:
    """pydantic's errors as one line per field: `match.kinds: Input should be a valid list`."""
    parts = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "(document)"
        reason = "unknown field" if item["type"] == "extra_forbidden" else item["msg"]
        reason = reason.removeprefix("Value error, ")
        parts.append(f"{field}: {reason}")
    return "; ".join(parts)


