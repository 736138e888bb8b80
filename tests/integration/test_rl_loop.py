"""One RL iteration end to end (issue 13): 16 streams generate, Pause(keep) freezes them, a numpy
"trainer" changes every tensor and pushes it with the Python SDK's WeightSync, Resume. Tokens before the update equal the old
model's greedy continuation, tokens after it equal the new model's continuation of the prompt plus
the tokens already generated (their KV was recomputed), each token reports the version that
computed it, and no request is lost. Also the pause modes on their own."""

import os
import subprocess
import threading
import time

import grpc
import pytest

import astr
import harness
import weights as W
from harness import apb, pb, request

pytestmark = pytest.mark.skipif(bool(harness.missing_binaries()), reason="binaries not built")

MAX_TOKENS = 400


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("rl")
    out = {"token": W.token_file(str(root))}
    stories = W.convert_stories(str(root / "stories"))
    rand = str(root / "random")
    subprocess.run([harness.ASTR_BIN, "make-model", "--format", "hf", "--dtype", "f32",
                    "--layers", "2", "--vocab", "400", "--seed", "11", "--out", rand],
                   check=True, capture_output=True, timeout=60)
    for name, folder in (("stories", stories), ("random", rand)):
        old_t = W.load(folder)
        new_t = W.perturbed(old_t, seed=3, scale=0.05)
        out[name] = {"old": folder, "new": W.write_folder(folder, new_t, str(root / (name + "1"))),
                     "new_t": new_t}
    return out


def start(make_cluster, models, folder, workers=2):
    c = make_cluster(model=folder, num_workers=workers, worker_flags={"dtype": "f32"},
                     scheduler_flags={"admin_token_file": models["token"],
                                      "tokenizer": harness.STORIES})
    return c, c.scheduler.admin_stub()


class Streams:
    """Streams running in threads; per request the tokens and version spans seen so far."""

    def __init__(self, stub, requests):
        self.tokens = [[] for _ in requests]
        self.spans = [[] for _ in requests]
        self.finish = [0] * len(requests)
        self.errors = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(stub, i, r), daemon=True)
                        for i, r in enumerate(requests)]
        for t in self.threads:
            t.start()

    def _run(self, stub, i, req):
        try:
            for m in stub.GenerateStream(req, timeout=180):
                with self.lock:
                    self.tokens[i] += list(m.token_ids)
                    self.spans[i] += [(s.version, s.start, s.count) for s in m.weight_versions]
                    if m.finish_reason:
                        self.finish[i] = m.finish_reason
        except grpc.RpcError as e:
            with self.lock:
                self.errors.append((i, e.code(), e.details()))

    def counts(self):
        with self.lock:
            return [len(t) for t in self.tokens]

    def settled(self, quiet_s=1.0, timeout=30):
        """Counts once no stream has received anything for `quiet_s` (the client may lag behind
        the server by a few messages)."""
        last, since = self.counts(), time.monotonic()
        end = since + timeout
        while time.monotonic() < end:
            time.sleep(0.05)
            now = self.counts()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return now
        raise AssertionError(f"streams still receiving after {timeout} s")

    def join(self):
        for t in self.threads:
            t.join(240)
            assert not t.is_alive()


def merged(spans):
    out = []
    for v, s, n in spans:
        if out and out[-1][0] == v and out[-1][1] + out[-1][2] == s:
            out[-1] = (v, out[-1][1], out[-1][2] + n)
        else:
            out.append((v, s, n))
    return out


def offline(model, prompt, n):
    return harness.offline_run(model, prompt_ids=prompt, max_tokens=n,
                               extra=("--dtype", "f32", "--ignore-eos"))["token_ids"]


@pytest.mark.parametrize("which", ["stories", "random"])
def test_rl_iteration_keep_push_resume(make_cluster, models, which):
    m = models[which]
    c, admin = start(make_cluster, models, m["old"])
    vocab = 400 if which == "random" else harness.STORIES_VOCAB
    prompts = [[1] + [3 + (17 * i + 5 * j) % (vocab - 3) for j in range(3 + i % 5)]
               for i in range(18)]
    reqs = [request(token_ids=p, max_tokens=MAX_TOKENS, ignore_eos=True) for p in prompts]
    # Two of them keep their KV through the update (opt-in).
    for r in reqs[16:]:
        r.kv_on_weight_update = pb.KV_ON_WEIGHT_UPDATE_REUSE
    for i, r in enumerate(reqs):
        r.request_id = f"rollout-{i}"
    s = Streams(c.stub, reqs)
    harness.wait_until(lambda: min(s.counts()) >= 4, 60)
    p = admin.Pause(apb.PauseRequest(mode=apb.PAUSE_MODE_KEEP), metadata=W.auth(), timeout=30)
    # Under load a stream may have finished before the pause: it is not frozen, and all its tokens
    # are version 0.
    frozen_ids = set(p.request_ids)
    assert p.frozen == len(frozen_ids) >= 1 and p.aborted == 0
    frozen = s.settled()
    time.sleep(0.5)
    assert s.counts() == frozen  # nothing moves while paused
    assert W.version(admin).paused == apb.PAUSE_MODE_KEEP
    # The trainer side: the SDK's WeightSync buckets the (HF name, array) pairs and streams them.
    sync = astr.WeightSync(astr.AdminClient(c.scheduler.admin_address, token=W.TOKEN),
                           bucket_bytes=1 << 16, chunk_bytes=1 << 12)
    u = sync.push(m["new_t"].items(), label="iteration-1", timeout=120)
    reusing = {f"rollout-{i}" for i in (16, 17)} & frozen_ids
    assert (u.version, u.workers) == (1, 2)
    assert (u.recomputed, u.reused) == (len(frozen_ids) - len(reusing), len(reusing))
    assert admin.Resume(apb.ResumeRequest(), metadata=W.auth(), timeout=30).was_paused
    s.join()
    assert s.errors == []
    for i, prompt in enumerate(prompts):
        toks = s.tokens[i]
        assert len(toks) == MAX_TOKENS and s.finish[i] == harness.FINISH["length"]
        spans = merged(s.spans[i])
        old = offline(m["old"], prompt, MAX_TOKENS)
        if f"rollout-{i}" not in frozen_ids:
            assert spans == [(0, 0, MAX_TOKENS)] and toks == old, f"stream {i}"
            continue
        k = spans[0][2]
        assert spans == [(0, 0, k), (1, k, MAX_TOKENS - k)], spans
        assert k >= frozen[i] >= 4
        assert toks[:k] == old[:k], f"stream {i} before"
        if i >= 16:
            continue  # reused KV mixes both versions: no single-model reference
        assert toks[k:] == offline(m["new"], prompt + toks[:k], MAX_TOKENS - k), f"stream {i} after"
    harness.wait_pages_free(c)


def queued_until_resume(c, admin, model):
    """A request sent while paused waits in the queue, then runs (normally) after Resume; returns
    Resume's answer."""
    later = Streams(c.stub, [request(token_ids=[1, 298], max_tokens=8)])
    harness.wait_until(lambda: c.stats().waiting_requests == 1, 30)
    time.sleep(0.3)
    assert later.counts() == [0]
    assert c.stats().waiting_requests == 1
    r = admin.Resume(apb.ResumeRequest(), metadata=W.auth(), timeout=30)
    later.join()
    assert later.tokens[0] == offline(model, [1, 298], 8)
    return r


def test_pause_abort_ends_running_requests_and_queues_new_ones(make_cluster, models):
    m = models["stories"]
    c, admin = start(make_cluster, models, m["old"], workers=1)
    prompts = [[1, 403 + i] for i in range(4)]
    s = Streams(c.stub, [request(token_ids=p, max_tokens=2000, ignore_eos=True) for p in prompts])
    harness.wait_until(lambda: min(s.counts()) >= 2 or s.errors, 60)
    assert s.errors == []
    p = admin.Pause(apb.PauseRequest(mode=apb.PAUSE_MODE_ABORT), metadata=W.auth(), timeout=30)
    assert p.aborted == 4 and len(p.request_ids) == 4
    s.join()
    assert s.errors == []
    assert all(f == harness.FINISH["abort"] for f in s.finish), s.finish
    assert all(0 < n < 2000 for n in s.counts())
    assert queued_until_resume(c, admin, m["old"]).was_paused
    harness.wait_pages_free(c)


def test_pause_drain_waits_for_running_requests(make_cluster, models):
    m = models["stories"]
    c, admin = start(make_cluster, models, m["old"], workers=1)
    prompts = [[1, 300 + i] for i in range(3)]
    s = Streams(c.stub, [request(token_ids=p, max_tokens=300, ignore_eos=True) for p in prompts])
    harness.wait_until(lambda: min(s.counts()) >= 1, 60)
    p = admin.Pause(apb.PauseRequest(mode=apb.PAUSE_MODE_DRAIN), metadata=W.auth(), timeout=60)
    # (A stream that finished before the pause arrived is not counted as drained.)
    assert 1 <= p.drained <= 3
    assert c.stats().running_requests == 0  # Pause returned once they had finished
    s.join()
    assert s.counts() == [300, 300, 300]
    for i, prompt in enumerate(prompts):
        assert s.tokens[i] == offline(m["old"], prompt, 300)
    r = queued_until_resume(c, admin, m["old"])
    assert r.was_paused and r.paused_ns > 0


def test_pause_keep_without_update_changes_nothing(make_cluster, models):
    m = models["stories"]
    c, admin = start(make_cluster, models, m["old"], workers=1)
    prompt = [1, 403, 407]
    # Long enough that it is still running when the flush after Resume arrives (~1 s of decode).
    n = 1200
    s = Streams(c.stub, [request(token_ids=prompt, max_tokens=n, ignore_eos=True)])
    harness.wait_until(lambda: s.counts()[0] >= 2, 60)
    admin.Pause(apb.PauseRequest(mode=apb.PAUSE_MODE_KEEP), metadata=W.auth(), timeout=30)
    # Flushing the prefix cache is allowed paused or not: the running sequence keeps its pages
    # (nothing becomes free) and its output is unchanged.
    flush = lambda: admin.FlushCache(apb.FlushCacheRequest(), metadata=W.auth(), timeout=10)
    assert flush().pages_freed == 0
    admin.Resume(apb.ResumeRequest(), metadata=W.auth(), timeout=30)
    assert flush().pages_freed == 0
    s.join()
    assert s.tokens[0] == offline(m["old"], prompt, n)
    assert merged(s.spans[0]) == [(0, 0, n)]
    # The finished sequence left its full pages in the cache (every position but the last token's
    # was fed): flushing frees them, and then nothing is left.
    harness.wait_until(lambda: c.stats().running_requests == 0, 30)
    page = 16  # the CPU worker's page size
    assert flush().pages_freed == (len(prompt) + n - 1) // page
    assert flush().pages_freed == 0


def test_pause_mode_is_required(make_cluster, models):
    c, admin = start(make_cluster, models, models["stories"]["old"], workers=1)
    with pytest.raises(grpc.RpcError) as e:
        admin.Pause(apb.PauseRequest(), metadata=W.auth(), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "mode" in e.value.details()
