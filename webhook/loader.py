"""Reading policies and the global config from files: the edge where the engine's input is
read (the engine itself reads nothing).

Policy and config files are read as manifests are (webhook.manifests): a duplicate key is
an error naming its line, as kubectl makes it, and alias bombs and depth are bounded before
a document is built. `load_policies` is what the CLI, the server and users' scripts call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from webhook.engine import podsecurity
from webhook.engine.policy import (
    Config,
    Policy,
    PolicyError,
    PolicySet,
    build,
    config_from,
    pod_security_policy,
    policy_set,
)
from webhook.manifests import read_named, read_text


def default_policies_dir() -> Path:
    """The shipped policies: `policies/` of a checkout, or the copy inside an installed wheel."""
    package = Path(__file__).resolve().parent  # webhook/
    checkout = package.parent / "policies"
    return checkout if checkout.is_dir() else package / "policies"


def pod_security_dir() -> Path:
    """The shipped Pod Security Standards controls: baseline/ and restricted/."""
    return default_policies_dir() / "pod-security"


def load_policies(directory: str | Path | None = None,
                  config: str | Path | Config | None = None) -> PolicySet:
    """Every policy in the directory's *.yaml / *.yml files (default: the shipped ones), or
    in one policy file, with the global config (a file, a Config, or the defaults) applied.
    Raises PolicyError."""
    directory = Path(directory) if directory is not None else default_policies_dir()
    if not isinstance(config, Config):
        config = load_config(config)
    return policy_set(_policies_at(directory, config) + _pod_security(config), config)


def _policies_at(place: Path, config: Config) -> list[Policy]:
    """Every policy in a directory's policy files, or in one policy file. Raises PolicyError
    when there is none."""
    if not place.exists():
        raise PolicyError(f"{place}: no such policy file or directory")
    found = [build(document, where, config)
             for path in policy_files(place) for where, document in _documents(path)]
    if not found:
        raise PolicyError(f"{place}: no policies found (expected one YAML file per policy)")
    return found


def load_policy_dirs(directories: list[str | Path], config: Config, defaults: bool = True,
                     only: tuple[str, ...] = (), skip: tuple[str, ...] = ()) -> PolicySet:
    """The policies of several directories or files as one set (`check --policies A
    --policies B`): the shipped ones first unless `defaults` is false, then each one's; a
    policy whose id an earlier one has already defined replaces it (a team's own version of
    a shipped policy). `only`: run just these ids; `skip`: leave these out. Raises
    PolicyError, naming an id that none defines."""
    folders = ([default_policies_dir()] if defaults else []) + [Path(d) for d in directories]
    if not folders:
        raise PolicyError("no policies: --no-default-policies needs a --policies PATH")
    by_id: dict[str, Policy] = {}
    for folder in folders:
        found = _policies_at(folder, config)
        here: set[str] = set()
        for policy in found:
            if policy.id in here:
                raise PolicyError(f"{policy.source}: policy id {policy.id!r} is already "
                                  f"defined in {by_id[policy.id].source}")
            here.add(policy.id)
            by_id.pop(policy.id, None)  # a later directory's policy replaces, in its place
            by_id[policy.id] = policy
    policies = list(by_id.values()) + _pod_security(config)
    known = {policy.id for policy in policies}
    unknown = sorted({*only, *skip} - known)
    if unknown:
        raise PolicyError(f"no policy with id {', '.join(map(repr, unknown))} "
                          f"(loaded: {', '.join(sorted(known))})")
    kept = [p for p in policies if (not only or p.id in only) and p.id not in skip]
    if not kept:
        raise PolicyError("no policies left to run: --policy and --skip-policy leave none")
    # the config's per-policy settings for a policy left out are not an error
    selected = config.model_copy(update={"policies": {
        key: value for key, value in config.policies.items()
        if any(p.id == key for p in kept)}})
    return policy_set(kept, selected)


def find_config(start: Path | None = None) -> Path | None:
    """The `.quickq-guard.yaml` a run in `start` (default: the working directory) uses, found
    the way linters find theirs: in that directory or the nearest parent that has one, up to
    the repository's root (the folder with `.git`); outside a repository, only `start`."""
    here = (start or Path.cwd()).resolve()
    walked: list[Path] = []
    for folder in (here, *here.parents):
        walked.append(folder)
        if (folder / ".git").exists():
            break
    else:
        walked = [here]
    for folder in walked:
        candidate = folder / CONFIG_FILE
        if candidate.is_file():
            return candidate
    return None


CONFIG_FILE = ".quickq-guard.yaml"


def policy_files(place: Path) -> list[Path]:
    """The policy files a load reads, in order: a directory's top-level .yaml and .yml
    files, hidden ones left out (a ConfigMap mount's ..data links among them), or the one
    file given."""
    if not place.is_dir():
        return [place]
    return sorted(p for p in place.iterdir()
                  if p.suffix in (".yaml", ".yml") and p.is_file() and not p.name.startswith("."))


def load_config(path: str | Path | None) -> Config:
    """The global config file, or the defaults when there is none."""
    if path is None:
        return Config()
    path = Path(path)
    return config_from(read_yaml(path), str(path))


def read_yaml(path: Path) -> list[Any]:
    """The documents of a policy or config file; raises PolicyError naming the file (and the
    line, for a document that cannot be read)."""
    try:
        data = read_named(str(path))
    except OSError as error:
        raise PolicyError(f"{path}: cannot read: {error.strerror}") from None
    documents = []
    for document in read_text(data, str(path)):
        if document.error:
            raise PolicyError(f"{path}: {document.error}")  # it names the line
        documents.append(document.obj)
    return documents


def _documents(path: Path) -> list[tuple[str, Any]]:
    """(where, document) of each document of a policy file that is not empty."""
    return [(f"{path}" if number == 1 else f"{path}: document {number}", document)
            for number, document in enumerate(read_yaml(path), start=1) if document is not None]


def _pod_security(config: Config) -> list[Policy]:
    """The Pod Security Standards controls the config switches on (podsecurity.selected)."""
    if not any(config.podSecurity.modes.values()):
        return []  # most configs: no profile to read
    folder = pod_security_dir()
    available = {level: [path.name for path in (folder / level).glob("*.yaml")]
                 for level in podsecurity.LEVELS}
    return [pod_security_policy(document, where, config, mode)
            for (level, name), mode in podsecurity.selected(available, config.podSecurity.modes)
            for where, document in _documents(folder / level / name)]
