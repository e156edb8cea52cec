"""liveness-probe-tolerance (warn) and inject-startup-probe (mutate)."""

from __future__ import annotations

import jsonpatch
import pytest
from builders import (
    container,
    judge,
    messages,
    node_template,
    paths,
    pod,
    pointer_prefix,
    result,
    with_config,
    workload,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook import Review, decode
from webhook.engine.normalize import normalize

# --- liveness-probe-tolerance ------------------------------------------------------------


@pytest.mark.parametrize(("period", "threshold", "seconds"), [
    (None, None, 30), (10, None, 30), (None, 5, 50), (5, 11, 55), (1, 1, 1)])
def test_short_liveness_window_warns_with_the_threshold_to_set(period, threshold, seconds):
    decision = judge(pod(container(livenessProbe=_probe(period, threshold))))
    found = result(decision, "liveness-probe-tolerance")
    assert (found.status, found.action) == ("fail", "warn")
    assert decision.allowed
    real_period, real_threshold = period or 10, threshold or 3
    needed = -(-60 // real_period)
    [message] = messages(decision, "liveness-probe-tolerance")
    assert message == (
        f"container 'app': livenessProbe restarts after {seconds}s of failures (failureThreshold "
        f"{real_threshold} x periodSeconds {real_period}); raise livenessProbe.failureThreshold "
        f"to {needed} or more (>= 60s)")
    assert paths(decision, "liveness-probe-tolerance") == [
        "spec.containers[0].livenessProbe.failureThreshold"]
    assert decision.warnings == (f"[liveness-probe-tolerance] {message}",)


@pytest.mark.parametrize(("period", "threshold"), [(10, 6), (None, 6), (20, None), (60, 1)])
def test_liveness_window_of_a_minute_or_more_passes(period, threshold):
    decision = judge(pod(container(livenessProbe=_probe(period, threshold))))
    assert result(decision, "liveness-probe-tolerance").status == "pass"


def test_init_containers_liveness_is_not_judged():
    init = container("init", livenessProbe=_probe(1, 1))
    decision = judge(pod(container(), initContainers=[init]))
    assert result(decision, "liveness-probe-tolerance").status == "pass"


def test_node_template_liveness_is_read_from_spec_health():
    decision = judge(node_template(health={"liveness": _probe(10, None)}))
    assert paths(decision, "liveness-probe-tolerance") == [
        "spec.health.liveness.failureThreshold"]
    assert "health.liveness restarts after 30s" in messages(
        decision, "liveness-probe-tolerance")[0]


def _probe(period, threshold, **extra):
    found = {"httpGet": {"path": "/healthz", "port": 8080}, **extra}
    if period is not None:
        found["periodSeconds"] = period
    if threshold is not None:
        found["failureThreshold"] = threshold
    return found


# --- inject-startup-probe -----------------------------------------------------------------

LIVENESS = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10,
            "failureThreshold": 6, "timeoutSeconds": 3, "initialDelaySeconds": 5,
            "successThreshold": 1}
# The webhook copies the liveness handler as the API server hands it over: with its default
# scheme (the API server would set it on the startup probe anyway).
EXPECTED_STARTUP = {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                    "timeoutSeconds": 3, "periodSeconds": 10, "failureThreshold": 60}


def test_startup_probe_is_copied_from_the_liveness_handler():
    obj = pod(container(livenessProbe=LIVENESS))
    decision = judge(obj)
    assert list(decision.patch) == [
        {"op": "add", "path": "/spec/containers/0/startupProbe", "value": EXPECTED_STARTUP}]
    found = result(decision, "inject-startup-probe")
    assert (found.status, found.action) == ("patch", "enforce")
    assert found.findings[0].path == "spec.containers[0].startupProbe"
    assert found.findings[0].message == (
        "container 'app': add startupProbe: it runs the liveness check every 10s for up to "
        "600s and holds off liveness checks until it succeeds, so a slow start is not "
        "restarted")
    patched = jsonpatch.apply_patch(normalize(obj)[0], list(decision.patch))
    assert patched == decision.patched
    liveness = patched["spec"]["containers"][0]["livenessProbe"]
    assert liveness == {**LIVENESS, "httpGet": EXPECTED_STARTUP["httpGet"]}


@pytest.mark.parametrize(("handler", "defaulted"), [
    ({"tcpSocket": {"port": 5432}}, {"tcpSocket": {"port": 5432}}),
    ({"exec": {"command": ["cat", "/tmp/ready"]}}, {"exec": {"command": ["cat", "/tmp/ready"]}}),
    ({"grpc": {"port": 9000}}, {"grpc": {"port": 9000, "service": ""}}),
])
def test_every_handler_kind_is_copied(handler, defaulted):
    decision = judge(pod(container(livenessProbe={**handler, "failureThreshold": 6})))
    [operation] = decision.patch
    # as the webhook sees the liveness probe: with the API server's defaults
    assert operation["value"] == {**defaulted, "timeoutSeconds": 1, "periodSeconds": 10,
                                  "failureThreshold": 60}


def test_container_with_a_startup_probe_is_left_alone():
    obj = pod(container(livenessProbe=LIVENESS, startupProbe={"tcpSocket": {"port": 1}}))
    decision = judge(obj)
    assert result(decision, "inject-startup-probe").status == "pass"
    assert decision.patch == ()


def test_only_containers_with_liveness_get_one_and_init_containers_never():
    obj = pod(container("plain"), container("served", livenessProbe=LIVENESS),
              initContainers=[container("init", livenessProbe=LIVENESS)])
    decision = judge(obj)
    assert [op["path"] for op in decision.patch] == ["/spec/containers/1/startupProbe"]
    assert result(decision, "inject-startup-probe").findings[0].container == "served"


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job",
                                  "CronJob"])
def test_controllers_are_patched_at_their_pod_template(kind):
    obj = workload(kind, container(livenessProbe=LIVENESS))
    # On UPDATE only when the update changes the template (here: the old image differs).
    old = workload(kind, container(image="registry.example.com/app:0.9", livenessProbe=LIVENESS))
    for operation in ("CREATE", "UPDATE"):
        decision = judge(obj, review=Review(operation=operation, old_object=decode(old)))
        assert [op["path"] for op in decision.patch] == [
            f"{pointer_prefix(kind)}/containers/0/startupProbe"]


def test_node_template_gets_spec_health_startup():
    obj = node_template(health={"liveness": LIVENESS})
    decision = judge(obj)
    # the NodeTemplate CRD's schema defaults no probe field: the handler as written
    assert list(decision.patch) == [
        {"op": "add", "path": "/spec/health/startup",
         "value": {**EXPECTED_STARTUP, "httpGet": LIVENESS["httpGet"]}}]
    assert "spec: add health.startup" in messages(decision, "inject-startup-probe")[0]
    patched = jsonpatch.apply_patch(obj, list(decision.patch))
    assert judge(patched).patch == ()


def test_patched_pod_is_not_patched_again():
    obj = pod(container(livenessProbe=LIVENESS))
    patched = jsonpatch.apply_patch(obj, list(judge(obj).patch))
    again = judge(patched)
    assert again.patch == ()
    assert result(again, "inject-startup-probe").status == "pass"


def test_startup_probe_params_can_be_overridden_by_config():
    from builders import with_config

    policies = with_config(policies={"inject-startup-probe": {
        "params": {"periodSeconds": 5, "failureThreshold": 24}}})
    [operation] = judge(pod(container(livenessProbe=LIVENESS)), policies).patch
    assert (operation["value"]["periodSeconds"], operation["value"]["failureThreshold"]) == (5, 24)


# --- the startup window covers what the liveness probe already allowed ----------------------


def _injected(liveness, policies=None):
    [operation] = judge(pod(container(livenessProbe=liveness)), policies).patch
    return operation["value"]


@pytest.mark.parametrize(("fields", "threshold"), [
    # initialDelaySeconds + failureThreshold x periodSeconds, with the API server's defaults
    ({"initialDelaySeconds": 4800}, 483),                          # 4800 + 3 x 10
    ({"initialDelaySeconds": 4800, "failureThreshold": 6}, 486),   # 4800 + 6 x 10
    ({"periodSeconds": 60, "failureThreshold": 12}, 72),           # 720 s
    ({"initialDelaySeconds": 905}, 94),                            # 935 s: rounded up
    ({"initialDelaySeconds": 570}, 60),                            # exactly 600 s
    ({"initialDelaySeconds": 571}, 61),                            # 601 s
    ({"initialDelaySeconds": 300, "periodSeconds": 30, "failureThreshold": 10}, 60),
    ({}, 60),                                                      # 30 s
    ({"initialDelaySeconds": -5, "periodSeconds": 0, "failureThreshold": 0}, 60),
])
def test_startup_window_is_never_shorter_than_what_liveness_allowed(fields, threshold):
    startup = _injected({"httpGet": {"path": "/healthz", "port": 8080}, **fields})
    assert (startup["periodSeconds"], startup["failureThreshold"]) == (10, threshold)
    assert "initialDelaySeconds" not in startup  # a fast start is let through at once


def test_the_message_gives_the_longer_window_and_why():
    obj = pod(container(livenessProbe={"tcpSocket": {"port": 5432}, "initialDelaySeconds": 900,
                                       "periodSeconds": 15, "failureThreshold": 4}))
    assert messages(judge(obj), "inject-startup-probe") == [
        "container 'app': add startupProbe: it runs the liveness check every 10s for up to "
        "960s (no less than livenessProbe allowed) and holds off liveness checks until it "
        "succeeds, so a slow start is not restarted"]


def test_a_longer_configured_period_gets_fewer_checks_for_the_same_window():
    from builders import with_config

    policies = with_config(policies={"inject-startup-probe": {
        "params": {"periodSeconds": 15, "failureThreshold": 40}}})
    startup = _injected({"exec": {"command": ["true"]}, "initialDelaySeconds": 4800}, policies)
    assert (startup["periodSeconds"], startup["failureThreshold"]) == (15, 322)  # 4830 s


def test_the_window_stays_within_the_int32_the_api_accepts():
    startup = _injected({"grpc": {"port": 9000}, "initialDelaySeconds": 2**31 - 1,
                         "periodSeconds": 2**31 - 1, "failureThreshold": 2**31 - 1})
    assert startup["failureThreshold"] == 2**31 - 1


def test_node_template_window_covers_its_liveness_delay():
    obj = node_template(health={"liveness": {"httpGet": {"path": "/healthz", "port": 8080},
                                             "initialDelaySeconds": 1200}})
    decision = judge(obj)
    [operation] = decision.patch
    assert operation["path"] == "/spec/health/startup"
    assert operation["value"]["failureThreshold"] == 123
    assert "(no less than health.liveness allowed)" in messages(decision,
                                                                "inject-startup-probe")[0]


@pytest.mark.parametrize("params", [{"periodSeconds": 0}, {"failureThreshold": -1}])
def test_a_window_parameter_below_one_is_refused_at_load(params):
    from builders import with_config

    from webhook.engine.policy import PolicyError

    with pytest.raises(PolicyError, match="inject-startup-probe.params: "
                                          r"\w+: Input should be greater than or equal to 1"):
        with_config(policies={"inject-startup-probe": {"params": params}})


@settings(max_examples=200, deadline=None)
@given(delay=st.one_of(st.none(), st.integers(0, 10**6)),
       period=st.one_of(st.none(), st.integers(1, 3600)),
       threshold=st.one_of(st.none(), st.integers(1, 1000)))
def test_the_injected_window_covers_liveness_and_the_default(delay, period, threshold):
    liveness = {"tcpSocket": {"port": 80}}
    for key, value in (("initialDelaySeconds", delay), ("periodSeconds", period),
                       ("failureThreshold", threshold)):
        if value is not None:
            liveness[key] = value
    startup = _injected(liveness)
    window = startup["periodSeconds"] * startup["failureThreshold"]
    allowed = (delay or 0) + (threshold or 3) * (period or 10)
    assert window >= allowed and window >= 600
    assert window - max(allowed, 600) < startup["periodSeconds"]  # no longer than needed


# --- a window per image: model servers load for many minutes ----------------------------------


@pytest.mark.parametrize("image", ["vllm/vllm-openai:v0.9.1",
                                   "ghcr.io/huggingface/text-generation-inference:3.0.1",
                                   "nvcr.io/nvidia/tritonserver:25.01-py3"])
def test_a_model_servers_startup_window_is_30_minutes_by_default(image):
    decision = judge(pod(container(image=image, livenessProbe=LIVENESS)))
    [operation] = decision.patch
    assert operation["value"]["periodSeconds"] * operation["value"]["failureThreshold"] == 1800
    assert "for up to 1800s and holds off" in messages(decision, "inject-startup-probe")[0]


def test_image_windows_are_settable_and_the_liveness_allowance_still_wins():
    policies = with_config(policies={"inject-startup-probe": {"params": {
        "imageWindows": {"registry.example.com/llm-*": 3600}}}})
    decision = judge(pod(container(image="registry.example.com/llm-70b:1.0",
                                   livenessProbe=LIVENESS)), policies)
    assert decision.patch[0]["value"]["failureThreshold"] == 360
    other = judge(pod(container(livenessProbe=LIVENESS)), policies)
    assert other.patch[0]["value"]["failureThreshold"] == 60
    slow = dict(LIVENESS, initialDelaySeconds=7200)
    longer = judge(pod(container(image="registry.example.com/llm-70b:1.0",
                                 livenessProbe=slow)), policies)
    assert longer.patch[0]["value"]["failureThreshold"] >= 723
    assert "(no less than livenessProbe allowed)" in messages(longer, "inject-startup-probe")[0]


def test_native_sidecars_get_a_startup_probe_and_the_tolerance_check():
    """An init container with restartPolicy Always runs for the pod's life and Kubernetes
    probes it as a container: it gets the startupProbe, at its own path, once, and its
    liveness probe is held to the tolerance; a plain init container still gets neither."""
    sidecar = container("proxy", restartPolicy="Always", livenessProbe=_probe(1, 1))
    obj = pod(container(), initContainers=[container("migrate"), sidecar])
    decision = judge(obj)
    assert [op["path"] for op in decision.patch] == ["/spec/initContainers/1/startupProbe"]
    assert messages(decision, "inject-startup-probe")[0].startswith(
        "initContainer 'proxy': add startupProbe")
    assert paths(decision, "liveness-probe-tolerance") == [
        "spec.initContainers[1].livenessProbe.failureThreshold"]
    patched = jsonpatch.apply_patch(obj, list(decision.patch))
    assert patched["spec"]["initContainers"][1]["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert judge(patched).patch == ()
    deployment = judge(workload("Deployment", container(), initContainers=[sidecar]))
    assert [op["path"] for op in deployment.patch] == [
        f"{pointer_prefix('Deployment')}/initContainers/0/startupProbe"]


def test_secret_probe_headers_are_hidden_in_every_output_but_the_patch_itself():
    """The injected startupProbe copies the liveness handler: an Authorization or X-API-Key
    header's value reaches the API server in the patch, and no report, message or shown
    patch (json, policyreport, table, sarif, junit, github)."""
    import json

    from webhook import load_policies
    from webhook.cli.formats import NAMES, render_all
    from webhook.cli.judge import Judged
    from webhook.engine.hidden import hidden_values, redacted
    from webhook.manifests import Document

    planted = "Bearer pl4nted-pr0be-t0ken-93f1"
    headers = [{"name": "Authorization", "value": planted},
               {"name": "X-API-Key", "value": "pl4nted-api-key-77"},
               {"name": "Accept", "value": "application/json"}]
    probe = {"httpGet": {"path": "/healthz", "port": 8080, "httpHeaders": headers}}
    obj = pod(container(livenessProbe=probe), initContainers=[
        container("proxy", restartPolicy="Always", livenessProbe=probe)])
    policies = load_policies()
    decision = judge(obj, policies)
    assert planted in json.dumps(list(decision.patch))  # what the API server applies
    judged = [Judged(Document("pod.yaml:1", file="pod.yaml", line=1, column=1), decision)]
    said = "\n".join([decision.message, *decision.warnings,
                      json.dumps(dict(decision.audit_annotations)),
                      *(render_all(name, judged, policies) for name in NAMES)])
    assert "application/json" in said and "(hidden)" in said  # the patches are shown
    assert planted not in said and "pl4nted-api-key-77" not in said
    assert planted not in json.dumps(redacted(obj))
    assert {planted, "pl4nted-api-key-77"} <= hidden_values(obj)
    assert "application/json" not in hidden_values(obj)
