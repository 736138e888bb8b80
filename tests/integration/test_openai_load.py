"""1,000 concurrent SSE streams on loopback (stories260K, short outputs), each on its own
connection: no errors, every stream ends with `data: [DONE]` and carries the greedy output of its
prompt, and the scheduler's thread count does not grow with the number of open streams (its
/proc/PID/status before, during and after; RSS printed). Label: slow."""

import asyncio
import json
import resource
import tempfile
import time

import harness
import openai_http as oh

STREAMS = 1000
MAX_TOKENS = 8
DISTINCT_PROMPTS = 20
# Threads the scheduler may add while the streams are open (a pool sized at start may still be
# growing lazily); one per stream or per connection would be hundreds.
THREAD_SLACK = 8


def proc_status(c):
    """Threads and VmRSS (kB) of the scheduler process."""
    out = {}
    with open(f"/proc/{c.scheduler.proc.proc.pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("Threads", "VmRSS"):
                out[key] = int(value.split()[0])
    return out


def raise_fd_limit(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = need if hard == resource.RLIM_INFINITY else min(max(soft, need), hard)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def test_1000_concurrent_streams(log_dir):
    # Client and (inherited by the processes started below) server sockets: 2 per stream + slack.
    limit = raise_fd_limit(4 * STREAMS + 512)
    assert limit >= 2 * STREAMS + 256, f"RLIMIT_NOFILE {limit} cannot hold {STREAMS} streams"
    c = harness.make_cluster(tempfile.mkdtemp(dir=log_dir),
                             worker_flags={"num_pages": 4096, "page_size": 16},
                             scheduler_flags={"max_queued_requests": 2 * STREAMS})
    try:
        run(c)
    finally:
        c.close()


def run(c):
    model = oh.served_model(c)
    prompts = harness.story_prompts(DISTINCT_PROMPTS, 1000, 3, 24)
    want = [harness.unary(c.stub, harness.request(token_ids=p, max_tokens=MAX_TOKENS)).one().text
            for p in prompts]
    before = proc_status(c)
    samples = []
    opened = [0]  # streams whose 200 head arrived
    heads = [0]  # streams whose head (any status) arrived, or that failed before it
    open_now = [0, 0]  # streams open at this moment, and the most at once
    all_open = None  # set once every stream has its head: only then do they read their events
    at_all_open = {}
    errors = []

    def head_done():
        heads[0] += 1
        if heads[0] == STREAMS:
            at_all_open.update(proc_status(c))
            all_open.set()

    async def one(i):
        prompt = prompts[i % DISTINCT_PROMPTS]
        s = await oh.AsyncStream.open(c.scheduler.http_address, "POST", "/v1/completions",
                                      {"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS,
                                       "temperature": 0, "stream": True})
        status = None
        try:
            try:
                status = await s.read_head()
            finally:
                head_done()
            if status != 200:
                errors.append(f"stream {i}: HTTP {status} {(await s.read_all())[:200]!r}")
                return
            opened[0] += 1
            open_now[0] += 1
            open_now[1] = max(open_now[1], open_now[0])
            # Every stream stays open until all have started: 1,000 at once, not in turn.
            await asyncio.wait_for(all_open.wait(), 120)
            text, events = "", []
            while (ev := await s.next_event()) is not None:
                events.append(ev)
            if not events or events[-1] != "[DONE]":
                errors.append(f"stream {i}: last event {events[-1:]!r}")
                return
            for ev in events[:-1]:
                v = json.loads(ev)
                if "error" in v:
                    errors.append(f"stream {i}: {v}")
                    return
                text += "".join(ch["text"] for ch in v["choices"])
            if text != want[i % DISTINCT_PROMPTS]:
                errors.append(f"stream {i}: text {text!r} != {want[i % DISTINCT_PROMPTS]!r}")
        except (OSError, asyncio.IncompleteReadError, ValueError) as e:
            errors.append(f"stream {i}: {type(e).__name__}: {e}")
        finally:
            if status == 200:
                open_now[0] -= 1
            s.close()

    async def sampler(done):
        while not done.is_set():
            samples.append((opened[0], proc_status(c)))
            await asyncio.sleep(0.05)

    async def main():
        nonlocal all_open
        all_open = asyncio.Event()
        done = asyncio.Event()
        watch = asyncio.create_task(sampler(done))
        start = time.monotonic()
        # All connections are opened at once; each awaits its whole stream.
        await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(STREAMS))), 150)
        elapsed = time.monotonic() - start
        done.set()
        await watch
        return elapsed

    elapsed = asyncio.run(main())
    stats, _ = harness.wait_pages_free(c, timeout=30)
    after = proc_status(c)
    assert not errors, f"{len(errors)} failed streams, e.g.:\n" + "\n".join(errors[:10])
    samples.append((STREAMS, at_all_open))
    during_threads = max(s["Threads"] for _, s in samples)
    during_rss = max(s["VmRSS"] for _, s in samples)
    print(f"{STREAMS} streams in {elapsed:.1f} s ({STREAMS / elapsed:.0f}/s), {open_now[1]} open at once; "
          f"scheduler threads before {before['Threads']}, with all {STREAMS} open {at_all_open['Threads']}, "
          f"max during {during_threads}, after {after['Threads']}; RSS kB before {before['VmRSS']}, "
          f"with all open {at_all_open['VmRSS']}, max during {during_rss}, after {after['VmRSS']}")
    assert open_now[1] == STREAMS
    assert during_threads <= before["Threads"] + THREAD_SLACK, \
        f"scheduler threads grew from {before['Threads']} to {during_threads} with {STREAMS} streams"
    assert after["Threads"] <= before["Threads"] + THREAD_SLACK
    assert stats.running_requests == 0 and stats.waiting_requests == 0
    assert stats.requests_refused == 0, stats
