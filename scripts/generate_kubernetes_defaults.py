"""Write webhook/engine/kubernetes_defaults.py: what the Kubernetes API server adds to and drops
from an object of each kind quickq-guard judges before a webhook sees it, recorded by asking a
real API server.

The script starts etcd and kube-apiserver (tests/support/controlplane.py, the binaries of
.tools/envtest/<release> or KUBEBUILDER_ASSETS), sends PROBES, objects of every judged kind
that use every part of a pod spec, through `kubectl create --dry-run=server -o json`, and
walks each answer beside its request with the types of webhook/engine/kubernetes_fields.py:

- a field the answer has and the request had not is a default of its type, in that kind
  (the same value every time it was left out, else it is left to the conditional defaults
  written by hand in webhook/engine/normalize.py);
- every field is sent once more set to its type's empty value ("", 0, false, [], {}): a field
  whose empty value the answer keeps (a pointer in Go: `runAsUser: 0`, `privileged: false`)
  is recorded; every other empty value the API server drops (`omitempty`).

Quantity fields and required fields come from the OpenAPI schemas that kubernetes-validate
ships (scripts/generate_kubernetes_fields.py). For a new Kubernetes release: build it
(`.venv/bin/python -m support.assets --all`), then, as root,

    unshare --net sh -c 'ip link set lo up &&
                         .venv/bin/python scripts/generate_kubernetes_defaults.py'

(KUBEBUILDER_ASSETS=.tools/envtest/v1.xx.y chooses the release), and run the cluster test
tests/cluster/test_offline_model.py on every tested release: it proves the model on the
object on 500+ objects.
"""

from __future__ import annotations

import copy
import json
import pprint
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))  # support.controlplane: the tests' own runner

import generate_kubernetes_fields as fields  # noqa: E402

from webhook.engine.kubernetes_fields import KINDS, TYPES  # noqa: E402
from webhook.engine.normalize import HAND_WRITTEN, RESET_ON_CREATE  # noqa: E402

TARGET = ROOT / "webhook" / "engine" / "kubernetes_defaults.py"
NAMESPACE = "default"

# --- the probes: valid objects that use every part of a pod spec quickq-guard judges --------


def _container(name: str, image: str) -> dict[str, Any]:
    return {
        "name": name, "image": image, "command": ["run"], "args": ["--x"], "workingDir": "/w",
        "ports": [{"containerPort": 8080, "name": "http"}, {"containerPort": 53,
                                                            "protocol": "UDP"}],
        "env": [{"name": "A", "value": "1"},
                {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "C", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                {"name": "D", "valueFrom": {"configMapKeyRef": {"name": "m", "key": "k"}}},
                {"name": "E", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
        "envFrom": [{"configMapRef": {"name": "m"}}, {"secretRef": {"name": "s"},
                                                       "prefix": "S_"}],
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                      "requests": {"cpu": "500m", "memory": "512Mi"}},
        "volumeMounts": [{"name": "data", "mountPath": "/data", "subPath": "x"}],
        "livenessProbe": {"httpGet": {"port": 8080, "httpHeaders": [{"name": "X",
                                                                      "value": "y"}]}},
        "readinessProbe": {"tcpSocket": {"port": 8080}},
        "startupProbe": {"grpc": {"port": 8080}},
        "lifecycle": {"postStart": {"exec": {"command": ["true"]}},
                      "preStop": {"httpGet": {"port": 8080, "path": "/stop"}}},
        "securityContext": {"runAsUser": 1000, "runAsNonRoot": True,
                            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                            "seccompProfile": {"type": "RuntimeDefault"},
                            "seLinuxOptions": {"level": "s0:c1"}},
    }


def _pod_spec(restart_policy: str | None = None) -> dict[str, Any]:
    main = _container("main", "registry.example/app:1.2")
    side = _container("side", "registry.example/side")  # no tag: imagePullPolicy Always
    side["livenessProbe"] = {"exec": {"command": ["true"]}, "periodSeconds": 20}
    init = {"name": "init", "image": "registry.example/init@sha256:" + "a" * 64,
            "command": ["true"]}
    spec: dict[str, Any] = {
        "containers": [main, side], "initContainers": [init],
        "volumes": [
            {"name": "data", "emptyDir": {"sizeLimit": "1Gi"}},
            {"name": "blank"},
            {"name": "secret", "secret": {"secretName": "s", "items": [{"key": "k",
                                                                        "path": "p"}]}},
            {"name": "config", "configMap": {"name": "m"}},
            {"name": "host", "hostPath": {"path": "/var/x"}},
            {"name": "claim", "persistentVolumeClaim": {"claimName": "c"}},
            {"name": "api", "downwardAPI": {"items": [{"path": "l", "fieldRef": {
                "fieldPath": "metadata.labels"}}]}},
            {"name": "projected", "projected": {"sources": [
                {"secret": {"name": "s"}}, {"configMap": {"name": "m"}},
                {"serviceAccountToken": {"path": "t"}},
                {"downwardAPI": {"items": [{"path": "n", "fieldRef": {
                    "fieldPath": "metadata.name"}}]}}]}},
            {"name": "csi", "csi": {"driver": "csi.example.com"}},
            {"name": "nfs", "nfs": {"server": "nfs.example", "path": "/x"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}}}}},
        ],
        "securityContext": {"runAsUser": 1000, "fsGroup": 2000, "supplementalGroups": [3],
                            "sysctls": [{"name": "net.ipv4.ping_group_range",
                                         "value": "0 1"}],
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "k", "operator": "In",
                                           "values": ["v"]}]}]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [
                        {"key": "k", "operator": "Exists"}]}}]},
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 5, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                                  "labelSelector": {"matchLabels": {
                                                      "app": "x"}}}}]},
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "zone", "labelSelector": {"matchExpressions": [
                    {"key": "app", "operator": "In", "values": ["y"]}]}}]}},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                         "effect": "NoSchedule"}, {"key": "k", "value": "v"}],
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                       "whenUnsatisfiable": "ScheduleAnyway",
                                       "labelSelector": {"matchLabels": {"app": "x"}}}],
        "dnsConfig": {"nameservers": ["10.0.0.10"], "options": [{"name": "ndots",
                                                                  "value": "2"}]},
        "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["a.example"]}],
        "imagePullSecrets": [{"name": "pull"}],
        "readinessGates": [{"conditionType": "example.com/ready"}],
        "nodeSelector": {"pool": "a"},
        "serviceAccountName": "default",
        "automountServiceAccountToken": False,
        "priorityClassName": "",
        "os": {"name": "linux"},
    }
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    return spec


LABELS = {"app": "probe"}


def _template(restart_policy: str | None = None) -> dict[str, Any]:
    return {"metadata": {"labels": dict(LABELS), "annotations": {"a": "b"}},
            "spec": _pod_spec(restart_policy)}


def _meta(name: str) -> dict[str, Any]:
    return {"name": name, "labels": {"team": "x"}, "annotations": {"note": "y"}}


def probes() -> list[dict[str, Any]]:
    """Two objects per judged kind: one with every part of a pod spec, one with only what
    the API server requires (what the first leaves out is defaulted in the second)."""
    return full_probes() + minimal_probes()


def minimal_probes() -> list[dict[str, Any]]:
    spec = {"containers": [{"name": "main", "image": "registry.example/app:1"}]}
    template = {"metadata": {"labels": dict(LABELS)}, "spec": spec}
    job_template = {"metadata": {"labels": dict(LABELS)},
                    "spec": {**copy.deepcopy(spec), "restartPolicy": "Never"}}
    selector = {"matchLabels": dict(LABELS)}
    meta = {"name": "min"}
    return [
        # No token volume: its name is random (normalize.py leaves it out).
        {"apiVersion": "v1", "kind": "Pod", "metadata": dict(meta),
         "spec": {**copy.deepcopy(spec), "automountServiceAccountToken": False}},
        {"apiVersion": "v1", "kind": "ReplicationController", "metadata": dict(meta),
         "spec": {"template": copy.deepcopy(template)}},
        *({"apiVersion": "apps/v1", "kind": kind, "metadata": dict(meta),
           "spec": {"selector": selector, "template": copy.deepcopy(template)}}
          for kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet")),
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": dict(meta),
         "spec": {"template": copy.deepcopy(job_template)}},
        {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": dict(meta),
         "spec": {"schedule": "@daily",
                  "jobTemplate": {"spec": {"template": copy.deepcopy(job_template)}}}},
    ]


def full_probes() -> list[dict[str, Any]]:
    selector = {"matchLabels": dict(LABELS)}
    job_spec = {"template": _template("Never")}
    return [
        {"apiVersion": "v1", "kind": "Pod", "metadata": _meta("pod"), "spec": _pod_spec()},
        {"apiVersion": "v1", "kind": "ReplicationController", "metadata": _meta("rc"),
         "spec": {"selector": dict(LABELS), "template": _template()}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta("deploy"),
         "spec": {"selector": selector, "template": _template()}},
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": _meta("rs"),
         "spec": {"selector": selector, "template": _template()}},
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": _meta("sts"),
         "spec": {"selector": selector, "serviceName": "sts", "template": _template(),
                  "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                      "accessModes": ["ReadWriteOnce"],
                      "resources": {"requests": {"storage": "1Gi"}}}}]}},
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": _meta("ds"),
         "spec": {"selector": selector, "template": _template()}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": _meta("job"),
         "spec": copy.deepcopy(job_spec)},
        {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": _meta("cron"),
         "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": copy.deepcopy(job_spec)}}},
    ]


# --- walking an object with its types ----------------------------------------------------------

Path_ = tuple[str | int, ...]


def typed_nodes(value: Any, kind: str, path: Path_ = ()) -> Iterator[tuple[Path_, str, Any]]:
    """(path, object type, mapping) of every mapping of a known type in `value`."""
    if kind.startswith("[]"):
        if isinstance(value, list):
            for index, item in enumerate(value):
                yield from typed_nodes(item, kind[2:], (*path, index))
        return
    if kind.startswith("{}"):
        if isinstance(value, dict):
            for key, item in value.items():
                yield from typed_nodes(item, kind[2:], (*path, key))
        return
    if kind not in TYPES or not isinstance(value, dict):
        return
    yield path, kind, value
    for name, item in value.items():
        child = TYPES[kind].get(name)
        if child is not None:
            yield from typed_nodes(item, child, (*path, name))


def at(value: Any, path: Path_) -> Any:
    for key in path:
        if isinstance(key, int):
            value = value[key] if isinstance(value, list) and key < len(value) else None
        else:
            value = value.get(key) if isinstance(value, dict) else None
        if value is None:
            return None
    return value


MISSING = object()


def empty_of(kind: str) -> Any:
    """The empty value of a field's type, or MISSING for types not probed."""
    if kind.startswith("[]"):
        return []
    if kind.startswith("{}") or kind in TYPES:
        return {}
    return {"string": "", "integer": 0, "boolean": False, "number": 0}.get(kind, MISSING)


# --- asking the API server ----------------------------------------------------------------


def dry_run(kubectl: list[str], objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The API server's answer to each object, by `kind/name`; refused ones are left out."""
    listed = {"apiVersion": "v1", "kind": "List", "items": objects}
    # Server-side validation only: kubectl's own would refuse a whole batch for one object.
    command = [*kubectl, "create", "--dry-run=server", "--validate=false", "-o", "json", "-f", "-"]
    done = subprocess.run(command,
                          input=json.dumps(listed), capture_output=True, text=True,
                          check=False, timeout=600)
    from support.controlplane import printed_objects

    return {f"{item['kind']}/{item['metadata']['name']}": item
            for item in printed_objects(done.stdout)}


def record(kubectl: list[str]) -> dict[str, Any]:
    """Defaults by kind and type, the fields whose empty value is kept, and what could not be
    recorded (conflicting defaults, refused empty values)."""
    bases = probes()
    answers = dry_run(kubectl, bases)
    missing = [f"{o['kind']}/{o['metadata']['name']}" for o in bases
               if f"{o['kind']}/{o['metadata']['name']}" not in answers]
    if missing:
        raise SystemExit(f"the API server refused the probes {missing}")
    seen: dict[tuple[str, str, str], list[Any]] = defaultdict(list)  # kind, type, field
    for base in bases:
        kind = base["kind"]
        answer = answers[f"{kind}/{base['metadata']['name']}"]
        root = KINDS[f"{base['apiVersion']} {kind}"]
        for path, type_name, node in typed_nodes(answer, root):
            sent = at(base, path)
            if not isinstance(sent, dict) or path[:1] == ("status",):
                continue
            for name in TYPES[type_name]:
                if name in sent:
                    continue
                seen[(kind, type_name, name)].append(node.get(name, MISSING))
    defaults: dict[str, dict[str, dict[str, Any]]] = defaultdict(lambda: defaultdict(dict))
    conditional: list[str] = []
    for (kind, type_name, name), values in sorted(seen.items()):
        if (type_name == "meta.v1.ObjectMeta" and name in SERVER_SET) \
                or (type_name, name) in HAND_WRITTEN \
                or (type_name == KINDS_BY_NAME.get(kind) and name in RESET_ON_CREATE):
            continue  # the API server's own, or written by hand in normalize.py
        present = [v for v in values if v is not MISSING]
        if not present:
            continue
        if len(present) == len(values) and all(v == present[0] for v in present):
            defaults[kind][type_name][name] = present[0]
        else:
            conditional.append(f"{kind} {type_name}.{name}")

    # Empty values: one probe per field of every typed mapping of the probes.
    variants: list[dict[str, Any]] = []
    asked: list[tuple[str, str, str, Path_, Any]] = []
    for base in bases:
        root = KINDS[f"{base['apiVersion']} {base['kind']}"]
        for path, type_name, _node in list(typed_nodes(base, root)):
            if path[:1] == ("status",):
                continue
            for name, field_kind in TYPES[type_name].items():
                empty = empty_of(field_kind)
                if empty is MISSING or (not path and name in ("apiVersion", "kind", "metadata")) \
                        or (type_name == "meta.v1.ObjectMeta"
                            and name not in ("labels", "annotations")):
                    continue
                variant = copy.deepcopy(base)
                variant["metadata"]["name"] = f"{base['metadata']['name']}-{len(variants)}"
                holder = at(variant, path) if path else variant
                holder[name] = empty
                variants.append(variant)
                asked.append((base["kind"], type_name, name, path, empty))
    kept: dict[str, set[str]] = defaultdict(set)
    dropped: dict[str, set[str]] = defaultdict(set)
    refused: set[str] = set()
    answers = {}
    for start in range(0, len(variants), 400):
        answers.update(dry_run(kubectl, variants[start:start + 400]))
    for variant, (kind, type_name, name, path, empty) in zip(variants, asked, strict=True):
        answer = answers.get(f"{kind}/{variant['metadata']['name']}")
        if answer is None:
            refused.add(f"{type_name}.{name}")
            continue
        holder = at(answer, path) if path else answer
        found = holder.get(name, MISSING) if isinstance(holder, dict) else MISSING
        default = defaults[kind].get(type_name, {}).get(name, MISSING)
        if found == empty and found != default:
            kept[type_name].add(name)
        else:
            dropped[type_name].add(name)
    conflicts = sorted(f"{t}.{n}" for t in kept for n in kept[t] & dropped.get(t, set()))
    return {"defaults": defaults, "kept": kept, "conditional": conditional,
            "refused": sorted(refused - {f"{t}.{n}" for t in kept for n in kept[t]}
                              - {f"{t}.{n}" for t in dropped for n in dropped[t]}),
            "conflicts": conflicts}


KINDS_BY_NAME = {key.split()[1]: root for key, root in KINDS.items()}
# Set by the API server on every create, never defaults of the user's object.
SERVER_SET = {"uid", "resourceVersion", "creationTimestamp", "generation", "managedFields",
              "namespace", "selfLink"}


def schema_facts() -> tuple[dict[str, dict[str, str]], dict[str, list[str]]]:
    """(type -> field -> 'quantity' | '{}quantity' | '[]quantity', type -> required fields)
    from the OpenAPI schemas."""
    defs = fields.definitions()
    quantities: dict[str, dict[str, str]] = {}
    required: dict[str, list[str]] = {}
    by_short = {fields.short(name): schema for name, schema in defs.items()}
    for type_name in TYPES:
        schema = by_short.get(type_name, {})
        for name, prop in sorted(schema.get("properties", {}).items()):
            shape = _quantity_shape(prop)
            if shape:
                quantities.setdefault(type_name, {})[name] = shape
        needed = sorted(schema.get("required", []))
        if needed:
            required[type_name] = needed
    return quantities, required


def _quantity_shape(prop: dict[str, Any]) -> str:
    def is_quantity(schema: dict[str, Any]) -> bool:
        return str(schema.get("$ref", "")).endswith("api.resource.Quantity")
    if is_quantity(prop):
        return "quantity"
    extra = prop.get("additionalProperties")
    if isinstance(extra, dict) and is_quantity(extra):
        return "{}quantity"
    items = prop.get("items")
    if isinstance(items, dict) and is_quantity(items):
        return "[]quantity"
    return ""


def _entry(indent: int, key: str, value: Any) -> list[str]:
    """`key: value,` at `indent`, wrapped to the line length."""
    pad = " " * indent
    text = pprint.pformat(value, width=max(40, 96 - indent - len(repr(key))), sort_dicts=True)
    first, *rest = text.splitlines()
    hang = " " * (indent + len(repr(key)) + 2)
    return [f"{pad}{key!r}: {first}", *(hang + line for line in rest[:-1]),
            *([hang + rest[-1] + ","] if rest else [])] if rest else [f"{pad}{key!r}: {first},"]


def _names(name: str, values: Any) -> list[str]:
    return [f"{name} = (", *(f"    {value!r}," for value in values), ")"]


def module_text(version: str, found: dict[str, Any]) -> str:
    quantities, required = schema_facts()
    lines = [
        f'"""What the Kubernetes API server {version} adds to and drops from the objects',
        "quickq-guard judges before a webhook sees them.",
        "",
        "Generated by scripts/generate_kubernetes_defaults.py, which asks a real API server",
        "(server-side dry-run) and reads the OpenAPI schemas kubernetes-validate ships; do not",
        "edit. The defaults that depend on other fields are written by hand in",
        "webhook/engine/normalize.py.",
        '"""',
        "",
        "from typing import Any",
        "",
        f"KUBERNETES_VERSION = {version!r}",
        "",
        "# kind -> object type -> field -> the value the API server sets when it is left out",
        "DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {",
    ]
    for kind in sorted(found["defaults"]):
        lines.append(f"    {kind!r}: {{")
        for type_name in sorted(found["defaults"][kind]):
            lines.append(f"        {type_name!r}: {{")
            for name, value in sorted(found["defaults"][kind][type_name].items()):
                lines += _entry(12, name, value)
            lines.append("        },")
        lines.append("    },")
    lines += ["}", "",
              "# object type -> the fields whose empty value (\"\", 0, false, [], {}) the API "
              "server",
              "# keeps; it drops every other empty value, and every null",
              "KEPT_EMPTY: dict[str, frozenset[str]] = {"]
    for type_name in sorted(found["kept"]):
        lines.append(f"    {type_name!r}: frozenset({{")
        lines += [f"        {name!r}," for name in sorted(found["kept"][type_name])]
        lines.append("    }),")
    lines += ["}", "", "# object type -> field -> where it holds resource quantities",
              "QUANTITIES: dict[str, dict[str, str]] = {"]
    for type_name, names in sorted(quantities.items()):
        lines += _entry(4, type_name, names)
    lines += ["}", "", "# object type -> the fields the API server refuses it without",
              "REQUIRED: dict[str, tuple[str, ...]] = {"]
    for type_name, names in sorted(required.items()):
        lines += _entry(4, type_name, tuple(names))
    lines += ["}", "", "# Defaults recorded that vary from object to object and are not written",
              "# by hand in webhook/engine/normalize.py (the generator says so), empty values",
              "# the API server refused, and fields kept empty in one place, dropped in another",
              *_names("CONDITIONAL", found["conditional"]),
              *_names("REFUSED_EMPTY", found["refused"]),
              *_names("CONFLICTS", found["conflicts"]), ""]
    return "\n".join(lines)


def main() -> int:
    from support.controlplane import ControlPlane, assets_dir

    assets = assets_dir()
    with tempfile.TemporaryDirectory(prefix="quickq-defaults-") as work:
        plane = ControlPlane(assets, Path(work))
        try:
            plane.start()
            plane.service_account(NAMESPACE)
            version = plane.version().lstrip("v")
            kubectl = [str(plane.assets / "kubectl"), "--kubeconfig", str(plane.kubeconfig),
                       "-n", NAMESPACE]
            found = record(kubectl)
        finally:
            plane.stop()
    TARGET.write_text(module_text(version, found))
    print(f"wrote {TARGET} (Kubernetes {version}); defaults that vary, not written by hand: "
          f"{', '.join(found['conditional']) or 'none'}")
    if found["refused"]:
        print(f"empty values the API server refused: {', '.join(found['refused'])}")
    if found["conflicts"]:
        print(f"kept in one place, dropped in another: {', '.join(found['conflicts'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
