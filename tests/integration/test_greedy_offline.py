"""Greedy output through the services equals the offline engine (`astr run`) for the same prompts,
on stories260K (token ids and text input); the llama.cpp golden ids anchor both."""

import pytest

import harness
from harness import STORIES, request, stream, unary

# llama.cpp's greedy continuation of "Once upon a time" (models/README.md), independent of astr.
GOLDEN_PROMPT = [1, 403, 407, 261, 378]
GOLDEN_IDS = [432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337,
              410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394]
GOLDEN_TEXT = ", there was a little girl named Lily. She loved to play outside in the park. One day, she saw"

TEXT_PROMPTS = [
    "Once upon a time",
    "The little dog",
    "Tom and Sue went to the park. They",
    "She was very happy because",
]


def test_golden_ids_unary_and_stream(cluster):
    req = request(token_ids=GOLDEN_PROMPT, max_tokens=32)
    u = unary(cluster.stub, req).one()
    assert u.token_ids == GOLDEN_IDS
    assert u.text == GOLDEN_TEXT
    assert u.finish_reason == harness.FINISH["length"]
    s = stream(cluster.stub, req).one()
    assert (s.text, s.token_ids) == (u.text, u.token_ids)


@pytest.mark.parametrize("seed,length,max_tokens", [(1, 3, 20), (2, 17, 40), (3, 64, 12), (4, 150, 30)])
def test_token_prompts_equal_offline(cluster, seed, length, max_tokens):
    prompt = harness.story_prompts(1, seed, length, length)[0]
    want = harness.offline_run(STORIES, prompt_ids=prompt, max_tokens=max_tokens)
    got = unary(cluster.stub, request(token_ids=prompt, max_tokens=max_tokens)).one()
    assert harness.offline_mismatch(got, want) is None, harness.offline_mismatch(got, want)
    # Greedy logprobs come from the same model: equal up to float noise between batch shapes.
    assert got.logprobs == [] or got.logprobs == pytest.approx(want["logprobs"], abs=1e-3)


@pytest.mark.parametrize("text", TEXT_PROMPTS)
def test_text_prompts_equal_offline(cluster, text):
    want = harness.offline_run(STORIES, prompt=text, max_tokens=48)
    r = unary(cluster.stub, request(text=text, max_tokens=48, return_prompt_ids=True))
    assert r.prompt_ids == want["prompt_ids"]
    assert harness.offline_mismatch(r.one(), want) is None, harness.offline_mismatch(r.one(), want)
    s = stream(cluster.stub, request(text=text, max_tokens=48, return_prompt_ids=True))
    assert s.prompt_ids == want["prompt_ids"]
    assert harness.offline_mismatch(s.one(), want) is None, harness.offline_mismatch(s.one(), want)


def test_long_generation_equals_offline(cluster):
    # 400 tokens: many decode steps and several pages per sequence. (stories260K rarely emits EOS;
    # the default model's chat test covers an EOS finish.)
    want = harness.offline_run(STORIES, prompt_ids=GOLDEN_PROMPT, max_tokens=400)
    got = unary(cluster.stub, request(token_ids=GOLDEN_PROMPT, max_tokens=400)).one()
    assert harness.offline_mismatch(got, want) is None, harness.offline_mismatch(got, want)
