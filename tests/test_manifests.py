"""Reading manifests the way kubectl does (YAML 1.1 through go-yaml v2)."""

from __future__ import annotations

import textwrap

import pytest
from builders import judge, result

from webhook.manifests import read_text


def read(text: str):
    return [(d.source, d.obj, d.error) for d in read_text(textwrap.dedent(text), "m.yaml")]


def only(text: str):
    [(_source, obj, error)] = read(text)
    assert error == ""
    return obj


@pytest.mark.parametrize(("scalar", "value"), [
    ("yes", True), ("Yes", True), ("on", True), ("ON", True), ("y", True), ("Y", True),
    ("no", False), ("off", False), ("n", False), ("true", True), ("False", False),
    ("0755", 0o755), ("0", 0), ("-017", -0o17), ("0x1F", 31), ("1_000", 1000),
    ("1e3", 1000.0), ("-1.5", -1.5), (".5", 0.5), ("~", None), ("null", None),
    ("'yes'", "yes"), ('"0755"', "0755"),
])
def test_plain_scalars_are_typed_with_yaml_1_1_rules(scalar, value):
    found = only(f"v: {scalar}\n")["v"]
    assert found == value and type(found) is type(value)


@pytest.mark.parametrize("scalar", ["2024-01-01", "2024-01-01T10:00:00Z",
                                    "2001-12-14 21:59:43.10 -5", "!!timestamp 2024-01-01"])
def test_timestamps_stay_strings(scalar):
    found = only(f"v: {scalar}\n")["v"]
    assert isinstance(found, str)
    assert found == scalar.removeprefix("!!timestamp ")


def test_anchors_aliases_and_merge_keys():
    obj = only("""\
        base: &resources {cpu: 100m, memory: 1Gi}
        first: *resources
        second:
          <<: *resources
          ephemeral-storage: 2Gi
        """)
    assert obj["first"] == {"cpu": "100m", "memory": "1Gi"}
    assert obj["second"] == {"cpu": "100m", "memory": "1Gi", "ephemeral-storage": "2Gi"}


def test_duplicate_keys_are_an_error_naming_the_line():
    documents = read("a: 1\n---\nkind: Pod\nkind: Job\n")
    assert documents[0] == ("m.yaml:1", {"a": 1}, "")
    source, obj, error = documents[1]
    assert (source, obj) == ("m.yaml:3", None)
    assert "key 'kind' is already defined" in error
    assert "(line 4, column 1)" in error


def test_a_syntax_error_names_its_line_and_keeps_the_documents_before():
    documents = read("a: 1\n---\nb: [unclosed\n")
    assert documents[0] == ("m.yaml:1", {"a": 1}, "")
    assert documents[1][0] == "m.yaml:4"
    assert documents[1][2].startswith("invalid YAML: ")


def test_sources_are_the_line_each_object_starts_on():
    documents = read("---\na: 1\n---\n---\n# comment only\n---\nb: 2\n...\n---\nc: 3\n")
    assert [(s, o) for s, o, _ in documents] == [
        ("m.yaml:2", {"a": 1}), ("m.yaml:7", {"b": 2}), ("m.yaml:10", {"c": 3})]


def test_an_empty_stream_has_no_documents():
    assert read("") == [] and read("---\n---\n") == [] and read("# nothing\n") == []


def test_json_is_read_too():
    assert only('{"apiVersion": "v1", "kind": "Pod", "spec": {"containers": []}}')["kind"] == "Pod"


def test_list_items_are_opened():
    documents = read("kind: List\nitems:\n  - {kind: Pod}\n  - kind: Job\n    x: 1\n")
    assert documents == [("m.yaml:3", {"kind": "Pod"}, ""),
                         ("m.yaml:4", {"kind": "Job", "x": 1}, "")]
    [*_, job] = read_text(textwrap.dedent("kind: List\nitems:\n  - {kind: Pod}\n"
                                          "  - kind: Job\n"), "m.yaml")
    assert (job.line, job.column) == (4, 5)


def test_yaml_1_1_values_reach_the_policies_as_kubernetes_sees_them():
    obj = only("""\
        apiVersion: v1
        kind: Pod
        metadata: {name: p, labels: {app: p}}
        spec:
          securityContext: {runAsNonRoot: yes}
          containers:
            - name: app
              image: app:1.0
              resources: {requests: {cpu: 1e3, memory: 1Gi}, limits: {cpu: 0755}}
        """)
    decision = judge(obj)
    assert result(decision, "disallow-root-user").status == "pass"  # `yes` is true
    # 1e3 cpus (1000, canonical 1k as the API server stores it) exceed the octal 0755 (493)
    [finding] = result(decision, "valid-resource-quantities").findings
    assert "resources.requests.cpu (1k) exceeds resources.limits.cpu (493)" in finding.message
