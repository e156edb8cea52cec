"""Input read as kubectl reads it: a .json file is strict JSON (a trailing comma is an error
naming the file and line), a typo of a judged kind is an error, not a skip, and with --strict
so is a kind neither judged nor served by Kubernetes."""

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


def test_strict_makes_unknown_kinds_an_error(capsys, tmp_path):
    stream = tmp_path / "mixed.yaml"
    stream.write_text("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n---\n"
                      "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n---\n"
                      "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n"
                      "metadata: {name: n}\n")
    code, out, err = run(capsys, "check", str(stream))
    assert code == 0 and "3 skipped" in out  # counted (a skip) by default, not listed
    code, out, err = run(capsys, "check", "--show-skipped", str(stream))
    assert code == 0 and "Widget" in out  # listed with --show-skipped
    code, _, err = run(capsys, "check", "--strict", str(stream))
    assert code == 2
    assert f"{stream}:1:1 Widget w: kind Widget (example.com) is not a kind Kubernetes " \
        "serves or quickq-guard knows (--strict)" in err
    assert "Service s" not in err and "NetworkPolicy n" not in err  # built-in: still skipped
    config = tmp_path / "config.yaml"  # a custom kind the config names is known
    config.write_text("customKinds:\n  - {group: example.com, kind: Widget, "
                      "podTemplates: [spec.template]}\n")
    code, _, err = run(capsys, "check", "--strict", "--config", str(config), str(stream))
    assert "Widget w: kind Widget" not in err
