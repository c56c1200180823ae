"""Every pytest run here (unit tests, nbval over the notebooks): a failed test's report names the
tritonservers that crashed during the run, with their signal and log tail (scripts/triton/crashes.py)."""
import time

import pytest

from scripts.triton.crashes import crash_reports

_SESSION_START = time.time()
_REPORTED: set[str] = set()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for text in crash_reports(_SESSION_START, _REPORTED):
            report.sections.append(("tritonserver crashed", text))
