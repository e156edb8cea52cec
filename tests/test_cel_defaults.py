"""The CEL forms of built-in rules (policies/cel-forms/, what the export writes out as
ValidatingAdmissionPolicies) give the rules' findings exactly: the same outcome, message,
container and field, on CREATE and on UPDATE, over generated Pods, controllers,
NodeTemplates and KServe model specs, and over the examples, the workloads of tests/ and the
benchmarks' corpus. The webhook and `check` keep the rule (CEL takes ~3x its time)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from builders import workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from native_messages import MAP_ORDER, joined
from test_cel_examples import container_fields, objects
from test_export import bindings, vap_programs
from test_export import pairs as _vap_pairs

from webhook import Config, Decision, Review, decode, evaluate, load_policies
from webhook.engine import cel as cel_module
from webhook.engine.apiserver import REFUSED
from webhook.engine.claims import claims_from
from webhook.engine.normalize import normalize
from webhook.engine.policy import PolicySet
from webhook.engine.workload import BUILT_IN, WORKLOAD_KINDS, api_group
from webhook.export.forms import FORMS_DIR
from webhook.export.vap import export
from webhook.loader import default_policies_dir

CEL_FORMS = sorted(path.stem for path in FORMS_DIR.glob("*.yaml"))
IMAGES = st.sampled_from([
    "app", "app:latest", "app:1.2.3", "registry:5000/app", "registry:5000/app:2",
    "registry:5000/app:latest", "a/b/c:latest", "app@sha256:" + "b" * 64, "app@sha256:",
    "app@sha256", "app:latest@sha256:" + "c" * 64, "a@b@c:d", "@", ":", "/", "app:", "",
    "  ", " app:1 ", "$IMAGE", "${REGISTRY}/app:1", "$(IMAGE)", "{{ .Values.image }}",
    "app:$1", "ghcr.io/org/app:v1.0-rc1", "<image>", "your-vllm-image", "Registry/app:1",
    "my app:1", "app:main", 42, None, True, ["app"]])


# Liveness probes: a field unset, zero, negative, of another type, or of any size.
PROBE_FIELDS = st.one_of(st.integers(-2, 120), st.sampled_from([None, "10", 10.0, True, []]))
PROBES = st.one_of(st.none(), st.sampled_from(["x", []]), st.fixed_dictionaries(
    {"httpGet": st.just({"path": "/healthz", "port": 8080})},
    optional={"periodSeconds": PROBE_FIELDS, "failureThreshold": PROBE_FIELDS}))


# Env entries: names that name a secret or refer to one, by every way the rule splits and
# compares words (camelCase, pairs, suffixes, the letters whose upper case is ASCII), and
# values that are or are not secrets, each with white space around it or not.
ENV_NAMES = st.sampled_from([
    "DB_PASSWORD", "dbPassword", "db-password", "db.password", "PASSWORD", "Secret",
    "GITHUB_TOKEN", "githubToken", "OAuthToken", "API_KEY", "APIKey", "apiKey", "APIKEY",
    "AWS_SECRET_ACCESS_KEY", "SSH_PRIVATE_KEY", "USE_API_KEY", "API_KEY_HEADER", "X-API-Key",
    "SECRET_NAME", "TOKEN_URL", "TOKENIZER_PATH", "PASSWORD_FILE", "SECRETS_DIR", "TOKEN_REF",
    "HF_TOKEN_ENDPOINT", "KEY_URI", "PASSWORD_MIN_LENGTH", "TOKEN_TTL", "PASSWORDLESS",
    "GCP_CREDENTIALS", "git-credential", "MYSQL_PASSWD", "ENCRYPTION_KEY", "CACHE_KEY", "KEY",
    "MONKEY", "SIGNING_KEY_V2", "KEY_PATH", "DATABASE_URL", "REDIS_URL", "LOG_LEVEL", "",
    "paßword", "DB_PA\u017fSWORD", "ACCEßKEY", "AWS_ACCEß_KEY", "Ap\u0131Key", "PASSWORD_ﬁle",
    "\u017fecret", "TOKEN1", "token2Secret", "a1B2", "$PASSWORD", "MY PASSWORD", "PASSWORD_",
    "_TOKEN_", "PGPASSWORD", "MYSQL_PWD", "DB_PASS", "dbPass", "OPENAI_API_KEYS", "HF_TOKENS",
    "ROUTER_TOKEN_TRACKER_TIME_UNIT", "MAX_TOKENS", "TOKEN_LIMITS", "REDISCLI_AUTH",
    "redis-cli.auth", "PASS_THROUGH", "GPG_PASSPHRASE", "SECRETS", "pa\u00df", "DBPA\u017fSWD"])
ENV_VALUES = st.sampled_from([
    None, "", " ", "hunter2", "pl4nted-S3cret-value-93f1", "true", "False", " yes ", "On",
    "NO", "off", "ye\u017f", "$(POSTGRES_PASSWORD)", "$(USER):$(PASSWORD)", "$(A)$(B)", "$()",
    "$(PASSWORD", "$$(X)", "12", "123456", "-1", "+5", "0.75", ".5", "5.", "1e9", "12a",
    "\u0663\u0664", " 3600\n", "/var/secrets/google/key.json", "/var/run/x", "/a", "/ключ/файл",
    "/kQ8vX2mZp4Lr7Tn1Wy6Bc3Hd9Fg5Js0AeUoIiYt/x", "https://auth.example.com/oauth/token",
    "https://user:pw@auth.example.com/token", "postgres://user:pw@host/db",
    "postgres://app:$(DB_PASSWORD)@db:5432/app", "redis://:hunter2@redis:6379/0",
    "postgres://db.example.com:5432/app", "https://hooks.example.com/x?token=abc123",
    "https://h/x?S\u0131g=1", "https://h/x?SIG=", "https://h/x?a=1&apiKEY=2", "https://u@h/x",
    "s://u:$(a@b)@h", "https://h/x y", "\u2003https://u:p@h\u2003", "a://b://c@d", "ftp://h",
    "0123456789abcdef0123456789abcdef01234567", "0x" + "1F" * 16, "0" * 40,
    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "kQ8vX2mZp4Lr7Tn1Wy6Bc3Hd9Fg5Js0AeUoIiYt", "kq8vx2mzp4lr7tn1wy6bc3hd9fg5js0aeuoiiyt",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaAAAA1111", " kQ8vX2mZp4Lr7Tn1Wy6Bc3Hd9Fg5Js0AeUoIiYt==\t",
    "x" * 40, "a b c d e f g h i j k l m n o p q r s t u v w x y z", "seconds", "$(PASSWORD)",
    "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"])
# What the API server refuses (so an object holding one is judged offline only, by both).
REFUSED_ENTRIES = st.sampled_from(["not-a-map", {"value": "no-name"}, {"name": 7},
                                   {"name": "DB_PASSWORD", "value": 42},
                                   {"name": "TOKEN", "value": True}, {"name": "KEY", "value": []}])
ENV_ENTRIES = st.integers(0, 19).flatmap(lambda n: REFUSED_ENTRIES if n == 0 else st.one_of(
    st.builds(lambda name, value: {"name": name} if value is None else
              {"name": name, "value": value}, ENV_NAMES, ENV_VALUES),
    st.builds(lambda name, which, value: {"name": name, "value": value, "valueFrom": {
        which: {"name": "cfg", "key": "k"}}}, ENV_NAMES,
        st.sampled_from(["configMapKeyRef", "secretKeyRef", "fieldRef"]),
        st.sampled_from([None, "", "x"]))))


# Labels: the keys the shipped require-labels asks for (either will do), others, null values.
LABELS = st.sampled_from([
    None, {}, {"app": "web"}, {"app.kubernetes.io/name": "web"}, {"app": None},
    {"app.kubernetes.io/name": ""}, {"team": "ml"}, {"App": "web", "app.kubernetes.io/app": "x"},
    {"app": "web", "app.kubernetes.io/name": "web", "team": "ml"}])


def _label_holders(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The object and each pod template in it (a dict holding metadata and a spec)."""
    found = [obj]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "template" and isinstance(value, dict):
                    found.append(value)
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(obj.get("spec"))
    return found


@st.composite
def kserve(draw: Any) -> dict[str, Any]:
    model: dict[str, Any] = {"modelFormat": {"name": "sklearn"}}
    image = draw(IMAGES)
    if image is not None:
        model["image"] = image
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "isvc", "namespace": "default"},
            "spec": {"predictor": {"model": model, "containers": [
                {"name": "side", **draw(container_fields())}]}}}


@st.composite
def with_images(draw: Any) -> dict[str, Any]:
    """An object whose every container's image is drawn from IMAGES."""
    obj = draw(st.one_of(objects(), kserve()))

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "name" in node and ("image" in node or "resources" in node
                                   or "securityContext" in node):
                image = draw(IMAGES)
                node.pop("image", None)
                if image is not None:
                    node["image"] = image
                probe = draw(PROBES)
                if probe is not None:
                    node["livenessProbe"] = probe
                env = draw(st.one_of(st.none(), st.lists(ENV_ENTRIES, max_size=4)))
                if env is not None:
                    node["env"] = env
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(obj["spec"])
    for holder in _label_holders(obj):
        labels = draw(LABELS)
        metadata = holder.setdefault("metadata", {})
        if isinstance(metadata, dict):
            metadata.pop("labels", None)
            if labels is not None:
                metadata["labels"] = labels
    probe = draw(PROBES)
    if obj["kind"] == "NodeTemplate" and probe is not None:
        obj["spec"]["health"] = {"liveness": probe}
    return obj


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[PolicySet, PolicySet]]:
    """(the shipped built-in rule, its CEL form) for each form; require-kueue-queue, off as
    shipped, switched on (audit)."""
    assert CEL_FORMS == ["disallow-latest-tag", "disallow-root-user", "gpu-priority-class",
                         "liveness-probe-tolerance", "no-plaintext-secrets", "require-gpu-limits",
                         "require-kueue-queue", "require-labels", "require-requests"]
    out = []
    for name in CEL_FORMS:
        config = Config.model_validate(
            {"policies": {name: {"action": "audit"}}} if name == "require-kueue-queue" else {})
        folders = []
        for which, source in (("rule", default_policies_dir()), ("cel", FORMS_DIR)):
            folder = tmp_path_factory.mktemp(f"{name}-{which}")
            (folder / f"{name}.yaml").write_text((source / f"{name}.yaml").read_text())
            folders.append(load_policies(folder, config))
        rule, cel = folders
        assert rule.policies[0].rule is not None and cel.policies[0].cel is not None
        assert rule.policies[0].action != "off" and cel.policies[0].action != "off"
        out.append((rule, cel))
    return out


# The forms that judge only the kinds the export covers: the webhook keeps the rule for the
# ML workload kinds, whose labels are in maps and lists of templates and whose several pod
# specs are each a GPU pod or not.
EXPORTED_ONLY = {"require-labels", "gpu-priority-class", "require-kueue-queue"}
# disallow-root-user's form judges every kind as the rule does but Argo's workflows, whose
# templates inherit the workflow's spec.securityContext where only the rule looks (the export
# covers no Argo kind).
NOT_ARGO = {"disallow-root-user"}


# require-gpu-limits' form is for the kinds the export covers (the ML workload kinds keep
# the rule, nulls and all), and leaves to the API server what it refuses: in a Pod or pod
# template a fractional GPU count or a request without a limit or unequal to it (the rule
# judges such an object offline, noting that the API server refuses it), in a NodeTemplate a
# quantity that is neither an int nor a string (its CRD's x-kubernetes-int-or-string; see
# _not_int_or_string).
API_REFUSED = {"require-gpu-limits"}
# no-plaintext-secrets' form judges each env value as written (FORM_GAPS): what the rule finds
# through $(VAR) references, by a credential's format, in args and command, and in a ConfigMap
# is the webhook's alone (its findings carry these checks).
SECRETS_GAP = {"reference", "format", "argument", "configmap"}
# The kinds whose operators compose their pods (Dynamo, NIM, KubeAI, llm-d; no export covers
# them): what an operator gives from elsewhere when the object leaves it out (KubeAI's
# resources, llm-d's image and security context) only the rule knows (Container.elsewhere);
# these forms read the composed containers as written.
COMPOSED_GAP = {"require-requests", "disallow-root-user", "disallow-latest-tag"}


def _covered(cel: PolicySet, obj: dict[str, Any], rule: Decision | None = None) -> bool:
    """Whether the form is held to the rule on this object (`rule`: the rule's decision)."""
    form = cel.policies[0].id
    if form in API_REFUSED and (not _exported_kind(obj) or _not_int_or_string(obj) or (
            rule is not None and any(result.reason == REFUSED for result in rule.results))):
        return False
    if form == "no-plaintext-secrets" and rule is not None and any(
            found.check in SECRETS_GAP for result in rule.results for found in result.findings):
        return False
    if form in COMPOSED_GAP and _composed(obj):
        return False
    if form in NOT_ARGO:
        return not str(obj.get("apiVersion", "")).startswith("argoproj.io/")
    return form not in EXPORTED_ONLY or _exported_kind(obj)


def _findings(decision: Decision) -> tuple[str, list[tuple[str, str | None, str, bool]]]:
    """Outcome and findings; a message as the engine writes a CEL policy's, on one line (the
    exported policies' messages are compared as they are: _native)."""
    return decision.outcome, sorted(
        (" ".join(found.message.split()), found.container, found.path, found.preexisting)
        for result in decision.results for found in result.findings)


@settings(max_examples=600, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(obj=with_images(), old=with_images())
def test_the_cel_defaults_give_the_built_in_rules_findings(pairs, obj, old):
    for rule, cel in pairs:
        decision = evaluate(decode(obj), rule)
        if not _covered(cel, obj, decision):
            continue
        assert _findings(evaluate(decode(obj), cel)) == _findings(decision), obj
        if old["kind"] == obj["kind"]:
            update = Review(operation="UPDATE", old_object=decode(old))
            decision = evaluate(decode(obj), rule, update)
            if _covered(cel, obj, decision):
                assert _findings(evaluate(decode(obj), cel, update)) == _findings(decision), \
                    (obj, old)


@st.composite
def with_env(draw: Any) -> dict[str, Any]:
    """A Pod or NodeTemplate whose containers carry env entries of every sort (ENV_ENTRIES)."""
    envs = [draw(st.lists(ENV_ENTRIES, min_size=1, max_size=6)) for _ in range(draw(
        st.integers(1, 2)))]
    if draw(st.booleans()):
        return {"apiVersion": "quickq.io/v1", "kind": "NodeTemplate",
                "metadata": {"name": "nt", "namespace": "default"},
                "spec": {"image": "registry.example.com/app:1.0", "env": envs[0]}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": f"c{index}", "image": "app:1.0", "env": env}
                                    for index, env in enumerate(envs)]}}


# GPU requests and limits: resources the accelerators' globs match and others, with counts
# of every form Kubernetes' quantities take (suffixes, exponents, fractions, zero, negative,
# not a quantity) and ints, as a NodeTemplate (whose CRD takes ints and strings) may hold.
GPU_NAMES = st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.5gb",
                             "nvidia.com/mig-3g.20gb", "amd.com/gpu", "amd.com/cpx_nps4",
                             "gpu.intel.com/xe", "google.com/tpu", "example.com/fpga", "cpu"])
GPU_COUNTS = st.one_of(st.integers(-2, 3), st.sampled_from([None, True, 0.5,
    "0", "1", "2", "8", "-1", "-0", "+1", "0.5", "1.0", "1.", ".5", "00", "0.0", "1.5", "500m",
    "1000m", "2000m", "1500m", "0m", "1k", "1.5k", "0.0001k", "1Ki", "0.5Ki", "0.3Ki", "1e0",
    "1e3", "1.5e1", "15e-1", "1e-3", "2E2", "1e-12", "1E", "1e1000", "1e1001", "0e5", "3u",
    "1000000000n", "1G", "999999999999999.5", "1000000000000000", "abc", "1GB", ""]))


@st.composite
def with_gpus(draw: Any) -> dict[str, Any]:
    """A Pod or NodeTemplate whose containers request and limit GPUs of every sort."""
    def resources() -> dict[str, Any]:
        return {which: draw(st.dictionaries(GPU_NAMES, GPU_COUNTS, max_size=3))
                for which in ("requests", "limits") if draw(st.booleans())}

    if draw(st.booleans()):
        return {"apiVersion": "quickq.io/v1", "kind": "NodeTemplate",
                "metadata": {"name": "nt", "namespace": "default"},
                "spec": {"image": "registry.example.com/app:1.0", "resources": resources()}}
    spec = {"containers": [{"name": f"c{index}", "image": "app:1.0", "resources": resources()}
                           for index in range(draw(st.integers(1, 2)))]}
    if draw(st.booleans()):
        spec["initContainers"] = [{"name": "init", "image": "app:1.0", "resources": resources()}]
    priority = draw(st.sampled_from([None, "", "gpu-high"]))
    if priority is not None:
        spec["priorityClassName"] = priority
    kind = draw(st.sampled_from(["Pod", "Deployment", "CronJob"]))
    obj = workload(kind, *spec.pop("containers"), **spec) if kind != "Pod" else {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
        "spec": spec}
    # Kueue's label, and an owner that is (or is not) the object's controller.
    obj["metadata"]["labels"] = draw(st.sampled_from([
        {"app": "p"}, {"app": "p", "kueue.x-k8s.io/queue-name": "team-a"}]))
    owner = draw(st.sampled_from([None, True, False]))
    if owner is not None:
        obj["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job",
                                               "name": "j", "uid": "u", "controller": owner}]
    return obj


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(obj=with_gpus())
def test_the_gpu_limits_form_judges_every_sort_of_count_as_the_rule(pairs, exported, obj):
    """The GPU policies' forms (require-gpu-limits, gpu-priority-class, require-kueue-queue)
    on GPU counts of every sort: the same findings in the engine, and as exported, the same
    messages."""
    _same_as_exported("require-gpu-limits", pairs, exported, obj)
    _same_as_exported("gpu-priority-class", pairs, exported, obj)
    _same_as_exported("require-kueue-queue", pairs, exported, obj)


@pytest.fixture(scope="module")
def exported(pairs: list[tuple[PolicySet, PolicySet]]) -> dict[str, dict[str, Any]]:
    """Each form's ValidatingAdmissionPolicy, by policy id."""
    return {key: vap for _, cel in pairs
            for key, (vap, _) in _vap_pairs(export(cel).objects).items()}


@pytest.fixture(autouse=True)
def _long_expressions(monkeypatch: pytest.MonkeyPatch) -> None:
    """A form's variables written into each exported expression make it longer than a
    policy file's may be; the API server takes up to 100,000 characters."""
    monkeypatch.setattr(cel_module, "MAX_EXPRESSION_LENGTH", 100_000)


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(obj=with_env())
def test_the_secrets_form_judges_every_sort_of_env_entry_as_the_rule(pairs, exported, obj):
    """no-plaintext-secrets' form on names and values of every sort the rule tells apart: the
    same findings in the engine, and as exported, the same messages (see the test below)."""
    _same_as_exported("no-plaintext-secrets", pairs, exported, obj)


def _same_as_exported(form: str, pairs: list[tuple[PolicySet, PolicySet]],
                      exported: dict[str, dict[str, Any]], obj: dict[str, Any]) -> None:
    """The form's findings are the rule's; and where the API server lets the object reach
    admission, the exported form's messages are the rule's findings (see
    test_the_exported_forms_give_the_rules_findings_as_their_messages)."""
    [(rule, cel)] = [(r, c) for r, c in pairs if c.policies[0].id == form]
    decision = evaluate(decode(obj), rule)
    if not _covered(cel, obj, decision):
        return
    assert _findings(evaluate(decode(obj), cel)) == _findings(decision), obj
    served, refused = normalize(obj)
    if refused or any(r.policy is None for r in decision.results):
        return
    findings = [found.message for result in decision.results for found in result.findings]
    failed = _native(exported[form], served, "default")
    assert bool(failed) == bool(findings) and None not in failed, (obj, failed)
    assert all(joined(str(message), findings, form in MAP_ORDER) for message in failed), \
        (failed, findings)
    assert len("; ".join(map(str, failed))) == len("; ".join(findings)), failed


@pytest.fixture(scope="module")
def corpus() -> list[dict[str, Any]]:
    """The policy test suites' objects, the examples, the real ML and other workloads of
    tests/, and the benchmarks' corpus: the corpus the native proof judges."""
    root = Path(__file__).resolve().parent.parent
    documents = [doc for folder in ("policies/tests", "examples", "tests/workloads",
                                    "tests/ml_workloads")
                 for path in sorted((root / folder).rglob("*.yaml"))
                 for doc in _documents(path)]
    sys.path.insert(0, str(root / "benchmarks"))
    try:
        from corpus import objects as generated
    finally:
        sys.path.pop(0)
    documents += [obj for _, obj in generated(2000)]
    assert len(documents) > 2000
    return documents


def test_the_corpus_of_examples_workloads_and_the_benchmark_is_judged_the_same(pairs, corpus):
    for rule, cel in pairs:
        for doc in corpus:
            decision = evaluate(decode(doc), rule)
            if _covered(cel, doc, decision):
                assert _findings(evaluate(decode(doc), cel)) == _findings(decision), doc


@pytest.mark.parametrize("form", ["gpu-priority-class", "require-kueue-queue"])
def test_gpu_pods_through_dra_claims_are_the_one_gap_of_the_gpu_workload_forms(
        pairs, corpus, form):
    """The forms read no DRA claim (no admission policy can look one up): with the corpus's
    ResourceClaims and ResourceClaimTemplates resolved, the rule asks a priority class (a
    queue) of pods that get their GPUs through a claim and the form does not. Those are the
    only objects where the two differ, as `export` and docs/export.md state."""
    [(rule, cel)] = [(r, c) for r, c in pairs if c.policies[0].id == form]
    claims = claims_from(corpus)
    gap = []
    for doc in corpus:
        if not _covered(cel, doc):
            continue
        resolved = evaluate(decode(doc), rule, Review(claims=claims))
        if _findings(resolved) != _findings(evaluate(decode(doc), cel)):
            gap.append(doc["metadata"]["name"])
            assert _findings(evaluate(decode(doc), rule)) == \
                _findings(evaluate(decode(doc), cel)), doc
            assert "resourceClaims" in str(doc["spec"]), doc
    assert gap == ["per-pod", "shared-claim"]


def test_the_exported_forms_give_the_rules_findings_as_their_messages(pairs, exported, corpus):
    """Each exported form, evaluated as the API server evaluates it, on each object of the
    exported kinds as the API server hands it over: it fails exactly where the rule finds
    something, and its messages (one per failing validation, each the failing containers'
    findings joined by '; ') are together every finding of the rule, in the rule's order
    within each: what tests/cluster/test_native_proof.py asks of the API server's answers."""
    judged = Counter[str]()
    for rule, cel in pairs:
        vap = exported[cel.policies[0].id]
        for doc in corpus:
            if not _exported_kind(doc):
                continue
            decision = evaluate(decode(doc), rule)
            if not _covered(cel, doc, decision):
                continue
            served, refused = normalize(doc)
            if refused or decision.skipped or any(r.policy is None for r in decision.results):
                continue  # the API server refuses it, or no policy judges it
            findings = [found.message for result in decision.results
                        for found in result.findings]
            failed = _native(vap, served, doc["metadata"].get("namespace", "d"))
            assert bool(failed) == bool(findings), (doc, failed)
            messages = [message for message in failed if message is not None]
            assert all(joined(message, findings, cel.policies[0].id in MAP_ORDER)
                       for message in messages), (messages, findings)
            if len(messages) == len(failed):
                assert len("; ".join(messages)) == len("; ".join(findings)), (messages, findings)
            judged[cel.policies[0].id] += bool(findings)
    assert all(judged[form] >= 10 for form in CEL_FORMS), judged


def _native(vap: dict[str, Any], obj: dict[str, Any], namespace: str) -> list[str | None]:
    """The message of each validation of the exported policy that fails, as the API server
    evaluates them: compiled as its plugin compiles it, by Kubernetes' CEL."""
    spec = vap["spec"]
    bound = cel_module.activation("object", bindings(obj, namespace))
    conditions, validations = vap_programs(orjson.dumps(spec))
    assert all(cel_module.evaluate(c, bound) is True for c in conditions)
    failed: list[str | None] = []
    for validation, (check, message) in zip(spec["validations"], validations, strict=True):
        if cel_module.evaluate(check, bound) is not True:
            failed.append(validation["message"] if message is None
                          else cel_module.evaluate(message, bound))
    return failed


def _not_int_or_string(obj: dict[str, Any]) -> bool:
    """Whether some request or limit is neither an int nor a string: a NodeTemplate's CRD
    refuses it; in a Pod or pod template the API server refuses a YAML true (no quantity) (a
    0.5 it reads as 500m and a null as 0, as the offline model does)."""
    node_template = obj.get("kind") == "NodeTemplate"
    found = False

    def walk(node: Any) -> None:
        nonlocal found
        if isinstance(node, dict):
            resources = node.get("resources")
            if isinstance(resources, dict):
                for which in ("requests", "limits"):
                    values = resources.get(which)
                    if isinstance(values, dict) and any(
                            isinstance(value, bool)
                            or (node_template and not isinstance(value, int | str))
                            for value in values.values()):
                        found = True
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(obj.get("spec"))
    return found


def _composed(obj: dict[str, Any]) -> bool:
    """A kind whose operator composes its pods (webhook.engine.workload.composed)."""
    sites = WORKLOAD_KINDS.get((api_group(str(obj.get("apiVersion", ""))), str(obj.get("kind"))))
    return bool(sites) and sites[0].style == "composed"


def _exported_kind(obj: dict[str, Any]) -> bool:
    """A Pod, a built-in pod controller or a NodeTemplate: what the export judges (a Volcano
    Job is not batch/v1's)."""
    kind, api_version = obj.get("kind"), str(obj.get("apiVersion", ""))
    if kind == "NodeTemplate":
        return api_version.split("/")[0] in ("quickq", "quickq.io")
    return kind in BUILT_IN and api_version == BUILT_IN[kind].api_version


def _documents(path: Path) -> list[dict[str, Any]]:
    """The objects of a file; of a policy test suite, the objects it judges."""
    try:
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict)]
    except yaml.YAMLError:
        return []
    objects = []
    for doc in documents:
        if doc.get("kind") == "PolicyTest":
            objects += [item["object"] for item in doc.get("resources", [])
                        if isinstance(item, dict) and isinstance(item.get("object"), dict)]
        else:
            objects.append(doc)
    return [obj for obj in objects if isinstance(obj.get("spec"), dict)]


@pytest.mark.parametrize("pod_level", [
    {"requests": {"cpu": "1", "memory": "1Gi"}}, {"limits": {"memory": "1Gi"}},
    {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}, {}, None])
def test_the_requests_form_reads_pod_level_resources_as_the_rule(pairs, pod_level):
    """Pod-level resources (spec.resources, Kubernetes 1.34+) count for every container."""
    [(rule, cel)] = [pair for pair in pairs if pair[0].policies[0].id == "require-requests"]
    spec: dict[str, Any] = {"containers": [{"name": "a", "image": "app:1.0"},
                                           {"name": "b", "image": "app:1.0",
                                            "resources": {"requests": {"cpu": "1"}}}]}
    if pod_level is not None:
        spec["resources"] = pod_level
    obj = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "default"}, "spec": spec}
    decision = evaluate(obj, rule)
    assert _findings(evaluate(obj, cel)) == _findings(decision)
    # Only the first names both cpu and memory for container a.
    assert (decision.outcome == "allowed") == (pod_level == {
        "requests": {"cpu": "1", "memory": "1Gi"}})


def test_the_secrets_forms_gap_is_what_the_rule_marks_as_the_webhooks_alone(pairs):
    """What export says no-plaintext-secrets' form leaves to the webhook: a reference the
    kubelet expands, a credential's format, an argument. The rule finds them, marked with
    their check; the form does not; everything else the two find alike."""
    [(rule, cel)] = [(r, c) for r, c in pairs if c.policies[0].id == "no-plaintext-secrets"]
    key = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"containers": [{"name": "app", "image": "app:1.0", "args": ["--token", "x1"],
                                    "env": [{"name": "PW", "value": "hunter2-S3cret"},
                                            {"name": "POSTGRES_PASSWORD", "value": "$(PW)"},
                                            {"name": "LLM", "value": key},
                                            {"name": "PGPASSWORD", "value": "hunter2"}]}]}}
    found = [f for r in evaluate(obj, rule).results for f in r.findings]
    assert [f.check for f in found] == ["reference", "format", "", "argument"]
    [form] = [f for r in evaluate(obj, cel).results for f in r.findings]
    assert (form.path, form.message) == (found[2].path, found[2].message)
