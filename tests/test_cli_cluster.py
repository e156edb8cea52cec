"""`quickq-guard cluster arm|probe|remove` against a stub API server on loopback: which
requests they send, and what they conclude from the answers a real API server gives (a
denial, the probe's warning, a call that failed open, a failed call)."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jsonpatch
import pytest
from builders import default_policies, judge, run_cli

from webhook.cli.cluster import ARMED_ANNOTATION, probe_pod
from webhook.server.admission import probe_warning

CONFIGS = "/apis/admissionregistration.k8s.io/v1/"
DENIED = ('admission webhook "validate.quickq-guard.quickq.io" denied the request: Pod '
          'default/x is denied by quickq-guard:\n- [disallow-latest-tag] container probe')
FAILED = ('Internal error occurred: failed calling webhook "validate.quickq-guard.quickq.io": '
          'failed to call webhook: connection refused')


class Stub:
    """Answers dry-run Pod creates from a script, and GET/PATCH/DELETE of the webhook
    configurations from a dict; records every request."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, dict[str, Any], list[str]]] = []
        self.configs: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self.authorizations: list[str | None] = []

    def config(self, resource: str, name: str, hook: str) -> None:
        self.configs[f"{CONFIGS}{resource}/{name}"] = {
            "metadata": {"name": name},
            "webhooks": [{"name": hook, "failurePolicy": "Ignore"}]}


def handler(stub: Stub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def answer(self, status: int, body: Any, warnings: list[str] = ()) -> None:  # type: ignore[assignment]
            data = json.dumps(body).encode()
            self.send_response(status)
            for warning in warnings:
                self.send_header("Warning", '299 - "' + warning.replace('"', '\\"') + '"')
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def handle_any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            stub.requests.append((self.command, self.path, body))
            stub.authorizations.append(self.headers.get("Authorization"))
            if self.path.startswith("/behind-a-proxy/"):  # a bare answer, not the API's
                self.send_response(502)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            if self.command == "POST":
                status, answer, warnings = stub.answers.pop(0) if len(stub.answers) > 1 \
                    else stub.answers[0]
                return self.answer(status, answer, warnings)
            config = stub.configs.get(self.path)
            if config is None:
                return self.answer(404, {"kind": "Status", "message": "not found"})
            if self.command == "GET":
                return self.answer(200, config)
            if self.command == "PATCH":
                assert self.headers["Content-Type"] == "application/json-patch+json"
                stub.configs[self.path] = jsonpatch.apply_patch(config, body)
                return self.answer(200, stub.configs[self.path])
            del stub.configs[self.path]
            return self.answer(200, {"kind": "Status", "status": "Success"})

        do_GET = do_POST = do_PATCH = do_DELETE = handle_any

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


@pytest.fixture
def stub() -> Iterator[tuple[Stub, str]]:
    state = Stub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def admitted(*warnings: str) -> tuple[int, dict[str, Any], list[str]]:
    return 201, {"kind": "Pod"}, list(warnings)


def refused(message: str, *warnings: str) -> tuple[int, dict[str, Any], list[str]]:
    return 403, {"kind": "Status", "message": message}, list(warnings)


ARM = ("cluster", "arm", "--namespace", "default", "--validating", "qg=Fail",
       "--mutating", "qg=Ignore", "--interval", "0.01")


def test_arm_waits_for_both_answers_then_sets_each_policy(capsys: Any,
                                                          stub: tuple[Stub, str]) -> None:
    state, url = stub
    state.config("validatingwebhookconfigurations", "qg", "validate.quickq-guard.quickq.io")
    state.config("mutatingwebhookconfigurations", "qg", "mutate.quickq-guard.quickq.io")
    state.configs[f"{CONFIGS}validatingwebhookconfigurations/qg"]["webhooks"].append(
        {"name": "configmaps.quickq-guard.quickq.io", "failurePolicy": "Ignore"})
    mine = "qg-system/qg"
    state.answers = [admitted(), refused(FAILED), admitted(probe_warning("validate", mine)),
                     # another install's answers do not count
                     admitted(probe_warning("validate", "other/qg"),
                              probe_warning("mutate", "other/qg")),
                     refused(DENIED, probe_warning("mutate", mine),
                             probe_warning("validate", mine))]
    code, out, err = run_cli(capsys, *ARM, "--instance", mine, "--server", url)
    assert code == 0, err
    posts = [r for r in state.requests if r[0] == "POST"]
    assert len(posts) == 5
    assert all(path == "/api/v1/namespaces/default/pods?dryRun=All" for _, path, _ in posts)
    assert "mutate, validate not answering: admitted, no answer" in err
    assert "failed calling webhook" in err
    validating = state.configs[f"{CONFIGS}validatingwebhookconfigurations/qg"]
    mutating = state.configs[f"{CONFIGS}mutatingwebhookconfigurations/qg"]
    assert validating["webhooks"][0]["failurePolicy"] == "Fail"
    assert validating["webhooks"][1]["failurePolicy"] == "Ignore"  # ConfigMaps: always
    assert mutating["webhooks"][0]["failurePolicy"] == "Ignore"
    for config in (validating, mutating):
        assert config["metadata"]["annotations"] == {ARMED_ANNOTATION: "true"}
    assert "validatingwebhookconfigurations/qg: failurePolicy Fail" in out


def test_arm_gives_up_and_changes_nothing_when_no_answer_comes(capsys: Any,
                                                               stub: tuple[Stub, str]) -> None:
    state, url = stub
    state.config("validatingwebhookconfigurations", "qg", "validate.quickq-guard.quickq.io")
    before = copy.deepcopy(state.configs)
    state.answers = [admitted()]  # failurePolicy Ignore and no webhook: admitted silently
    code, _, err = run_cli(capsys, "cluster", "arm", "--namespace", "default",
                           "--validating", "qg=Fail", "--timeout", "0.2", "--interval", "0.01",
                           "--server", url)
    assert code == 1
    assert "no answer within 0.2s" in err
    assert state.configs == before
    assert all(method == "POST" for method, _, _ in state.requests)


@pytest.mark.parametrize(("expect", "answer", "code"), [
    ("denied", refused(DENIED, probe_warning("validate", "ns/qg")), 0),
    ("denied", refused(DENIED), 1),  # denied, but not by this install
    ("denied", admitted(probe_warning("validate", "ns/qg")), 1),
    ("denied", refused(FAILED), 1),
    ("warned", admitted(probe_warning("validate", "ns/qg"),
                        "[disallow-latest-tag] would deny: container 'probe': ..."), 0),
    ("warned", admitted(), 1),
    ("answered", admitted(probe_warning("validate", "ns/qg")), 0),
    ("answered", admitted(probe_warning("validate", "other/qg")), 1),
    ("answered", admitted(), 1),
])
def test_probe_checks_what_quickq_guard_said(capsys: Any, stub: tuple[Stub, str], expect: str,
                                             answer: Any, code: int) -> None:
    state, url = stub
    state.answers = [answer]
    got, out, err = run_cli(capsys, "cluster", "probe", "--namespace", "team-a", "--expect",
                            expect, "--policy", "disallow-latest-tag", "--image", "x:latest",
                            "--instance", "ns/qg",
                            "--server", url)
    assert got == code, out + err
    [(_, path, body)] = state.requests
    assert path == "/api/v1/namespaces/team-a/pods?dryRun=All"
    assert body["spec"]["containers"][0]["image"] == "x:latest"


def test_remove_deletes_both_and_a_missing_one_is_fine(capsys: Any,
                                                       stub: tuple[Stub, str]) -> None:
    state, url = stub
    state.config("validatingwebhookconfigurations", "qg", "validate.quickq-guard.quickq.io")
    code, out, err = run_cli(capsys, "cluster", "remove", "--validating", "qg",
                           "--mutating", "qg", "--server", url)
    assert code == 0, err
    assert state.configs == {}
    assert "mutatingwebhookconfigurations/qg: gone already" in out


def test_a_kubeconfig_names_the_server_and_the_credentials(capsys: Any, tmp_path: Any,
                                                           stub: tuple[Stub, str]) -> None:
    state, url = stub
    state.answers = [admitted(probe_warning("validate", "ns/qg"))]
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "hooks",
        "clusters": [{"name": "stub", "cluster": {"server": url}}],
        "users": [{"name": "hooks", "user": {"token": "hooks-token"}}],
        "contexts": [{"name": "hooks", "context": {"cluster": "stub", "user": "hooks"}}]}))
    code, out, err = run_cli(capsys, "cluster", "probe", "--namespace", "team-a",
                             "--instance", "ns/qg", "--kubeconfig", str(kubeconfig))
    assert code == 0, out + err
    assert state.authorizations == ["Bearer hooks-token"]


def test_a_refusal_without_a_status_object_is_still_a_refusal(capsys: Any,
                                                              stub: tuple[Stub, str]) -> None:
    """What a proxy or a load balancer in front of the API server answers: no JSON, maybe
    no Content-Type."""
    state, url = stub
    state.answers = [(503, None, [])]  # the stub sends `null`, as application/json
    code, out, err = run_cli(capsys, "cluster", "probe", "--namespace", "team-a",
                             "--server", url)
    assert code == 1 and "null" in out and "expected the probe to be answered" in err
    code, _, err = run_cli(capsys, "cluster", "remove", "--validating", "qg",
                           "--server", url + "/behind-a-proxy")
    assert code == 2 and "cannot delete validatingwebhookconfigurations/qg: HTTP 502" in err


def test_bad_arguments_and_no_cluster_are_clear_errors(capsys: Any,
                                                       monkeypatch: Any) -> None:
    code, _, err = run_cli(capsys, "cluster", "arm", "--namespace", "d", "--validating", "qg")
    assert code == 2 and "say NAME=Fail or NAME=Ignore" in err
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, _, err = run_cli(capsys, "cluster", "remove", "--validating", "qg")
    assert code == 2 and "not in a Pod" in err
    code, _, err = run_cli(capsys, "cluster", "remove", "--validating", "qg",
                           "--server", "http://127.0.0.1:9")
    assert code == 2 and "cannot reach the API server" in err
    code, _, err = run_cli(capsys, "cluster", "remove", "--validating", "qg",
                           "--kubeconfig", "/nonexistent/config")
    assert code == 2 and "cannot read the Kubernetes configuration" in err
    code, _, err = run_cli(capsys, "cluster", "remove", "--validating", "qg",
                           "--server", "https://127.0.0.1:9", "--certificate-authority",
                           "/nonexistent/ca.crt")
    assert code == 2 and "cannot load the TLS files" in err


def test_the_probe_pod_passes_the_shipped_policies_and_only_the_tag_denies_it() -> None:
    good = judge(probe_pod("team-a", "registry.invalid/quickq-guard-probe:1.0"),
                 default_policies())
    assert good.allowed, good.message
    bad = judge(probe_pod("team-a", "registry.invalid/quickq-guard-probe:latest"),
                default_policies())
    assert not bad.allowed
    assert [line.split("]")[0] for line in bad.message.splitlines()[1:]] == [
        "- [disallow-latest-tag"]
