"""Policies chosen per run: repeated --policies beside the shipped ones, --no-default-policies,
--policy/--skip-policy, check --mode, and .quickq-guard.yaml found at the repository root;
flags win over the config file, which wins over the defaults."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from builders import run_cli as run

from webhook.loader import load_policies

BAD = str(Path(__file__).resolve().parents[1] / "examples/bad/pod.yaml")
SHIPPED = [p.id for p in load_policies().policies]


def policy(folder: Path, id_: str, label: str, action: str = "enforce") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{id_}.yaml").write_text(textwrap.dedent(f"""\
        id: {id_}
        description: d
        type: validate
        action: {action}
        rule: require-labels
        params: {{labels: [{label}]}}
        """))
    return folder


def judged(capsys, *args: str) -> tuple[int, dict[str, str], str]:
    """The exit code, each policy's status on examples/bad/pod.yaml, stderr."""
    code, out, err = run(capsys, "check", "-o", "json", *args, BAD)
    report = json.loads(out) if out else {"results": []}
    return code, {r["policy"]: r["result"] for r in report["results"]}, err


def test_repeated_policies_all_load_beside_the_shipped_ones(capsys, tmp_path):
    one = policy(tmp_path / "one", "team-label", "team")
    two = policy(tmp_path / "two", "cost-label", "cost-center")
    code, results, _ = judged(capsys, "--policies", str(one), "--policies", str(two))
    assert code == 1
    assert set(results) == {*SHIPPED, "team-label", "cost-label"}
    assert results["team-label"] == results["cost-label"] == "fail"
    _, alone, _ = judged(capsys, "--no-default-policies", "--policies", str(one),
                         "--policies", str(two))
    assert set(alone) == {"team-label", "cost-label"}


def test_a_policy_with_a_shipped_id_replaces_it(capsys, tmp_path):
    mine = policy(tmp_path / "mine", "require-labels", "team", action="enforce")
    _, results, _ = judged(capsys, "--policies", str(mine))
    assert set(results) == set(SHIPPED)
    code, report, _ = run(capsys, "check", "-o", "json", "--policies", str(mine),
                          "--policy", "require-labels", BAD)
    assert code == 1  # enforced now: the pod has no team label
    [result] = json.loads(report)["results"]
    assert "team" in json.dumps(result) and result["action"] == "enforce"


def test_policy_and_skip_policy(capsys):
    code, results, _ = judged(capsys, "--policy", "disallow-latest-tag",
                              "--policy", "require-labels")
    assert set(results) == {"disallow-latest-tag", "require-labels"} and code == 1
    _, results, _ = judged(capsys, "--skip-policy", "disallow-latest-tag")
    assert set(results) == set(SHIPPED) - {"disallow-latest-tag"}
    code, _, err = judged(capsys, "--skip-policy", "no-such-policy")
    assert code == 2 and "no policy with id 'no-such-policy'" in err


def test_check_mode_dry_run(capsys):
    code, results, _ = judged(capsys, "--mode", "dry-run", "--policy", "disallow-latest-tag")
    # dry-run denies nothing: the denial is reported as would-deny
    assert code == 0 and results == {"disallow-latest-tag": "fail"}
    _, out, _ = run(capsys, "check", "--mode", "dry-run", "--policy", "disallow-latest-tag",
                    BAD)
    assert "WOULD-DENY" in out


def test_config_file_at_the_repository_root(capsys, tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".quickq-guard.yaml").write_text(
        "mode: dry-run\npolicies:\n  disallow-root-user: {action: 'off'}\n")
    deep = tmp_path / "deploy" / "prod"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    code, out, err = run(capsys, "check", "--policy", "disallow-latest-tag",
                         "--policy", "disallow-root-user", BAD)
    assert code == 0 and "WOULD-DENY" in out  # the file's mode
    assert f"config: {tmp_path / '.quickq-guard.yaml'}" in err
    _, results, _ = judged(capsys, "--policy", "disallow-root-user")
    assert results == {"disallow-root-user": "skip"}  # the file's action: off
    # flags win over the file
    assert run(capsys, "check", "--mode", "enforce", "--policy", "disallow-latest-tag",
               BAD)[0] == 1
    # --config names another file; the one found is not read
    other = tmp_path / "other.yaml"
    other.write_text("mode: enforce\n")
    assert run(capsys, "check", "--config", str(other), "--policy", "disallow-latest-tag",
               BAD)[0] == 1


def test_config_file_is_not_looked_for_above_the_repository(capsys, tmp_path, monkeypatch):
    (tmp_path / ".quickq-guard.yaml").write_text("mode: dry-run\n")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    monkeypatch.chdir(repo)
    assert run(capsys, "check", "--policy", "disallow-latest-tag", BAD)[0] == 1


def test_policies_may_name_one_policy_file(capsys, tmp_path):
    one = policy(tmp_path / "one", "team-label", "team") / "team-label.yaml"
    code, results, _ = judged(capsys, "--no-default-policies", "--policies", str(one))
    assert code == 1 and results == {"team-label": "fail"}
    code, _, err = run(capsys, "check", "--policies", str(tmp_path / "missing.yaml"), BAD)
    assert code == 2
    assert f"{tmp_path / 'missing.yaml'}: no such policy file or directory" in err


def test_a_watched_policy_file_is_reloaded_when_it_changes(tmp_path):
    from webhook.server.reload import PolicySource

    one = policy(tmp_path, "team-label", "team") / "team-label.yaml"
    source = PolicySource(str(one), None)
    before = source.fingerprint()
    assert source.load().full.policies[0].id == "team-label"
    one.write_text(one.read_text().replace("team", "owner"))
    assert source.fingerprint() != before
