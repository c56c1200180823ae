"""Profiles (``cpu``, ``gpu-trtllm``): ``env/profiles.toml`` read into one object per profile."""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.paths import PROFILES_FILE, build_dir

BIND_HOST_ENV = "TUTORIAL_BIND_HOST"


def available_profiles(path: Path = PROFILES_FILE) -> list[str]:
    with open(path, "rb") as fh:
        return list(tomllib.load(fh))


@dataclass(frozen=True)
class Profile:
    """One profile's settings, with its relative paths resolved against the build directory."""

    name: str
    settings: dict[str, Any] = field(repr=False)
    root: Path

    def __getitem__(self, key: str) -> Any:
        try:
            return self.settings[key]
        except KeyError:
            raise KeyError(f"profile {self.name!r} has no setting {key!r} (see {PROFILES_FILE})") from None

    def get(self, key: str, default: Any = None) -> Any:
        return self.settings.get(key, default)

    @property
    def engine(self) -> str:
        return self["engine"]

    def with_settings(self, **overrides: Any) -> "Profile":
        """The same profile with some settings replaced (notebook 07's larger model: another model
        and engine directory, every engine setting kept)."""
        unknown = sorted(set(overrides) - set(self.settings))
        if unknown:
            raise KeyError(f"profile {self.name!r} has no setting(s) {unknown} to replace (see {PROFILES_FILE})")
        return Profile(self.name, self.settings | overrides, self.root)

    def skipped_notebooks(self) -> dict[str, str]:
        """``{notebook stem: why this profile does not run it}`` (the table ``skip_notebooks``)."""
        return dict(self.settings.get("skip_notebooks", {}))

    def require_notebook(self, notebook: str) -> None:
        """Refuse, with the profile's stated reason, a notebook this profile does not run."""
        reason = self.skipped_notebooks().get(notebook)
        if reason:
            raise SystemExit(f"{notebook} does not run on profile {self.name}: {reason} "
                             f"([{self.name}.skip_notebooks] in {PROFILES_FILE.name})")

    def path(self, key: str) -> Path:
        """A path setting: ``$<key>_env`` overrides it; relative values live under the build dir."""
        env_name = self.settings.get(f"{key}_env")
        value = os.environ.get(env_name) if env_name else None
        p = Path(value if value else self[key]).expanduser()
        return p if p.is_absolute() else self.root / p


def load_profile(name: str = "cpu", path: Path = PROFILES_FILE, root: Path | None = None) -> Profile:
    """Load one profile by name; an unknown name is an error that lists the known ones."""
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    if name not in data:
        raise ValueError(f"unknown profile {name!r}: choose one of {sorted(data)} (defined in {path})")
    return Profile(name=name, settings=dict(data[name]), root=(root or build_dir()))


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
