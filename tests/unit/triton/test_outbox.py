"""The vLLM engine model's outbox: responses in order, chunks merged when a thread falls behind,
cancellation read after each send, a failed send contained to its request."""
import threading
import time

import pytest

from scripts.triton.backend.outbox import Outbox, merged

FINAL = 1


class Sender:
    """Records what a Python-backend ``InferenceResponseSender`` would be given; ``gate`` holds sends back."""

    def __init__(self, cancel_after: int | None = None, fail: bool = False, gate: threading.Event | None = None):
        self.sent: list[tuple] = []
        self.cancel_after, self.fail, self.gate = cancel_after, fail, gate
        self.cancel_checks = 0

    def send(self, response=None, flags=0):
        if self.gate is not None:
            self.gate.wait(5)
        if self.fail:
            raise RuntimeError("Unable to send the response: the request is gone")
        self.sent.append((response, flags))

    def is_cancelled(self):
        self.cancel_checks += 1
        return self.cancel_after is not None and len(self.sent) >= self.cancel_after


def respond(ids, text):
    return {"ids": ids, "text": text}


def wait_for(condition, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_merged_joins_consecutive_chunks_and_keeps_whole_responses_apart():
    items = [("chunk", [1], "a", False), ("chunk", [2, 3], "bc", False), ("response", "error", True)]
    assert merged(items, respond) == [({"ids": [1, 2, 3], "text": "abc"}, False), ("error", True)]
    assert merged([("chunk", [1], "a", False), ("chunk", [2], "b", True)], respond) == [({"ids": [1, 2], "text": "ab"}, True)]
    assert merged([("response", None, True)], respond) == [(None, True)]
    assert merged([("chunk", [1], "a", False), ("response", None, True)], respond) == [({"ids": [1], "text": "a"}, True)]


def test_inline_outbox_sends_at_once_and_asks_triton_for_cancellation_each_time():
    outbox = Outbox(0, FINAL)
    sender = Sender()
    stream = outbox.stream(sender, respond)
    stream.put([5], "x")
    assert sender.sent == [({"ids": [5], "text": "x"}, 0)]
    assert stream.cancelled is False and sender.cancel_checks == 1
    stream.finish()
    assert sender.sent[-1] == (None, FINAL)
    outbox.close()


def test_last_chunk_carries_the_final_flag_and_finish_adds_nothing():
    outbox = Outbox(0, FINAL)
    sender = Sender()
    stream = outbox.stream(sender, respond)
    stream.put([1], "a")
    stream.put([2], "b", final=True)
    stream.finish()
    assert sender.sent == [({"ids": [1], "text": "a"}, 0), ({"ids": [2], "text": "b"}, FINAL)]


def test_threads_keep_each_request_in_order_and_merge_what_queued_behind_a_slow_send():
    outbox = Outbox(2, FINAL)
    gate = threading.Event()
    senders = [Sender(gate=gate) for _ in range(4)]
    streams = [outbox.stream(s, respond) for s in senders]
    for step in range(5):
        for stream in streams:
            stream.put([step], str(step))
    for stream in streams:
        stream.finish()
    gate.set()
    for sender in senders:
        wait_for(lambda s=sender: s.sent and s.sent[-1][1] == FINAL)
    outbox.close()
    for sender in senders:
        ids = [i for response, _ in sender.sent if response for i in response["ids"]]
        assert ids == [0, 1, 2, 3, 4]
        assert "".join(r["text"] for r, _ in sender.sent if r) == "01234"
        assert [flags for _, flags in sender.sent].count(FINAL) == 1 and sender.sent[-1][1] == FINAL
        assert len(sender.sent) < 6  # the first send was held back: what queued behind it left as one response


def test_threads_read_cancellation_after_each_send_and_drop_what_follows_a_failed_send(capsys):
    outbox = Outbox(1, FINAL)
    cancelled = Sender(cancel_after=1)
    stream = outbox.stream(cancelled, respond)
    assert stream.cancelled is False
    stream.put([1], "a")
    wait_for(lambda: stream.cancelled)
    broken = Sender(fail=True)
    gone = outbox.stream(broken, respond)
    gone.put([1], "a")
    gone.put([2], "b")
    wait_for(lambda: gone.closed)
    assert gone.cancelled  # the engine model aborts a request whose responses can no longer be sent
    other = Sender()
    ok = outbox.stream(other, respond)
    ok.put([3], "c", final=True)
    wait_for(lambda: other.sent)
    outbox.close()
    assert other.sent == [({"ids": [3], "text": "c"}, FINAL)]
    assert "a response could not be sent (RuntimeError" in capsys.readouterr().err


def test_inline_a_failed_send_reads_as_cancelled(capsys):
    stream = Outbox(0, FINAL).stream(Sender(fail=True), respond)
    stream.put([1], "a")
    assert stream.closed and stream.cancelled
    assert "a response could not be sent" in capsys.readouterr().err


@pytest.mark.parametrize("threads", [-1, 1.5, True, "2"])
def test_a_thread_count_that_is_not_a_whole_number_is_refused(threads):
    with pytest.raises(ValueError, match="response_threads must be a whole number"):
        Outbox(threads, FINAL)
