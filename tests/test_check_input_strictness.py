"""Input read as kubectl reads it: a .json file is strict JSON (a trailing comma is an error
naming the file and line), and a typo of a judged kind is an error, not a skip."""

from __future__ import annotations

import json

from builders import run_cli as run

POD_JSON = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "labels": {"app": "p"}},
            "spec": {"securityContext": {"runAsNonRoot": True}, "containers": [
                {"name": "app", "image": "registry.example.com/app:1.0",
                 "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}


def test_a_trailing_comma_in_a_json_file_is_an_error_naming_its_line(capsys, tmp_path):
    good = tmp_path / "pod.json"
    good.write_text(json.dumps(POD_JSON, indent=2))
    assert run(capsys, "check", str(good))[0] == 0
    text = json.dumps(POD_JSON, indent=2)
    broken = tmp_path / "broken.json"
    broken.write_text(text.replace('"name": "p",', '"name": "p",,', 1))
    trailing = tmp_path / "trailing.json"
    trailing.write_text(text.replace('"app": "p"\n', '"app": "p",\n', 1))
    line = text[:text.index('"app": "p"\n')].count("\n") + 1
    code, _, err = run(capsys, "check", str(trailing))
    assert code == 2
    assert f"{trailing}:{line + 1}:" in err and "invalid JSON" in err  # at the `}` after it
    assert "no trailing comma" in err
    # the same text in a .yaml file is YAML, which allows it
    as_yaml = tmp_path / "trailing.yaml"
    as_yaml.write_text(trailing.read_text())
    assert run(capsys, "check", str(as_yaml))[0] == 0
    assert run(capsys, "check", str(broken))[0] == 2


def test_a_typo_of_a_judged_kind_is_an_error(capsys, tmp_path):
    typo = tmp_path / "typo.yaml"
    typo.write_text("apiVersion: apps/v1\nkind: Deploymnet\nmetadata: {name: web}\n")
    code, _, err = run(capsys, "check", str(typo))
    assert code == 2
    assert "did you mean Deployment?; fix the kind" in err
    other = tmp_path / "service.yaml"
    other.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: web}\n")
    assert run(capsys, "check", str(other))[0] == 0  # a kind not judged stays a skip
