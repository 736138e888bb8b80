"""astr.Client / AsyncClient against a real gRPC server with a recording fake Generate: prompts
and options become the request generate.proto describes, replies and streams come back, errors
keep their code and message, cancellation and deadlines reach the server."""

import asyncio
import json

import grpc
import numpy as np
import pytest

from sdk_testing import WAIT_S, FakeGenerate, astr, pb, serve


@pytest.fixture
def generate_server():
    fake = FakeGenerate()
    with serve(generate=fake) as address:
        yield fake, address


def test_options_cover_the_proto():
    """Every SamplingParameters field is an option, and every GenerateRequest field other than
    the prompt oneof and `sampling` itself (the descriptors are the reference)."""
    sampling = set(pb.SamplingParameters.DESCRIPTOR.fields_by_name)
    request = set(pb.GenerateRequest.DESCRIPTOR.fields_by_name) - {
        "text", "token_ids", "chat", "sampling"}
    assert set(astr.SamplingOptions.__annotations__) == sampling
    assert set(astr.GenerateOptions.__annotations__) == sampling | request | {
        "tools", "continue_final_message", "template_kwargs"}


def test_generate_text_with_every_option(generate_server):
    fake, address = generate_server
    with astr.Client(address, timeout=30) as client:
        reply = client.generate(
            "Once upon a time", request_id="req-1", n=2, priority=3, return_prompt_ids=True,
            add_special_tokens=False, parse_special_tokens=False, kv_on_weight_update="reuse",
            logprob_start=1, cache_salt="tenant-a", temperature=0.5, top_k=40, top_p=0.9, min_p=0.05,
            repetition_penalty=1.1, frequency_penalty=0.5, presence_penalty=-0.5,
            penalty_window=64, logit_bias={7: -100.0, 9: 2.5}, seed=2**63 + 5, stop="\n\n",
            stop_token_ids=[2, 3], ignore_eos=True, min_tokens=4, max_tokens=32,
            return_logprobs=True, top_logprobs=5, logprobs_mode="processed",
            include_stop_str_in_output=True, skip_special_tokens=False,
            constraint={"json_schema": {"type": "object"}}, return_sampling_mask=True)
    (request,) = fake.record.only("Generate")
    assert request.WhichOneof("input") == "text" and request.text == "Once upon a time"
    assert (request.request_id, request.n, request.priority) == ("req-1", 2, 3)
    assert request.return_prompt_ids and request.logprob_start == 1
    assert request.cache_salt == "tenant-a"
    assert request.HasField("add_special_tokens") and not request.add_special_tokens
    assert request.HasField("parse_special_tokens") and not request.parse_special_tokens
    assert request.kv_on_weight_update == pb.KV_ON_WEIGHT_UPDATE_REUSE
    s = request.sampling
    assert s.temperature == pytest.approx(0.5) and s.top_p == pytest.approx(0.9)
    assert (s.top_k, s.penalty_window, s.min_tokens, s.max_tokens) == (40, 64, 4, 32)
    assert s.min_p == pytest.approx(0.05) and s.repetition_penalty == pytest.approx(1.1)
    assert (s.frequency_penalty, s.presence_penalty) == (0.5, -0.5)
    assert dict(s.logit_bias) == {7: -100.0, 9: 2.5}
    assert s.seed == 2**63 + 5
    assert list(s.stop) == ["\n\n"] and list(s.stop_token_ids) == [2, 3]
    assert s.ignore_eos and s.return_logprobs and s.include_stop_str_in_output
    assert s.top_logprobs == 5 and s.logprobs_mode == pb.LOGPROBS_MODE_PROCESSED
    assert s.HasField("skip_special_tokens") and not s.skip_special_tokens
    assert s.return_sampling_mask
    assert s.constraint.WhichOneof("kind") == "json_schema"
    assert json.loads(s.constraint.json_schema) == {"type": "object"}
    assert [c.text for c in reply.completions] == ["sample 0", "sample 1"]
    assert reply.request_id == "req-1" and reply.seed == 2**63 + 5


def test_unset_options_stay_unset(generate_server):
    fake, address = generate_server
    with astr.Client(address) as client:
        client.generate("hi", max_tokens=1)
    (request,) = fake.record.only("Generate")
    for field in ("temperature", "top_p", "seed", "repetition_penalty", "skip_special_tokens"):
        assert not request.sampling.HasField(field), field
    assert not request.HasField("logprob_start") and not request.HasField("add_special_tokens")
    assert request.kv_on_weight_update == pb.KV_ON_WEIGHT_UPDATE_RECOMPUTE


def test_prompt_kinds(generate_server):
    fake, address = generate_server
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c1"}]},
                pb.ChatMessage(role="tool", content="42", tool_call_id="c1")]
    with astr.Client(address) as client:
        client.generate([1, 15043, 2])
        client.generate(np.array([4, 5], dtype=np.int64))
        client.generate(messages, tools=[{"type": "function"}], continue_final_message=True,
                        template_kwargs={"enable_thinking": False})
        client.generate(pb.ChatInput(messages=[pb.ChatMessage(role="user", content="x")]))
        client.generate(pb.TokenIds(ids=[9]))
    ids, array, chat, chat_input, token_ids = fake.record.only("Generate")
    assert list(ids.token_ids.ids) == [1, 15043, 2]
    assert list(array.token_ids.ids) == [4, 5]
    assert [(m.role, m.content, m.tool_call_id) for m in chat.chat.messages] == [
        ("system", "Be brief.", ""), ("assistant", "", ""), ("tool", "42", "c1")]
    assert json.loads(chat.chat.messages[1].tool_calls_json) == [{"id": "c1"}]
    assert json.loads(chat.chat.tools_json) == [{"type": "function"}]
    assert json.loads(chat.chat.template_kwargs_json) == {"enable_thinking": False}
    assert chat.chat.continue_final_message
    assert chat_input.chat.messages[0].content == "x"
    assert list(token_ids.token_ids.ids) == [9]


def test_bad_arguments_fail_before_any_rpc(generate_server):
    fake, address = generate_server
    cases = [
        ((b"bytes",), {}, TypeError, "bytes"),
        (([],), {}, ValueError, "empty"),
        (("x",), {"temprature": 1.0}, TypeError, "temprature"),
        (("x",), {"tools": []}, TypeError, "tools"),
        (("x",), {"seed": -1}, ValueError, "seed=-1"),
        (("x",), {"top_k": "many"}, TypeError, "top_k='many'"),
        (("x",), {"logprobs_mode": "softmax"}, ValueError, "logprobs_mode='softmax'"),
        (("x",), {"kv_on_weight_update": "keep"}, ValueError, "kv_on_weight_update"),
        (("x",), {"constraint": {"regex": "a", "choice": ["a"]}}, ValueError, "exactly one"),
        (("x",), {"constraint": {"choice": "ab"}}, TypeError, "constraint.choice"),
        (("x",), {"constraint": {"json_object": False}}, ValueError, "json_object"),
        (([{"role": "user", "text": "hi"}],), {}, ValueError, "text"),
        (([1, {"role": "user"}],), {}, TypeError, "chat message 1"),
    ]
    with astr.Client(address) as client:
        for args, options, error, words in cases:
            with pytest.raises(error, match=words):
                client.generate(*args, **options)
        with pytest.raises(TypeError, match="token ids"):
            client.tokenize([1, 2])
    assert fake.record.calls == []


def test_sampling_mask_ids():
    """A mask's ids as sent; the whole vocabulary for a mask that removed nothing (count equal to
    the vocabulary size, no ids); a mask whose count disagrees with its ids is refused."""
    assert list(astr.sampling_mask_ids(pb.SamplingMask(count=3, token_ids=[2, 9, 40]), 50)) == [
        2, 9, 40]
    assert list(astr.sampling_mask_ids(pb.SamplingMask(count=1, token_ids=[49]), 50)) == [49]
    assert list(astr.sampling_mask_ids(pb.SamplingMask(count=5), 5)) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="count 4 holds 2 ids"):
        astr.sampling_mask_ids(pb.SamplingMask(count=4, token_ids=[1, 2]), 50)
    with pytest.raises(ValueError, match="count 5 holds 0 ids"):
        astr.sampling_mask_ids(pb.SamplingMask(count=5), 6)


def test_tokenize_detokenize_info_stats(generate_server):
    fake, address = generate_server
    with astr.Client(address) as client:
        tokens = client.tokenize("ab", add_special_tokens=False)
        chat = client.tokenize([{"role": "user", "content": "hi"}], template_kwargs="{}")
        text = client.detokenize([104, 105], skip_special_tokens=False)
        info = client.model_info()
        stats = client.server_stats()
    assert list(tokens.token_ids) == [97, 98] and list(tokens.tokens) == ["a", "b"]
    assert chat.rendered_prompt == "<chat>"
    assert text == "hi"
    assert (info.model_name, info.vocab_size) == ("fake", 512)
    assert (stats.waiting_requests, stats.running_requests) == (1, 2)
    plain, rendered = fake.record.only("Tokenize")
    assert plain.text == "ab" and plain.HasField("add_special_tokens")
    assert not plain.HasField("parse_special_tokens")
    assert rendered.chat.template_kwargs_json == "{}"
    (detok,) = fake.record.only("Detokenize")
    assert list(detok.token_ids) == [104, 105] and not detok.skip_special_tokens


def stream_replies():
    return [
        pb.GenerateStreamResponse(request_id="s", index=0, text="Once", token_ids=[10]),
        pb.GenerateStreamResponse(request_id="s", index=1, text="Twice", token_ids=[11]),
        pb.GenerateStreamResponse(request_id="s", index=0, text=" upon", token_ids=[12],
                                  finish_reason=pb.FINISH_REASON_LENGTH),
        pb.GenerateStreamResponse(request_id="s", index=1, text="!", token_ids=[13],
                                  finish_reason=pb.FINISH_REASON_STOP, stop_string="!",
                                  usage=pb.Usage(prompt_tokens=2, completion_tokens=4)),
    ]


def test_generate_stream(generate_server):
    fake, address = generate_server
    fake.stream_replies = stream_replies()
    with astr.Client(address) as client:
        received = list(client.generate_stream("Once", n=2, max_tokens=2))
    assert received == stream_replies()
    (request,) = fake.record.only("GenerateStream")
    assert request.n == 2 and request.sampling.max_tokens == 2


def test_stream_error_after_some_messages(generate_server):
    fake, address = generate_server
    fake.stream_replies = stream_replies()[:1]
    fake.stream_error = (grpc.StatusCode.RESOURCE_EXHAUSTED, "the queue is full")
    received = []
    with astr.Client(address) as client:
        with pytest.raises(astr.AstrError) as info:
            for message in client.generate_stream("x"):
                received.append(message)
    assert received == stream_replies()[:1]
    assert (info.value.code, info.value.message) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED, "the queue is full")
    assert info.value.method == "/astr.v1.Generate/GenerateStream"


def test_unary_error(generate_server):
    fake, address = generate_server
    fake.errors["Generate"] = (grpc.StatusCode.INVALID_ARGUMENT,
                               "sampling.top_p: 1.5 is outside (0, 1]")
    with astr.Client(address) as client:
        with pytest.raises(astr.AstrError) as info:
            client.generate("x", top_p=1.5)
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.message == "sampling.top_p: 1.5 is outside (0, 1]"


def test_cancel_reaches_the_server(generate_server):
    fake, address = generate_server
    fake.stream_replies = stream_replies()
    fake.block_stream_after = 1
    with astr.Client(address) as client:
        with client.generate_stream("x") as stream:
            first = next(stream)
        # Leaving the block cancelled the call: the server's termination callback runs.
        assert fake.stream_ended.wait(WAIT_S)
    assert first == stream_replies()[0]


def test_deadline(generate_server):
    fake, address = generate_server
    fake.stream_replies = stream_replies()
    fake.block_stream_after = 1
    with astr.Client(address, timeout=WAIT_S) as client:
        with pytest.raises(astr.AstrError) as info:
            for _ in client.generate_stream("x", timeout=1.0):  # the server stalls after one
                pass
    assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED


def test_async_client(generate_server):
    fake, address = generate_server
    fake.stream_replies = stream_replies()

    async def main():
        async with astr.AsyncClient(address, timeout=30) as client:
            reply = await client.generate([{"role": "user", "content": "hi"}], n=3, seed=11)
            streamed = [m async for m in client.generate_stream("Once", n=2)]
            tokens = await client.tokenize("ok")
            text = await client.detokenize([111, 107])
            info = await client.model_info()
            stats = await client.server_stats()
            fake.errors["Detokenize"] = (grpc.StatusCode.INVALID_ARGUMENT, "token_ids[0]: -1")
            with pytest.raises(astr.AstrError) as error:
                await client.detokenize([-1])
            return reply, streamed, tokens, text, info, stats, error.value

    reply, streamed, tokens, text, info, stats, error = asyncio.run(main())
    assert [c.index for c in reply.completions] == [0, 1, 2] and reply.seed == 11
    assert streamed == stream_replies()
    assert list(tokens.token_ids) == [111, 107] and text == "ok"
    assert info.max_n == 4 and stats.running_requests == 2
    assert (error.code, error.message) == (grpc.StatusCode.INVALID_ARGUMENT, "token_ids[0]: -1")
    (request,) = fake.record.only("Generate")
    assert request.chat.messages[0].content == "hi" and request.n == 3


def test_async_stream_cancel_and_error(generate_server):
    fake, address = generate_server
    fake.stream_replies = stream_replies()
    fake.block_stream_after = 1

    async def cancel():
        async with astr.AsyncClient(address) as client:
            async with client.generate_stream("x") as stream:
                return await stream.__anext__()

    assert asyncio.run(cancel()) == stream_replies()[0]
    assert fake.stream_ended.wait(WAIT_S)

    fake.block_stream_after = 0
    fake.stream_replies = []
    fake.stream_error = (grpc.StatusCode.UNAVAILABLE, "no worker is up")

    async def failing():
        async with astr.AsyncClient(address) as client:
            with pytest.raises(astr.AstrError) as info:
                async for _ in client.generate_stream("x"):
                    pass
            return info.value

    error = asyncio.run(failing())
    assert (error.code, error.message) == (grpc.StatusCode.UNAVAILABLE, "no worker is up")
