"""`check` as a CI pipeline runs it: honest exit codes, errors on stderr naming file and line,
directory walks of real repositories, and a summary that counts what it says."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from builders import run_cli as run

from webhook.cli import judge, main
from webhook.loader import load_policies
from webhook.manifests import manifest_sources, walk

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
BAD_POD = (EXAMPLES / "bad" / "pod.yaml").read_text()
GOOD_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: good, namespace: default, labels: {app: good}}
spec:
  securityContext: {runAsNonRoot: true}
  containers:
    - name: app
      image: app:1.0
      resources: {requests: {cpu: 100m, memory: 1Gi}}
"""




def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


# --- empty input ------------------------------------------------------------------------------


@pytest.mark.parametrize("stdin", ["", "\n", "# nothing but a comment\n", "---\n---\n"])
def test_input_without_any_object_is_exit_2_with_a_message(capsys, monkeypatch, stdin):
    code, out, err = run(capsys, "check", "-", stdin=stdin, monkeypatch=monkeypatch)
    assert code == 2
    assert "no Kubernetes object found in stdin" in err
    assert "--allow-empty" in err
    assert out.startswith("0 resources")


def test_allow_empty_lets_empty_input_pass(capsys, monkeypatch):
    code, _, err = run(capsys, "check", "--allow-empty", "-", stdin="", monkeypatch=monkeypatch)
    assert code == 0 and err == ""


def test_a_failed_command_upstream_fails_the_check():
    # `false | quickq-guard check -`: the shell hands over an empty stream
    done = subprocess.run(f"false | {sys.executable} -m webhook.cli check -", shell=True,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "no Kubernetes object found" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_empty_directory_is_exit_2(capsys, tmp_path):
    code, _, err = run(capsys, "check", str(tmp_path))
    assert code == 2 and "no Kubernetes object found" in err


# --- the summary and errors -----------------------------------------------------------------


def test_errors_are_not_counted_as_denials(capsys, tmp_path):
    path = write(tmp_path, "three.yaml", BAD_POD + "---\n- a list\n---\nkind: Pod\nspec: 1\n")
    code, out, err = run(capsys, "check", str(path))
    assert code == 2
    assert out.splitlines()[-1].startswith("3 resources: 0 allowed, 1 denied, 2 error; ")
    assert len(err.splitlines()) == 2
    code, out, _ = run(capsys, "check", "-o", "json", str(path))
    outcomes = json.loads(out)["summary"]["outcomes"]
    assert (outcomes["denied"], outcomes["error"]) == (1, 2)


def test_a_missing_file_is_an_error_not_a_denial(capsys, tmp_path):
    code, out, err = run(capsys, "check", str(tmp_path / "nope.yaml"))
    assert code == 2
    assert "0 denied" in out and "1 error" in out
    assert err == f"quickq-guard: error: {tmp_path / 'nope.yaml'}: no such file or directory; " \
                  "check the path\n"


def test_findings_are_counted_one_per_thing_to_change(capsys, tmp_path):
    _, out, _ = run(capsys, "check", "-o", "json", str(write(tmp_path, "p.yaml", BAD_POD)))
    report = json.loads(out)
    findings = sum(len(r["findings"]) for r in report["results"])
    assert report["summary"]["findings"] == findings > report["summary"]["fail"]
    _, out, _ = run(capsys, "check", str(tmp_path / "p.yaml"))
    rows = out.splitlines()[:-1]
    assert len(rows) == findings
    assert f"; {findings} findings;" in out.splitlines()[-1]


def test_a_multi_line_parser_message_stays_on_one_stderr_line(capsys, tmp_path):
    path = write(tmp_path, "t.yaml", "a: b\n  c: d\n")
    code, out, err = run(capsys, "check", str(path))
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith(f"quickq-guard: error: {path}:2:")
    assert len(out.splitlines()) == 1  # the summary only


def test_an_unrendered_helm_template_named_on_the_command_line_says_to_render_it(
        capsys, tmp_path):
    path = write(tmp_path, "deployment.yaml", """\
        apiVersion: apps/v1
        kind: Deployment
        metadata:
          name: {{ .Release.Name }}
        spec:
          replicas: {{ .Values.replicas }}
        """)
    code, _, err = run(capsys, "check", str(path))
    assert code == 2
    assert str(path) in err and "unrendered Helm template" in err
    assert "helm template" in err


def test_error_messages_never_show_a_traceback(tmp_path):
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "deep.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    done = subprocess.run([sys.executable, "-m", "webhook.cli", "check", "--verbose",
                           str(tmp_path)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr + done.stdout
    assert str(tmp_path / "bin.yaml") in done.stderr


# --- exit codes and --fail-on -------------------------------------------------------------


def test_fail_on_decides_what_exit_1_means(capsys, tmp_path):
    warned = write(tmp_path, "warned.yaml", GOOD_POD.replace(
        "      resources:", "      livenessProbe: {tcpSocket: {port: 1}}\n      resources:"))
    audited = write(tmp_path, "audited.yaml", GOOD_POD.replace("labels: {app: good}",
                                                               "labels: {}"))
    assert run(capsys, "check", str(warned))[0] == 0
    assert run(capsys, "check", "--fail-on", "warn", str(warned))[0] == 1
    assert run(capsys, "check", "--fail-on", "warn", str(audited))[0] == 0
    assert run(capsys, "check", "--fail-on", "audit", str(audited))[0] == 1


def test_dry_run_denials_fail_only_with_fail_on_warn(capsys, tmp_path):
    config = write(tmp_path, "config.yaml", "mode: dry-run\n")
    pod = write(tmp_path, "p.yaml", BAD_POD)
    code, out, _ = run(capsys, "check", "--config", str(config), str(pod))
    assert code == 0
    assert "WOULD-DENY" in out and "1 would-deny" in out.splitlines()[-1]
    assert run(capsys, "check", "--config", str(config), "--fail-on", "warn", str(pod))[0] == 1


def test_quiet_shows_failures_only(capsys, tmp_path):
    pod = write(tmp_path, "p.yaml", BAD_POD)
    _, out, _ = run(capsys, "check", "--quiet", str(pod))
    rows = out.splitlines()[:-1]
    assert rows and all(row.startswith("DENY") for row in rows)
    _, out, _ = run(capsys, "check", "-q", "-o", "json", str(pod))
    assert {r["result"] for r in json.loads(out)["results"]} == {"fail"}


@pytest.mark.parametrize("value", ["0", "-3", "x"])
def test_bad_jobs_values_are_usage_errors(capsys, value):
    with pytest.raises(SystemExit) as raised:
        main(["check", "--jobs", value, "x.yaml"])
    assert raised.value.code == 2
    assert "--jobs" in capsys.readouterr().err


def test_help_texts_name_the_defaults(capsys):
    for command in ("serve", "certs", "check"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        out = capsys.readouterr().out
        assert "default" in out
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    assert "(default: 8443)" in out and "(default: certs/tls.crt)" in out


def test_colour_only_on_a_terminal_and_never_with_no_color(tmp_path):
    pod = write(tmp_path, "p.yaml", BAD_POD)
    piped = subprocess.run([sys.executable, "-m", "webhook.cli", "check", str(pod)],
                           capture_output=True, text=True, check=False)
    assert "\033[" not in piped.stdout
    script = ("import sys, pty, os; os.environ.update(sys.argv[1:2] and {'NO_COLOR': '1'} "
              f"or {{}}); pty.spawn([sys.executable, '-m', 'webhook.cli', 'check', {str(pod)!r}])")
    coloured = subprocess.run([sys.executable, "-c", script], capture_output=True, check=False)
    assert b"\033[31mDENY" in coloured.stdout
    plain = subprocess.run([sys.executable, "-c", script, "no-color"], capture_output=True,
                           check=False)
    assert b"DENY" in plain.stdout and b"\033[" not in plain.stdout


# --- directory walks ------------------------------------------------------------------------


def test_a_repository_walk_skips_what_is_not_a_manifest(capsys, tmp_path):
    write(tmp_path, "deploy/pod.yaml", BAD_POD)
    write(tmp_path, "kustomization.yaml", "resources: [deploy/pod.yaml]\n")
    write(tmp_path, "chart/values.yaml", "replicas: 2\nimage: {tag: 1.0}\n")
    write(tmp_path, "chart/templates/pod.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n"
                                                "  name: {{ .Release.Name }}\n")
    write(tmp_path, "schema.json", '{"$schema": "http://json-schema.org/draft-07/schema#"}')
    write(tmp_path, ".venv/lib/site/pod.yaml", BAD_POD)
    write(tmp_path, ".github/workflows/ci.yml", "on: push\n")
    # Another project's test pod, vendored (Go) or installed (npm): not this repository's.
    write(tmp_path, "vendor/k8s.io/api/testdata/pod.yaml", BAD_POD)
    write(tmp_path, "web/node_modules/pkg/pod.yaml", BAD_POD)
    code, out, err = run(capsys, "check", "--verbose", str(tmp_path))
    assert code == 1  # the real denial, not exit 2 for the files that are not manifests
    assert out.splitlines()[-1].startswith("1 resources:")
    notes = err.splitlines()
    assert sorted(re.match(r"quickq-guard: note: skipped (.*?): ", n)[1] for n in notes) == sorted(
        str(tmp_path / name) for name in ("chart/templates/pod.yaml", "chart/values.yaml",
                                          "kustomization.yaml", "schema.json"))
    assert any("unrendered Helm template" in n for n in notes)
    # Named, a vendored folder is walked: the user asked for it.
    code, out, _ = run(capsys, "check", str(tmp_path / "vendor"))
    assert code == 1 and out.splitlines()[-1].startswith("1 resources:")
    _, _, quiet = run(capsys, "check", "-q", str(tmp_path))
    assert quiet == ""


def test_a_file_named_on_the_command_line_is_still_an_error(capsys, tmp_path):
    values = write(tmp_path, "values.yaml", "replicas: 2\n")
    code, _, err = run(capsys, "check", str(values))
    assert code == 2
    assert f"{values}:1:1" in err and "no 'kind'" in err


def test_broken_yaml_in_a_walk_is_still_an_error(capsys, tmp_path):
    write(tmp_path, "broken.yaml", "a: [\n")
    write(tmp_path, "pod.yaml", GOOD_POD)
    code, _, err = run(capsys, "check", str(tmp_path))
    assert code == 2 and "broken.yaml" in err


def test_gitignore_and_exclude_leave_files_out(capsys, tmp_path):
    (tmp_path / ".git").mkdir()
    write(tmp_path, ".gitignore", "build/\n*.generated.yaml\n!keep.generated.yaml\n")
    write(tmp_path, "k8s/.gitignore", "local/\n")
    write(tmp_path, "k8s/pod.yaml", GOOD_POD)
    write(tmp_path, "k8s/local/pod.yaml", BAD_POD)
    write(tmp_path, "k8s/x.generated.yaml", BAD_POD)
    write(tmp_path, "k8s/keep.generated.yaml", GOOD_POD.replace("name: good", "name: kept"))
    write(tmp_path, "build/pod.yaml", BAD_POD)
    write(tmp_path, "k8s/legacy/pod.yaml", BAD_POD)
    code, out, _ = run(capsys, "check", "-o", "json", "--exclude", "legacy", str(tmp_path))
    files = sorted({Path(r["resource"]["file"]).relative_to(tmp_path).as_posix()
                    for r in json.loads(out)["results"]})
    assert files == ["k8s/keep.generated.yaml", "k8s/pod.yaml"]
    assert code == 0
    # a .gitignore above the directory given applies too, up to the repository's root
    _, out, _ = run(capsys, "check", "-o", "json", str(tmp_path / "k8s"))
    assert "x.generated.yaml" not in out and "local" not in out
    code, out, _ = run(capsys, "check", "-o", "json", "--exclude", "/pod.yaml",
                       str(tmp_path / "k8s"))
    assert code == 1 and "k8s/pod.yaml" not in out and "legacy/pod.yaml" in out



def test_a_walk_lists_files_in_the_order_of_their_path_parts(tmp_path):
    # `a/x.yaml` before `a-b.yaml`: sorted by parts, as Paths sort, not as strings sort
    for name in ("a.yaml", "a-b.yaml", "a/x.yaml", "a/b/c.yml", "a/B.json", "b.YAML"):
        write(tmp_path, name, GOOD_POD)
    found = walk(tmp_path)
    assert found == sorted(found) and [p.relative_to(tmp_path).as_posix() for p in found] == [
        "a/B.json", "a/b/c.yml", "a/x.yaml", "a-b.yaml", "a.yaml", "b.YAML"]
    assert [s.name for s in manifest_sources([str(tmp_path)])] == [str(p) for p in found]


def test_a_gitignore_in_a_subfolder_matches_from_its_own_folder(tmp_path):
    (tmp_path / ".git").mkdir()
    write(tmp_path, ".gitignore", "/top.yaml\n")
    write(tmp_path, "k8s/.gitignore", "/only-here.yaml\ndeep/*.yaml\n!deep/keep.yaml\n")
    for name in ("top.yaml", "k8s/top.yaml", "k8s/only-here.yaml", "k8s/x/only-here.yaml",
                 "k8s/deep/a.yaml", "k8s/deep/keep.yaml", "k8s/x/deep/a.yaml"):
        write(tmp_path, name, GOOD_POD)
    names = [p.relative_to(tmp_path).as_posix() for p in walk(tmp_path / "k8s")]
    assert names == ["k8s/deep/keep.yaml", "k8s/top.yaml", "k8s/x/deep/a.yaml",
                     "k8s/x/only-here.yaml"]  # deep/ is anchored: it has a slash
    names = [p.relative_to(tmp_path).as_posix() for p in walk(tmp_path, ["x/"])]
    assert names == ["k8s/deep/keep.yaml", "k8s/top.yaml"]


def test_the_scan_reads_each_file_once_and_names_those_that_may_hold_exceptions_or_claims(
        tmp_path, monkeypatch):
    write(tmp_path, "pod.yaml", GOOD_POD)
    write(tmp_path, "exception.yaml", "apiVersion: quickq.io/v1alpha1\nkind: PolicyException\n")
    write(tmp_path, "claim.yaml", "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\n")
    write(tmp_path, "big.yaml", "---\n".join([GOOD_POD] * 40))
    opened = _count_opens(monkeypatch, tmp_path)
    monkeypatch.setattr(judge, "TASK_BYTES", 2000)
    found = judge.scan([str(tmp_path), str(tmp_path / "missing.yaml")], [], None)
    monkeypatch.undo()
    assert sorted(opened) == sorted(str(tmp_path / name) for name in (
        "big.yaml", "claim.yaml", "exception.yaml", "pod.yaml"))
    assert [s.name for s in found.exceptions] == [str(tmp_path / "exception.yaml")]
    assert [s.name for s in found.claims] == [str(tmp_path / "claim.yaml")]
    sources = [source for task in found.tasks for source in task]
    assert sum(s.name.endswith("big.yaml") for s in sources) > 3  # split into pieces
    assert sources[-1].name.endswith("missing.yaml") and not sources[-1].exists
    assert found.size == sum(p.stat().st_size for p in tmp_path.glob("*.yaml"))
    assert found.read == {str(p): p.read_bytes() for p in tmp_path.glob("*.yaml")}
    assert judge.tasks([str(tmp_path)], [], None) == judge.scan([str(tmp_path)], [], None).tasks


def _count_opens(monkeypatch, directory: Path) -> list[str]:
    """The manifests of `directory` opened from now on (not a .gitignore or kustomization
    looked for once per folder)."""
    manifests = {str(path) for path in directory.glob("*.yaml")}
    opened: list[str] = []
    real_open = os.open

    def counting_open(name, *args, **kwargs):
        if str(name) in manifests:
            opened.append(str(name))
        return real_open(name, *args, **kwargs)

    monkeypatch.setattr("os.open", counting_open)
    return opened


@pytest.mark.parametrize("kept", [judge.KEPT_BYTES, 3000])
def test_judging_what_the_scan_read_reads_no_file_again_unless_it_kept_too_much(
        tmp_path, monkeypatch, kept):
    """The scan keeps the bytes it read for the judging (a forked worker inherits them), up to
    KEPT_BYTES; past that a file is read again when judged, with the same verdicts."""
    write(tmp_path, "a.yaml", GOOD_POD)
    write(tmp_path, "b.yaml", BAD_POD)
    write(tmp_path, "big.yaml", "---\n".join([GOOD_POD] * 40))
    policies = load_policies(ROOT / "policies")
    monkeypatch.setattr(judge, "KEPT_BYTES", kept)
    monkeypatch.setattr(judge, "TASK_BYTES", 2000)
    found = judge.scan([str(tmp_path)], [], None)
    opened = _count_opens(monkeypatch, tmp_path)
    parts = list(judge.judge_all(found.tasks, policies, len, 1, found.read))
    monkeypatch.undo()
    kept_all = kept == judge.KEPT_BYTES
    assert sorted(found.read) == sorted(str(tmp_path / name) for name in (
        ("a.yaml", "b.yaml", "big.yaml") if kept_all else ("a.yaml", "b.yaml")))
    pieces = sum(source.name.endswith("big.yaml") for task in found.tasks for source in task)
    assert sorted(set(opened)) == ([] if kept_all else [str(tmp_path / "big.yaml")])
    assert len(opened) == (0 if kept_all else pieces)
    assert sum(part.counts["resources"] for part in parts) == 42
    assert sum(part.counts["outcome:denied"] for part in parts) == 1


# --- lint and serve -------------------------------------------------------------------------


def test_lint_without_any_node_template_is_an_error(capsys, tmp_path):
    code, _, err = run(capsys, "validate-nodetemplates", str(write(tmp_path, "p.yaml", GOOD_POD)))
    assert code == 2
    assert "no NodeTemplate found" in err and "quickq-guard check" in err


def test_serve_reports_a_port_in_use_before_starting(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "webhook.cli", "serve", "--host", "127.0.0.1", "--port",
             str(port), "--cert", str(tmp_path / "tls.crt"), "--key", str(tmp_path / "k")],
            capture_output=True, text=True, check=False, timeout=60, cwd=tmp_path)
    assert done.returncode == 3
    assert f"cannot listen on 127.0.0.1:{port}: the port is already in use" in done.stderr
    assert "startup" not in done.stderr.lower()
    assert not (tmp_path / "certs").exists()  # nothing was made before the check


@pytest.mark.parametrize(("args", "problem"), [
    (["serve", "--port", "99999"], "argument --port: a port is 1 to 65535, not 99999"),
    (["serve", "--port", "-1"], "argument --port: a port is 1 to 65535, not -1"),
    (["serve", "--probe-port", "http"],
     "argument --probe-port: expected a port number, got 'http'"),
    (["audit", "--once", "--metrics-port", "70000"],
     "argument --metrics-port: a port is 0 to 65535, not 70000"),
])
def test_a_port_out_of_range_is_a_usage_error(capsys, args, problem):
    with pytest.raises(SystemExit) as stopped:
        main(args)
    assert stopped.value.code == 2 and problem in capsys.readouterr().err


def test_serve_on_an_address_not_of_this_machine_says_to_pass_another_host(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "serve", "--host", "192.0.2.1", "--port", "18443",
         "--cert", str(tmp_path / "tls.crt"), "--key", str(tmp_path / "k")],
        capture_output=True, text=True, check=False, timeout=60, cwd=tmp_path)
    assert done.returncode == 3
    assert "cannot listen on 192.0.2.1:18443: Cannot assign requested address; pass the " \
           "--host of one of this machine's addresses" in done.stderr


def test_a_low_port_without_the_right_to_bind_it_says_what_to_do(monkeypatch):
    from webhook.cli import serve

    def refused(self: socket.socket, address: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(socket.socket, "bind", refused)
    assert serve.port_problem("0.0.0.0", 443, "--port") == (
        "Permission denied; pass a --port of 1024 or more, or give the process the capability "
        "to bind low ports (CAP_NET_BIND_SERVICE)")
