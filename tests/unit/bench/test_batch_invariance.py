"""scripts.bench.batch_invariance: the same prompts alone and inside a batch, against a fake engine whose
answers depend on what else is in flight, as bf16 kernels' do on a GPU."""
import asyncio

import pytest

from scripts.bench import batch_invariance as bi
from scripts.profiles import load_profile
from scripts.triton.client import Chunk

from fakes import FakeTokenizer


class BatchDependentModel:
    """A fake ensemble: a prompt's ids are its characters' code points; a prompt in ``flips`` answered
    while other requests are in flight gets another token from position ``at`` on. ``chunk`` > 0 streams
    the ids in responses of that many."""

    def __init__(self, flips=(), at=3, chunk=0, fail=(), no_ids=False):
        self.flips, self.at, self.chunk, self.fail, self.no_ids = set(flips), at, chunk, set(fail), no_ids
        self.in_flight, self.most_in_flight, self.closed = 0, 0, False

    async def generate(self, inputs, parameters=None):
        prompt = inputs["text_input"].reshape(-1)[0].decode()
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        crowded = False
        try:
            for _ in range(3):  # let the others of a batch arrive
                await asyncio.sleep(0)
                crowded = crowded or self.in_flight > 1
            if prompt in self.fail:
                raise RuntimeError("Triton refused it")
            ids = [ord(c) for c in prompt][:8]
            if crowded and prompt in self.flips:
                ids = ids[:self.at] + [0] * (len(ids) - self.at)
            if self.no_ids:
                yield Chunk("text", len(ids))
                return
            size = self.chunk or len(ids)
            for start in range(0, len(ids), size):
                yield Chunk("", len(ids[start:start + size]), ids[start:start + size])
        finally:
            self.in_flight -= 1

    async def close(self):
        self.closed = True


PROMPTS = ["alpha prompt", "bravo prompt", "charlie prompt", "delta prompt"]


def test_a_batch_invariant_engine_answers_every_prompt_as_alone():
    model = BatchDependentModel()
    result = asyncio.run(bi.measure(model, PROMPTS, 8, 100))
    assert (result.batch, result.repeatable, result.equal, result.parted_at, result.errors) == (4, 4, 4, [], [])
    assert result.share == 1.0 and result.complete and model.most_in_flight == 4  # the batch was in flight at once
    assert "the same ids as alone for 4/4 (share 1.00)" in result.format()


def test_prompts_that_change_inside_the_batch_are_counted_with_where_they_part():
    model = BatchDependentModel(flips={"bravo prompt", "delta prompt"}, at=3, chunk=2)  # streamed in pieces too
    result = asyncio.run(bi.measure(model, PROMPTS, 8, 100))
    assert (result.repeatable, result.equal, result.parted_at) == (4, 2, [3, 3]) and result.share == 0.5
    assert "the same ids as alone for 2/4 (share 0.50); the others part from their answer alone at token 3 to 3" in result.format()


def test_failed_requests_are_reported_and_not_counted_as_equal():
    result = asyncio.run(bi.measure(BatchDependentModel(fail={"charlie prompt"}), PROMPTS, 8, 100))
    assert not result.complete and len(result.errors) == 3 and result.equal == result.repeatable == 3
    assert "failed requests: 3, e.g. RuntimeError: Triton refused it" in result.format()


def test_a_model_without_ids_is_an_error_not_a_pass():
    result = asyncio.run(bi.measure(BatchDependentModel(no_ids=True), PROMPTS[:2], 8, 100))
    assert result.equal == 0 and not result.complete and "returns no output_ids" in result.errors[0]


def test_first_difference():
    assert bi.first_difference([1, 2, 3], [1, 9, 3]) == 1
    assert bi.first_difference([1, 2], [1, 2, 3]) == 2
    with pytest.raises(ValueError):
        bi.first_difference([1], [1])


def test_the_reason_is_the_profiles():
    for name in ("cpu", "gpu-vllm"):
        profile = load_profile(name)
        line = bi.reason(profile)
        assert line.startswith(f"profile {name}: batch_invariant {str(profile['batch_invariant']).lower()}: ")
        assert line.endswith(profile["batch_invariant_reason"]) and profile["batch_invariant_reason"]


def test_alone_vs_batch_opens_the_model_with_its_ids_and_closes_it(monkeypatch):
    opened = []
    model = BatchDependentModel(flips={bi.bench_prompts(FakeTokenizer(), 3)[1]})

    def open_model(grpc_url, model_name, outputs):
        opened.append((grpc_url, model_name, outputs))
        return model

    monkeypatch.setattr(bi, "repository_facts", lambda _repo: type("Facts", (), {"tokenizer_dir": "tok"}))
    monkeypatch.setattr(bi, "load_tokenizer", lambda _dir: FakeTokenizer())
    monkeypatch.setattr(bi, "model_outputs", lambda _repo, name: ("text_output", "sequence_length", "output_ids"))
    # as notebook 05 calls it: from a thread, an event loop running meanwhile
    result = asyncio.run(asyncio.to_thread(bi.alone_vs_batch, "127.0.0.1:1", "repo", batch=3, max_tokens=8,
                                           open_model=open_model))
    assert opened == [("127.0.0.1:1", "ensemble", ("text_output", "sequence_length", "output_ids"))]
    assert model.closed and (result.batch, result.repeatable, result.equal) == (3, 3, 2)
