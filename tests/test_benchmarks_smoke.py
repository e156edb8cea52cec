"""The benchmark scripts still run (tiny sizes: the figures themselves are not tested)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import cli_bench  # noqa: E402
import corpus  # noqa: E402
import engine_bench  # noqa: E402


def test_the_corpus_is_deterministic_and_mixed(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    assert corpus.write(first, 120) == corpus.write(second, 120)
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir())
    assert all((first / n).read_bytes() == (second / n).read_bytes() for n in names)
    kinds = {kind for kind, _ in corpus.objects(400)}
    assert kinds == set(corpus.MIX)


def test_engine_bench_prints_rates_per_kind(capsys):
    assert engine_bench.main(["--count", "60", "--seconds", "0.01", "--repeat", "1",
                              "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    kinds = [row["kind"] for row in figures["rows"]]
    assert kinds[0].startswith("Pod (") and kinds[-1] == "all (mixed corpus)"
    assert all(row["evals_per_s"] > 0 for row in figures["rows"])


def test_cli_bench_times_the_cli(tmp_path, capsys):
    assert cli_bench.main(["--count", "40", "--runs", "1", "--out", str(tmp_path)]) == 0
    figures = json.loads((tmp_path / "cli_bench.json").read_text())
    assert figures["files"] == 40
    assert figures["quickq_guard"]["resources"] == 40
    assert figures["quickq_guard"]["wall_s"] > 0
    assert "checkov" not in figures
    assert "quickq-guard check -o json" in capsys.readouterr().out


def test_cel_bench_reports_both_targets(capsys):
    import cel_bench

    assert cel_bench.main(["--seconds", "0.01", "--repeat", "1", "--policies", "5",
                           "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["policies_loaded"] == 5 and figures["load_s"] > 0
    assert figures["cel_policy_evals_per_s"] > 0 and figures["containers"] == 2


def test_cel_runtimes_compares_the_installed_runtime(capsys):
    import cel_runtimes

    assert cel_runtimes.main(["--seconds", "0.01", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert f"conformance: {len(cel_runtimes.CONFORMANCE)}/{len(cel_runtimes.CONFORMANCE)}" in out
    assert "error for 'container.image.startsWith(1)': compile: " in out


def test_engine_ab_times_two_checkouts(tmp_path, capsys):
    import shutil

    import engine_ab

    root = BENCHMARKS.parent
    shutil.copytree(root / "webhook", tmp_path / "webhook")
    shutil.copytree(root / "policies", tmp_path / "policies")
    assert engine_ab.main([str(tmp_path), "--rounds", "1", "--seconds", "0.01"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("default policies: before 11, after 11")
    assert all("after/before" in line for line in lines[1:]) and len(lines) == 3


def test_stream_bench_times_every_format_on_one_stream(tmp_path, capsys):
    import stream_bench

    assert stream_bench.main(["--count", "30", "--formats", "table", "sarif", "--jobs", "1",
                              "--out", str(tmp_path)]) == 0
    figures = json.loads((tmp_path / "stream_bench.json").read_text())
    assert figures["pods"] == 30 and set(figures["runs"]) == {"table", "sarif"}
    assert all(run["exit_code"] in (0, 1) for run in figures["runs"].values())
    stream = (tmp_path / "pods-30.yaml").read_text()
    assert stream.count("\nkind: Pod\n") + stream.startswith("kind: Pod\n") == 30
    assert json.loads((tmp_path / "stream-sarif.out").read_text())["version"] == "2.1.0"
    assert "peak RSS" in capsys.readouterr().out
