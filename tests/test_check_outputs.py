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


KUBEAI = "tests/ml_workloads/kubeai-model.yaml"  # its resource profile is not judged here
NOT_JUDGED = "come from KubeAI's configuration, not this object: not judged here"


def test_what_is_not_judged_is_in_every_report_that_lists_results(capsys):
    """A part of an object quickq-guard does not judge is a `skip` result of no policy in
    the reports that list every result, counted in their summaries; the reports of things
    to fix (SARIF, GitHub, GitLab) leave it out, as they leave out objects not judged."""
    code, out, _ = run(capsys, "check", "-o", "json", KUBEAI)
    assert code == 1  # its `latest` image and its token in env
    report = json.loads(out)
    notes = [row for row in report["results"] if row["policy"] is None]
    assert [(row["result"], NOT_JUDGED in row["message"]) for row in notes] == [("skip", True)]
    assert report["summary"]["skip"] == sum(row["result"] == "skip"
                                            for row in report["results"])
    junit = run(capsys, "check", "-o", "junit", KUBEAI)[1]
    assert re.search(r'name="not judged"[^>]*>\s*<skipped message="[^"]*' + NOT_JUDGED, junit)
    assert f'skipped="{report["summary"]["skip"]}"' in junit
    policyreport = run(capsys, "check", "-o", "policyreport", KUBEAI)[1]
    assert re.search(r'"policy":"judged","rule":"judged","result":"skip","message":"[^"]*'
                     + NOT_JUDGED, policyreport)
    assert f'"skip":{report["summary"]["skip"]}' in policyreport
    table = run(capsys, "check", KUBEAI)[1]
    assert f'{report["summary"]["skip"]} skip' in table and NOT_JUDGED in table
    for problems_only in ("sarif", "github", "gitlab"):
        assert NOT_JUDGED not in run(capsys, "check", "-o", problems_only, KUBEAI)[1]
