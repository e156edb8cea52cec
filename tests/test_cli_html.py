"""`check -o html`: the page's content, read as text (tests/test_html_report_browser.py opens
it in Chromium). Its numbers are the JSON report's, what it shows is escaped, and it loads
nothing from anywhere."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import container, pod, run_cli

from webhook.cli.formats.html import suggested_fix

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _in_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


class Page(HTMLParser):
    """What a test reads of a page: the summary's numbers by key, the findings table's rows
    (the text of its 8 columns, from the data the page's script shows) and their notes, the
    inline style and script, and every URL an element names."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.numbers: dict[str, int] = {}
        self.urls: list[str] = []
        self.inline: dict[str, str] = {}
        self.csp = ""
        self._key: str | None = None
        self._raw: str | None = None  # in a style or script element
        self.feed(text)
        data = json.loads(self.inline["data"])
        options = data["options"]
        self.rows = [[options["verdict"][r[0]], options["policy"][r[1]], options["kind"][r[2]],
                      options["namespace"][r[3]], r[4], r[5], r[5] if r[6] is None else r[6],
                      r[10]] for r in data["rows"]]
        self.notes = [" ".join([json.dumps(r[7]), r[8], r[9]]) for r in data["rows"]]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag in ("style", "script"):
            self._raw = "data" if named.get("type") == "application/json" else tag
        for attr in ("src", "href", "action", "data", "poster", "srcset"):
            value = named.get(attr)
            if value and not value.startswith("#"):
                self.urls.append(value)
        if named.get("http-equiv") == "Content-Security-Policy":
            self.csp = named.get("content") or ""
        if "data-summary" in named:
            self._key = named["data-summary"]

    def handle_endtag(self, tag: str) -> None:
        self._raw = None
        if tag in ("li", "span"):
            self._key = None

    def handle_data(self, data: str) -> None:
        if self._raw is not None:
            self.inline[self._raw] = self.inline.get(self._raw, "") + data
        if self._key is not None and data.strip().isdigit() and self._key not in self.numbers:
            self.numbers[self._key] = int(data.strip())


def report(capsys: Any, *args: str) -> tuple[int, str]:
    code, out, _ = run_cli(capsys, "check", *args)
    return code, out


def test_the_summary_numbers_are_the_json_report_s(capsys: Any) -> None:
    code, out = report(capsys, "-o", "html", "examples/")
    assert code == 1
    page = Page(out)
    _, text = report(capsys, "-o", "json", "examples/")
    summary = json.loads(text)["summary"]
    expected = {"resources": summary["resources"], "skipped": summary["skipped"],
                "findings": summary["findings"],
                **{key: summary[key] for key in ("pass", "fail", "warn", "patch", "skip",
                                                 "error", "excepted")},
                **{f"outcomes.{k}": v for k, v in summary["outcomes"].items()
                   if v or k in ("allowed", "denied", "patched", "error")}}
    assert page.numbers == expected
    assert summary["findings"] > 10 and summary["outcomes"]["denied"] > 0


def test_every_finding_is_a_row_with_its_location(capsys: Any) -> None:
    _, out = report(capsys, "-o", "html", "examples/")
    _, text = report(capsys, "-o", "json", "examples/")
    results = json.loads(text)["results"]
    expected = sorted((r["policy"], f["message"], f"{r['resource']['file']}:{f['line']}:"
                       f"{f['column']}") for r in results if r["result"] in ("fail", "patch")
                      for f in r["findings"])
    rows = Page(out).rows
    assert all(len(row) == 8 for row in rows)
    # the message cell also holds an exception or a note; none here
    assert sorted((row[1], row[5], row[7]) for row in rows) == expected


def test_the_page_loads_nothing_and_allows_only_its_own_style_and_script(capsys: Any) -> None:
    _, out = report(capsys, "-o", "html", "examples/")
    page = Page(out)
    assert page.urls == []
    assert "default-src 'none'" in page.csp
    for tag in ("style", "script"):
        digest = base64.b64encode(hashlib.sha256(page.inline[tag].encode()).digest()).decode()
        assert f"{tag}-src 'sha256-{digest}'" in page.csp
    assert "unsafe-inline" not in page.csp
    assert not re.search(r"<[a-z]+[^>]* style=", out)  # the policy would block it
    assert out.count("<script") == 2 and out.count("<style") == 1  # the script and its data


def test_what_the_manifests_say_is_shown_as_text(capsys: Any, tmp_path: Path) -> None:
    manifest = tmp_path / "pod.yaml"
    image = "registry.example.com/<script>alert(1)</script>:latest"
    manifest.write_text(yaml.safe_dump(pod(container("app", image=image), name="web")))
    code, out = report(capsys, "-o", "html", str(manifest))
    assert code == 1
    assert "<script>alert" not in out and "</script>:latest" not in out
    assert "\\u003cscript\\u003ealert(1)\\u003c/script\\u003e" in out  # in the table's data
    assert any(image in row[5] for row in Page(out).rows)  # the reader sees it as written


def test_an_excepted_finding_shows_its_exception(capsys: Any, tmp_path: Path) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(pod(container("plugin", securityContext={
        "runAsUser": 0}), name="plugin", namespace="gpu-operator")))
    expires = (datetime.now(UTC) + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    (tmp_path / "exception.yaml").write_text(yaml.safe_dump({
        "apiVersion": "quickq.io/v1alpha1", "kind": "PolicyException",
        "metadata": {"name": "gpu-root", "namespace": "quickq-guard"},
        "spec": {"policies": [{"id": "disallow-root-user"}],
                 "match": {"namespaces": ["gpu-operator"], "kinds": ["Pod"]},
                 "expires": expires, "reason": "the device plugin needs root"}}))
    config = tmp_path / "config.yaml"
    config.write_text("exceptionNamespaces: [quickq-guard]\n")
    code, out = report(capsys, "-o", "html", "--config", str(config), str(manifest),
                       "--exceptions", str(tmp_path / "exception.yaml"))
    assert code == 0
    page = Page(out)
    [(row, notes)] = [(row, notes) for row, notes in zip(page.rows, page.notes, strict=True)
                      if row[1] == "disallow-root-user"]
    assert row[0] == "excepted"
    assert "PolicyException quickq-guard/gpu-root" in notes
    assert "the device plugin needs root" in notes
    assert "excepted by PolicyException quickq-guard/gpu-root, until" in out  # the list


def test_skipped_objects_are_behind_a_toggle(capsys: Any) -> None:
    _, out = report(capsys, "-o", "html", "examples/")
    _, text = report(capsys, "-o", "json", "examples/")
    skipped = json.loads(text)["summary"]["skipped"]
    assert skipped >= 1
    toggle = re.search(r'<details id="skipped">(.*?)</details>', out, re.S)
    assert toggle is not None and "PriorityClass" in toggle.group(1)
    assert toggle.group(1).count("<tr><td>") == skipped


def test_quiet_keeps_what_fails_the_run(capsys: Any) -> None:
    _, out = report(capsys, "-o", "html", "--quiet", "examples/")
    verdicts = {row[0] for row in Page(out).rows}
    assert verdicts == {"deny"}
    _, everything = report(capsys, "-o", "html", "examples/")
    assert {row[0] for row in Page(everything).rows} > {"deny", "patch", "audit"}


def test_the_actions_of_the_policies_are_shown(capsys: Any, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("policies:\n  require-labels:\n    action: 'off'\n")
    _, out = report(capsys, "-o", "html", "--config", str(config), "examples/")
    row = re.search(r"<th scope=\"row\">require-labels</th><td>(.*?)</td>", out)
    assert row is not None and 'class="action a-off">off<' in row.group(1)
    _, before = report(capsys, "-o", "html", "examples/")
    assert 'class="action a-off">1 off<' in before and 'class="action a-off">2 off<' in out


@pytest.mark.parametrize(("message", "fix"), [
    ("container 'app': env API_TOKEN holds a literal value; move it into a Secret",
     "move it into a Secret"),
    ("add the label metadata.labels.app", "add the label metadata.labels.app"),
    ("container 'api': add resources.requests.cpu", "container 'api': add resources.requests.cpu"),
    ("container 'llm': resources.requests[nvidia.com/gpu] must be a whole number", ""),
])
def test_the_fix_is_what_the_message_asks(message: str, fix: str) -> None:
    assert suggested_fix(message) == fix


def test_an_object_that_cannot_be_read_is_an_error_row(capsys: Any, tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [\n")
    code, out = report(capsys, "-o", "html", str(broken), "examples/bad/pod.yaml")
    assert code == 2
    [row] = [row for row in Page(out).rows if row[0] == "error"]
    assert row[5].startswith("invalid YAML") and row[7] == f"{broken}:2:1"
    assert "<strong>Errors:</strong> 1 object cannot be judged (exit code 2)" in out
    assert Page(out).numbers["outcomes.error"] == 1
