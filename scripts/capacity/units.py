"""Units and validation shared by the capacity checker (and the Triton memory estimate).

The error type every malformed input raises, checks that name the field and what it must be,
memory sizes (``"16GiB"``, ``"80GB"``, bytes), Ray's fixed-point resource amounts, and how amounts
are printed.
"""
from __future__ import annotations

import math
import re
from typing import Any, Mapping

#: Ray compares resource amounts in fixed point with four decimal places.
RAY_RESOURCE_SCALE = 10_000

_MEMORY_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40,
}
_MEMORY_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)(?:[eE]([+-]?\d+))?\s*([A-Za-z]*)\s*$")


class CapacityConfigError(ValueError):
    """A Serve config, cluster description or engine config is malformed; the message says
    which field, where, and what it must be."""


# -- validation -------------------------------------------------------------------------------

def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def require_number(value: Any, where: str, *, whole: bool = False, minimum: float = 0) -> float:
    """``value`` as a finite number >= ``minimum`` (a whole number when ``whole``)."""
    kind = "a whole number" if whole else "a number"
    if not is_number(value) or value < minimum or (whole and value != int(value)):
        raise CapacityConfigError(f"{where} must be {kind} >= {minimum:g}, got {value!r}")
    return int(value) if whole else value


def require_mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise CapacityConfigError(f"{where} must be a mapping (key: value), got {typename(value)}")
    return value


def require_list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise CapacityConfigError(f"{where} must be a list, got {typename(value)}")
    return value


def require_string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise CapacityConfigError(f"{where} must be a non-empty string, got {value!r}")
    return value


def typename(value: Any) -> str:
    return "nothing (null)" if value is None else f"{type(value).__name__} {value!r}"


def gpu_amount(value: Any, where: str) -> float:
    """A GPU request: fractional up to 1, whole numbers above (Ray's rule for GPUs)."""
    amount = require_number(value, where)
    if amount > 1 and amount != int(amount):
        raise CapacityConfigError(
            f"{where} must be a whole number when greater than 1 (a replica takes whole GPUs, "
            f"or a share of one), got {value!r}")
    return amount


def parse_memory(value: Any, where: str = "memory") -> int:
    """Bytes from a number of bytes or a string such as ``"16GiB"``, ``"512 MiB"``, ``"80GB"``.

    Units (case-insensitive): B, KB, MB, GB, TB (powers of 1000) and KiB, MiB, GiB, TiB
    (or Ki, Mi, Gi, Ti; powers of 1024). Raises :class:`CapacityConfigError` otherwise.
    """
    if is_number(value):
        if value < 0:
            raise CapacityConfigError(f"{where} must be a number of bytes >= 0 or a size like '16GiB', got {value!r}")
        return int(value)
    if isinstance(value, str):
        match = _MEMORY_RE.match(value)
        if match:
            number, exponent, unit = match.groups()
            factor = _MEMORY_UNITS.get(unit.lower())
            if factor is None:
                raise CapacityConfigError(
                    f"{where} has an unknown memory unit {unit!r} in {value!r}: use bytes or one of "
                    "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB")
            amount = float(number) * (10 ** int(exponent) if exponent else 1)
            return int(round(amount * factor))
    raise CapacityConfigError(f"{where} must be a number of bytes >= 0 or a size like '16GiB', got {value!r}")


def to_units(key: str, amount: float) -> int:
    """An amount in Ray's fixed point (memory stays in bytes)."""
    return int(round(amount)) if key == "memory" else int(round(amount * RAY_RESOURCE_SCALE))


def from_units(key: str, units: int) -> float:
    return float(units) if key == "memory" else units / RAY_RESOURCE_SCALE


def format_bytes(n: float) -> str:
    """``n`` bytes in GiB (or MiB below 1 GiB)."""
    return f"{n / 2**30:.1f} GiB" if abs(n) >= 2**30 else f"{n / 2**20:.0f} MiB"


def fmt_number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.4f}".rstrip("0").rstrip(".")


def fmt_amount(key: str, amount: float) -> str:
    return format_bytes(amount) if key == "memory" else fmt_number(amount)


def fmt_resources(resources: Mapping[str, float]) -> str:
    """``GPU 1, CPU 4, memory 16.0 GiB, custom 1`` (Ray's per-node ``node:<ip>`` keys left out)."""
    order = ["GPU", "CPU", "memory"]
    keys = [k for k in order if k in resources] + sorted(
        k for k in resources if k not in order and not k.startswith("node:"))
    return ", ".join(f"{k} {fmt_amount(k, resources[k])}" for k in keys) or "nothing"
