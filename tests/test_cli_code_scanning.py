"""What code scanning and merge requests read: SARIF rules ranked and linked as GitHub shows
them, and GitLab's code quality report (`check -o gitlab`)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from builders import run_cli as run
from test_cli_formats import sarif_schema

from webhook.loader import load_policies

ROOT = Path(__file__).resolve().parents[1]
BAD = "examples/bad/pod.yaml"


def rules_of(out: str) -> dict[str, dict]:
    return {rule["id"]: rule for rule in json.loads(out)["runs"][0]["tool"]["driver"]["rules"]}


def test_sarif_rules_carry_security_severity_and_full_descriptions(capsys):
    code, out, _ = run(capsys, "check", "-o", "sarif", BAD)
    assert code == 1
    jsonschema.Draft4Validator(sarif_schema()).validate(json.loads(out))
    rules = rules_of(out)
    by_action = {p.id: p.action for p in load_policies().policies}
    expected = {"enforce": "8.0", "warn": "5.0", "audit": "2.0", "off": "0.0"}
    for policy, action in by_action.items():
        properties = rules[policy]["properties"]
        assert properties["security-severity"] == expected[action], policy
        assert "security" in properties["tags"]
        float(properties["security-severity"])  # GitHub reads a number in a string
    requests = rules["require-requests"]
    assert requests["shortDescription"]["text"] == \
        "Every container declares cpu and memory requests."
    full = requests["fullDescription"]["text"]
    assert full.startswith("Every container declares cpu and memory requests; without them "
                           "the scheduler overcommits nodes")
    assert "the webhook denies what violates it" in full
    assert "helpUri" not in requests  # no docs address given


def test_sarif_help_uri_is_the_policys_section_of_the_docs(capsys):
    _, out, _ = run(capsys, "check", "-o", "sarif", "--docs-url",
                    "https://docs.example.com/quickq-guard/", BAD)
    rules = rules_of(out)
    assert rules["disallow-latest-tag"]["helpUri"] == \
        "https://docs.example.com/quickq-guard/policies/#disallow-latest-tag"
    # every shipped policy has that section: an anchor in docs/policies.md
    page = (ROOT / "docs/policies.md").read_text()
    for policy in load_policies().policies:
        assert f'<a id="{policy.id}"></a>' in page, policy.id


def test_gitlab_code_quality(capsys, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: Pod\nmetadata: [\n")
    code, out, _ = run(capsys, "check", "-o", "gitlab", BAD, str(broken))
    assert code == 2
    issues = json.loads(out)
    assert issues
    for issue in issues:
        assert set(issue) == {"description", "check_name", "fingerprint", "severity",
                              "location"}
        assert issue["severity"] in ("info", "minor", "major", "critical", "blocker")
        assert set(issue["location"]) == {"path", "lines"}
        assert issue["location"]["lines"]["begin"] >= 1
    assert len({issue["fingerprint"] for issue in issues}) == len(issues)
    latest = next(i for i in issues if i["check_name"] == "disallow-latest-tag")
    assert latest["severity"] == "critical" and latest["location"]["path"] == BAD
    lines = Path(BAD).read_text().splitlines()
    assert "image:" in lines[latest["location"]["lines"]["begin"] - 1]  # the field's line
    [invalid] = [i for i in issues if i["check_name"] == "invalid-manifest"]
    assert invalid["severity"] == "blocker" and invalid["location"]["path"] == str(broken)
    audit = [i for i in issues if i["check_name"] == "require-labels"]
    assert audit and all(i["severity"] == "info" for i in audit)


def test_gitlab_fingerprint_survives_a_move(capsys, tmp_path):
    manifest = tmp_path / "pod.yaml"
    text = Path(BAD).read_text()
    manifest.write_text(text)
    _, before, _ = run(capsys, "check", "-o", "gitlab", str(manifest))
    manifest.write_text("# a comment moves every line down\n" + text)
    _, after, _ = run(capsys, "check", "-o", "gitlab", str(manifest))
    moved = json.loads(after)
    assert [i["fingerprint"] for i in json.loads(before)] == [i["fingerprint"] for i in moved]
    assert [i["location"]["lines"]["begin"] for i in json.loads(before)] != \
        [i["location"]["lines"]["begin"] for i in moved]


def test_gitlab_of_nothing_is_an_empty_list(capsys, monkeypatch):
    code, out, _ = run(capsys, "check", "-o", "gitlab", "--allow-empty", "-", stdin="",
                       monkeypatch=monkeypatch)
    assert (code, json.loads(out)) == (0, [])
