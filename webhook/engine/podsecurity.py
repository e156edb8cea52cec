"""The Pod Security Standards profiles: which of the shipped control files run, and how.

`policies/pod-security/` holds one CEL policy per control of the Kubernetes Pod Security
Standards, as of Kubernetes v1.28: `baseline/` and `restricted/`. The restricted profile is
the baseline controls plus the restricted ones, where a restricted file replaces the baseline
file of the same name (capabilities.yaml, seccomp-profile.yaml, volumes.yaml), as the Pod
Security Admission controller's restricted checks override their baseline counterparts.

None of them runs unless the global config's `podSecurity` names a profile for an action,
in the words of PSA's namespace labels (`enforce: baseline`, `warn: restricted`, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

Mode = Literal["enforce", "warn", "audit"]

VERSION = "v1.28"  # the Kubernetes version whose Pod Security Standards the files encode
LEVELS = ("baseline", "restricted")  # privileged is the absence of controls
MODES: tuple[Mode, ...] = ("enforce", "warn", "audit")  # strongest first


def profile_files(directory: Path, level: str) -> list[Path]:
    """The control files of a profile (`baseline` or `restricted`), in a stable order."""
    files: dict[str, Path] = {}
    for name in LEVELS[: LEVELS.index(level) + 1]:
        for path in sorted((directory / name).glob("*.yaml")):
            files[path.name] = path  # a restricted file replaces the baseline one
    return sorted(files.values(), key=lambda path: (LEVELS.index(path.parent.name), path.name))


def selected(directory: Path, modes: Mapping[str, str | None]) -> list[tuple[Path, Mode]]:
    """Each control file the modes switch on, with its action: the strongest mode whose
    profile includes it (enforce, then warn, then audit), so a control runs once."""
    chosen: dict[Path, Mode] = {}
    for mode in MODES:
        level = modes.get(mode)
        if level in LEVELS:
            for path in profile_files(directory, level):
                chosen.setdefault(path, mode)
    return sorted(chosen.items(),
                  key=lambda item: (LEVELS.index(item[0].parent.name), item[0].name))
