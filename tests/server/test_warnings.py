"""Warnings as the API server passes them on: one whole warning per finding, never split,
at most 256 bytes, and a count of the findings left out past the 4096-byte budget."""

from __future__ import annotations

from webhook.server.admission import clean_warnings

ROOT = ("[disallow-root-user] container '{}': may run as root; set "
        "securityContext.runAsNonRoot: true or a non-zero securityContext.runAsUser "
        "(already violated before this update)")


def header_bytes(warnings: list[str]) -> int:
    """What the API server counts: `299 - "<text>"` per warning."""
    return sum(len(f'299 - "{w}"'.encode()) for w in warnings)


def test_each_finding_is_one_whole_warning_even_past_120_characters() -> None:
    findings = [ROOT.format("a"), ROOT.format("b")]
    assert len(findings[0]) > 120
    assert clean_warnings(findings) == findings
    assert not any(w.startswith("...") for w in clean_warnings(findings))


def test_a_finding_longer_than_256_bytes_keeps_its_fix() -> None:
    long = ("[require-requests] container 'c': " + "x" * 300
            + "; set resources.requests.cpu, for example 100m")
    [warning] = clean_warnings([long])
    assert len(warning.encode()) <= 256
    assert warning == ("[require-requests] container 'c': "
                       "set resources.requests.cpu, for example 100m")
    [cut] = clean_warnings(["y" * 1000])
    assert len(cut.encode()) <= 256 and cut.endswith("...")


def test_duplicates_and_empty_warnings_are_dropped_not_counted() -> None:
    assert clean_warnings(["a", "", "a", " b "]) == ["a", "b"]


def test_findings_past_the_budget_are_counted_as_findings() -> None:
    findings = [ROOT.format(f"c{index}") for index in range(60)]
    warnings = clean_warnings(findings)
    shown = warnings[:-1]
    assert shown == findings[:len(shown)]
    assert header_bytes(warnings) <= 4096
    left = len(findings) - len(shown)
    assert warnings[-1] == (f"quickq-guard: {left} more finding(s) not shown here; "
                            "the webhook log lists each")


def test_every_finding_fits_when_the_budget_allows() -> None:
    findings = [ROOT.format(f"c{index}") for index in range(20)]
    assert clean_warnings(findings) == findings
    assert header_bytes(findings) <= 4096
