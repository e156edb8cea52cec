"""`check -o html` opened in headless Chromium, as a person opens the file: it loads with no
console error and asks the network for nothing, its numbers are the JSON report's, its
filters show exactly what they say, it reads on a laptop and a phone, light and dark, and no
hidden value is anywhere in it.

The browser is Debian's chromium, driven through Debian's chromium-driver by Selenium (the
driver comes from the same source package as the browser, so their versions always match,
and the tests stay plain pytest). scripts/install-browser installs both; scripts/setup runs it
as root. Without them these tests skip, except as root or under CI=true, where they fail.
Screenshots are kept in test-artifacts/ (git-ignored; a CI job can upload it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
PLANTED = "Vx7-planted-env-value-q3"
CORPUS = 5000


def _missing() -> str:
    missing = [name for name in ("chromium", "chromedriver") if shutil.which(name) is None]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip install -e '.[test]')")
    return ", ".join(missing)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = _missing()
    if missing:
        why = (f"no {missing}: scripts/install-browser installs Debian's chromium and "
               "chromium-driver (as root; scripts/setup runs it)")
        if os.environ.get("CI") == "true" or os.geteuid() == 0:
            pytest.fail(why)  # where it can be installed, a skip would hide the tests
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or ""
    # --no-sandbox: Chromium's sandbox refuses to run as root, which CI is.
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1280,900", "--no-first-run",
                     "--disable-background-networking", "--disable-extensions"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=options,
                              service=Service(shutil.which("chromedriver") or ""))
    try:
        yield driver
    finally:
        driver.quit()


def check(*args: str, out: Path) -> tuple[int, str]:
    """`quickq-guard check ARGS` run from the checkout, its stdout written to `out`."""
    done = subprocess.run([sys.executable, "-m", "webhook.cli", "check", *args],
                          capture_output=True, text=True, cwd=ROOT, check=False,
                          timeout=300)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    out.write_text(done.stdout)
    return done.returncode, done.stdout


def load(driver: Any, page: Path) -> dict[str, list[Any]]:
    """Open the page and wait for its script: what it logged to the console, and the URLs of
    every request it made (its own file's included)."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get_log("browser")  # what earlier pages left
    driver.get_log("performance")
    driver.get(page.as_uri())
    WebDriverWait(driver, 30).until(
        lambda d: d.execute_script("return document.documentElement.dataset.ready"))
    requests = [event["params"]["request"]["url"] for entry in driver.get_log("performance")
                if (event := json.loads(entry["message"])["message"])["method"]
                == "Network.requestWillBeSent"]
    requests += driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)")
    return {"console": driver.get_log("browser"), "requests": requests}


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("examples")
    check("-o", "html", "examples/", out=folder / "report.html")
    _, text = check("-o", "json", "examples/", out=folder / "report.json")
    return {"page": folder / "report.html", "json": json.loads(text)}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The benchmarks' mixed corpus of 5,000 objects, one file each, judged as HTML and JSON."""
    folder = tmp_path_factory.mktemp("corpus")
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "corpus.py"),
                    str(folder / "manifests"), "--count", str(CORPUS)],
                   check=True, capture_output=True, timeout=300)
    check("-o", "html", str(folder / "manifests"), out=folder / "report.html")
    _, text = check("-o", "json", str(folder / "manifests"), out=folder / "report.json")
    return {"page": folder / "report.html", "json": json.loads(text)}


def show_all(driver: Any) -> None:
    """Show every matching finding on one page (the page shows 100 at a time)."""
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("id", "f-size")).select_by_visible_text("all")


def visible(driver: Any) -> list[list[str]]:
    """The cells' text of each row of the findings table a person sees (the cell's own text,
    without the notes under it)."""
    rows: list[list[str]] = driver.execute_script(
        "return Array.from(document.querySelectorAll('#table tbody tr'))"
        ".filter(tr => tr.offsetParent !== null)"
        ".map(tr => Array.from(tr.cells, td => td.firstChild ? td.firstChild.textContent : ''))")
    return rows


def settled(driver: Any) -> None:
    """Wait until what was typed into a filter has been applied (after a pause, see
    report.js)."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 10).until(lambda d: d.execute_script(
        "return !document.getElementById('shown').dataset.pending"))


def findings(report: dict[str, Any], keep: Any = lambda result: True) -> int:
    """The findings of a JSON report, of the results `keep` says."""
    return sum(len(result["findings"]) for result in report["results"]
               if result["result"] in ("fail", "patch") and keep(result))


def test_the_examples_page_loads_with_no_error_and_no_request(browser: Any,
                                                              examples: dict[str, Any]) -> None:
    seen = load(browser, examples["page"])
    assert seen["console"] == []
    assert seen["requests"] == [examples["page"].as_uri()]
    assert browser.title.startswith("quickq-guard report")


def test_the_5000_object_page_loads_with_no_error_and_no_request(browser: Any,
                                                                 corpus: dict[str, Any]) -> None:
    seen = load(browser, corpus["page"])
    assert seen["console"] == []
    assert seen["requests"] == [corpus["page"].as_uri()]
    assert corpus["json"]["summary"]["resources"] == CORPUS


@pytest.mark.parametrize("which", ["examples", "corpus"])
def test_the_summary_shows_the_json_report_s_numbers(browser: Any, which: str,
                                                      request: pytest.FixtureRequest) -> None:
    made = request.getfixturevalue(which)
    load(browser, made["page"])
    shown = browser.execute_script(
        "return Array.from(document.querySelectorAll('[data-summary]'),"
        " e => [e.dataset.summary, e.querySelector('.n, b').textContent])")
    summary = made["json"]["summary"]
    numbers = {key: int(text) for key, text in shown}
    for key, number in numbers.items():
        group, _, name = key.partition(".")
        assert number == (summary[group][name] if name else summary[group]), key
    assert {"resources", "findings", "skipped", "outcomes.denied", "outcomes.allowed",
            "outcomes.patched", "outcomes.error", "fail", "pass"} <= set(numbers)
    assert browser.find_element("id", "shown").text.startswith(
        f"{summary['findings']:,} findings")
    show_all(browser)
    rows = visible(browser)
    assert sum(1 for row in rows if row[1] and row[0] != "error") == summary["findings"]


def test_filtering_by_a_policy_shows_exactly_that_policy_s_rows(browser: Any,
                                                                corpus: dict[str, Any]) -> None:
    from selenium.webdriver.support.ui import Select

    load(browser, corpus["page"])
    total = corpus["json"]["summary"]["findings"]
    for policy in ("disallow-root-user", "inject-gpu-toleration"):
        Select(browser.find_element("id", "f-policy")).select_by_visible_text(policy)
        show_all(browser)
        rows = visible(browser)
        expected = findings(corpus["json"], lambda result, p=policy: result["policy"] == p)
        assert expected > 100
        assert len(rows) == expected and {row[1] for row in rows} == {policy}
        assert browser.find_element("id", "shown").text == \
            f"{expected:,} of {total:,} findings match"
        Select(browser.find_element("id", "f-size")).select_by_visible_text("100")
    Select(browser.find_element("id", "f-policy")).select_by_visible_text("all")
    assert browser.find_element("id", "shown").text.startswith(f"{total:,} findings")


def test_the_free_text_filter_finds_a_file_by_name(browser: Any,
                                                   corpus: dict[str, Any]) -> None:
    load(browser, corpus["page"])
    total = corpus["json"]["summary"]["findings"]
    file = next(result["resource"]["file"] for result in corpus["json"]["results"]
                if result["result"] == "fail")
    name = Path(file).name
    search = browser.find_element("id", "f-text")
    search.send_keys(name)
    settled(browser)
    rows = visible(browser)
    expected = findings(corpus["json"], lambda result: result["resource"]["file"] == file)
    assert rows and len(rows) == expected
    assert all(row[7].strip().startswith(file + ":") for row in rows)
    browser.find_element("css selector", "#filters button[type=reset]").click()
    assert browser.find_element("id", "shown").text.startswith(f"{total:,} findings")
    assert len(visible(browser)) == 100


def test_the_findings_come_a_page_at_a_time(browser: Any, corpus: dict[str, Any]) -> None:
    load(browser, corpus["page"])
    total = corpus["json"]["summary"]["findings"]
    first = visible(browser)
    assert len(first) == 100
    assert browser.find_element("id", "shown").text == f"{total:,} findings; showing 1\u2013100"
    browser.find_element("css selector", "#pages [data-page=next]").click()
    second = visible(browser)
    assert len(second) == 100 and second != first
    pages = -(-total // 100)
    assert browser.find_element("id", "page-of").text == f"page 2 of {pages}"
    browser.find_element("css selector", "#pages [data-page=last]").click()
    assert len(visible(browser)) == total - 100 * (pages - 1)
    assert browser.find_element("css selector", "#pages [data-page=next]").get_attribute(
        "disabled")


def test_the_page_works_from_the_keyboard_and_labels_its_controls(
        browser: Any, examples: dict[str, Any]) -> None:
    from selenium.webdriver.common.keys import Keys

    load(browser, examples["page"])
    unlabelled = browser.execute_script(
        "return Array.from(document.querySelectorAll('select, input'))"
        ".filter(e => !e.labels.length).map(e => e.id)")
    assert unlabelled == []
    body = browser.find_element("tag name", "body")
    body.send_keys(Keys.TAB)
    assert browser.switch_to.active_element.text == "Skip to the findings"
    # sort by policy with the keyboard: focus its header's button, press Enter
    button = browser.find_element("css selector", "#table thead button[data-col='1']")
    button.send_keys(Keys.ENTER)
    header = button.find_element("xpath", "..")
    assert header.get_attribute("aria-sort") == "ascending"
    policies = [row[1] for row in visible(browser)]
    assert policies == sorted(policies) and len(set(policies)) > 3
    button.send_keys(Keys.ENTER)
    assert header.get_attribute("aria-sort") == "descending"
    assert [row[1] for row in visible(browser)] == sorted(policies, reverse=True)
    # the skipped objects open from the keyboard too
    toggle = browser.find_element("css selector", "#skipped summary")
    table = browser.find_element("css selector", "#skipped table")
    assert not table.is_displayed()
    toggle.send_keys(Keys.ENTER)
    assert table.is_displayed() and "PriorityClass" in table.text


def not_blank(png: bytes) -> bool:
    """Whether a PNG shows something: its pixels, as stored (filtered per row), take many
    values; a page of one colour leaves a handful."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    data, at = b"", 8
    while at < len(png):
        length = int.from_bytes(png[at:at + 4], "big")
        if png[at + 4:at + 8] == b"IDAT":
            data += png[at + 8:at + 8 + length]
        at += 12 + length
    return len(set(zlib.decompress(data))) > 64


def test_screenshots_on_a_laptop_and_a_phone_light_and_dark(browser: Any,
                                                            examples: dict[str, Any]) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    browser.get("about:blank")
    assert not not_blank(browser.get_screenshot_as_png())  # the check can fail
    load(browser, examples["page"])
    browser.set_window_size(1280, 900)
    laptop = browser.get_screenshot_as_png()
    (ARTIFACTS / "report-laptop.png").write_bytes(laptop)
    assert not_blank(laptop)
    background = "return getComputedStyle(document.body).backgroundColor"
    assert browser.execute_script(background) == "rgb(255, 255, 255)"

    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {
        "features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    try:
        assert browser.execute_script(background) == "rgb(13, 17, 23)"
        dark = browser.get_screenshot_as_png()
        (ARTIFACTS / "report-dark.png").write_bytes(dark)
        assert not_blank(dark)
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})

    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True})
    try:
        # a phone: nothing wider than the screen, each finding a card of its own
        assert browser.execute_script(
            "return document.documentElement.scrollWidth") <= 390
        assert browser.execute_script(
            "return getComputedStyle(document.querySelector('#table tbody tr')).display"
        ) == "block"
        browser.execute_script("document.getElementById('findings').scrollIntoView()")
        phone = browser.get_screenshot_as_png()
        (ARTIFACTS / "report-phone.png").write_bytes(phone)
        assert not_blank(phone)
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


COPIES_ENV = {"id": "copies-env", "description": "copies an env value into an annotation",
              "type": "mutate", "action": "enforce", "scope": "object",
              "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": (
                  "[JSONPatch{op: 'add', path: '/metadata/annotations/copied', "
                  "value: object.spec.containers[0].env[0].value}]")}}]}
SHOWS_ENV = {"id": "shows-env", "description": "tries to show a value", "type": "validate",
             "action": "enforce", "scope": "container",
             "validations": [{"expression": "false", "message": "a value was read",
                              "messageExpression":
                                  "'values: ' + container.env.map(e, e.value).join(', ')"}]}


def test_a_planted_secret_appears_nowhere_in_the_page(browser: Any, tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "leaky.yaml").write_text(yaml.safe_dump_all([COPIES_ENV, SHOWS_ENV]))
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "team-a",
                     "annotations": {"db-password": PLANTED}},
        "spec": {"containers": [{"name": "app", "image": "registry.example.com/app:1.0",
                                 "env": [{"name": "DB_PASSWORD", "value": PLANTED}]}]}}))
    page = tmp_path / "report.html"
    check("-o", "html", "--no-default-policies", "--policies", str(policies), str(manifest),
          out=page)
    seen = load(browser, page)
    assert seen["console"] == []
    text = browser.execute_script("return document.body.innerText")
    assert "values: (hidden)" in text and "copies-env" in text  # both findings are there
    assert '"value":"(hidden)"' in text  # the patch, as reports show it
    for shown in (page.read_text(), browser.page_source, text):
        assert PLANTED not in shown and PLANTED[3:] not in shown
