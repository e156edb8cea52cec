"""JSON Patch array indices are ASCII digits (RFC 6901); anything else is a clear error."""

from __future__ import annotations

from typing import Any

import pytest
from builders import pod
from builders import policies_in as policies

from webhook import decode, evaluate
from webhook.engine.patch import PatchError, apply_patch

NOT_INDICES = ["\u0661", "\u00b2", "\u0663", "01", "-1", "1.0", " 1", "+1", "0x1", "\uff11"]


@pytest.mark.parametrize("token", NOT_INDICES)
@pytest.mark.parametrize("op", ["add", "replace", "remove"])
def test_a_token_that_is_not_ascii_digits_is_not_an_index(token: str, op: str) -> None:
    document = {"a": [1, 2, 3]}
    with pytest.raises(PatchError, match="is not an array index \\(ASCII digits"):
        apply_patch(document, [{"op": op, "path": f"/a/{token}", "value": 9}])
    assert document == {"a": [1, 2, 3]}


@pytest.mark.parametrize("token", NOT_INDICES)
def test_a_token_that_is_not_an_index_is_refused_on_the_way_down(token: str) -> None:
    with pytest.raises(PatchError, match="is not an array index"):
        apply_patch({"a": [{"b": 1}]}, [{"op": "add", "path": f"/a/{token}/c", "value": 9}])


def test_ascii_indices_still_apply() -> None:
    assert apply_patch({"a": [1, 2]}, [{"op": "replace", "path": "/a/1", "value": 9},
                                       {"op": "add", "path": "/a/-", "value": 3},
                                       {"op": "remove", "path": "/a/0"}]) == {"a": [9, 3]}


def _mutation(path: str) -> dict[str, Any]:
    return {"id": "set-env", "description": "Sets an env value.", "type": "mutate",
            "action": "enforce", "scope": "container",
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": (
                "container.env[0].value == 'b' ? [] : "
                f"[JSONPatch{{op: 'replace', path: '{path}', value: 'b'}}]")}}]}


@pytest.mark.parametrize("token", ["\u0661", "\u00b2"])
def test_a_cel_patch_with_such_an_index_is_an_error_result_not_a_patch(tmp_path: Any,
                                                                       token: str) -> None:
    obj = pod({"name": "app", "image": "app:1", "env": [{"name": "A", "value": "a"}]})
    decision = evaluate(decode(obj), policies(tmp_path, _mutation(f"/env/{token}/value")))
    assert decision.outcome == "error" and not decision.patch
    [result] = decision.results
    assert result.status == "error"
    assert f"{token!r} is not an array index" in result.reason


@pytest.mark.parametrize("token", NOT_INDICES)
@pytest.mark.parametrize("where", ["/a/{}/c", "/a/{}"])
def test_rebasing_on_the_written_manifest_reads_only_ascii_indices(token: str,
                                                                   where: str) -> None:
    """`check --fix` rebases a policy's operations on the manifest as written: a token that
    is not an index is the same clear error there (never item 1, an append or a
    traceback)."""
    from webhook.engine.patch import rebase

    operation = {"op": "add", "path": where.format(token), "value": 9}
    with pytest.raises(PatchError, match="is not an array index"):
        rebase([operation], {"a": [{"b": 0}, {"b": 1}]})
