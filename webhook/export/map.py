"""Mutate policies as Kubernetes MutatingAdmissionPolicies (admissionregistration.k8s.io/v1,
GA in 1.36), so a cluster keeps injecting what the webhook injects when the webhook is down:
a MutatingAdmissionPolicy and its binding per mutate policy in force.

The patch is JSONPatch, written so that the object the API server stores is the one the
webhook's patch makes:

- `inject-startup-probe` and `inject-gpu-toleration`, built-in rules, are written out in CEL
  here from their params (the same numbers, globs and taint keys the rule reads), and
  `tests/cluster/test_native_mutations.py` shows on the real API server that the stored objects
  equal the webhook's.
- A CEL mutate policy in object scope keeps its expressions, with `params` and `podSpec`
  written in as for ValidatingAdmissionPolicy (webhook/export/vap.py).

The two built-in rules also patch NodeTemplates (their spec is pod spec and container at
once: spec.tolerations, spec.health.startup), in each group the config accepts. The binding
and matchConditions mean what the webhook does: Pods on CREATE only, a NodeTemplate on
CREATE and UPDATE, a controller on UPDATE only when its pod template changed, a ReplicaSet
its Deployment controls not at all, and the config's exclusions. `reinvocationPolicy:
IfNeeded`, as the chart's mutating webhook. A policy that only reports (warn, audit, dry-run
mode), one in container scope and other built-in rules are refused with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.engine.globs import glob_regex
from webhook.engine.policy import Config, Policy, PolicySet
from webhook.engine.rules.gpu import GpuTolerationParams
from webhook.engine.rules.probes import (
    DEFAULT_FAILURE_THRESHOLD,
    DEFAULT_PERIOD_SECONDS,
    HANDLERS,
    INT32_MAX,
    StartupProbeParams,
)
from webhook.engine.workload import BUILT_IN, IN_TEMPLATE
from webhook.export import kubernetes_cel
from webhook.export.vap import (
    CONTAINER_GROUPS,
    NAME_PREFIX,
    POD_SPEC,
    RESOURCES,
    Exported,
    NotExportable,
    Refusal,
    _exclusions,
    _literal,
    _namespace_selector,
    _reads,
    _rewrite,
    match_constraints,
    params_literal,
    refuse_exceptions,
)

API_VERSION = "admissionregistration.k8s.io/v1"  # MutatingAdmissionPolicy is GA since 1.36
# The JSON Pointer of the pod spec, wherever the kind keeps it.
POD_SPEC_POINTER = " : ".join(
    [*(f"object.kind == '{kind}' ? '/{'/'.join(built.pod_spec)}'"
       for kind, built in BUILT_IN.items() if built.pod_spec != IN_TEMPLATE),
     f"'/{'/'.join(IN_TEMPLATE)}'"])


def _template(root: str) -> str:
    """The pod template of a controller under `root` (object or oldObject)."""
    return " : ".join(
        [*(f"{root}.kind == '{kind}' ? {root}.{'.'.join(built.pod_spec[:-1])}"
           for kind, built in BUILT_IN.items()
           if kind != "Pod" and built.pod_spec != IN_TEMPLATE),
         f"{root}.{'.'.join(IN_TEMPLATE[:-1])}"])


# The webhook's _not_mutated and _same_pod_template, as matchConditions.
WHEN_MUTATED = [
    {"name": "quickq-guard-template-changed", "expression": (
        f"request.operation != 'UPDATE' || object.kind in ['Pod', 'NodeTemplate'] || "
        f"({_template('object')}) != ({_template('oldObject')})")},
    {"name": "quickq-guard-not-deployment-replicaset", "expression": (
        "!(object.kind == 'ReplicaSet' && has(object.metadata.ownerReferences) && "
        "object.metadata.ownerReferences.exists(o, has(o.controller) && o.controller && "
        "o.kind == 'Deployment' && o.apiVersion.startsWith('apps/')))")},
]


def export(policies: PolicySet) -> Exported:
    """The MutatingAdmissionPolicy and binding of each exportable mutate policy, and why each
    of the others is not exported."""
    objects: list[dict[str, Any]] = []
    refusals: list[Refusal] = []
    notes: list[str] = []
    for policy in policies.policies:
        if policy.type != "mutate" or policy.action == "off":
            continue  # validate policies are ValidatingAdmissionPolicy's (vap.py)
        try:
            objects += translate(policy, policies.config)
        except NotExportable as error:
            refusals.append(Refusal(policy.id, str(error), expected=False))
            continue
        if policy.rule is not None and policy.rule.name == "inject-gpu-toleration":
            notes.append(f"{policy.id}: pods that get GPUs only through DRA claims get no "
                         "toleration from the exported policy (it cannot read the claims); "
                         "the webhook adds it")
        covered = (*RESOURCES, "NodeTemplate") if policy.cel is None else tuple(RESOURCES)
        left_out = [kind for kind in policy.match.kinds if kind not in covered]
        if left_out or not policy.match.kinds:
            what = "Pods, the built-in pod controllers and NodeTemplates" \
                if policy.cel is None else "Pods and the built-in pod controllers"
            notes.append(f"{policy.id}: exported for {what} only; the ML workload kinds and "
                         "custom kinds are left to the webhook")
    return Exported(objects, refusals, notes)


def translate(policy: Policy, config: Config) -> list[dict[str, Any]]:
    """The policy as a MutatingAdmissionPolicy and its binding. Raises NotExportable."""
    if policy.type != "mutate":
        raise NotExportable("a validate policy: it is a ValidatingAdmissionPolicy's")
    if policy.action != "enforce" or config.mode == "dry-run":
        why = "dry-run mode" if config.mode == "dry-run" else f"action {policy.action}"
        raise NotExportable(f"{why} only reports the patch, and a MutatingAdmissionPolicy "
                            "cannot report without patching")
    refuse_exceptions(config)
    built_in = policy.cel is None
    rules = _resource_rules(policy, config, node_templates=built_in)
    if not rules:
        raise NotExportable(f"it patches only {', '.join(policy.match.kinds)}: the export "
                            "finds pod specs in Pods and the built-in pod controllers")
    variables = [{"name": "podSpec", "expression": POD_SPEC},
                 {"name": "podSpecPath", "expression": POD_SPEC_POINTER}]
    conditions: list[dict[str, str]] = []
    if policy.cel is None:
        # The built-in rules patch a NodeTemplate's spec as both pod spec and container.
        variables = [{"name": "podSpec",
                      "expression": f"object.kind == 'NodeTemplate' ? object.spec : {POD_SPEC}"},
                     {"name": "podSpecPath", "expression":
                      f"object.kind == 'NodeTemplate' ? '/spec' : {POD_SPEC_POINTER}"}]
        name = policy.rule.name if policy.rule is not None else policy.id
        if name == "inject-startup-probe" and isinstance(policy.params, StartupProbeParams):
            probes, patch = startup_probe(policy.params)
            variables += probes
            patches = [patch]
        elif name == "inject-gpu-toleration" and isinstance(policy.params, GpuTolerationParams):
            variables += gpu_variables(policy.params)
            patches = [gpu_toleration(policy.params)]
        else:
            raise NotExportable(f"built-in rule {name} has no MutatingAdmissionPolicy form")
    else:
        program = policy.cel
        if program.scope == "container":
            raise NotExportable("scope: container: its patch paths are relative to each "
                                "container, which the export does not write out")
        uncompilable = kubernetes_cel.refusal(program, mutating=True)
        if uncompilable:
            raise NotExportable(uncompilable)
        defined = {variable.name for variable in program.variables}
        for reserved in ("params", "podSpec", "podSpecPath"):
            if reserved in defined:
                raise NotExportable(f"it defines a variable named {reserved}, the name the "
                                    f"export gives quickq-guard's {reserved}")
        params = params_literal(program.params)
        as_variables = {"params": "variables.params", "podSpec": "variables.podSpec"}
        own = [{"name": v.name, "expression": _rewrite(v.expression.text, as_variables, {})}
               for v in program.variables]
        patches = [_rewrite(m.source or m.expression.text, as_variables, {})
                   for m in program.mutations]
        if any(_reads(text, {"variables.params"})
               for text in [*patches, *(v["expression"] for v in own)]):
            variables.append({"name": "params", "expression": params})
        variables += own
        inlined = {"params": f"({params})", "podSpec": f"({POD_SPEC})"}
        conditions = [{"name": c.name, "expression": _rewrite(c.expression.text, inlined, {})}
                      for c in program.match_conditions]

    name = f"{NAME_PREFIX}{policy.id}"
    labels = {"app.kubernetes.io/managed-by": "quickq-guard"}
    spec: dict[str, Any] = {
        "failurePolicy": "Fail", "reinvocationPolicy": "IfNeeded",
        "matchConstraints": match_constraints(policy, rules),
        "matchConditions": _exclusions(policy, config) + WHEN_MUTATED + conditions,
        "variables": variables,
        "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": text}}
                      for text in patches]}
    binding_spec: dict[str, Any] = {"policyName": name}
    excluded = _namespace_selector(("*",), config.excludeNamespaces)
    if excluded:
        binding_spec["matchResources"] = {"namespaceSelector": excluded}
    return [
        {"apiVersion": API_VERSION, "kind": "MutatingAdmissionPolicy",
         "metadata": {"name": name, "labels": labels,
                      "annotations": {"quickq.io/policy": policy.id,
                                      "quickq.io/description": policy.description}},
         "spec": spec},
        {"apiVersion": API_VERSION, "kind": "MutatingAdmissionPolicyBinding",
         "metadata": {"name": name, "labels": dict(labels),
                      "annotations": {"quickq.io/policy": policy.id}},
         "spec": binding_spec},
    ]


def _resource_rules(policy: Policy, config: Config,
                    node_templates: bool = False) -> list[dict[str, Any]]:
    """Pods on CREATE (the webhook patches a Pod on CREATE only), the controllers on the
    policy's operations, one rule per API group; NodeTemplates in each group the config
    accepts where the mutation is written out for them (the built-in rules)."""
    kinds = policy.match.kinds or (*RESOURCES, "NodeTemplate")
    operations = list(policy.match.operations)
    rules: list[dict[str, Any]] = []
    by_group: dict[str, list[str]] = {}
    for kind, (group, resource) in RESOURCES.items():
        if kind not in kinds:
            continue
        if kind == "Pod":
            if "CREATE" in operations:
                rules.append({"apiGroups": [""], "apiVersions": ["v1"],
                              "operations": ["CREATE"], "resources": ["pods"]})
            continue
        by_group.setdefault(group, []).append(resource)
    rules += [{"apiGroups": [group], "apiVersions": ["v1"], "operations": list(operations),
               "resources": resources} for group, resources in by_group.items()]
    if node_templates and "NodeTemplate" in kinds and config.nodeTemplateGroups:
        rules.append({"apiGroups": list(config.nodeTemplateGroups), "apiVersions": ["*"],
                      "operations": list(operations), "resources": ["nodetemplates"]})
    return rules


def _anchored(pattern: str) -> str:
    """A glob as an RE2 expression for the whole string (CEL's matches() searches)."""
    return f"^{glob_regex(pattern)}$"


def _first_match(subject: str, globs: Mapping[str, Any], otherwise: str) -> str:
    """The value of the first glob that matches `subject` (a CEL string), else `otherwise`."""
    out = otherwise
    for pattern, value in reversed(list(globs.items())):
        out = f"{subject}.matches({_literal(_anchored(pattern))}) ? {value} : {out}"
    return f"({out})"


def _positive(probe: str, field: str, default: int) -> str:
    return f"({probe}.?{field}.orValue(0) > 0 ? {probe}.{field} : {default})"


def startup_probe(params: StartupProbeParams) -> tuple[list[dict[str, str]], str]:
    """inject_startup_probe (webhook/engine/rules/probes.py) as a JSONPatch expression: a
    container with a liveness probe of one handler and no startup probe gets one that runs
    that handler (and its timeout) every periodSeconds, for no less than the image's window
    and what the liveness probe allowed. A NodeTemplate's spec is its container, with the
    probes under spec.health (liveness, startup)."""
    pods = _startup_probes(params, "c.livenessProbe", "has(c.livenessProbe)",
                           "!has(c.startupProbe)")
    node = _startup_probes(params, "c.health.liveness",
                           "has(c.health) && c.health != null && has(c.health.liveness) "
                           "&& c.health.liveness != null",
                           "!(has(c.health.startup) && c.health.startup != null)")
    # Native sidecars: init containers with restartPolicy Always, probed as containers are.
    sidecars = _startup_probes(params, "c.livenessProbe",
                               "c.?restartPolicy.orValue('') == 'Always' && has(c.livenessProbe)",
                               "!has(c.startupProbe)")
    probes = (f"object.kind == 'NodeTemplate' ? [object.spec].map(c, {node}) : "
              f"variables.podSpec.?containers.orValue([]).map(c, {pods})")
    sidecar_probes = ("object.kind == 'NodeTemplate' ? [] : "
                      f"variables.podSpec.?initContainers.orValue([]).map(c, {sidecars})")
    patch = (
        "object.kind == 'NodeTemplate' ? (variables.startupProbes[0].size() > 0 ? "
        "[JSONPatch{op: 'add', path: '/spec/health/startup', "
        "value: variables.startupProbes[0][0]}] : []) : "
        "variables.podSpec.?containers.orValue([]).transformList(i, c, "
        "variables.startupProbes[i].size() > 0, JSONPatch{op: 'add', path: "
        "variables.podSpecPath + '/containers/' + string(i) + '/startupProbe', "
        "value: variables.startupProbes[i][0]}) + "
        "variables.podSpec.?initContainers.orValue([]).transformList(i, c, "
        "variables.sidecarProbes[i].size() > 0, JSONPatch{op: 'add', path: "
        "variables.podSpecPath + '/initContainers/' + string(i) + '/startupProbe', "
        "value: variables.sidecarProbes[i][0]})")
    return [{"name": "startupProbes", "expression": probes},
            {"name": "sidecarProbes", "expression": sidecar_probes}], patch


def _startup_probes(params: StartupProbeParams, liveness: str, has_liveness: str,
                    no_startup: str) -> str:
    """For a container `c` whose liveness probe is at `liveness`: [the startup probe to add],
    or [] when it gets none."""
    period = params.periodSeconds
    windows = {pattern: str(-(-seconds // period))
               for pattern, seconds in params.window_globs.items()}
    shortest = _first_match("c.?image.orValue('')", windows,
                            str(-(-(period * params.failureThreshold) // period)))
    allowed = (f"({_positive('l', 'initialDelaySeconds', 0)} + "
               f"{_positive('l', 'failureThreshold', DEFAULT_FAILURE_THRESHOLD)} * "
               f"{_positive('l', 'periodSeconds', DEFAULT_PERIOD_SECONDS)})")
    handlers = ", ".join(f"has({liveness}.{handler})" for handler in HANDLERS)
    entries = ", ".join(f"?{_literal(key)}: has(l.{key}) ? optional.of(dyn(l.{key})) : "
                        "optional.none()" for key in (*HANDLERS, "timeoutSeconds"))
    # Each name bound by a one-element map(): the API server's admission-policy CEL (1.36)
    # has no cel.bind ("undeclared reference").
    return (
        f"{has_liveness} && {no_startup} && [{handlers}].filter(h, h).size() == 1 ? "
        f"[{liveness}].map(l, [{shortest}].map(s, "
        f"[({allowed} + {period - 1}) / {period}].map(a, [s > a ? s : a].map(t, "
        f"{{{entries}, 'periodSeconds': dyn({period}), "
        f"'failureThreshold': dyn(t > {INT32_MAX} ? {INT32_MAX} : t)}})[0])[0])[0]) : []")


def gpu_variables(params: GpuTolerationParams) -> list[dict[str, str]]:
    """The taint keys a pod's GPU resources need (sorted by resource, as the rule does), and
    those no toleration of the pod tolerates yet."""
    resources = " || ".join(f"n.matches({_literal(_anchored(p))})"
                            for p in params.resources) or "false"
    keys = {pattern: _literal(key) for pattern, key in params.taint_keys.items()}
    lists = ("object.kind == 'NodeTemplate' ? [object.spec] : "
             + " + ".join(f"variables.podSpec.?{group}.orValue([])"
                          for group, _ in CONTAINER_GROUPS))
    used = " + ".join(
        f"c.?resources.?{which}.orValue({{}}).filter(n, ({resources}) && "
        f"quantity(string(c.resources.{which}[n])).isGreaterThan(quantity('0')))"
        for which in ("requests", "limits"))
    effect = _literal(params.effect)
    tolerated = ("variables.podSpec.?tolerations.orValue([]).exists(t, "
                 "t.?operator.orValue('') == 'Exists' && "
                 f"t.?effect.orValue('') in ['', {effect}] && "
                 "(t.?key.orValue('') == '' || t.key == k))")
    return [
        {"name": "gpuTaintKeys", "expression": (
            f"({lists}).map(c, {used}).flatten().distinct().sort()"
            f".map(n, {_first_match('n', keys, 'n')}).distinct()")},
        {"name": "missingTolerations",
         "expression": f"variables.gpuTaintKeys.filter(k, !({tolerated}))"},
    ]


def gpu_toleration(params: GpuTolerationParams) -> str:
    """_gpu_toleration (webhook/engine/rules/gpu.py): a toleration per missing taint key, the
    whole list when the pod spec has none."""
    effect = _literal(params.effect)
    toleration = f"{{'key': dyn(k), 'operator': dyn('Exists'), 'effect': dyn({effect})}}"
    return (
        "variables.missingTolerations.size() == 0 ? [] : "
        "has(variables.podSpec.tolerations) ? variables.missingTolerations.map(k, "
        "JSONPatch{op: 'add', path: variables.podSpecPath + '/tolerations/-', "
        f"value: {toleration}}}) : "
        "[JSONPatch{op: 'add', path: variables.podSpecPath + '/tolerations', "
        f"value: variables.missingTolerations.map(k, {toleration})}}]")

