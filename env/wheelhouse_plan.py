"""Which downloaded wheels a GPU host needs carried: the build side of env/wheelhouse.py (uses `packaging`).

A wheel is dropped when the host (its `pip list --format=freeze`) has the distribution at a version that
satisfies every specifier that the .in file and the resolved wheels' Requires-Dist (markers decided for
Linux x86_64 and the host's Python, extras followed) put on it; `# host-provides:` names are always
dropped, `# leave-out:` names never carried, and a carried wheel that nothing carried (nor the .in file)
needs any more is pruned. NumPy, SciPy and scikit-learn are always carried: the venv hides the host's.
"""
from __future__ import annotations

import re
import zipfile
from email.parser import HeaderParser
from pathlib import Path

try:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version
except ImportError:  # pip vendors it
    from pip._vendor.packaging.requirements import InvalidRequirement, Requirement
    from pip._vendor.packaging.utils import canonicalize_name
    from pip._vendor.packaging.version import InvalidVersion, Version

HIDDEN_DISTS = {"numpy", "scipy", "scikit-learn"}  # env/wheelhouse.py HIDDEN_FROM_HOST: the venv hides the host's


def marker_env(python_version: str) -> dict[str, str]:
    full = python_version if python_version.count(".") >= 2 else python_version + ".0"
    return {"python_version": ".".join(python_version.split(".")[:2]), "python_full_version": full,
            "implementation_name": "cpython", "implementation_version": full, "platform_python_implementation": "CPython",
            "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
            "platform_release": "", "platform_version": ""}


def applies(req: Requirement, env: dict, extras: set[str]) -> bool:
    return req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in sorted(extras | {""}))


def wheel_requires(path: Path) -> list[Requirement]:
    """The Requires-Dist of a wheel's METADATA (none when it has no METADATA)."""
    with zipfile.ZipFile(path) as z:
        meta = next((n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)), None)
        text = z.read(meta).decode("utf-8", "replace") if meta else ""
    out = []
    for line in HeaderParser().parsestr(text).get_all("Requires-Dist") or []:
        try:
            out.append(Requirement(line))
        except InvalidRequirement:
            print(f"{path.name}: unparsable Requires-Dist {line!r} ignored")
    return out


def read_host_freeze(path: Path) -> dict[str, str]:
    """{name: version} of `python3 -m pip list --format=freeze` output."""
    host = {}
    for line in path.read_text().splitlines():
        if m := re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*===?\s*([^\s;#]+)", line):
            host[canonicalize_name(m[1])] = m[2]
    return host


def matches(name: str, patterns: list[str]) -> bool:
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)


def select_wheels(folder: Path, pins: dict[str, str]) -> dict[str, Path]:
    """{name: wheel file} of folder for exactly the pinned versions (a download cache may hold others)."""
    found: dict[str, Path] = {}
    for f in sorted(folder.glob("*.whl")):
        name, version = canonicalize_name(f.name.split("-")[0]), f.name.split("-")[1]
        if name in pins and Version(version) == Version(pins[name]):
            found.setdefault(name, f)
    if missing := sorted(set(pins) - set(found)):
        raise SystemExit(f"no wheel in {folder} for: {', '.join(f'{n}=={pins[n]}' for n in missing)}")
    return found


def plan(wheels: dict[str, Path], skipped: set[str], roots: list[str], source: str, provides: list[str],
         leave_out: list[str], overrides: list[str], host: dict[str, str] | None, python_version: str
         ) -> dict[str, tuple[str, str]]:
    """{name: (verdict, why)} for the downloaded wheels and the resolved names not downloaded (skipped);
    verdict is carry, host, leave-out or pruned. roots: the requirement lines of the .in file (source)."""
    env = marker_env(python_version)
    leave = set(map(canonicalize_name, leave_out))
    root_reqs = [r for r in map(Requirement, roots) if applies(r, env, set())]
    root_names = {canonicalize_name(r.name) for r in root_reqs}
    reqs = {n: wheel_requires(p) for n, p in wheels.items() if n not in leave}
    extras: dict[str, set[str]] = {}
    for r in root_reqs:
        extras.setdefault(canonicalize_name(r.name), set()).update(map(canonicalize_name, r.extras))
    changed = True
    while changed:  # the extras asked of each distribution, anywhere in the set
        changed = False
        for n, rs in reqs.items():
            for r in (r for r in rs if applies(r, env, extras.get(n, set()))):
                have = extras.setdefault(canonicalize_name(r.name), set())
                changed |= not {canonicalize_name(e) for e in r.extras} <= have
                have.update(map(canonicalize_name, r.extras))
    specs: dict[str, list[tuple[str, object]]] = {}
    for r in root_reqs:
        specs.setdefault(canonicalize_name(r.name), []).append((source, r.specifier))
    for n, rs in reqs.items():
        for r in rs:
            if canonicalize_name(r.name) not in overrides and applies(r, env, extras.get(n, set())):
                specs.setdefault(canonicalize_name(r.name), []).append((n, r.specifier))

    def unmet(n: str) -> str:
        try:
            v = Version(host[n])
        except InvalidVersion:
            return f"host has {n} {host[n]} (not a PEP 440 version)"
        bad = [f"{who} needs {spec}" for who, spec in specs.get(n, []) if not spec.contains(v, prereleases=True)]
        return f"host has {n} {host[n]}, " + ", ".join(bad) if bad else ""

    out: dict[str, tuple[str, str]] = {}
    for n in sorted(set(wheels) | skipped):
        if n in leave:
            out[n] = ("leave-out", "# leave-out")
        elif n not in root_names and matches(n, provides):
            why = unmet(n) if host and n in host else ("host lacks it" if host else "")
            out[n] = ("host", "# host-provides" + (f" (warning: {why})" if why else ""))
        elif n in HIDDEN_DISTS:
            out[n] = ("carry", "the venv hides the host's copy")
        elif host is None or n not in host:
            out[n] = ("carry", "" if host is None else "host lacks it")
        else:
            why = unmet(n)
            out[n] = ("carry", why) if why else ("host", f"host has {n} {host[n]}")
    seen: set[str] = set()
    queue = sorted(root_names)
    while queue:  # what the carried wheels and the .in file still need
        n = queue.pop()
        if n in seen:
            continue
        seen.add(n)
        if out.get(n, ("",))[0] == "carry":
            queue += [canonicalize_name(r.name) for r in reqs.get(n, []) if applies(r, env, extras.get(n, set()))]
    for n, (verdict, _) in out.items():
        if verdict == "carry" and n not in seen:
            out[n] = ("pruned", "needed only by what the host provides or what is left out")
    return out
