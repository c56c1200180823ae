"""scripts.bench.recovery: the memory readings."""
import os

from scripts.bench.recovery import rss_bytes, rss_table


def test_rss_of_this_process_and_of_a_gone_one():
    assert rss_bytes(os.getpid()) > 10 * 2**20 and rss_bytes(2**22 - 3) == 0
    assert list(rss_table([("me", os.getpid())])) == [f"me ({os.getpid()})"]
