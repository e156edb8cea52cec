"""The benchmark scripts still run (tiny sizes: the figures themselves are not tested).

Each runs as its own process, as a user runs it: tests import nothing from benchmarks/.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def run(script: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), *args],
                          capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def kinds_in(directory: Path) -> set[str]:
    return {document["kind"] for path in directory.iterdir()
            for document in yaml.safe_load_all(path.read_text()) if document}


def test_the_corpus_is_deterministic_and_mixed(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    run("corpus.py", str(first), "--count", "120")
    run("corpus.py", str(second), "--count", "120")
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir()) and len(names) == 120
    assert all((first / n).read_bytes() == (second / n).read_bytes() for n in names)
    assert {"Pod", "Deployment", "NodeTemplate", "Service"} <= kinds_in(first)


def test_engine_bench_prints_rates_per_kind():
    figures = json.loads(run("engine_bench.py", "--count", "60", "--seconds", "0.01",
                             "--repeat", "1", "--json"))
    kinds = [row["kind"] for row in figures["rows"]]
    assert kinds[0].startswith("Pod (") and "all (mixed corpus)" in kinds
    # The same figures with 1,000 PolicyExceptions loaded, in the same run.
    assert kinds[-1] == "all (mixed corpus) with 1,000 exceptions"
    assert all(row["evals_per_s"] > 0 for row in figures["rows"])
    assert "check's path: Pod (examples/good/pod.yaml) with 1,000 exceptions" in kinds


def test_cli_bench_times_the_cli(tmp_path):
    out = run("cli_bench.py", "--count", "40", "--runs", "1", "--out", str(tmp_path))
    figures = json.loads((tmp_path / "cli_bench.json").read_text())
    assert figures["files"] == 40
    assert figures["quickq_guard"]["resources"] == 40
    assert figures["quickq_guard"]["wall_s"] > 0
    assert "checkov" not in figures
    assert "quickq-guard check -o json" in out


def test_cel_bench_reports_both_targets():
    figures = json.loads(run("cel_bench.py", "--seconds", "0.01", "--repeat", "1",
                             "--policies", "5", "--json"))
    assert figures["policies_loaded"] == 5 and figures["load_s"] > 0
    assert figures["cel_policy_evals_per_s"] > 0 and figures["containers"] == 2


def test_cel_runtimes_compares_the_installed_runtime():
    out = run("cel_runtimes.py", "--seconds", "0.01", "--repeat", "1")
    conformance = next(line for line in out.splitlines() if "conformance: " in line)
    passed, total = conformance.split("conformance: ")[1].split()[0].split("/")
    assert passed == total and int(total) > 0
    assert "error for 'container.image.startsWith(1)': compile: " in out


def test_small_file_times_check_beside_its_floors():
    out = run("small_file.py", "--runs", "1", "--floor")
    for name in ("this", "floor: python", "floor: + libraries", "floor: + libraries + pydantic"):
        assert f"\n{name}: median " in f"\n{out}", out
    assert "runs of `check examples/good/deployment.yaml`" in out


def test_engine_ab_times_two_checkouts(tmp_path):
    root = BENCHMARKS.parent
    shutil.copytree(root / "webhook", tmp_path / "webhook")
    shutil.copytree(root / "policies", tmp_path / "policies")
    lines = run("engine_ab.py", str(tmp_path), "--rounds", "1", "--seconds", "0.01").splitlines()
    assert lines[0].startswith("default policies: before 14, after 14")
    # typical Pod, review Pod as written and from the API server, and check's path
    assert all("after/before" in line for line in lines[1:]) and len(lines) == 5


def test_stream_bench_times_every_format_on_one_stream(tmp_path):
    out = run("stream_bench.py", "--count", "30", "--formats", "table", "sarif", "--jobs", "1",
              "--out", str(tmp_path))
    figures = json.loads((tmp_path / "stream_bench.json").read_text())
    assert figures["pods"] == 30 and set(figures["runs"]) == {"table", "sarif"}
    assert all(run["exit_code"] in (0, 1) for run in figures["runs"].values())
    stream = (tmp_path / "pods-30.yaml").read_text()
    assert stream.count("\nkind: Pod\n") + stream.startswith("kind: Pod\n") == 30
    assert json.loads((tmp_path / "stream-sarif.out").read_text())["version"] == "2.1.0"
    assert "peak RSS" in out


def test_webhook_ab_times_two_checkouts_and_the_bare_endpoint(tmp_path):
    root = BENCHMARKS.parent
    shutil.copytree(root / "webhook", tmp_path / "webhook")
    shutil.copytree(root / "policies", tmp_path / "policies")
    out = run("webhook_ab.py", str(tmp_path), "--rounds", "1", "--duration", "0.3")
    rows = [line for line in out.splitlines() if line.rstrip().endswith(tuple("0123456789"))]
    assert [row.split()[0] for row in rows[:2]] == ["bare", "this"]
    assert rows[2].startswith(str(tmp_path)[:40])
    assert all(float(row.split()[-4]) > 0 for row in rows[:3])  # us/review (req/s, p99 after)
    assert out.count("bare endpoint / this =") == 2


def test_hostile_load_prints_each_case():
    figures = json.loads(run("hostile_load.py", "--quick", "--json"))
    cases = {row["case"].split(" (")[0]: row for row in figures["rows"]}
    assert cases["messageExpression showing an env value"]["leaks"] == 0
    assert all(row["exit"] == 2 for name, row in cases.items() if name.startswith("check:"))
    assert all(row.get("status", 200) == 200 for row in figures["rows"])


def test_html_report_prints_the_page_s_size_and_time_to_interactive():
    figures = json.loads(run("html_report.py", "--count", "60", "--runs", "1", "--json"))
    assert figures["objects"] == 60 and figures["findings_rows"] > 10
    assert 0 < figures["bytes"] < 3 * 1024 * 1024 and figures["bytes_ok"]
    if shutil.which("chromium") and shutil.which("chromedriver"):
        assert figures["interactive_ms_median"] > 0
    else:
        assert "scripts/install-browser" in figures["why_no_time"]


def peer_policies() -> tuple[list[dict], list[dict]]:
    folder = BENCHMARKS / "peers" / "policies"
    return ([d for d in yaml.safe_load_all((folder / "gatekeeper.yaml").read_text()) if d],
            [d for d in yaml.safe_load_all((folder / "kyverno.yaml").read_text()) if d])


def test_the_peers_policies_are_the_seven_quickq_guard_loads():
    gatekeeper, kyverno = peer_policies()
    constraints = {d["metadata"]["name"] for d in gatekeeper
                   if d["apiVersion"].startswith("constraints.")}
    templates = {d["spec"]["crd"]["spec"]["names"]["kind"] for d in gatekeeper
                 if d["kind"] == "ConstraintTemplate"}
    assert templates == {d["kind"] for d in gatekeeper
                         if d["apiVersion"].startswith("constraints.")}
    seven = {"require-requests", "disallow-latest-tag", "disallow-root-user",
             "require-gpu-limits", "no-plaintext-secrets", "liveness-probe-tolerance",
             "require-labels"}
    assert constraints == seven == {d["metadata"]["name"] for d in kyverno}
    policies = Path(__file__).resolve().parent.parent / "policies"
    assert all(yaml.safe_load((policies / f"{p}.yaml").read_text())["type"] == "validate"
               for p in seven)


def test_peers_compares_verdicts_object_by_object(tmp_path):
    """Stand-in peers: a gator that finds nothing, and a Kyverno CLI that prints its warnings
    and a report failing an object that is not in the corpus. Every failure quickq-guard finds
    is a difference, named by policy with an example file."""
    fake = tmp_path / "gator"
    fake.write_text(f"#!{sys.executable}\nprint('[]')\n")
    fake.chmod(0o755)
    report = ("Warning: ClusterPolicy is deprecated\n"
              "apiVersion: openreports.io/v1alpha1\nkind: ClusterReport\nresults:\n"
              "- policy: require-labels\n  result: fail\n  resources:\n"
              "  - {kind: Pod, namespace: nowhere, name: made-up}\n")
    kyverno = tmp_path / "kyverno"
    kyverno.write_text(f"#!{sys.executable}\nprint({report!r})\n")
    kyverno.chmod(0o755)
    out = run("peers.py", "--count", "40", "--rounds", "1", "--gator", str(fake),
              "--kyverno", str(kyverno), "--out", str(tmp_path / "out"))
    figures = json.loads((tmp_path / "out" / "peers.json").read_text())
    assert figures["files"] == 40 and figures["rounds"] == 1
    assert 0 < figures["gator"]["agreement"] < 1
    assert figures["kyverno"]["agreement"] == figures["gator"]["agreement"]
    assert "fails by quickq-guard only on" in out
    assert "gator only" not in out and "kyverno only" not in out


@pytest.mark.parametrize("peer", ["gator", "kyverno"])
def test_peers_agree_with_the_built_peer(tmp_path, peer):
    """With the peer built (benchmarks/peers.py builds it), its policies judge as
    quickq-guard's do on every object of a small corpus."""
    binary = BENCHMARKS / "out" / "peers" / "bin" / peer
    if not binary.exists():
        pytest.skip(f"{peer} is not built: run benchmarks/peers.py --only {peer} once")
    out = run("peers.py", "--count", "300", "--rounds", "1", "--only", peer,
              f"--{peer}", str(binary), "--out", str(tmp_path))
    assert f"agreement with {peer}:" in out, out
    assert "(100.0%) get the same failing policies" in out, out
