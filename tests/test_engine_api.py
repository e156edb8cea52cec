"""The engine's public API in two steps: decode() a manifest, evaluate() it for a Review."""

from __future__ import annotations

import dataclasses
import inspect
from datetime import UTC, datetime

import pytest
from builders import container, default_policies, pod

import webhook
from webhook import Decoded, Review, decode, evaluate


def test_the_public_api_names_both_steps_and_the_review() -> None:
    for name in ("decode", "evaluate", "Review", "Decoded", "load_policies", "Decision"):
        assert name in webhook.__all__
        assert getattr(webhook, name) is not None


def test_evaluate_takes_the_object_the_policies_and_one_review() -> None:
    """No keyword whose meaning depends on another: everything beside the object is in the
    review."""
    assert list(inspect.signature(evaluate).parameters) == ["obj", "policies", "review"]


def test_the_docstring_example_runs() -> None:
    example = webhook.__doc__.split("\n\n")[2]
    lines = [line.strip() for line in example.splitlines()]
    assert lines[0].startswith("from webhook import")
    old_pod = pod(container(image="python:latest"))
    scope: dict[str, object] = {"pod": pod(), "old_pod": old_pod}
    exec("\n".join(lines), scope)
    assert scope["decision"].allowed  # type: ignore[attr-defined]


def test_decode_gives_the_object_as_the_api_server_hands_it_over() -> None:
    manifest = pod()
    manifest["spec"]["containers"][0]["ports"] = [{"containerPort": 8080}]
    decoded = decode(manifest)
    assert not decoded.refused and decoded.refusals == ()
    assert decoded.object["spec"]["containers"][0]["ports"][0]["protocol"] == "TCP"
    assert "protocol" not in manifest["spec"]["containers"][0]["ports"][0]  # never changed


def test_decode_gives_what_the_api_server_refuses_and_evaluate_denies_it() -> None:
    manifest = pod()
    manifest["spec"]["containers"][0]["securityContext"] = {"runAsUser": "1000"}
    decoded = decode(manifest)
    assert decoded.refused
    [(path, problem)] = decoded.refusals
    assert path == ("spec", "containers", 0, "securityContext", "runAsUser")
    assert "integer" in problem
    decision = evaluate(decoded, default_policies())
    assert decision.outcome == "error"
    assert "the Kubernetes API server would refuse it" in decision.message


def test_an_object_not_decoded_is_taken_as_the_api_server_hands_it_over() -> None:
    """The webhook's call: the API server has decoded the object, nothing is defaulted."""
    manifest = pod()
    manifest["spec"]["containers"][0]["ports"] = [{"containerPort": 8080}]
    decision = evaluate(manifest, default_policies())
    assert decision.allowed
    assert decision.outcome == evaluate(decode(manifest), default_policies()).outcome


def test_a_review_is_immutable_and_has_a_time_without_being_given_one() -> None:
    before = datetime.now(UTC)
    review = Review()
    assert before <= review.now <= datetime.now(UTC)
    assert review.operation == "CREATE" and review.old_object is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        review.operation = "UPDATE"  # type: ignore[misc]


def test_a_review_takes_the_old_object_decoded_and_groups_as_a_tuple() -> None:
    old = pod()
    old["spec"]["containers"][0]["ports"] = [{"containerPort": 8080}]
    review = Review(operation="UPDATE", old_object=decode(old),
                    groups=["system:authenticated"])  # type: ignore[arg-type]
    assert not isinstance(review.old_object, Decoded)
    assert review.old_object == decode(old).object
    assert review.groups == ("system:authenticated",)


def test_an_update_is_judged_through_its_review() -> None:
    """A violation the old object already had only warns on UPDATE: the review carries it."""
    bad = pod(container(image="python:latest"))
    assert not evaluate(decode(bad), default_policies()).allowed
    update = Review(operation="UPDATE", old_object=decode(bad))
    decision = evaluate(decode(bad), default_policies(), update)
    assert decision.allowed
    assert any("already violated" in warning for warning in decision.warnings)


def test_decode_refuses_an_api_version_no_longer_served() -> None:
    manifest = {"apiVersion": "extensions/v1beta1", "kind": "Deployment",
                "metadata": {"name": "old"}, "spec": {}}
    [(path, problem)] = decode(manifest).refusals
    assert path == ("apiVersion",) and "no longer served" in problem
    decision = evaluate(decode(manifest), default_policies())
    assert decision.outcome == "error" and problem in decision.message
    beta = {"apiVersion": "apps/v1beta3", "kind": "Deployment", "metadata": {"name": "x"}}
    assert decode(beta).refusals == ((("apiVersion",), "apiVersion apps/v1beta3 does not "
                                      "serve Deployment; use apiVersion apps/v1"),)
    assert decode({"apiVersion": "example.com/v1", "kind": "Thing"}).refusals == ()
