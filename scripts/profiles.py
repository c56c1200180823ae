"""Profiles (``cpu``, ``gpu-transformers``, ``gpu-vllm``, ``gpu-trtllm``): ``env/profiles.toml`` read into one
typed, validated object per profile (the model: :mod:`scripts.profile_model`)."""
from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from scripts.paths import PROFILES_FILE, REPO_ROOT, build_dir
from scripts.profile_model import PROFILE_MODELS, ProfileSettings, ServeSettings

BIND_HOST_ENV = "TUTORIAL_BIND_HOST"
#: ``"<target>@<host>"`` names a rehearsal: the host profile's engine and model with the target's Serve settings.
REHEARSAL_MARK = "@"
#: Serve settings a rehearsal keeps from its host: the name its engine serves, and no GPU where the host has none.
HOST_SERVE_KEYS = frozenset({"served_model_name", "num_gpus_per_replica"})


def available_profiles(path: Path = PROFILES_FILE) -> list[str]:
    with open(path, "rb") as fh:
        return list(tomllib.load(fh))


class ProfileError(ValueError):
    """A profile in the profiles file is invalid; each line names the file, the profile and the key."""


@dataclass(frozen=True)
class Profile(Mapping[str, Any]):
    """One profile: its typed, validated settings (:mod:`scripts.profile_model`), read as attributes of their
    sections (``profile.settings.serve.serve_max_replicas``) or as the flat TOML keys (``profile["serve_max_replicas"]``,
    ``profile.get("engine_start_method")``: an optional key left unset reads as absent); relative paths
    are resolved against the build directory."""

    name: str
    settings: ProfileSettings = field(repr=False)
    root: Path
    source: Path = field(default=PROFILES_FILE, repr=False, compare=False)
    rehearses: "Profile | None" = field(default=None, repr=False, compare=False)  # the GPU profile a rehearsal plays
    _flat: dict[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_flat", self.settings.flat())

    def __getitem__(self, key: str) -> Any:
        try:
            return self._flat[key]
        except KeyError:
            raise KeyError(f"profile {self.name!r} has no setting {key!r} (see {self.source})") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._flat)

    def __len__(self) -> int:
        return len(self._flat)

    @property
    def engine(self) -> str:
        return self.settings.engine

    def with_settings(self, **overrides: Any) -> "Profile":
        """The same profile with some settings replaced and validated again (notebook 07's larger model:
        another model and engine directory, every engine setting kept)."""
        unknown = sorted(set(overrides) - type(self.settings).known_keys())
        if unknown:
            raise KeyError(f"profile {self.name!r} has no setting(s) {unknown} to replace (see {self.source})")
        settings = validate_profile(self.name, self.settings.flat() | overrides, self.source)
        return replace(self, settings=settings)

    def skipped_notebooks(self) -> dict[str, str]:
        """``{notebook stem: why this profile does not run it}`` (the table ``skip_notebooks``)."""
        return dict(self.settings.skip_notebooks)

    def require_notebook(self, notebook: str) -> None:
        """Refuse, with the profile's stated reason, a notebook this profile does not run."""
        reason = self.skipped_notebooks().get(notebook)
        if reason:
            raise SystemExit(f"{notebook} does not run on profile {self.name}: {reason} "
                             f"([{self.name}.skip_notebooks] in {self.source.name})")

    def path(self, key: str) -> Path:
        """A path setting: ``$<key>_env`` overrides it; relative values live under the build dir."""
        env_name = self.get(f"{key}_env")
        value = os.environ.get(env_name) if env_name else None
        p = Path(value if value else self[key]).expanduser()
        return p if p.is_absolute() else self.root / p


def shown_path(path: Path) -> str:
    """The profiles file as errors name it: relative to the repository where it lies inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def _problem(error: dict[str, Any], model: type[ProfileSettings]) -> str:
    """One pydantic error as a sentence about a flat TOML key."""
    loc = [str(part) for part in error["loc"]]
    key = ".".join(loc[1:] if loc and loc[0] in model.sections() else loc)
    if error["type"] == "extra_forbidden":
        return f"unknown key {key!r}" + _hint(key, model)
    if error["type"] == "missing":
        field_info = model.sections().get(loc[0], model).model_fields.get(loc[-1])
        return f"missing required key {key!r}" + (f": {field_info.description}" if field_info else "")
    if not key or key in model.sections():  # a section's own check (model_validator): its message says it all
        return error["msg"].removeprefix("Value error, ")
    return f"key {key!r}: {error['msg']}, got {error['input']!r} ({type(error['input']).__name__})"


def _hint(key: str, model: type[ProfileSettings]) -> str:
    """Where an unknown key comes from: a typo of a known one, or a key of another engine."""
    close = difflib.get_close_matches(key, sorted(model.known_keys()), n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    others = [engine for engine, other in PROFILE_MODELS.items() if key in other.known_keys()]
    return f" (a setting of engine {' or '.join(others)} only)" if others else ""


def validate_profile(name: str, flat: dict[str, Any], path: Path = PROFILES_FILE) -> ProfileSettings:
    """A profile's flat TOML table as its typed settings; :class:`ProfileError` lists what is wrong with it."""
    where = f"{shown_path(path)} [{name}]"
    engine = flat.get("engine")
    model = PROFILE_MODELS.get(engine) if isinstance(engine, str) else None
    if model is None:
        raise ProfileError(f"{where}: key 'engine' must be one of {', '.join(map(repr, PROFILE_MODELS))}, "
                           f"got {engine!r}" if engine is not None else f"{where}: missing required key 'engine'")
    try:
        return model.from_flat(flat)
    except ValidationError as exc:
        # an unknown key first: a typo explains the missing key that follows it
        errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        raise ProfileError("\n".join(f"{where}: {_problem(e, model)}" for e in errors)) from None


def load_profile(name: str = "cpu", path: Path = PROFILES_FILE, root: Path | None = None) -> Profile:
    """Load and validate one profile by name; an unknown name is an error that lists the known ones, an
    invalid profile a :class:`ProfileError` naming the file, the profile and each key at fault.
    ``"<target>@<host>"`` loads a rehearsal (:func:`rehearsal`)."""
    target, mark, host = name.partition(REHEARSAL_MARK)
    if mark:
        return rehearsal(target, host, path, root)
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    if name not in data:
        raise ValueError(f"unknown profile {name!r}: choose one of {sorted(data)} (defined in {path})")
    settings = validate_profile(name, data[name], Path(path))
    if settings.expect.gpu_counterpart not in data:
        raise ProfileError(f"{shown_path(path)} [{name}]: key 'gpu_counterpart' names no profile of the file "
                           f"({settings.expect.gpu_counterpart!r})")
    return Profile(name=name, settings=settings, root=(root or build_dir()), source=Path(path))


def rehearsal(target: str, host: str = "cpu", path: Path = PROFILES_FILE, root: Path | None = None) -> Profile:
    """Profile ``"<target>@<host>"``: the host profile (a CPU one) serving with the target's Serve settings.

    A GPU profile's Serve numbers (CPUs per replica, replica counts, autoscaling delays and windows, request
    limits) meet each other, and the notebooks' waits, in lines that only run on its GPU. The rehearsal
    runs those lines on the host's engine: its model, engine, expectations and GPU-free replicas, with every
    Serve key of the target but the served name and ``num_gpus_per_replica`` (:data:`HOST_SERVE_KEYS`).
    Its replicas load it by the same name (``app_builder({"profile": "gpu-trtllm@cpu"})``), and
    ``rehearses`` holds the target (its GPU per replica, for the replica counts a share of one gives)."""
    target_profile, host_profile = load_profile(target, path, root), load_profile(host, path, root)
    if host_profile["num_gpus_per_replica"]:
        raise ValueError(f"a rehearsal runs on a CPU profile; {host!r} asks for GPUs "
                         f"(num_gpus_per_replica {host_profile['num_gpus_per_replica']})")
    serve_keys = {key: target_profile[key] for key in ServeSettings.model_fields if key not in HOST_SERVE_KEYS}
    name = f"{target}{REHEARSAL_MARK}{host}"
    settings = validate_profile(name, host_profile.settings.flat() | serve_keys, Path(path))
    return replace(host_profile, name=name, settings=settings, rehearses=target_profile)


def bind_host() -> str:
    """The address the servers readers reach listen on (Serve's HTTP proxy): ``127.0.0.1``, unless
    ``$TUTORIAL_BIND_HOST`` says otherwise (``0.0.0.0`` inside a container whose ports are published).
    Servers that sit behind Serve (Triton) stay on loopback regardless."""
    import ipaddress  # noqa: PLC0415

    value = os.environ.get(BIND_HOST_ENV, "127.0.0.1").strip()
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{BIND_HOST_ENV}={value!r} is not an IP address: use 127.0.0.1 (default) or 0.0.0.0") from None
    return value
