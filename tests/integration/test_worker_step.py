"""The worker's step stream dialled directly (no scheduler): a hand-written plan reproduces
llama.cpp's greedy golden ids, and every invalid plan is answered with an error naming the
problem, applies nothing, and leaves the worker serving."""

import queue

import grpc
import pytest

import harness
from harness import STORIES, wpb

PROMPT = [1, 403, 407, 261, 378]
GOLDEN_IDS = [432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337,
              410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394]
NUM_PAGES = 32
PAGE_SIZE = 4
MAX_BATCH_TOKENS = 64
NEEDS_BINARIES = [harness.WORKER_BIN]  # no scheduler needed
INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT.value[0]  # StepResult.error_code is a number


class StepStream:
    """One Step stream: send a plan, get its result."""

    def __init__(self, worker):
        self.plans = queue.Queue()
        self.results = worker.stub.Step(iter(self.plans.get, None), timeout=60)
        self.next_id = 1

    def step(self, plan):
        plan.step_id = self.next_id
        self.next_id += 1
        self.plans.put(plan)
        r = next(self.results)
        assert r.step_id == plan.step_id
        return r

    def close(self):
        self.plans.put(None)
        for _ in self.results:
            pass


def greedy_params():
    return wpb.WorkerSamplingParams(temperature=0.0, top_p=1.0, repetition_penalty=1.0, eos_token_ids=[2])


def start_plan(live_id, pages, tokens=PROMPT):
    return wpb.StepPlan(
        start=[wpb.SequenceStart(live_id=live_id, params=greedy_params(), tokens=tokens,
                                 num_prompt_tokens=len(tokens), pages=pages)],
        entries=[wpb.StepEntry(live_id=live_id, start_position=0, num_tokens=len(tokens), sample=True)],
    )


@pytest.fixture
def worker(new_cluster):
    c = new_cluster()
    return c.start_worker(
        STORIES, num_pages=NUM_PAGES, page_size=PAGE_SIZE, max_batch_tokens=MAX_BATCH_TOKENS
    )


def run_greedy(s, live_id, first_page, count):
    """Prefill PROMPT then decode; pages first_page, first_page+1, ... as positions need them."""
    pages = [first_page, first_page + 1]  # 8 slots: the prompt and the first decode rows
    r = s.step(start_plan(live_id, pages))
    assert r.error_code == 0, r.error_message
    out = [r.samples[0].token_id]
    pos = len(PROMPT)
    while len(out) < count:
        new = []
        if pos == len(pages) * PAGE_SIZE:
            new = [first_page + len(pages)]
            pages += new
        r = s.step(wpb.StepPlan(entries=[wpb.StepEntry(live_id=live_id, start_position=pos, num_tokens=1,
                                                       new_pages=new, sample=True)]))
        assert r.error_code == 0, r.error_message
        out.append(r.samples[0].token_id)
        pos += 1
    return out, pages


def test_plan_reproduces_golden(worker):
    s = StepStream(worker)
    out, pages = run_greedy(s, 7, 0, 12)  # 17 positions -> 5 pages of 4
    assert out == GOLDEN_IDS[:12]
    info = worker.info()
    assert info.live_sequences == 1 and info.pages_in_use == len(pages)
    r = s.step(wpb.StepPlan(release=[7]))
    assert r.error_code == 0, r.error_message
    info = worker.info()
    assert info.live_sequences == 0 and info.pages_in_use == 0
    assert info.steps >= 12
    s.close()


def bad_plans():
    # (case, plan, words the message must contain one of)
    p = wpb.StepPlan
    e = wpb.StepEntry
    return [
        ("unknown_sequence", p(entries=[e(live_id=99, start_position=0, num_tokens=1, sample=True)]),
         ["99", "seq"]),
        ("page_out_of_range", start_plan(1, [0, NUM_PAGES]), ["page"]),
        ("page_negative", start_plan(1, [-1]), ["page"]),
        ("too_few_pages", start_plan(1, []), ["page"]),
        ("token_out_of_vocab", start_plan(1, [0, 1], tokens=[1, 512]), ["token"]),
        # Pages for all 65 positions, so that only the step's token count is wrong.
        ("too_many_tokens", start_plan(1, list(range(17)), tokens=[1] * (MAX_BATCH_TOKENS + 1)),
         ["max_batch_tokens", "batch"]),
    ]


def test_invalid_plans_refused_and_nothing_applied(worker):
    s = StepStream(worker)
    for case, plan, words in bad_plans():
        r = s.step(plan)
        assert r.error_code != 0, f"{case}: accepted"
        assert r.error_code == INVALID_ARGUMENT, f"{case}: code {r.error_code}"
        assert any(w in r.error_message for w in words), f"{case}: {r.error_message!r} names none of {words}"
        assert len(r.samples) == 0
        info = worker.info()
        assert info.live_sequences == 0 and info.pages_in_use == 0, f"{case} left state behind"
    # The stream and the worker still work.
    out, _ = run_greedy(s, 3, 0, 4)
    assert out == GOLDEN_IDS[:4]
    s.close()


def test_invalid_plan_mid_sequence(worker):
    s = StepStream(worker)
    out, pages = run_greedy(s, 5, 0, 3)
    pos = len(PROMPT) + 2
    for case, entry in [
        ("wrong_start_position", wpb.StepEntry(live_id=5, start_position=pos + 1, num_tokens=1, sample=True)),
    ]:
        r = s.step(wpb.StepPlan(entries=[entry]))
        assert r.error_code == INVALID_ARGUMENT, f"{case}: {r.error_code} {r.error_message}"
    # Duplicate start of a live id.
    r = s.step(start_plan(5, [4]))
    assert r.error_code == INVALID_ARGUMENT, r.error_message
    # The sequence continues where it was.
    r = s.step(wpb.StepPlan(entries=[wpb.StepEntry(live_id=5, start_position=pos, num_tokens=1, sample=True)]))
    assert r.error_code == 0, r.error_message
    assert out + [r.samples[0].token_id] == GOLDEN_IDS[:4]
    s.close()


def test_new_stream_starts_empty(worker):
    s = StepStream(worker)
    run_greedy(s, 1, 0, 2)
    assert worker.info().live_sequences == 1
    s.close()

    def idle():
        i = worker.info()
        return i.live_sequences == 0 and i.pages_in_use == 0

    harness.wait_until(idle, 5)
    s2 = StepStream(worker)
    out, _ = run_greedy(s2, 1, 0, 3)  # the same id and pages are free again
    assert out == GOLDEN_IDS[:3]
    s2.close()
