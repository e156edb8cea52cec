"""Nothing an object holds makes a built-in rule slow: each matcher of object content is
linear in it (RE2 or string methods, webhook/engine/linear.py).

Every built-in rule (the default policies and the restricted Pod Security profile) judges
Pods that carry, in one field at a time, a value close to the 3 MiB body limit built from
one of the engine's patterns: repeated prefixes and near misses, which make a backtracking
matcher try every split. Python's `re` held the GIL for 76 s on a 300 KB one
(`"http://h/?" + "key" * 100000`, issue 32); each here must be judged within BOUND seconds.

The Pods are judged in a child process that reports each case as it starts and ends, so a
case that hangs fails the test (and is killed) instead of hanging it.
"""

from __future__ import annotations

import copy
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
# A generous bound, in CPU seconds of the judging process (the machine is shared, so wall
# time says little): a linear judgement of 2.5 MB takes under a second; a quadratic one
# minutes to hours. A case still running after HANG wall seconds fails at once.
BOUND = 5.0
HANG = 90.0
SIZE = 2_500_000  # characters: the review stays under the 3 MiB body limit


def _repeat(unit: str, prefix: str = "", suffix: str = "") -> str:
    return prefix + unit * ((SIZE - len(prefix) - len(suffix)) // len(unit)) + suffix


def values() -> Iterator[tuple[str, str]]:
    """(id, value): each engine pattern's repeated prefix or near miss, at SIZE."""
    yield "query-key-repeated", _repeat("key", "http://h/?")  # the value
    yield "query-near-miss", _repeat("a", "http://h/?x", "password")
    yield "query-many-starts", _repeat("&password", "http://h/?")
    yield "url-userinfo-no-at", _repeat("u", "http://")
    yield "url-scheme-run", _repeat("a+", "", "://")
    yield "references-open", _repeat("$(")
    yield "references-near-miss", _repeat("$(A)", "", "$(")
    yield "path-near-miss", _repeat("a/", "/", " ")
    yield "hex-near-miss", _repeat("f", "0x", "g")
    yield "base64-near-miss", _repeat("A1a", "", "!")
    yield "number-near-miss", _repeat("1", "", "x")
    yield "decimal-near-miss", _repeat("1", "1.", "Kix")
    yield "exponent-near-miss", _repeat("1", "1e", "x")
    yield "zeros-near-miss", _repeat("0", "", ".x")
    yield "dots", _repeat(".")
    yield "variable-open", _repeat("${")
    yield "template-open", _repeat("{{")
    yield "image-colons", _repeat("a:")
    yield "image-slashes", _repeat("a/", "", ":")
    yield "image-ats", _repeat("@")
    yield "camel-case", _repeat("aB")
    yield "separators", _repeat("_-.")
    yield "spaces-bracket", _repeat(" ", "", "[X")
    yield "glob-prefix", _repeat("nvidia.com/", "", "x")


def _place(obj: dict[str, Any], where: str, value: str) -> None:
    container = obj["spec"]["containers"][0]
    if where == "env-secret-value":
        container["env"] = [{"name": "DB_PASSWORD", "value": value}]
    elif where == "env-plain-value":
        container["env"] = [{"name": "LOG_SINK", "value": value}]
    elif where == "env-name":
        container["env"] = [{"name": value, "value": "x"}]
    elif where == "image":
        container["image"] = value
    elif where == "cpu-request":
        container["resources"]["requests"]["cpu"] = value
    elif where == "resource-name":
        container["resources"]["limits"][value] = "1"
    elif where == "label":
        obj["metadata"]["labels"]["team"] = value
    elif where == "annotation":
        obj["metadata"]["annotations"] = {value: value[:1000]}


PLACES = ("env-secret-value", "env-plain-value", "env-name", "image", "cpu-request",
          "resource-name", "label", "annotation")


def worker() -> None:
    """Judge every case, saying on stdout when each starts and ends."""
    sys.path.insert(0, str(REPO))
    from webhook import evaluate, load_policies
    from webhook.engine.policy import Config
    from webhook.testing import pod, with_probe

    sets = [load_policies(), load_policies(None, Config.model_validate(
        {"podSecurity": {"enforce": "restricted"}}))]
    base = with_probe(pod(name="hostile"))
    for value_id, value in values():
        for where in PLACES:
            obj = copy.deepcopy(base)
            _place(obj, where, value)
            case = f"{value_id}@{where}"
            print(json.dumps({"start": case}), flush=True)
            started = time.process_time()
            for policies in sets:
                evaluate(obj, policies)
            seconds = time.process_time() - started
            print(json.dumps({"done": case, "seconds": round(seconds, 3)}), flush=True)


def test_every_builtin_rule_judges_hostile_values_in_linear_time() -> None:
    child = subprocess.Popen([sys.executable, __file__], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    assert child.stdout is not None
    slow: list[tuple[str, float]] = []
    done = 0
    current = "(start-up)"
    try:
        while True:
            ready, _, _ = select.select([child.stdout], [], [], HANG)
            if not ready:
                raise AssertionError(f"{current} still judging after {HANG} s")
            line = child.stdout.readline()
            if not line:
                break
            event = json.loads(line)
            if "start" in event:
                current = event["start"]
                continue
            done += 1
            if event["seconds"] > BOUND:
                slow.append((event["done"], event["seconds"]))
    finally:
        child.kill()
        child.wait()
    assert child.returncode in (0, -9), "the judging process failed"
    assert done == len(list(values())) * len(PLACES)
    assert not slow, f"judged in more than {BOUND} CPU seconds: {slow}"


if __name__ == "__main__":
    worker()
