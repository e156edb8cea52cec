"""`check` with worker processes and orjson prints exactly what one process with json prints."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from webhook.cli import commands as cli
from webhook.engine.evaluate import evaluate
from webhook.engine.policy import load_policies
from webhook.manifests import read_paths

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _reference(paths: list[str]) -> tuple[str, str]:
    """The JSON report and the table as the single-process CLI wrote them with json."""
    policies = load_policies()
    decisions = [cli._judge(d, policies) for d in read_paths(paths)]
    table = cli.io.StringIO()
    cli._print_table(decisions, table, color=False)
    return json.dumps(cli.report(decisions), indent=2, default=str) + "\n", table.getvalue()


def _corpus(tmp_path: Path) -> list[str]:
    """Files that judge differently: good, bad, unreadable, non-ASCII, several per file."""
    for source in sorted(EXAMPLES.rglob("*.yaml")):
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
    return [str(tmp_path), str(tmp_path / "missing.yaml")]


@pytest.mark.parametrize("output", ["json", "table"])
@pytest.mark.parametrize("jobs", [1, 2, 3])
def test_workers_print_what_one_process_prints(tmp_path, capsys, monkeypatch, output, jobs):
    paths = _corpus(tmp_path)
    monkeypatch.setattr(cli, "PARALLEL_CHUNK", 4)  # many slices, some without results
    expected_json, expected_table = _reference(paths)
    code = cli.main(["check", "--output", output, "--jobs", str(jobs), *paths])
    out = capsys.readouterr().out
    assert out == (expected_json if output == "json" else expected_table)
    assert code == 2  # broken.yaml, dup.yaml and missing.yaml cannot be judged


def test_default_jobs_use_workers_only_for_many_files(tmp_path, monkeypatch):
    paths = _corpus(tmp_path)
    started = []
    real_pool = cli.mp.get_context("fork").Pool

    class Context:
        def Pool(self, workers):  # multiprocessing's name
            started.append(workers)
            return real_pool(workers)

    monkeypatch.setattr(cli.mp, "get_context", lambda method: Context())
    render = cli._Render("json", False)
    cli.judge_paths(paths, load_policies(), 0, render)
    assert started == []  # fewer than PARALLEL_MIN_FILES files: one process
    monkeypatch.setattr(cli, "PARALLEL_MIN_FILES", 1)
    monkeypatch.setattr(cli, "PARALLEL_CHUNK", 4)
    monkeypatch.setattr(cli, "_cpus", lambda: 2)
    cli.judge_paths(paths, load_policies(), 0, render)
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
    assert cli.dumps_json(value) == json.dumps(value, indent=2, default=str)


def test_report_rows_with_user_floats_fall_back_to_json():
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "p"}},
           "spec": {"containers": [{"name": "c", "image": "r/c:1",
                                    "livenessProbe": {"exec": {"command": ["true"]},
                                                      "timeoutSeconds": math.nan}}]}}
    report = cli.report([evaluate(obj, load_policies())])
    assert cli.dumps_json(report) == json.dumps(report, indent=2, default=str)
