"""The `quickq-guard` command: check, policies, validate-nodetemplates; exit codes and the JSON
contract."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from builders import run_cli as run

from webhook import Review, decode
from webhook.cli import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
RESULT_KEYS = {"resource", "policy", "action", "result", "message", "path", "patch"}
RESOURCE_KEYS = {"apiVersion", "kind", "namespace", "name", "source", "file", "line", "column"}

BAD_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: bad, namespace: default, labels: {app: bad}}
spec:
  securityContext: {runAsNonRoot: true}
  containers:
    - name: app
      image: app:latest
      resources: {requests: {cpu: 100m, memory: 1Gi}}
"""
GOOD_POD = BAD_POD.replace("name: bad", "name: good").replace("app:latest", "app:1.0")
GPU_POD = GOOD_POD.replace("name: good", "name: gpu").replace(
    "memory: 1Gi}", "memory: 1Gi, nvidia.com/gpu: 1}, limits: {nvidia.com/gpu: 1}").replace(
    "runAsNonRoot: true}", "runAsNonRoot: true}\n  priorityClassName: high")




def check_json(capsys, *args, **kwargs):
    code, out, err = run(capsys, "check", "--output", "json", *args, **kwargs)
    return code, json.loads(out), err


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


# --- exit codes -----------------------------------------------------------------------------


def test_exit_0_when_nothing_enforced_fails(capsys):
    code, out, _ = run(capsys, "check", str(EXAMPLES / "good"))
    assert code == 0
    # The PriorityClass the GPU example names is a kind no policy judges: skipped, one skip
    # for the object (as the reports write it); require-kueue-queue is off and
    # gpu-resource-claims judges no pods (4 skips each), and the NodeTemplate skips
    # gpu-claim-usage and gpu-priority-class.
    assert out.splitlines()[-1] == ("5 resources: 2 allowed, 0 denied, 2 patched, 0 error, "
                                    "1 skipped; 4 findings; policy results: 42 pass, 0 fail, "
                                    "0 warn, 4 patch, 11 skip, 0 error")
    # Listed only when asked (--show-skipped); counted either way.
    assert "SKIP" not in out
    _, out, _ = run(capsys, "check", "--show-skipped", str(EXAMPLES / "good"))
    assert "SKIP        -                          PriorityClass gpu-inference  kind " \
        "PriorityClass (scheduling.k8s.io) is not judged" in out


def test_exit_1_when_something_enforced_fails(capsys, tmp_path):
    code, out, _ = run(capsys, "check", str(write(tmp_path, "p.yaml", BAD_POD)))
    assert code == 1
    assert "DENY        disallow-latest-tag        Pod default/bad  container 'app': image " \
           "'app:latest' uses the 'latest' tag" in out
    assert f"[{tmp_path / 'p.yaml'}:8:7]" in out  # BAD_POD's image field


def test_warn_and_audit_failures_do_not_fail_the_check(capsys, tmp_path):
    text = GOOD_POD.replace("labels: {app: bad}", "labels: {}").replace(
        "name: app\n", "name: app\n      livenessProbe: {tcpSocket: {port: 1}}\n")
    code, out, _ = run(capsys, "check", str(write(tmp_path, "p.yaml", text)))
    assert code == 0
    assert "WARN        liveness-probe-tolerance" in out
    assert "AUDIT       require-labels" in out
    assert "PATCH       inject-startup-probe" in out


def test_exit_2_on_a_parse_error_but_other_objects_are_still_reported(capsys, tmp_path):
    write(tmp_path, "a-broken.yaml", "kind: Pod\nmetadata: [unclosed\n")
    write(tmp_path, "b-bad.yaml", BAD_POD)
    code, report, err = check_json(capsys, str(tmp_path))
    assert code == 2
    errors = [r for r in report["results"] if r["result"] == "error"]
    assert len(errors) == 1
    assert errors[0]["resource"]["source"] == f"{tmp_path / 'a-broken.yaml'}:3"
    assert err.startswith(f"quickq-guard: error: {tmp_path / 'a-broken.yaml'}:3:1: invalid YAML")
    assert "fix the YAML at the line shown" in err
    assert errors[0]["message"].startswith("invalid YAML: ")
    assert "line 3" in errors[0]["message"]
    assert any(r["policy"] == "disallow-latest-tag" and r["result"] == "fail"
               for r in report["results"])
    assert report["summary"]["resources"] == 2 and report["summary"]["error"] == 1


@pytest.mark.parametrize(("text", "problem"), [
    ("- just\n- a list\n", "expected a Kubernetes object (a mapping), got a list"),
    ("metadata: {name: x}\n", "the object has no 'kind'"),
    ("apiVersion: v1\nkind: Pod\nspec: {containers: nginx}\n",
     "spec.containers: expected a list, got a string"),
    ("a: 1\na: 2\n", "key 'a' is already defined"),
])
def test_bad_documents_are_an_error_on_stderr_naming_file_and_line_and_others_still_judged(
        capsys, tmp_path, text, problem):
    path = write(tmp_path, "stream.yaml", BAD_POD + "---\n" + text + "---\n" + GOOD_POD)
    code, out, err = run(capsys, "check", str(path))
    assert code == 2
    assert "Traceback" not in out + err
    assert "ERROR" not in out  # errors are not table rows
    [error_line] = err.splitlines()
    assert problem in error_line
    assert error_line.startswith(f"quickq-guard: error: {path}:11:1")
    assert "Pod default/bad  container 'app'" in out
    assert out.splitlines()[-1].startswith("3 resources: 1 allowed, 1 denied, 1 error; ")


def test_a_missing_file_is_an_error_and_other_paths_are_still_judged(capsys, tmp_path):
    code, report, _ = check_json(capsys, str(tmp_path / "nope.yaml"),
                                 str(write(tmp_path, "p.yaml", BAD_POD)))
    assert code == 2
    assert report["results"][0]["message"] == "no such file or directory"
    assert report["summary"]["fail"] == 1


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as raised:
        main(["check"])
    assert raised.value.code == 2
    with pytest.raises(SystemExit) as raised:
        main(["check", "--output", "xml", "x.yaml"])
    assert raised.value.code == 2


def test_a_broken_policy_directory_exits_2_naming_the_problem(capsys, tmp_path):
    write(tmp_path, "policies/p.yaml", "id: x\ndescription: d\ntype: validate\naction: nope\n")
    code, out, err = run(capsys, "check", "--policies", str(tmp_path / "policies"),
                         str(EXAMPLES / "good"))
    assert code == 2
    assert out == ""
    assert err.startswith(f"quickq-guard: error: {tmp_path / 'policies' / 'p.yaml'}: action: ")


# --- the JSON contract ----------------------------------------------------------------------


def test_json_output_has_one_result_per_resource_and_policy(capsys, tmp_path):
    path = write(tmp_path, "all.yaml", BAD_POD + "---\n" + GPU_POD)
    code, report, _ = check_json(capsys, str(path))
    assert code == 1
    assert set(report) == {"summary", "results"}
    assert set(report["summary"]) == {"resources", "pass", "fail", "warn", "patch", "skip",
                                      "error", "audit", "excepted", "outcomes", "skipped",
                                      "findings"}
    assert report["summary"]["outcomes"] == {"allowed": 0, "denied": 1, "patched": 1,
                                             "would-deny": 0, "would-patch": 0, "error": 0}
    assert report["summary"]["resources"] == 2
    assert len(report["results"]) == 2 * 14
    for item in report["results"]:
        assert set(item) >= RESULT_KEYS
        assert set(item["resource"]) == RESOURCE_KEYS
        assert item["result"] in {"pass", "fail", "patch", "skip", "error"}
    counted = {key: 0 for key in ("pass", "fail", "warn", "patch", "skip", "error")}
    for item in report["results"]:
        warn = item["result"] == "fail" and item["action"] != "enforce"
        counted["warn" if warn else item["result"]] += 1
    assert {k: report["summary"][k] for k in counted} == counted

    by_key = {(r["resource"]["name"], r["policy"]): r for r in report["results"]}
    denied = by_key["bad", "disallow-latest-tag"]
    assert denied["resource"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "default",
                                  "name": "bad", "source": f"{path}:1", "file": str(path),
                                  "line": 1, "column": 1}
    assert (denied["action"], denied["result"], denied["path"]) == (
        "enforce", "fail", "spec.containers[0].image")
    assert denied["message"].startswith("container 'app': image 'app:latest'")
    assert denied["patch"] == []
    patch = by_key["gpu", "inject-gpu-toleration"]
    assert (patch["result"], patch["action"], patch["path"]) == (
        "patch", "enforce", "spec.tolerations")
    # As the webhook sees the Pod: the API server has added its not-ready and unreachable
    # tolerations already, so the patch appends to the list.
    assert patch["patch"] == [{"op": "add", "path": "/spec/tolerations/-", "value": {
        "key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}}]
    assert by_key["gpu", "disallow-latest-tag"]["result"] == "pass"
    assert by_key["gpu", "disallow-latest-tag"]["resource"]["source"] == f"{path}:11"


def test_failing_warn_policy_is_result_fail_with_action_warn(capsys, tmp_path):
    text = GOOD_POD.replace("name: app\n", "name: app\n      livenessProbe: {exec: "
                            "{command: [ok]}}\n      startupProbe: {exec: {command: [ok]}}\n")
    code, report, _ = check_json(capsys, str(write(tmp_path, "p.yaml", text)))
    [item] = [r for r in report["results"] if r["policy"] == "liveness-probe-tolerance"]
    assert (item["result"], item["action"]) == ("fail", "warn")
    assert item["path"] == "spec.containers[0].livenessProbe.failureThreshold"
    assert report["summary"]["warn"] == 1 and report["summary"]["fail"] == 0
    assert code == 0


# --- inputs ---------------------------------------------------------------------------------


def test_directories_are_read_recursively_and_only_manifest_suffixes(capsys, tmp_path):
    write(tmp_path, "a/b/c/deep.yml", BAD_POD)
    write(tmp_path, "top.json", json.dumps(yaml.safe_load(GOOD_POD)))
    write(tmp_path, "notes.txt", "not: a manifest\n")
    code, report, _ = check_json(capsys, str(tmp_path))
    sources = sorted({r["resource"]["source"] for r in report["results"]})
    assert sources == [f"{tmp_path / 'a/b/c/deep.yml'}:1", f"{tmp_path / 'top.json'}:1"]
    assert code == 1


def test_stdin_multi_document_streams_with_empty_documents(capsys, monkeypatch):
    stream = "---\n" + BAD_POD + "---\n---\n# only a comment\n---\n" + GOOD_POD + "...\n"
    code, report, _ = check_json(capsys, "-", stdin=stream, monkeypatch=monkeypatch)
    assert code == 1
    names = {(r["resource"]["name"], r["resource"]["source"]) for r in report["results"]}
    assert names == {("bad", "<stdin>:2"), ("good", "<stdin>:15")}
    assert report["summary"]["resources"] == 2


def test_kind_list_items_are_judged_one_by_one(capsys, tmp_path):
    items = [yaml.safe_load(BAD_POD), yaml.safe_load(GOOD_POD),
             {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "c"}}]
    path = write(tmp_path, "list.yaml", yaml.safe_dump(
        {"apiVersion": "v1", "kind": "List", "items": items}))
    code, report, _ = check_json(capsys, str(path))
    assert code == 1
    assert report["summary"]["resources"] == 3
    sources = {r["resource"]["name"]: r["resource"]["source"] for r in report["results"]}
    lines = path.read_text().splitlines()
    starts = [n for n, line in enumerate(lines, 1) if line.startswith("- ")]
    assert sources == {"bad": f"{path}:{starts[0]}", "good": f"{path}:{starts[1]}",
                       "c": f"{path}:{starts[2]}"}
    assert {r["result"] for r in report["results"] if r["resource"]["name"] == "c"} == {"skip"}


def test_config_option_switches_to_dry_run(capsys, tmp_path):
    config = write(tmp_path, "config.yaml", "mode: dry-run\n")
    code, report, _ = check_json(capsys, "--config", str(config),
                                 str(write(tmp_path, "p.yaml", BAD_POD)))
    assert code == 0
    # Counted as what the decision says: would deny, a warning (as PolicyReport says), not
    # a failure of an enforce policy.
    assert (report["summary"]["fail"], report["summary"]["warn"]) == (0, 1)
    assert report["summary"]["outcomes"]["would-deny"] == 1


def test_summary_counts_a_violation_an_update_keeps_as_a_warning():
    """What the webhook answers to an UPDATE that keeps a violation (a warning) is what the
    summary counts: the verdict, not the policy's action."""
    from collections import Counter

    from builders import container, pod

    from webhook import evaluate, load_policies
    from webhook.cli.judge import count

    old = pod(container(image="app:latest"))
    new = pod(container(image="app:latest"), labels={"app": "a", "team": "x"})
    decision = evaluate(decode(new),
                        load_policies(),
                        Review(operation="UPDATE", old_object=decode(old)))
    assert decision.outcome == "allowed" and decision.warnings
    counts: Counter[str] = Counter()
    count(decision, counts)
    assert counts["fail"] == 0 and counts["warn"] >= 1


def test_policies_option_judges_with_another_policy_set(capsys, tmp_path):
    write(tmp_path, "policies/labels.yaml", """\
        id: team-label
        description: d
        type: validate
        action: enforce
        rule: require-labels
        params: {labels: [team]}
        """)
    code, report, _ = check_json(capsys, "--no-default-policies", "--policies",
                                 str(tmp_path / "policies"),
                                 str(write(tmp_path, "p.yaml", BAD_POD)))
    assert code == 1
    assert [r["policy"] for r in report["results"]] == ["team-label"]
    assert report["results"][0]["path"] == "metadata.labels.team"


# --- --fix ------------------------------------------------------------------------------------


def test_fix_prints_the_manifests_with_patches_applied(capsys, tmp_path):
    path = write(tmp_path, "all.yaml", GPU_POD + "---\napiVersion: v1\nkind: ConfigMap\n"
                 "metadata: {name: c}\n")
    code, out, _ = run(capsys, "check", "--fix", str(path))
    assert code == 0
    fixed = list(yaml.safe_load_all(out))
    assert fixed[0]["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert fixed[1] == {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    refixed = write(tmp_path, "fixed.yaml", out)
    _, report, _ = check_json(capsys, str(refixed))
    assert report["summary"]["patch"] == 0


def test_fix_adds_the_startup_probe_to_the_gpu_example(capsys):
    code, out, _ = run(capsys, "check", "--fix", str(EXAMPLES / "good/gpu-inference-pod.yaml"))
    [fixed] = yaml.safe_load_all(out)
    container = fixed["spec"]["containers"][0]
    assert container["startupProbe"] == {"httpGet": {"path": "/healthz", "port": 8080},
                                         "periodSeconds": 10, "failureThreshold": 60}
    assert code == 0


# --- policies and lint ----------------------------------------------------------------------


def test_policies_lists_every_policy_with_type_and_action(capsys):
    code, out, _ = run(capsys, "policies")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("ID") and "(mode: enforce)" in lines[0]
    rows = {line.split()[0]: line.split()[1:3] for line in lines[1:]}
    assert rows["liveness-probe-tolerance"] == ["validate", "warn"]
    assert rows["inject-gpu-toleration"] == ["mutate", "enforce"]
    assert rows["require-labels"] == ["validate", "audit"]
    assert len(rows) == 14


def test_policies_as_json_give_each_policy_with_its_params_after_the_config(capsys, tmp_path):
    config = write(tmp_path, "c.yaml", "mode: dry-run\npolicies:\n  require-labels:\n"
                   "    action: enforce\n    params: {labels: [team]}\n")
    code, out, _ = run(capsys, "policies", "-o", "json", "--config", str(config))
    assert code == 0
    listed = json.loads(out)
    assert listed["mode"] == "dry-run" and len(listed["policies"]) == 14
    labels = next(p for p in listed["policies"] if p["id"] == "require-labels")
    assert labels["action"] == "enforce" and labels["params"]["labels"] == [["team"]]
    assert labels["type"] == "validate" and labels["description"]
    assert labels["source"].endswith("require-labels.yaml")
    assert labels["match"]["operations"] == ["CREATE", "UPDATE"]


def test_policies_reports_a_config_typo_and_exits_2(capsys, tmp_path):
    config = write(tmp_path, "c.yaml", "policies: {require-label: {action: warn}}\n")
    code, _, err = run(capsys, "policies", "--config", str(config))
    assert code == 2
    assert "config: policies: no policy with id 'require-label'" in err


def test_lint_accepts_the_good_node_template_and_ignores_other_kinds(capsys):
    code, out, err = run(capsys, "validate-nodetemplates", str(EXAMPLES / "good"))
    assert code == 0
    assert out == ""
    assert "1 NodeTemplate(s) checked" in err


def test_lint_names_the_field_path_of_each_problem_and_exits_1(capsys, tmp_path):
    path = write(tmp_path, "nt.yaml", """\
        apiVersion: quickq/v1
        kind: NodeTemplate
        metadata: {name: gpu-01}
        spec:
          image: registry.example.com/model:1.0
          resources:
            requests: {cpu: 1, memory: 4GB}
          health:
            liveness: {httpGet: {path: /, port: 80}, periodSecond: 10}
          env:
            - {name: A, valu: b}
        """)
    code, out, _ = run(capsys, "validate-nodetemplates", str(path))
    assert code == 1
    assert f"{path}:1:1: NodeTemplate gpu-01: spec.resources.requests.memory: '4GB' is not a " \
           "valid quantity" in out
    assert "spec.health.liveness.periodSecond: unknown field" in out
    assert "spec.env.0.valu: unknown field" in out


def test_lint_of_an_unreadable_document_exits_2(capsys, tmp_path):
    code, _, err = run(capsys, "validate-nodetemplates", str(write(tmp_path, "x.yaml", "a: [\n")))
    assert code == 2
    assert "invalid YAML" in err


def test_the_old_name_lint_still_validates_with_a_deprecation_note(capsys):
    code, out, err = run(capsys, "lint", str(EXAMPLES / "good"))
    assert code == 0 and out == ""
    assert "1 NodeTemplate(s) checked" in err
    assert "`lint` is deprecated: it validates NodeTemplates only; run `quickq-guard " \
           "validate-nodetemplates`" in err


def test_lint_schema_prints_the_shipped_schema(capsys):
    code, out, _ = run(capsys, "validate-nodetemplates", "--schema", "-")
    assert code == 0
    assert out == (ROOT / "webhook/schemas/nodetemplate.schema.json").read_text()


def test_the_installed_command_runs(tmp_path):
    path = write(tmp_path, "p.yaml", BAD_POD)
    done = subprocess.run([str(Path(sys.executable).parent / "quickq-guard"), "check", "-o",
                           "json", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert json.loads(done.stdout)["summary"]["fail"] == 1


def run_command(*args: str, setup: str = "", stdout=subprocess.PIPE,
                ) -> subprocess.CompletedProcess[bytes]:
    """The command as `python -m webhook.cli` runs it (webhook.cli.run), after `setup`."""
    code = f"import sys\n{setup}\nsys.argv = ['quickq-guard', *{list(args)!r}]\n" \
        "from webhook.cli import run\nrun()\n"
    return subprocess.run([sys.executable, "-c", code], stdout=stdout, stderr=subprocess.PIPE,
                          check=False)


def test_the_command_ends_without_tearing_the_interpreter_down(tmp_path):
    path = write(tmp_path, "p.yaml", BAD_POD)
    done = run_command("check", "-o", "json", str(path), setup=(
        "import atexit; atexit.register(lambda: print('torn down', file=sys.stderr))"))
    assert done.returncode == 1  # main()'s exit code, as sys.exit would give it
    assert json.loads(done.stdout)["summary"]["fail"] == 1  # flushed: all of it is there
    assert b"torn down" not in done.stderr


def test_the_command_writes_a_large_report_whole_to_a_file(tmp_path):
    for index in range(300):
        write(tmp_path / "in", f"p{index}.yaml", BAD_POD.replace("name: bad", f"name: b{index}"))
    report = tmp_path / "report.json"
    with report.open("wb") as out:
        done = run_command("check", "-o", "json", str(tmp_path / "in"), stdout=out)
    assert done.returncode == 1
    assert json.loads(report.read_bytes())["summary"]["resources"] == 300


def test_the_command_says_so_when_the_output_cannot_be_written():
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    # What the command prints stays in the buffer until run() flushes it, and fails there.
    done = run_command("policies", setup="sys.stdout = open('/dev/full', 'w', buffering=1 << 20)")
    assert done.returncode == 2
    assert b"quickq-guard: error: cannot write the output: No space left on device" \
        in done.stderr
    assert b"Traceback" not in done.stderr


def test_the_command_is_quiet_when_its_reader_goes_away(tmp_path):
    for index in range(300):
        write(tmp_path, f"p{index}.yaml", BAD_POD.replace("name: bad", f"name: b{index}"))
    code = ("import subprocess, sys\n"
            "cmd = [sys.executable, '-m', 'webhook.cli', 'check', '-o', 'json', "
            f"{str(tmp_path)!r}]\n"
            "p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)\n"
            "p.stdout.read(100); p.stdout.close()\n"
            "err = p.stderr.read(); sys.stdout.write(f'{p.wait()} {err!r}')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    returncode, err = done.stdout.split(" ", 1)
    assert returncode in ("0", "1")  # as far as it got: no crash
    assert "Traceback" not in err and "Exception ignored" not in err


def test_fix_writes_a_copied_probe_handler_out_in_full_not_as_a_yaml_alias(tmp_path: Path) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {app: p}}\nspec:\n"
        "  securityContext: {runAsNonRoot: true}\n  containers:\n  - name: a\n    image: a:1\n"
        "    resources: {requests: {cpu: 1, memory: 1Gi}}\n"
        "    livenessProbe: {httpGet: {path: /h, port: 80}, failureThreshold: 6}\n")
    out = subprocess.run([sys.executable, "-m", "webhook.cli", "check", "--fix", str(manifest)],
                         capture_output=True, text=True, check=False).stdout
    assert "&id" not in out and "*id" not in out
    fixed = yaml.safe_load(out)
    container = fixed["spec"]["containers"][0]
    assert container["startupProbe"]["httpGet"] == {"path": "/h", "port": 80}


def test_check_says_why_a_deployments_replicaset_is_not_patched(capsys, monkeypatch):
    """What the chart does not send to the mutating webhook, offline says the same."""
    from webhook.testing import gpu_container, workload

    replica_set = workload("ReplicaSet", gpu_container(), priorityClassName="gpu")
    replica_set["metadata"]["ownerReferences"] = [{
        "apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u-1",
        "controller": True}]
    code, out, _ = run(capsys, "check", "-o", "json", "-", stdin=json.dumps(replica_set),
                       monkeypatch=monkeypatch)
    assert code == 0
    rows = [r for r in json.loads(out)["results"] if r["policy"] == "inject-gpu-toleration"]
    assert [(r["result"], r["message"]) for r in rows] == [
        ("skip", "a ReplicaSet its Deployment controls is patched through the Deployment")]
