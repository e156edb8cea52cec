"""The fast YAML reader (libyaml events) reads manifests exactly as PyYAML's loader does.

webhook/manifests.py reads most streams straight from libyaml's events (webhook/yaml_events.py)
and hands anything unusual to KubernetesLoader (webhook/yaml11.py). Whichever reader ran, the
objects and the error messages must be the same, and both must follow kubectl's YAML 1.1
(go-yaml v2) rules.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from webhook import manifests, yaml11
from webhook.manifests import read_text
from webhook.yaml_events import EventReader, Fallback

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def fast(text: str):
    """The fast reader's documents, or 'fallback' when it leaves the stream to PyYAML."""
    try:
        return [_comparable(*read) for read in EventReader(text).documents()]
    except Fallback:
        return "fallback"


def slow(text: str):
    return [_comparable(*read) for read in manifests._slow_documents(text, 0)]


def _comparable(line, column, obj, error, positions):
    """A document as read, with where each of its fields is instead of the parser's marks."""
    where = {}
    if positions is not None:
        seen: set[int] = set()
        pending: list[tuple[object, tuple[object, ...]]] = [(obj, ())]
        while pending:
            value, path = pending.pop()
            if id(value) in seen:  # an alias: its fields were listed where the anchor is
                continue
            seen.add(id(value))
            pairs = value.items() if isinstance(value, dict) else enumerate(value) \
                if isinstance(value, list) else ()
            for key, child in pairs:
                field = (*path, key)
                where[field] = positions.find(obj, field)
                pending.append((child, field))
    return line, column, obj, error, where


def same(text: str) -> None:
    """Both readers give the same (line, column, object, error, where each field is), types
    included."""
    got = fast(text)
    if got != "fallback":
        assert repr(got) == repr(slow(text))


def value(scalar: str):
    [document] = list(read_text(f"v: {scalar}\n", "m.yaml"))
    assert document.error == ""
    return document.obj["v"]


@pytest.mark.parametrize(("scalar", "expected"), [
    ("yes", True), ("YES", True), ("on", True), ("On", True), ("y", True), ("Y", True),
    ("no", False), ("OFF", False), ("n", False), ("N", False), ("True", True), ("FALSE", False),
    ("0755", 0o755), ("-0755", -0o755), ("0o17", 15), ("0b101", 5), ("0x1F", 31), ("1_000", 1000),
    ("0", 0), ("+12", 12), ("1e3", 1000.0), ("1.5e+3", 1500.0), (".5", 0.5), ("-1.5", -1.5),
    ("~", None), ("null", None), ("NULL", None), ("", None),
    ("tRue", "tRue"), ("yes please", "yes please"), ("09", 9.0), ("1e", "1e"), ("0.1.2", "0.1.2"),
    ("1:20", "1:20"), ("_1", "_1"),
    ("'yes'", "yes"), ('"on"', "on"), ("'0755'", "0755"), ('"1e3"', "1e3"), ("'~'", "~"),
    ("'null'", "null"), ('""', ""), ("|\n  yes\n", "yes\n"), (">-\n  0755\n", "0755"),
    ("2024-01-01", "2024-01-01"), ("2024-01-01T10:00:00Z", "2024-01-01T10:00:00Z"),
    ("!!timestamp 2024-01-01", "2024-01-01"), ("!!str 0755", "0755"), ("!!int '12'", 12),
])
def test_scalars_follow_yaml_1_1_as_kubectl_reads_them(scalar, expected):
    found = value(scalar)
    assert found == expected and type(found) is type(expected)
    same(f"v: {scalar}\n")


# Plain scalars as a manifest has them: names, images, quantities, flags, numbers of every form.
_PLAIN = st.one_of(
    st.from_regex(r"[-+.~<0-9a-zA-Z_/:=@]{1,12}", fullmatch=True),
    st.sampled_from(["yes", "No", "on", "OFF", "y", "~", "null", "<<", ".inf", "-.Inf", ".NaN",
                     "0x1F", "0o17", "0b11", "1_000", "0755", "1e3", "+.5", "-0", "Null"]),
    st.text(min_size=1, max_size=8),
)


@given(_PLAIN)
def test_a_plain_scalar_is_typed_as_pyyaml_types_it(text):
    """The reader takes a plain scalar whose first character no resolver is added for as a
    string without asking the resolver (yaml11.TYPED_FIRST): the same value PyYAML's loader
    makes of it, type included."""
    from webhook.yaml_events import _plain

    node = yaml.ScalarNode(yaml11.KubernetesResolver().resolve(yaml.ScalarNode, text,
                                                               (True, False)), text)
    if node.tag == "tag:yaml.org,2002:merge":
        return  # left to PyYAML's loader (Fallback)
    expected = yaml11.KubernetesConstructor().construct_document(node)
    got = _plain(text)
    assert repr(got) == repr(expected) and type(got) is type(expected)


def test_special_floats():
    assert value(".inf") == math.inf and value("-.Inf") == -math.inf
    assert math.isnan(value(".nan"))


def test_plain_keys_are_typed_too_and_quoted_keys_stay_strings():
    [document] = list(read_text("2: a\nyes: b\n'no': c\n~: d\n", "m.yaml"))
    assert document.obj == {2: "a", True: "b", "no": "c", None: "d"}
    same("2: a\nyes: b\n'no': c\n~: d\n")


def test_anchors_aliases_and_merge_keys():
    text = ("base: &base {cpu: 100m, memory: 1Gi}\nalias: *base\n"
            "merged:\n  <<: *base\n  gpu: 1\nlisted:\n  <<: [*base]\n  x: 1\n"
            "items: &list [a, b]\nagain: *list\n")
    [document] = list(read_text(text, "m.yaml"))
    obj = document.obj
    assert obj["alias"] is obj["base"]
    assert obj["merged"] == {"cpu": "100m", "memory": "1Gi", "gpu": 1}
    assert list(obj["merged"]) == ["cpu", "memory", "gpu"]
    assert obj["listed"] == {"cpu": "100m", "memory": "1Gi", "x": 1}
    assert obj["again"] == ["a", "b"]
    assert fast(text) != "fallback"
    same(text)


@pytest.mark.parametrize("text", [
    "base: &b {x: 1}\nm:\n  <<: *b\n  x: 2\n",          # explicit key over a merged one
    "a: &a {x: 1}\nb: &b {y: 2}\nm:\n  <<: [*a, *b]\n",  # several merged mappings
    "a: &a {x: 1}\nb: &b {x: 2}\nm:\n  <<: [*a, *b]\n",
    "m:\n  <<: 1\n", "m:\n  <<: [1]\n", "m: <<\n",
    "a: 1\na: 2\n", "a: 1\n---\nb: 1\nb: 2\n---\nc: 3\n", "1: a\ntrue: b\n",
    "a: {x: 1, x: 2}\nb: 1\nb: 2\n",
    "a: *undefined\n", "a: &x 1\nb: &x 2\n", "? [a]\n: 1\n", "? {a: 1}\n: 1\n",
    "&k a: 1\n*k : 2\n", "a: !foo x\n", "!!map {a: 1}\n", "!!set {a, b}\n", "a: !\n  1\n",
])
def test_what_the_fast_reader_leaves_to_pyyaml_reads_the_same(text):
    assert fast(text) == "fallback"
    assert [(d.source, d.obj, d.error) for d in read_text(text, "m.yaml")] \
        == [(f"m.yaml:{n}", o, f"invalid YAML: {e}" if e else "")
            for n, _, o, e, _ in slow(text) if e or o is not None]


@pytest.mark.parametrize("text", [
    "a: [1, 2\n", "a: 1\n---\nb: [\n", "a: 1\n  b: 2\n", "k: v\n\tb: 1\n", "a: 'x\n",
    "---\n---\n", "", "# only a comment\n", "- 1\n- 2\n", "a: 1\n...\n---\nb: 2\n",
    '{"a": 1, "b": [true, null, 1.5e3, "x", "\\u263A"]}\n', "a:\n  - b: 1\n    c: 2\n  - d\n",
    "a: &a [*a]\n",
])
def test_syntax_errors_and_plain_streams_read_the_same(text):
    same(text)


def test_errors_name_the_file_and_the_line():
    documents = list(read_text("kind: A\n---\nkind: Pod\nmetadata: {}\nkind: Job\n---\n"
                               "kind: C\n---\nx: [\n", "dir/m.yaml"))
    assert [(d.source, d.obj) for d in documents[:1]] == [("dir/m.yaml:1", {"kind": "A"})]
    assert (documents[1].source, documents[1].line, documents[1].column) == ("dir/m.yaml:3", 3, 1)
    assert documents[1].error == ("invalid YAML: while reading a mapping: key 'kind' is "
                                  "already defined (line 5, column 1)")
    assert (documents[2].source, documents[2].obj) == ("dir/m.yaml:7", {"kind": "C"})
    assert documents[3].source == "dir/m.yaml:10"
    assert documents[3].error.startswith("invalid YAML: ") and "line 10" in documents[3].error


def test_a_stream_read_from_a_later_line_counts_lines_from_there():
    [first, second] = read_text("a: 1\n---\nb: [\n", "m.yaml", first_line=40)
    assert (first.source, first.line) == ("m.yaml:40", 40)
    assert second.line == 43 and "(line 43, column 1)" in second.error


def test_the_benchmark_corpus_reads_the_same_with_both_readers(tmp_path):
    subprocess.run([sys.executable, str(BENCHMARKS / "corpus.py"), str(tmp_path),
                    "--count", "300", "--seed", "11"], check=True, capture_output=True)
    files = sorted(tmp_path.iterdir())
    assert len(files) == 300
    for path in files:
        text = path.read_text()
        documents = fast(text)
        assert documents != "fallback"
        assert repr(documents) == repr(slow(text))
