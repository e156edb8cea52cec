"""The Pod Security Standards profiles: which of the shipped control files run, and how
(webhook.loader reads them).

`policies/pod-security/` holds one CEL policy per control of the Kubernetes Pod Security
Standards, as of Kubernetes v1.28: `baseline/` and `restricted/`. The restricted profile is
the baseline controls plus the restricted ones, where a restricted file replaces the baseline
file of the same name (capabilities.yaml, seccomp-profile.yaml, volumes.yaml), as the Pod
Security Admission controller's restricted checks override their baseline counterparts.

None of them runs unless the global config's `podSecurity` names a profile for an action,
in the words of PSA's namespace labels (`enforce: baseline`, `warn: restricted`, ...).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

Mode = Literal["enforce", "warn", "audit"]

VERSION = "v1.28"  # the Kubernetes version whose Pod Security Standards the files encode
LEVELS = ("baseline", "restricted")  # privileged is the absence of controls
MODES: tuple[Mode, ...] = ("enforce", "warn", "audit")  # strongest first


# A control: its level's folder (baseline, restricted) and its file name there.
Control = tuple[str, str]


def profile(level: str, available: Mapping[str, Iterable[str]]) -> list[Control]:
    """The controls of a profile (`baseline` or `restricted`) among the `available` file
    names of each level, in a stable order."""
    files: dict[str, Control] = {}
    for name in LEVELS[: LEVELS.index(level) + 1]:
        for file in sorted(available.get(name, ())):
            files[file] = (name, file)  # a restricted file replaces the baseline one
    return sorted(files.values(), key=_order)


def selected(available: Mapping[str, Iterable[str]],
             modes: Mapping[str, str | None]) -> list[tuple[Control, Mode]]:
    """Each control the modes switch on, with its action: the strongest mode whose profile
    includes it (enforce, then warn, then audit), so a control runs once."""
    chosen: dict[Control, Mode] = {}
    for mode in MODES:
        level = modes.get(mode)
        if level in LEVELS:
            for control in profile(level, available):
                chosen.setdefault(control, mode)
    return sorted(chosen.items(), key=lambda item: _order(item[0]))


def _order(control: Control) -> tuple[int, str]:
    return LEVELS.index(control[0]), control[1]
