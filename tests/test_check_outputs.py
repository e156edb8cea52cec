"""`check --output-file` and several reports in one run (`-o table -o sarif=results.sarif`):
each report is the one a run with that format alone writes."""

from __future__ import annotations

import json
import re

from builders import run_cli as run

BAD = "examples/bad/pod.yaml"


def _timeless(text: str) -> str:
    return re.sub(r'"seconds":\d+', '"seconds":0', text)


def test_output_file(capsys, tmp_path):
    report = tmp_path / "report.json"
    code, out, _ = run(capsys, "check", "-o", "json", "--output-file", str(report), BAD)
    assert code == 1 and out == ""
    alone = run(capsys, "check", "-o", "json", BAD)[1]
    assert report.read_text() == alone


def test_several_outputs_in_one_run(capsys, tmp_path):
    sarif, gitlab = tmp_path / "results.sarif", tmp_path / "quality.json"
    code, out, _ = run(capsys, "check", "-o", "table", "-o", f"sarif={sarif}",
                       "-o", f"gitlab={gitlab}", BAD)
    assert code == 1
    assert out == run(capsys, "check", BAD)[1]  # the table, on stdout
    assert sarif.read_text() == run(capsys, "check", "-o", "sarif", BAD)[1]
    assert json.loads(gitlab.read_text()) == json.loads(
        run(capsys, "check", "-o", "gitlab", BAD)[1])


def test_several_outputs_with_workers_match_one_process(capsys, tmp_path):
    one, two = tmp_path / "one.yaml", tmp_path / "two.yaml"
    code, alone, _ = run(capsys, "check", "--jobs", "1", "-o", f"policyreport={one}",
                         "-o", "json", "examples/")
    assert code == 1
    code, together, _ = run(capsys, "check", "--jobs", "2", "-o", f"policyreport={two}",
                            "-o", "json", "examples/")
    assert code == 1 and together == alone
    assert _timeless(one.read_text()) == _timeless(two.read_text()) != ""


def test_only_one_report_on_stdout(capsys, tmp_path):
    code, _, err = run(capsys, "check", "-o", "table", "-o", "json", BAD)
    assert code == 2 and "more than one report would go to stdout" in err
    code, _, err = run(capsys, "check", "-o", f"json={tmp_path / 'missing' / 'r.json'}", BAD)
    assert code == 2 and "cannot write" in err and "No such file or directory" in err
