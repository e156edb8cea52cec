"""A denial message stays bounded however many violations an object has."""

from __future__ import annotations

from webhook.server.admission import DENIAL_MAX, denial_message


def test_short_denial_is_passed_through_whole() -> None:
    message = "Pod default/a is denied by quickq-guard:\n- [require-requests] add cpu"
    assert denial_message(message) == message


def test_empty_denial_still_says_who_denied() -> None:
    assert denial_message("") == "denied by quickq-guard"


def test_huge_denial_is_cut_at_a_line_and_counts_what_was_left_out() -> None:
    lines = [f"- [require-requests] container 'c{i}': add resources.requests.cpu"
             for i in range(5000)]
    message = "Pod default/a is denied by quickq-guard:\n" + "\n".join(lines)
    cut = denial_message(message)
    assert len(cut.encode()) <= DENIAL_MAX + 200
    kept = cut.splitlines()
    assert kept[0] == "Pod default/a is denied by quickq-guard:"
    assert all(line in message.splitlines() for line in kept[:-1])
    left = len(message.splitlines()) - (len(kept) - 1)
    assert kept[-1].startswith(f"... and {left} more line(s)")
