"""Test helpers around the engine: judge an object, read its results.

The objects themselves come from webhook.testing, the one builder that tests and benchmarks
share: `pod()` and `container()` start from an object that passes every default policy.
"""

from __future__ import annotations

import copy
from typing import Any

from webhook import Decision, Result, Review, decode, evaluate, load_policies
from webhook.engine.policy import Config, PolicySet
from webhook.testing import (  # noqa: F401 - the object builders tests import from here
    GOOD_IMAGE,
    POD_SPEC_PATHS,
    container,
    gpu_container,
    node_template,
    pod,
    pod_spec,
    probe,
    workload,
)

CONTROLLERS = [kind for kind in POD_SPEC_PATHS if kind != "Pod"]


def pointer_prefix(kind: str) -> str:
    """The JSON pointer of the pod spec of `kind`: /spec/template/spec for a Deployment."""
    return "".join("/" + part for part in POD_SPEC_PATHS[kind][1])


def dotted_prefix(kind: str) -> str:
    return ".".join(POD_SPEC_PATHS[kind][1])


_DEFAULT: PolicySet | None = None


def default_policies() -> PolicySet:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = load_policies()
    return _DEFAULT


def with_config(**config: Any) -> PolicySet:
    """The shipped policies under a config built from keyword arguments."""
    return load_policies(None, Config.model_validate(config))


def judge(obj: Any, policies: PolicySet | None = None, review: Review | None = None) -> Decision:
    """evaluate(decode(obj)), as `check` judges a manifest, asserting the engine never
    modifies its input."""
    before = copy.deepcopy(obj)
    decision = evaluate(decode(obj), policies or default_policies(), review)
    assert obj == before, "decode() or evaluate() modified the object it was given"
    return decision


def judge_given(obj: Any, policies: PolicySet | None = None,
                review: Review | None = None) -> Decision:
    """evaluate(obj) on the object as it is given (as the API server hands it to the
    webhook), asserting the engine never modifies its input."""
    before = copy.deepcopy(obj)
    decision = evaluate(obj, policies or default_policies(), review)
    assert obj == before, "evaluate() modified the object it was given"
    return decision


def result(decision: Decision, policy: str) -> Result:
    for found in decision.results:
        if found.policy == policy:
            return found
    raise AssertionError(f"no result for {policy}: {[r.policy for r in decision.results]}")


def statuses(decision: Decision) -> dict[str | None, str]:
    return {found.policy: found.status for found in decision.results}


def failing(decision: Decision) -> set[str | None]:
    return {found.policy for found in decision.results if found.status == "fail"}


def messages(decision: Decision, policy: str) -> list[str]:
    return [found.message for found in result(decision, policy).findings]


def paths(decision: Decision, policy: str) -> list[str]:
    return [found.path for found in result(decision, policy).findings]


def run_cli(capsys: Any, *args: str, stdin: str | None = None,
            monkeypatch: Any = None) -> tuple[int, str, str]:
    """`quickq-guard ARGS` in process, with `stdin` as standard input: (exit code, out, err)."""
    import io
    import sys

    from webhook.cli import main

    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def policies_in(tmp_path: Any, *documents: dict[str, Any],
                config: Config | None = None) -> PolicySet:
    """The policy documents written to one file of a folder of their own, loaded."""
    import yaml

    folder = tmp_path / "policies"
    folder.mkdir(exist_ok=True)
    (folder / "p.yaml").write_text(yaml.safe_dump_all(documents))
    return load_policies(folder, config)
