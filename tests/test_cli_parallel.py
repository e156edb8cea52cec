"""`check` with worker processes, split files and orjson prints exactly what one process with
json prints, in every output format."""

from __future__ import annotations

import json
import math
import multiprocessing
import re
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from webhook import decode
from webhook.cli import judge, main
from webhook.cli.formats import NAMES
from webhook.cli.formats import json as json_format
from webhook.cli.summary import summary
from webhook.engine.evaluate import evaluate
from webhook.engine.results import Decision, Finding, Resource, Result
from webhook.loader import load_policies
from webhook.manifests import Document, read_paths

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _reference(paths: list[str], failing_only: str | None = None) -> str:
    """The JSON report as json.dumps writes it, judged one document at a time."""
    policies = load_policies()
    judged = [judge.Judged(d, judge.judge(d, policies)) for d in read_paths(paths)
              if not d.file.endswith("values.yaml")]
    counts: Counter[str] = Counter()
    for item in judged:
        judge.count(item.decision, counts)
    report = {"results": json_format.rows(judged, failing_only), "summary": summary(counts)}
    return json.dumps(report, indent=2, default=str) + "\n"


def _corpus(tmp_path: Path) -> list[str]:
    """Files that judge differently: good, bad, unreadable, non-ASCII, several per file."""
    for source in sorted([*EXAMPLES.glob("good/*.yaml"), *EXAMPLES.glob("bad/*.yaml")]):
        for copy in range(3):
            (tmp_path / f"{source.parent.name}-{copy}-{source.name}").write_bytes(
                source.read_bytes())
    (tmp_path / "broken.yaml").write_text("a: [unclosed\n")
    (tmp_path / "dup.yaml").write_text("apiVersion: v1\nkind: Pod\nkind: Job\n")
    (tmp_path / "unicode.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: caf\u00e9, labels: {app: \u2603}}\n"
        "spec:\n  containers:\n  - name: \u00e9t\u00e9\n    image: r/x:1\n"
        "    livenessProbe: {exec: {command: [\"\u00e9\", \"\U0001F600\"]},\n"
        "                    timeoutSeconds: .inf}\n",
        encoding="utf-8")
    (tmp_path / "service.json").write_text('{"apiVersion": "v1", "kind": "Service"}')
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "values.yaml").write_text("replicas: 2\n")  # skipped in the walk, with a note
    return [str(tmp_path), str(tmp_path / "missing.yaml")]


@pytest.mark.parametrize("jobs", [2, 3])
def test_workers_print_what_one_process_prints(tmp_path, capsys, monkeypatch, jobs):
    paths = _corpus(tmp_path)
    monkeypatch.setattr(judge, "TASK_BYTES", 600)  # many tasks, big files split, some empty
    assert main(["check", "--output", "json", "--jobs", "1", *paths]) == 2
    assert capsys.readouterr().out == _reference(paths)
    for output in NAMES:
        assert main(["check", "--output", output, "--jobs", "1", *paths]) == 2
        alone = capsys.readouterr()
        code = main(["check", "--output", output, "--jobs", str(jobs), *paths])
        together = capsys.readouterr()
        assert code == 2  # broken.yaml, dup.yaml and missing.yaml cannot be judged
        # A PolicyReport's timestamp and the HTML page's time are the run's second, which two
        # runs may not share.
        assert _any_second(together.out) == _any_second(alone.out), output
        assert together.err == alone.err, output


def _any_second(report: str) -> str:
    """The report with the time of the run (a PolicyReport's, the HTML page's) left out."""
    report = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", "(time)", report)
    return re.sub(r'"timestamp":\{"seconds":\d+', '"timestamp":{"seconds":0', report)


@pytest.mark.parametrize("fail_on", ["deny", "audit"])
def test_quiet_json_is_what_json_dumps_writes_of_the_failing_results(tmp_path, capsys,
                                                                     monkeypatch, fail_on):
    paths = _corpus(tmp_path)
    monkeypatch.setattr(judge, "TASK_BYTES", 600)
    assert main(["check", "-o", "json", "--quiet", "--fail-on", fail_on, "--jobs", "2",
                 *paths]) == 2
    assert capsys.readouterr().out == _reference(paths, fail_on)


def test_workers_hand_their_output_back_and_leave_no_file(tmp_path, capsys, monkeypatch):
    (tmp_path / "corpus").mkdir()
    paths = _corpus(tmp_path / "corpus")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setattr(judge, "TASK_BYTES", 600)
    assert main(["check", "-o", "json", "--jobs", "2", *paths]) == 2
    assert capsys.readouterr().out == _reference(paths)
    assert list(scratch.iterdir()) == []


def test_a_large_file_split_between_workers_keeps_its_lines(tmp_path, capsys, monkeypatch):
    stream = tmp_path / "stream.yaml"
    pods = [(EXAMPLES / "bad" / "pod.yaml").read_text()] * 40
    stream.write_text("---\n".join(pods))
    assert main(["check", "-o", "json", "--jobs", "1", str(stream)]) == 1
    whole = json.loads(capsys.readouterr().out)
    monkeypatch.setattr(judge, "TASK_BYTES", 500)
    assert len(judge.tasks([str(stream)], [], None)) > 5
    assert main(["check", "-o", "json", "--jobs", "2", str(stream)]) == 1
    split = json.loads(capsys.readouterr().out)
    assert split == whole
    lines = sorted({r["resource"]["line"] for r in split["results"]})
    step = pods[0].count("\n") + 1
    first = next(n for n, line in enumerate(pods[0].splitlines(), 1)
                 if line.startswith("apiVersion"))
    assert lines == [first + step * n for n in range(40)]


def test_default_jobs_use_workers_only_for_large_input(tmp_path, monkeypatch):
    paths = _corpus(tmp_path)
    started = []
    real_pool = multiprocessing.get_context("fork").Pool

    class Context:
        def Pool(self, workers):  # multiprocessing's name
            started.append(workers)
            return real_pool(workers)

    monkeypatch.setattr(multiprocessing, "get_context", lambda method: Context())
    monkeypatch.setattr(judge, "_go_started", lambda: False)  # another test may have loaded it
    policies = load_policies()

    def run() -> None:
        work = judge.tasks(paths, [], None)
        list(judge.judge_all(work, policies, len, 0, None))

    run()
    assert started == []  # less than PARALLEL_MIN_BYTES: one process
    monkeypatch.setattr(judge, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(judge, "TASK_BYTES", 600)
    monkeypatch.setattr(judge, "_cpus", lambda: 2)
    run()
    assert started == [2]


@pytest.mark.parametrize("value", [
    {"a": "caf\u00e9 \U0001F600", "b": [1, 2.5, None, True]},
    {"big": 2**70, "neg": -(2**63) - 1},
    {"nan": math.nan, "inf": [math.inf, -math.inf]},
    {1: "int key", "nested": {True: "bool key"}},
    {"bytes": b"\x00\x01", "set": {1}},
    [],
    {},
])
def test_dumps_json_equals_json_dumps(value):
    assert json_format.dumps_json(value) == json.dumps(value, indent=2, default=str)


def test_report_rows_with_user_floats_fall_back_to_json():
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "p"}},
           "spec": {"containers": [{"name": "c", "image": "r/c:1",
                                    "livenessProbe": {"exec": {"command": ["true"]},
                                                      "timeoutSeconds": math.nan}}]}}
    decision = evaluate(decode(obj), load_policies())
    report = json_format.rows([judge.Judged(Document("p.yaml:1"), decision)])
    assert json_format.dumps_json(report) == json.dumps(report, indent=2, default=str)


@pytest.mark.parametrize("value", [math.nan, -math.inf, 2**70, {1: "int key"}, "caf\u00e9"])
def test_report_rows_with_odd_user_values_in_a_patch_are_what_json_writes(value):
    patch = ({"op": "add", "path": "/spec/x", "value": value},)
    finding = Finding("add spec.x", ("spec", "x"), None, patch)
    result = Result("odd-policy", "mutate", "enforce", "patch", (finding,))
    decision = Decision(Resource("v1", "Pod", "", "p"), (result,), True, "patched")
    judged = [judge.Judged(Document("p.yaml:1"), decision)]
    expected = json.dumps(json_format.rows(judged), indent=2, default=str)
    # as the report holds them: indented by 4, without the list's brackets
    assert json_format.rows_bytes(judged).decode() == \
        "  " + expected[2:-2].replace("\n", "\n  ")


def test_with_kubernetes_cel_loaded_the_process_judges_alone(tmp_path, monkeypatch):
    """A process forked once the Go runtime runs in it may hang: with the CEL library loaded
    (a CEL policy compiled), check judges in its own process, and gives the same verdicts."""
    from webhook.engine.cel import kubecel

    paths = _corpus(tmp_path)
    started = []

    class Context:
        def Pool(self, workers):  # multiprocessing's name
            started.append(workers)
            raise AssertionError("forked with Go running")

    monkeypatch.setattr(multiprocessing, "get_context", lambda method: Context())
    monkeypatch.setattr(judge, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(judge, "TASK_BYTES", 600)
    monkeypatch.setattr(judge, "_cpus", lambda: 2)
    kubecel.info()  # loads the library
    policies = load_policies()
    parts = list(judge.judge_all(judge.tasks(paths, [], None), policies, len, 0, None))
    assert started == [] and parts


CEL_POLICY = """\
id: cel-names
description: container names are short and images pinned
type: validate
action: enforce
scope: container
variables:
- name: pinned
  expression: "!container.image.endsWith(':latest') && container.image.contains(':')"
validations:
- expression: size(container.name) < 12 && variables.pinned
  messageExpression: "'container ' + container.name + ' is unpinned or long'"
"""


def test_workers_with_cel_policies_print_what_one_process_prints(tmp_path):
    """With a CEL policy the run still forks its workers (the Go runtime starts only in
    them, after the fork), ends, and prints what one process prints."""
    import subprocess
    import sys

    (tmp_path / "in").mkdir()
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "cel-names.yaml").write_text(CEL_POLICY)
    paths = _corpus(tmp_path / "in")
    probe = ("import runpy, sys\n"
             "from webhook.cli import judge\n"
             "real = judge._forking\n"
             "def counted():\n"
             "    sys.stderr.write('forking\\n')\n"
             "    return real()\n"
             "judge._forking = counted\n"
             "judge.TASK_BYTES = 600  # several tasks of the small corpus\n"
             "sys.argv = ['quickq-guard', *sys.argv[1:]]\n"
             "runpy.run_module('webhook.cli', run_name='__main__')\n")
    runs = {}
    for jobs in ("1", "2"):
        runs[jobs] = subprocess.run(
            [sys.executable, "-c", probe, "check", "--jobs", jobs, "--policies",
             str(tmp_path / "policies"), "-o", "json", *paths],
            capture_output=True, text=True, timeout=300, check=False)
    serial, parallel = runs["1"], runs["2"]
    assert "Traceback" not in parallel.stderr, parallel.stderr[-2000:]
    assert parallel.returncode == serial.returncode == 2, parallel.stderr[-2000:]
    assert parallel.stderr.replace("forking\n", "") == serial.stderr
    assert parallel.stdout == serial.stdout
    assert "cel-names" in parallel.stdout and "is unpinned or long" in parallel.stdout
    assert parallel.stderr.count("forking") == 2  # the throwaway load, then the workers
    assert "forking" not in serial.stderr
