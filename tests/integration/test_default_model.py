"""Greedy output through the services equals `astr run` on the default model (SmolLM2-135M,
scripts/default_model.sh), with text and chat input. Skipped when the model is not present."""

import grpc
import pytest

import harness
from harness import request, stream, unary

MODEL = harness.default_model()
pytestmark = pytest.mark.skipif(MODEL is None, reason="default model not present (scripts/default_model.sh)")

MAX_TOKENS = 16


@pytest.fixture(scope="module")
def smol(log_dir):
    import tempfile

    c = harness.make_cluster(
        tempfile.mkdtemp(dir=log_dir),
        model=MODEL,
        worker_flags={"num_pages": 128, "page_size": 16},
    )
    yield c
    c.close()


def check_equal(got, want):
    why = harness.offline_mismatch(got, want)
    assert why is None, why


@pytest.mark.parametrize("text", ["The capital of France is", "def fibonacci(n):"])
def test_text_equals_offline(smol, text):
    want = harness.offline_run(MODEL, prompt=text, max_tokens=MAX_TOKENS)
    r = unary(smol.stub, request(text=text, max_tokens=MAX_TOKENS, return_prompt_ids=True))
    assert r.prompt_ids == want["prompt_ids"]
    check_equal(r.one(), want)
    check_equal(stream(smol.stub, request(text=text, max_tokens=MAX_TOKENS)).one(), want)


@pytest.mark.parametrize("message", ["What is 2+2?", "Name a color."])
def test_chat_equals_offline(smol, message):
    want = harness.offline_run(MODEL, chat=message, max_tokens=MAX_TOKENS)
    req = request(chat=[("user", message)], max_tokens=MAX_TOKENS, return_prompt_ids=True)
    r = unary(smol.stub, req)
    assert r.prompt_ids == want["prompt_ids"]
    check_equal(r.one(), want)
    check_equal(stream(smol.stub, req).one(), want)


def test_model_info_has_chat_template(smol):
    info = smol.scheduler.model_info()
    assert info.has_chat_template
    # The chat EOS the offline engine stopped on must be one of the model's EOS ids.
    want = harness.offline_run(MODEL, chat="What is 2+2?", max_tokens=MAX_TOKENS)
    if want["finish_reason"] == "eos":
        assert want["token_ids"][-1] in info.eos_token_ids


def test_chat_cli_prints_unary_answer(smol):
    message = "What is 2+2?"
    want = unary(smol.stub, request(chat=[("user", message)], max_tokens=MAX_TOKENS)).one().text
    r = harness.run_cli("chat", "--server", smol.scheduler.address, "--max-tokens", str(MAX_TOKENS),
                        input=message + "\n")
    assert r.returncode == 0, r.stderr
    assert want.strip() and want.strip() in r.stdout, f"stdout {r.stdout!r}, unary text {want!r}"


def test_chat_without_messages_invalid(smol):
    req = harness.pb.GenerateRequest(chat=harness.pb.ChatInput())
    req.sampling.max_tokens = 4
    with pytest.raises(grpc.RpcError) as e:
        smol.stub.Generate(req, timeout=harness.RPC_TIMEOUT_S)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "messages" in e.value.details(), e.value.details()
    # Still serving.
    unary(smol.stub, request(chat=[("user", "Hi")], max_tokens=2))


def _run_script_default(name):
    """The default value scripts/run.sh gives `name` ("${ASTR_X-...}" or "${ASTR_X:-...}")."""
    import os
    import re

    text = open(os.path.join(harness.SOURCE_DIR, "scripts", "run.sh")).read()
    m = re.search(r'^' + name + r'="\$\{[A-Z_]+:?-(.*)\}"$', text, re.M)
    assert m, f"{name} not found in scripts/run.sh"
    return m.group(1)


@pytest.fixture(scope="module")
def served_defaults(log_dir):
    """The default model served as scripts/run.sh serves it: with its generation config."""
    import os
    import tempfile

    config = os.path.join(harness.SOURCE_DIR, "scripts", "default_model.generation_config.json")
    yield from harness.openai_cluster(log_dir, MODEL, worker_flags={"num_pages": 128, "page_size": 16},
                                      scheduler_flags={"generation_config": config})


def test_run_command_answers_the_capital_of_france(served_defaults):
    """What ./scripts/run.sh prints on a fresh machine: its question, its system message and its
    `astr generate` call, against the server it starts."""
    message = _run_script_default("MESSAGE")
    system = _run_script_default("SYSTEM")
    assert "capital of France" in message
    r = harness.run_cli("generate", "--server", served_defaults.scheduler.address, "--system", system,
                        "--chat", message)
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout, r.stdout
    assert "finish: eos" in r.stderr and len(r.stdout) < 200, (r.stdout, r.stderr)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_openai_chat_with_served_defaults_answers(served_defaults, seed):
    """An OpenAI client that sets nothing but the messages gets the served defaults (sampled at
    temperature 0.2, length-capped) and still a short, right answer."""
    system = _run_script_default("SYSTEM")
    r = served_defaults.client.chat.completions.create(
        model=served_defaults.model, seed=seed,
        messages=[{"role": "system", "content": system},
                  {"role": "user", "content": "What is the capital of France?"}])
    assert "Paris" in r.choices[0].message.content, r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop"
