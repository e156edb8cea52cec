"""YAML bombs are refused before anything converts them: alias expansion is bounded with
Kubernetes' own rule, nesting depth is bounded through aliases, an anchor may not hold
itself, and a policy file's `params` obey the same bounds at load. The CLI exits 2 naming
the file and line, well under 1 GB, never crashing (how long it takes:
benchmarks/hostile_load.py)."""

from __future__ import annotations

import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from webhook import PolicyError, load_policies
from webhook.manifests import read_text

HEAD = ("apiVersion: serving.kserve.io/v1beta1\nkind: InferenceService\n"
        "metadata: {name: x, namespace: default}\nspec:\n  predictor:\n"
        "    model: {modelFormat: {name: sklearn}, storageUri: 's3://models/x'}\n")
READS_OBJECT = {"id": "reads-object", "description": "reads the whole object",
                "type": "validate", "action": "enforce", "scope": "object",
                "validations": [{"expression": "string(object).size() > 0",
                                 "message": "m"}]}


def laughs(levels: int = 9, indent: str = "  ") -> str:
    """A few hundred bytes that stand for 9**levels strings."""
    lines = [f"{indent}a0: &a0 [" + ", ".join(["lol"] * 9) + "]"]
    lines += [f"{indent}a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]"
              for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def chain(levels: int = 40, nesting: int = 500) -> str:
    """Each anchor nests the previous one `nesting` levels deeper: 20,000 levels from 40 KB,
    with few enough copies to pass the alias rule; CEL's conversion crashed on it."""
    lines = ["  a0: &a0 x"]
    lines += [f"  a{i}: &a{i} " + "[" * nesting + f"*a{i - 1}" + "]" * nesting
              for i in range(1, levels)]
    return "\n".join(lines) + "\n"


BOMBS = {  # text, problem, and the lines the anchor named may be on
    "laughs": (HEAD + laughs(), "refused as an alias bomb", range(7, 16)),
    "deep": (HEAD + chain(), "more than 1000 levels deep", range(7, 47)),
    "itself": (HEAD + "  again: &s {x: [*s]}\n", "an anchor holds an alias of itself", [7]),
}


def _limit_memory() -> None:
    # 1 GiB for Python, and 3 GiB of address space the Go runtime of the CEL library reserves
    # but does not use (VmSize 1.7 GB once loaded, RSS some MiB): a bomb expanded would pass
    # both by far.
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "webhook.cli", "check", *args],
                          capture_output=True, text=True, check=False, timeout=60,
                          preexec_fn=_limit_memory)


@pytest.fixture(scope="module")
def policies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("reads-object")
    (folder / "reads-object.yaml").write_text(yaml.safe_dump(READS_OBJECT))
    return folder


@pytest.mark.parametrize("name", list(BOMBS))
def test_a_bomb_is_exit_2_naming_file_and_line(tmp_path: Path, policies: Path,
                                               name: str) -> None:
    text, problem, lines = BOMBS[name]
    bomb = tmp_path / f"{name}.yaml"
    bomb.write_text(text)
    done = _check("--no-default-policies", "--policies", str(policies), str(bomb))
    assert done.returncode == 2, done.stderr[-2000:]
    where = re.search(rf"{re.escape(str(bomb))}:(\d+):\d+: invalid YAML: ", done.stderr)
    assert where is not None and int(where[1]) in lines, done.stderr
    assert problem in done.stderr
    assert "Traceback" not in done.stderr


def test_the_other_files_of_the_directory_are_still_judged(tmp_path: Path,
                                                           policies: Path) -> None:
    for name, (text, _, _) in BOMBS.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    (tmp_path / "fine.yaml").write_text(HEAD)
    done = _check("--no-default-policies", "--policies", str(policies), "--output", "json",
                  str(tmp_path))
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"{tmp_path / 'fine.yaml'}:1" in done.stdout
    assert done.stdout.count("invalid YAML") >= len(BOMBS)


@pytest.mark.parametrize("name", list(BOMBS))
def test_both_readers_refuse_it_at_the_same_place(name: str) -> None:
    text = BOMBS[name][0]
    fast = [(d.source, d.error) for d in read_text(text, "m.yaml")]
    # An explicit tag sends the stream to PyYAML's composer instead of the fast reader.
    slow = [(d.source, d.error) for d in read_text(text.replace("spec:\n", "spec: !!map\n"),
                                                   "m.yaml")]
    assert fast == slow
    assert len(fast) == 1 and fast[0][1].startswith("invalid YAML: ")


def test_ordinary_anchors_and_merges_are_still_read() -> None:
    text = ("base: &b {cpu: 1, memory: 2}\n" + "".join(
        f"m{i}:\n  <<: *b\n  extra: {i}\n" for i in range(300)))
    [document] = read_text(text, "m.yaml")
    assert document.error == "" and document.obj["m299"] == {"cpu": 1, "memory": 2,
                                                             "extra": 299}


@pytest.mark.parametrize("name", ["laughs", "deep", "itself"])
def test_a_policy_file_s_params_obey_the_same_bounds(tmp_path: Path, name: str) -> None:
    body = {"laughs": laughs(indent="  "), "deep": chain(),
            "itself": "  again: &s {x: [*s]}\n"}[name]
    policy = tmp_path / "bomb.yaml"
    policy.write_text(yaml.safe_dump({k: v for k, v in READS_OBJECT.items()}) + "params:\n"
                      + body)
    with pytest.raises(PolicyError, match=f"{policy}: invalid YAML: .*line") as error:
        load_policies(tmp_path)
    assert BOMBS[name][1] in str(error.value)
    done = _check("--policies", str(tmp_path), str(policy))
    assert done.returncode == 2 and str(policy) in done.stderr
