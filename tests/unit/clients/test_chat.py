"""scripts.clients.chat: the chat client against the real routes on a loopback port (a fake Triton
behind them), and reading a streamed answer."""
import asyncio

from scripts.clients.chat import ChatClient, bench_messages, streamed_text

from fakes import CHUNKS_TEXT, closed_port_url


def test_bench_messages_cycle_the_chat_questions():
    messages = bench_messages(50)
    assert len(messages) == 50 and all(m[0]["role"] == "user" and m[0]["content"].strip() for m in messages)
    distinct = len({m[0]["content"] for m in messages})
    assert 1 < distinct < 50 and messages[distinct] == messages[0]


def test_chat_client_sends_greedy_requests_and_reports_failures(chat_url, chat_service):
    async def go(url, **kw):
        async with ChatClient(url, 2, 6, **kw) as client:
            return await client.send([{"role": "user", "content": "hi"}])

    reply = asyncio.run(go(chat_url))
    assert (reply.text, reply.tokens, reply.error) == (CHUNKS_TEXT, 4, None)
    sent = chat_service.backend.calls[-1]
    assert sent["max_tokens"][0, 0] == 6 and "temperature" not in sent  # greedy
    refused = asyncio.run(go(chat_url, model="gpt-4o"))
    assert refused.text is None and refused.error.startswith("HTTP 404: ") and "gpt-4o" in refused.error
    unreachable = asyncio.run(go(closed_port_url()))
    assert unreachable.text is None and unreachable.error.startswith("ConnectError")


def test_streamed_text_joins_deltas_and_skips_usage_and_done():
    events = [{"choices": [{"delta": {"role": "assistant"}}]}, {"choices": [{"delta": {"content": "Ca"}}]},
              {"choices": [{"delta": {"content": "fé"}}]}, {"choices": [], "usage": {"total_tokens": 3}}, "[DONE]"]
    assert streamed_text(events) == "Café"
