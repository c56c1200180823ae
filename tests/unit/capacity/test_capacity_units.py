"""scripts.capacity.units: memory sizes, fixed-point amounts, printing."""
import pytest

from scripts.capacity.units import (RAY_RESOURCE_SCALE, CapacityConfigError, fmt_number, fmt_resources, format_bytes,
                                    from_units, gpu_amount, parse_memory, require_number, to_units)

GiB = 2**30


def test_parse_memory():
    assert parse_memory("16GiB") == 16 * GiB
    assert parse_memory("1.5 gib") == 3 * GiB // 2
    assert parse_memory("80GB") == 80 * 10**9
    assert parse_memory("512Mi") == 512 * 2**20
    assert parse_memory(1024) == 1024 and parse_memory("2e3") == 2000
    for bad in ("-1GiB", "GiB", "16G", None, -5):
        with pytest.raises(CapacityConfigError):
            parse_memory(bad, "x")


def test_errors_are_value_errors_that_name_the_field():
    with pytest.raises(ValueError, match=r"x\.num_cpus must be a number >= 0, got -1"):
        require_number(-1, "x.num_cpus")
    with pytest.raises(ValueError, match="must be a whole number when greater than 1"):
        gpu_amount(1.5, "num_gpus")
    assert gpu_amount(0.25, "num_gpus") == 0.25 and gpu_amount(2, "num_gpus") == 2


def test_fixed_point_round_trip():
    assert to_units("GPU", 0.1) * 10 == RAY_RESOURCE_SCALE
    assert from_units("CPU", to_units("CPU", 2.5)) == 2.5
    assert to_units("memory", 3 * GiB) == 3 * GiB  # memory stays in bytes


def test_printing():
    assert format_bytes(3 * GiB / 2) == "1.5 GiB" and format_bytes(256 * 2**20) == "256 MiB"
    assert fmt_number(2.0) == "2" and fmt_number(0.3333) == "0.3333" and fmt_number(0.5) == "0.5"
    shown = fmt_resources({"CPU": 4, "memory": 16 * GiB, "GPU": 1, "node:10.0.0.1": 1, "custom": 1})
    assert shown == "GPU 1, CPU 4, memory 16.0 GiB, custom 1"
