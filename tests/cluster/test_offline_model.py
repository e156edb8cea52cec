"""Offline equals online, on the object: webhook.engine.normalize makes, from an object as
written, the object the real API server hands a webhook, for every kind quickq-guard judges.

A corpus of 500+ objects (the tests' workloads and builders, examples/, the benchmark corpus,
and hypothesis-generated pod specs full of quantities, probes, ports, empty values, nulls and
whole floats) goes through `kubectl create --dry-run=server -o json` in a few batched calls;
each answer, less what only the server can set (uid, resourceVersion, creationTimestamp,
generation, managedFields, the namespace of a request, status, the ServiceAccount token
volume with its random name, a Job's controller-uid), must be the offline model's object,
exactly. And what the API server refuses for a missing required field, the model refuses too.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_helpers import ControlPlane, started, wait_until
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from support.controlplane import printed_objects

from webhook.engine.apiserver import refused_fields
from webhook.engine.kubernetes_fields import KINDS
from webhook.engine.normalize import normalize
from webhook.engine.patch import dotted
from webhook.engine.policy_exceptions import VERSION
from webhook.engine.workload import read_workload
from webhook.export.crd import definition, exception_schema, openapi_v3_schema
from webhook.manifests import read_text
from webhook.testing import POD_SPEC_PATHS, container, node_template, pod, pod_spec, workload

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import corpus  # noqa: E402

NAMESPACE = "offline-model"
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")
JOB_UID_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


# --- the corpus -------------------------------------------------------------------------------


def judged(obj: Any) -> bool:
    return isinstance(obj, dict) and f"{obj.get('apiVersion')} {obj.get('kind')}" in KINDS


def fixture_objects() -> Iterator[dict[str, Any]]:
    """Every built-in judged object in examples/, tests/workloads/, the builders and the
    benchmark corpus."""
    for folder in (REPO / "examples", REPO / "tests" / "workloads"):
        for path in sorted(folder.rglob("*.yaml")):
            for document in read_text(path.read_bytes(), str(path)):
                if judged(document.obj):
                    yield document.obj
    yield pod()
    for kind in POD_SPEC_PATHS:
        yield workload(kind)
        yield workload(kind, container(image="registry.example.com/app"),
                       container("side", image="registry.example.com/side:latest"))
    deployments = 0
    for _kind, obj in corpus.objects(800, seed=18):
        if judged(obj):
            yield obj
        if obj.get("kind") == "Deployment":
            deployments += 1
            if deployments % 3 == 0:
                yield from other_controllers(obj)


def other_controllers(deployment: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A Deployment's pod template in a ReplicaSet, a DaemonSet and a ReplicationController
    (which the corpus has none of)."""
    spec = deployment["spec"]
    kept = {key: copy.deepcopy(value) for key, value in spec.items()
            if key in ("selector", "template", "minReadySeconds")}
    yield {**copy.deepcopy(deployment), "kind": "ReplicaSet",
           "spec": {**kept, "replicas": spec.get("replicas", 1)}}
    yield {**copy.deepcopy(deployment), "kind": "DaemonSet", "spec": kept}
    labels = dict(spec["template"]["metadata"]["labels"])
    controller = {"apiVersion": "v1", "kind": "ReplicationController",
                  "metadata": copy.deepcopy(deployment["metadata"]),
                  "spec": {"template": copy.deepcopy(spec["template"])}}
    if len(labels) > 1:  # else the selector and the labels are the template's, by default
        controller["spec"]["selector"] = labels
        controller["metadata"].pop("labels", None)
    yield controller


def refused_resources(obj: dict[str, Any]) -> bool:
    """Whether a resource amount is one the API server refuses (a quantity that does not
    parse, a fractional GPU): offline, the policies that judge it deny it saying so
    (webhook/engine/apiserver.py, tests/test_api_server_refusals.py)."""
    workload = read_workload(obj, ())
    return workload is not None and bool(refused_fields(workload))


def renamed(obj: dict[str, Any], index: int) -> dict[str, Any]:
    """The object with a name of its own in the test namespace, so answers map back to it."""
    obj = copy.deepcopy(obj)
    metadata = obj.setdefault("metadata", {})
    metadata.pop("generateName", None)
    metadata["name"] = f"m{index}"
    metadata["namespace"] = NAMESPACE
    return obj


def server_answers(plane: ControlPlane, texts: list[str]) -> tuple[list[Any], str]:
    """kubectl's answers, in order, to the YAML documents of one call, and its stderr."""
    done = plane.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                         input="\n---\n".join(texts), check=False)
    return printed_objects(done.stdout), done.stderr


def without_server_set(answer: dict[str, Any], sent: dict[str, Any]) -> dict[str, Any]:
    """The answer less what only the API server can know."""
    answer = copy.deepcopy(answer)
    metadata = answer.get("metadata", {})
    for name in SERVER_SET:
        metadata.pop(name, None)
    answer.pop("status", None)
    if answer["kind"] == "Pod":
        spec = answer["spec"]
        if spec.get("priorityClassName", BUILTIN_PRIORITY_CLASSES[0]) \
                not in BUILTIN_PRIORITY_CLASSES:  # the value of the cluster's class
            spec.pop("priority", None)
            spec.pop("preemptionPolicy", None)
        token = [v["name"] for v in spec.get("volumes", [])
                 if v["name"].startswith("kube-api-access-")]
        spec["volumes"] = [v for v in spec.get("volumes", []) if v["name"] not in token]
        if not spec["volumes"]:
            del spec["volumes"]
        for group in ("containers", "initContainers"):
            for item in spec.get(group, []):
                mounts = [m for m in item.get("volumeMounts", []) if m["name"] not in token]
                if mounts:
                    item["volumeMounts"] = mounts
                else:
                    item.pop("volumeMounts", None)
    if answer["kind"] == "Job":
        if "selector" not in (sent.get("spec") or {}):
            answer["spec"].pop("selector", None)
        labels = answer["spec"]["template"]["metadata"]["labels"]
        for name in JOB_UID_LABELS:
            labels.pop(name, None)
    return answer


def differences(expected: Any, found: Any, path: str = "") -> list[str]:
    if isinstance(expected, dict) and isinstance(found, dict):
        lines = []
        for key in sorted(set(expected) | set(found)):
            if key not in found:
                lines.append(f"{path}.{key}: the API server has {expected[key]!r}, offline none")
            elif key not in expected:
                lines.append(f"{path}.{key}: offline has {found[key]!r}, the API server none")
            else:
                lines += differences(expected[key], found[key], f"{path}.{key}")
        return lines
    if isinstance(expected, list) and isinstance(found, list) and len(expected) == len(found):
        return [line for i, (e, f) in enumerate(zip(expected, found, strict=True))
                for line in differences(e, f, f"{path}[{i}]")]
    if expected != found or type(expected) is not type(found):
        return [f"{path}: the API server has {expected!r}, offline {found!r}"]
    return []


def values_of(value: Any, keys: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    """(key, value) of every field named one of `keys`, at any depth."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in keys:
                yield key, item
            yield from values_of(item, keys)
    elif isinstance(value, list):
        for item in value:
            yield from values_of(item, keys)


def prepare(plane: ControlPlane, objects: list[dict[str, Any]]) -> None:
    """The ServiceAccounts and PriorityClasses the objects name: cluster state, which the
    Pod admission plugins look up."""
    found = [(key, value) for obj in objects
             for key, value in values_of(obj, ("serviceAccountName", "serviceAccount",
                                               "priorityClassName"))
             if isinstance(value, str) and value]
    manifests = []
    for key, value in sorted(set(found)):
        if key == "priorityClassName" and value in BUILTIN_PRIORITY_CLASSES:
            continue
        manifests.append(
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
             "metadata": {"name": value}, "value": 1000}
            if key == "priorityClassName" else
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": value, "namespace": NAMESPACE}})
    if manifests:
        plane.kubectl("apply", "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "List", "items": manifests}))


BUILTIN_PRIORITY_CLASSES = ("system-node-critical", "system-cluster-critical")


def compare(plane: ControlPlane, objects: list[dict[str, Any]]) -> tuple[int, list[str]]:
    """(objects compared, differences) for objects sent as YAML and read back as the CLI
    reads a manifest."""
    prepare(plane, objects)
    texts = [yaml.safe_dump(renamed(obj, index), sort_keys=False)
             for index, obj in enumerate(objects)]
    answers, stderr = server_answers(plane, texts)
    by_name = {(a["kind"], a["metadata"]["name"]): a for a in answers}
    problems: list[str] = []
    compared = 0
    for text in texts:
        [document] = list(read_text(text.encode(), "corpus"))
        written = document.obj
        answer = by_name.get((written["kind"], written["metadata"]["name"]))
        offline, missing = normalize(written)
        label = f"{written['kind']}/{written['metadata']['name']}"
        if answer is None:
            problems.append(f"{label}: refused by the API server ({_refusal(stderr, label)})")
            continue
        if missing:
            problems.append(f"{label}: accepted by the API server, refused offline: {missing}")
            continue
        compared += 1
        found = differences(without_server_set(answer, written), offline)
        problems += [f"{label} {line}" for line in found]
    return compared, problems


def _refusal(stderr: str, label: str) -> str:
    name = label.split("/", 1)[1]
    return next((line for line in stderr.splitlines() if f'"{name}"' in line), stderr[-300:])


@pytest.fixture(scope="module")
def model_plane(plane: ControlPlane,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """An API server of its own (the session's `plane` made sure one can run): the other
    cluster tests install webhooks and policies that would change or refuse the objects."""
    with started(plane.assets, tmp_path_factory.mktemp("offline-model"), NAMESPACE) as own:
        yield own


def test_the_fixtures_examples_and_corpus_are_what_the_api_server_makes_of_them(
        model_plane: ControlPlane) -> None:
    objects = [obj for obj in fixture_objects() if not refused_resources(obj)]
    assert len(objects) >= 500
    kinds = {obj["kind"] for obj in objects}
    assert kinds == {"Pod", "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job",
                     "CronJob", "ReplicationController"}
    compared, problems = compare(model_plane, objects)
    assert not problems, f"{len(problems)} differences:\n" + "\n".join(problems[:40])
    assert compared == len(objects)


# --- generated objects ------------------------------------------------------------------------

QUANTITY = st.one_of(
    st.integers(0, 64).map(str), st.integers(0, 64),
    st.sampled_from(["0.5", "1.5", "0.25", "2.0"]),
    st.integers(1, 4000).map(lambda n: f"{n}m"),
    st.integers(1, 4096).map(lambda n: f"{n}Mi"),
    st.sampled_from(["0.5Gi", "1.5Gi", "1Gi", "1024Mi", "2048Ki", "1e3", "1k", "1500m", "1G",
                     "0.1", "100M", "512Ki", "1.5Ki"]),
)
WHOLE = st.integers(1, 120).flatmap(lambda n: st.sampled_from([n, float(n)]))
# Fields of a container and the empty values a manifest may give them.
CONTAINER_EMPTIES = [("env", ([], None)), ("envFrom", ([], None)), ("volumeMounts", ([], None)),
                     ("args", ([], None)), ("workingDir", ("", None)), ("stdin", (False, None)),
                     ("tty", (False, None)), ("lifecycle", (None,)), ("resources", (None, {}))]


@st.composite
def generated_container(draw: st.DrawFn, name: str) -> dict[str, Any]:
    item = container(name, image=draw(st.sampled_from(
        ["registry.example.com/app:1.2", "registry.example.com/app", "app:latest",
         "registry.example.com/app@sha256:" + "b" * 64, "registry.example.com:5000/app"])))
    requests = {"cpu": draw(QUANTITY), "memory": draw(QUANTITY)}
    if draw(st.integers(0, 9)) == 0:  # a null quantity: the API server stores "0"
        requests[draw(st.sampled_from(["cpu", "memory", "ephemeral-storage"]))] = None
    limits = {k: v for k, v in requests.items() if draw(st.booleans())}
    item["resources"] = {"requests": requests} if not limits else (
        {"limits": limits} if draw(st.booleans()) else {"requests": requests, "limits": limits})
    if draw(st.booleans()):
        handler = draw(st.sampled_from([{"httpGet": {"port": 8080}},
                                        {"httpGet": {"port": "http", "path": "/h"}},
                                        {"tcpSocket": {"port": 8080}},
                                        {"grpc": {"port": 9090}},
                                        {"exec": {"command": ["true"]}}]))
        item["livenessProbe"] = {**handler, "periodSeconds": draw(WHOLE)}
        if draw(st.booleans()):
            item["livenessProbe"]["timeoutSeconds"] = draw(WHOLE)
    if draw(st.booleans()):
        item["ports"] = [{"containerPort": draw(st.integers(1, 65535)), "name": "http"}]
        if draw(st.booleans()):
            item["ports"][0]["protocol"] = draw(st.sampled_from(["TCP", "UDP", "SCTP"]))
    context = item.setdefault("securityContext", {})
    for key in draw(st.lists(st.sampled_from(["privileged", "runAsUser", "readOnlyRootFilesystem",
                                              "runAsGroup"]), unique=True, max_size=2)):
        context[key] = draw(st.sampled_from([None, 0, 1000, 1000.0] if key.startswith("run")
                                            else [None, False, True]))
    if draw(st.booleans()):
        item["securityContext"] = None
    for key, empties in draw(st.lists(st.sampled_from(CONTAINER_EMPTIES), unique_by=lambda e: e[0],
                                      max_size=3)):
        item[key] = draw(st.sampled_from(empties))
    return item


@st.composite
def generated_object(draw: st.DrawFn) -> dict[str, Any]:
    containers = [draw(generated_container(f"c{i}")) for i in range(draw(st.integers(1, 2)))]
    changes: dict[str, Any] = {}
    for key, choices in (("tolerations", [[], None]), ("nodeSelector", [{}, None]),
                         ("securityContext", [{}, None]), ("hostNetwork", [False, None]),
                         ("terminationGracePeriodSeconds", [30.0, 0, 10]),
                         ("volumes", [[], [{"name": "scratch"}]])):
        if draw(st.booleans()):
            changes[key] = draw(st.sampled_from(choices))
    spec = pod_spec(*containers, **changes)
    kind = draw(st.sampled_from(sorted(POD_SPEC_PATHS)))
    obj = pod(name="x") if kind == "Pod" else workload(kind, name="x")
    holder = obj
    for key in POD_SPEC_PATHS[kind][1][:-1]:
        holder = holder[key]
    holder[POD_SPEC_PATHS[kind][1][-1]] = spec
    if kind in ("Job", "CronJob"):
        spec["restartPolicy"] = "Never"
    metadata = obj["metadata"]
    for key in ("annotations", "labels"):
        if draw(st.booleans()) and not (key == "labels" and kind != "Pod"):
            metadata[key] = draw(st.sampled_from([{}, None]))
    if kind == "Deployment" and draw(st.booleans()):
        obj["spec"]["minReadySeconds"] = draw(st.sampled_from([0, 0.0, 5, 5.0]))
        obj["spec"]["replicas"] = draw(st.sampled_from([1.0, 3, 0]))
    return obj


@settings(max_examples=4, deadline=None, database=None, phases=[Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(objects=st.lists(generated_object(), min_size=40, max_size=40))
def test_generated_objects_are_what_the_api_server_makes_of_them(
        model_plane: ControlPlane, objects: list[dict[str, Any]]) -> None:
    compared, problems = compare(model_plane, objects)
    assert not problems, f"{len(problems)} differences:\n" + "\n".join(problems[:40])
    assert compared == len(objects)


# --- what the API server refuses --------------------------------------------------------------


def incomplete_objects() -> list[tuple[dict[str, Any], str]]:
    """(object, the field offline names) for objects that lack a required field."""
    no_image = pod()
    del no_image["spec"]["containers"][0]["image"]
    no_selector = workload("Deployment")
    del no_selector["spec"]["selector"]
    empty_spec = pod()
    empty_spec["spec"] = {}
    no_port = pod(container(ports=[{"name": "http"}]))
    no_name = workload("StatefulSet")
    del no_name["spec"]["template"]["spec"]["containers"][0]["name"]
    no_template = workload("Job")
    del no_template["spec"]["template"]
    return [(no_image, "spec.containers[0].image"), (no_selector, "spec.selector"),
            (empty_spec, "spec.containers"), (no_port, "spec.containers[0].ports[0].containerPort"),
            (no_name, "spec.template.spec.containers[0].name"), (no_template, "spec.template")]


def test_what_lacks_a_required_field_is_refused_offline_and_by_the_api_server(
        model_plane: ControlPlane) -> None:
    cases = incomplete_objects()
    texts = [yaml.safe_dump(renamed(obj, index)) for index, (obj, _) in enumerate(cases)]
    answers, stderr = server_answers(model_plane, texts)
    assert answers == [], f"the API server accepted {[a['metadata']['name'] for a in answers]}"
    for index, (obj, field) in enumerate(cases):
        assert f'"m{index}"' in stderr
        _, missing = normalize(obj)
        assert field in [dotted(path) for path, _ in missing], (obj["kind"], missing)


# --- quickq-guard's own custom resources --------------------------------------------------------


@pytest.fixture(scope="module")
def with_our_crds(model_plane: ControlPlane) -> ControlPlane:
    """The model's API server with the NodeTemplate and PolicyException CRDs the chart ships
    (webhook.export.crd makes both from the models)."""
    crds = [definition("NodeTemplate", "v1", openapi_v3_schema()),
            definition("PolicyException", VERSION, exception_schema())]
    model_plane.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": crds}))
    model_plane.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                        "crd/nodetemplates.quickq.io", "crd/policyexceptions.quickq.io")
    probe = yaml.safe_dump(renamed(node_template(), 0))
    wait_until(lambda: bool(server_answers(model_plane, [probe])[0]),
               what="the API server to serve NodeTemplates")
    return model_plane


def exception_object(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"quickq.io/{VERSION}", "kind": "PolicyException",
            "metadata": {"name": "x"},
            "spec": {"policies": [{"id": "disallow-root-user"}],
                     "match": {"namespaces": ["gpu-operator"]},
                     "expires": "2027-01-01T00:00:00Z", "reason": "the device plugin",
                     **spec}}


def custom_objects() -> Iterator[dict[str, Any]]:
    """NodeTemplates (the examples, as the API server serves them in group quickq.io, the
    builder's, and ones with nulls and empty values) and PolicyExceptions that leave out
    what the schema defaults."""
    for path in sorted((REPO / "examples").rglob("*.yaml")):
        for document in read_text(path.read_bytes(), str(path)):
            obj = document.obj
            if isinstance(obj, dict) and obj.get("kind") == "NodeTemplate":
                yield {**obj, "apiVersion": "quickq.io/v1"}
    yield node_template()
    yield node_template(health=None, securityContext={"privileged": None, "runAsUser": 0})
    yield node_template(env=[{"name": "A", "value": None}, {"name": "B", "value": ""}],
                        ports=[{"containerPort": 80, "name": None}], tolerations=[],
                        command=[], args=None)
    yield node_template(health={"liveness": {"tcpSocket": {"port": 80}, "periodSeconds": None},
                                "readiness": None})
    yield exception_object()
    yield exception_object(ticket=None, owner="ml-platform")
    yield exception_object(policies=[{"id": "disallow-root-user", "containers": ["server"]},
                                     {"id": "require-labels"}])
    yield exception_object(match={"namespaces": ["ml-*"], "kinds": None, "names": ["a"],
                                  "selector": {"matchExpressions": [
                                      {"key": "app", "operator": "Exists"},
                                      {"key": "tier", "operator": "In", "values": ["gpu"]}]}})
    yield exception_object(match={"namespaces": ["ml"], "selector": None})
    yield exception_object(match={"namespaces": ["ml"], "selector": {"matchLabels": {"a": "b"}}})


def test_our_custom_resources_are_what_the_api_server_makes_of_them(
        with_our_crds: ControlPlane) -> None:
    objects = list(custom_objects())
    compared, problems = compare(with_our_crds, objects)
    assert not problems, f"{len(problems)} differences:\n" + "\n".join(problems)
    assert compared == len(objects)
    # the schemas' defaults are set, not only nothing changed
    served = [normalize(renamed(obj, 0))[0] for obj in objects[-6:]]
    assert served[0]["spec"]["match"]["kinds"] == [] == served[0]["spec"]["policies"][0][
        "containers"]


def test_a_null_our_crds_refuse_is_refused_offline_too(with_our_crds: ControlPlane) -> None:
    """The models take `protocol: null`; the API server checks a null against the enum and
    refuses it: so does the offline model, in the API server's words."""
    obj = renamed(node_template(ports=[{"containerPort": 80, "protocol": None}]), 0)
    answers, stderr = server_answers(with_our_crds, [yaml.safe_dump(obj)])
    assert answers == []
    _, refused = normalize(obj)
    assert refused == [(("spec", "ports", 0, "protocol"),
                        'Unsupported value: null: supported values: "TCP", "UDP", "SCTP"')]
    assert "spec.ports[0].protocol: Unsupported value: null: supported values: " \
        '"TCP", "UDP", "SCTP"' in stderr


# --- zero values of required ints -------------------------------------------------------------


def zero_objects() -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], str]]]:
    """Pods with a required int at 0 (no omitempty: the API server keeps it): those it
    accepts (an iSCSI volume's LUN 0, a sleep of 0 s) and those its validation then refuses,
    with the field offline names (a port, a weight, maxSkew)."""
    iscsi = pod(volumes=[{"name": "disk", "iscsi": {
        "targetPortal": "10.0.0.1:3260", "iqn": "iqn.2001-04.com.example:storage", "lun": 0}}])
    sleep = pod(container(lifecycle={"preStop": {"sleep": {"seconds": 0}},
                                     "postStart": {"sleep": {"seconds": 0}}}))
    port = pod(container(ports=[{"containerPort": 0}]))
    grpc = pod(container(livenessProbe={"grpc": {"port": 0}}))
    weight = pod(affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 0, "preference": {"matchExpressions": [
            {"key": "a", "operator": "Exists"}]}}]}})
    skew = pod(topologySpreadConstraints=[{"maxSkew": 0, "topologyKey": "zone",
                                           "whenUnsatisfiable": "DoNotSchedule"}])
    return [iscsi, sleep], [
        (port, "spec.containers[0].ports[0].containerPort"),
        (grpc, "spec.containers[0].livenessProbe.grpc.port"),
        (weight, "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
                 ".weight"),
        (skew, "spec.topologySpreadConstraints[0].maxSkew")]


def test_a_required_int_at_zero_is_what_the_api_server_makes_of_it(
        model_plane: ControlPlane) -> None:
    accepted, refused = zero_objects()
    compared, problems = compare(model_plane, accepted)
    assert not problems and compared == len(accepted), problems
    texts = [yaml.safe_dump(renamed(obj, index)) for index, (obj, _) in enumerate(refused)]
    answers, _ = server_answers(model_plane, texts)
    assert answers == [], f"the API server accepted {[a['metadata']['name'] for a in answers]}"
    for obj, field in refused:
        _, missing = normalize(obj)
        assert field in [dotted(path) for path, _ in missing], (field, missing)
