"""Sentences a notebook renders from its run's values (``IPython.display.Markdown``) instead of
figures typed into its markdown, which go stale on the next run (CONTRIBUTING.md)."""
from __future__ import annotations


def health_check_rule() -> tuple[int, float]:
    """Serve's rule for an unhealthy replica: (failed checks in a row, Serve's default period in s)."""
    from ray.serve._private import constants  # noqa: PLC0415 - ray 2.60 ray/serve/_private/constants.py

    return constants.REPLICA_HEALTH_CHECK_UNHEALTHY_THRESHOLD, float(constants.DEFAULT_HEALTH_CHECK_PERIOD_S)


def detection_sentence(detected_s: float, recovered_s: float, period_s: float,
                       rule: tuple[int, float] | None = None) -> str:
    """What notebook 05's crash took: Serve's detection against its rule, and the replacement."""
    threshold, default_s = rule or health_check_rule()
    return (f"Serve counted the replica out **{detected_s:.1f} s** after the crash. Its rule is {threshold} failed "
            f"health checks in a row, one every {period_s:g} s here, so at least {(threshold - 1) * period_s:g} s, "
            f"plus the time each failing check takes (the first one stops what is left of the Triton group); at "
            f"Serve's default period of {default_s:g} s the rule alone takes {(threshold - 1) * default_s:g} to "
            f"{threshold * default_s:g} s. The deployment was whole again **{recovered_s:.1f} s** after the crash: "
            f"the replacement replica had to start its own Triton first.")
