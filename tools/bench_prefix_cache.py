#!/usr/bin/env python3
"""bench_prefix_cache.py: astr's radix prefix cache (and its latency-bounded step) with the cache
on and off, interleaved in one sitting, and optionally llama.cpp's llama-server with
`cache_prompt`; one JSON document on stdout, progress on stderr.

    .cache/venv/bin/python tools/bench_prefix_cache.py --rounds 3 \\
        --llama-server http://127.0.0.1:8089

Configurations. Each `--config NAME:FLAG,FLAG...` is one astr-worker + astr-scheduler pair on
127.0.0.1 (free ports), the scheduler started with the config's flags (plus every
--scheduler-arg). The default configs are `on:--prefix-cache` and `off:--no-prefix-cache`. All
pairs run side by side for the whole sitting (an idle one takes no CPU); each gets --warmup
unmeasured requests first. `astr-scheduler --help` is read first: when it has no --prefix-cache
flag, a config that turns the cache on is skipped, --no-prefix-cache is dropped (such a build has
no cache), and the JSON says `"prefix_cache_flag": false`; --max-step-ms (--max-step-ms here, or in
a config) is dropped the same way when absent (`"max_step_ms_flag": false`). Any other flag the
scheduler does not list is an error.

Rounds. For each round and each scenario, every config (and llama-server, for scenarios a and c)
runs the scenario in turn, the order reversed every other round, because this machine's memory
bandwidth swings by ~1.8x within minutes: only figures of one sitting compare. The prompts are
drawn anew for every round (seeded by --seed, the round and the scenario) and are the same for
every config of the round, so a cache only ever helps within one scenario's run, never from an
earlier round. Prompts are token ids (astr.v1.Tokenize of random common words, cut to the exact
length), sent as such (GenerateRequest.token_ids; llama-server's `"prompt": [ids]`), so a shared
prefix is exactly the same tokens.

Scenarios (--scenarios):
  a    shared system prompt: --shared-requests requests (at most --shared-concurrency in flight,
       default: all sent at once), each the same system prompt of --system-tokens tokens
       followed by a unique question of --question-tokens; greedy, ignore_eos, --max-tokens
       tokens.
  b    GRPO shape: --grpo-prompts unique prompts of --grpo-prompt-tokens tokens, each one request
       with n = --grpo-n samples (GenerateRequest.n), --grpo-max-tokens tokens, temperature
       --grpo-temperature with a fixed seed per prompt, ignore_eos; all requests at once.
  c    multi-turn replay: one --turns-turn conversation on one stream; turn k's prompt is the
       whole conversation so far (every earlier prompt and the model's replies, as token ids)
       plus a new --turn-tokens user turn; greedy, ignore_eos, --turn-max-tokens tokens.
  itl  inter-token latency under load: for each --itl-levels level, a wave of
       max(level, --itl-requests) unique --itl-prompt-tokens prompts with at most `level` in
       flight, --itl-max-tokens tokens each, greedy, ignore_eos (bench_http.py's shape).

Figures, client side, as bench_http.py defines them: TTFT (request sent -> first message carrying
a token), ITL (the gap between two token-carrying messages of one sample, divided evenly over the
message's tokens), wall time (first request sent -> last stream ended), output tokens/s (output
tokens / wall time), errors (failed requests, and samples that did not return exactly their
max tokens). Server side: `cached_tokens` is astr's usage.cached_tokens (prompt tokens whose K/V
came from the prefix cache), `computed_prefill_tokens` = prompt_tokens - cached_tokens; for
llama-server they are its final chunk's `timings.cache_n` and `timings.prompt_n` (its
`tokens_cached` is the slot's whole KV length after the request, prompt plus generated tokens,
not the reused count: it is kept as `slot_tokens`). `server` holds the deltas of astr's
GetServerStats counters over the run (steps, preemptions, refused requests). For a, b and c,
`same_output` compares each config's generated tokens with the first --config's of the same round
(greedy or seeded, so they should be equal whatever the cache does).
"""

import argparse
import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

import grpc
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_http as bh  # noqa: E402  (its processes, stubs, SSE parsing and statistics)

bh.LOG_NAME = "bench_prefix_cache"
log = bh.log
httpx = bh.httpx

SCENARIOS = {
    "a": "shared system prompt",
    "b": "GRPO shape (n samples per prompt)",
    "c": "multi-turn replay",
    "itl": "inter-token latency under load",
}
LLAMA = "llama_server"
LLAMA_SCENARIOS = ("a", "c")  # llama-server has no n; the brief's comparison is a and c
PREFIX_FLAG = "--prefix-cache"
STEP_FLAG = "--max-step-ms"
DEFAULT_CONFIGS = [("on", [PREFIX_FLAG]), ("off", ["--no-prefix-cache"])]


def parse_list(text, kind):
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"empty {kind} list")
    return items


def parse_levels(text):
    try:
        levels = [int(x) for x in parse_list(text, "level")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--itl-levels must be integers, got {text!r}") from None
    if min(levels) < 1:
        raise argparse.ArgumentTypeError(f"--itl-levels must be positive, got {text!r}")
    return levels


def parse_scenarios(text):
    names = parse_list(text, "scenario")
    bad = [s for s in names if s not in SCENARIOS]
    if bad:
        raise argparse.ArgumentTypeError(
            f"unknown scenario(s) {','.join(bad)}; expected some of {','.join(SCENARIOS)}")
    return list(dict.fromkeys(names))


def parse_config(text):
    """NAME[:FLAG,FLAG...] -> (name, [flags])."""
    name, _, flags = text.partition(":")
    name = name.strip()
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name == LLAMA:
        raise argparse.ArgumentTypeError(
            f"--config {text!r}: NAME must be letters, digits, '_', '.', '-' (not {LLAMA!r})")
    return name, [f.strip() for f in flags.split(",") if f.strip()]


def positive(text):
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return v


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Flag defaults shown, the epilog (the scenarios) kept as written."""


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="bench_prefix_cache.py",
        description="Prefix-cache benchmark: astr with the radix prefix cache on and off (and "
        "llama-server with cache_prompt), interleaved, over four scenarios; prints one JSON "
        "document on stdout. See the module docstring for what each figure is.",
        epilog=__doc__[__doc__.index("Scenarios (--scenarios):"):__doc__.index("Figures,")],
        formatter_class=HelpFormatter,
    )
    g = p.add_argument_group("servers")
    g.add_argument("--bin-dir", default=os.environ.get("ASTR_BIN_DIR")
                   or os.path.join(bh.REPO, "build", "bin"),
                   help="Directory of astr-worker and astr-scheduler.")
    g.add_argument("--model", default=None,
                   help="Model file of the started workers. Default: scripts/default_model.sh's "
                   "(SmolLM2-135M-Instruct Q4_1).")
    g.add_argument("--worker-threads", "--threads", dest="threads", type=positive, default=1,
                   help="--threads of every started astr-worker (match llama-server's -t).")
    g.add_argument("--kv-cache-mb", type=int, default=4096,
                   help="--kv-cache-mb of every started astr-worker. The default holds scenario "
                   "a's 64 prompts of ~1,040 tokens without a cache (SmolLM2-135M: ~45 KB per "
                   "token; 1024 MiB holds 23k), so `off` is not limited by KV pages; less "
                   "measures the cache's memory savings too (watch preemptions). Pages are "
                   "touched only when used.")
    g.add_argument("--worker-arg", action="append", default=[],
                   help="Extra flag for every started astr-worker (repeatable, e.g. "
                   "--worker-arg=--dtype=f32).")
    g.add_argument("--scheduler-arg", action="append", default=[],
                   help="Extra flag for every started astr-scheduler, whatever its config "
                   "(repeatable, passed as given).")
    g.add_argument("--config", action="append", type=parse_config, default=None,
                   metavar="NAME:FLAG,FLAG...",
                   help="One astr configuration: a name and the scheduler flags that make it, "
                   "comma-separated, values as --flag=value (repeatable; the first is the "
                   "reference of same_output). E.g. --config on:--prefix-cache "
                   "--config on-step20:--prefix-cache,--max-step-ms=20 --config "
                   "off:--no-prefix-cache. Default: on:--prefix-cache and off:--no-prefix-cache.")
    g.add_argument("--max-step-ms", type=int, default=None, metavar="N",
                   help="Add --max-step-ms=N (the latency-bounded step) to every config that does "
                   "not set it; dropped, with a note, when the scheduler has no such flag.")
    g.add_argument("--llama-server", default=None, metavar="URL",
                   help="Also run scenarios a and c on this running llama-server (base URL; "
                   "/completion with cache_prompt and token-id prompts). It must serve the same "
                   "GGUF (astr's token ids are sent), with -np >= --shared-concurrency slots and "
                   "-c large enough for that many system prompts + questions + --max-tokens, and "
                   "for the whole conversation of c in one slot.")
    g = p.add_argument_group("sitting")
    g.add_argument("--scenarios", type=parse_scenarios, default="a,b,c,itl",
                   help="Scenarios to run, in this order (a, b, c, itl; comma list).")
    g.add_argument("--rounds", type=positive, default=3,
                   help="Rounds: each runs every scenario on every config, interleaved.")
    g.add_argument("--warmup", type=int, default=2,
                   help="Unmeasured requests per server (unique short prompts) before round 0.")
    g.add_argument("--seed", type=int, default=1,
                   help="Seed of every prompt's words and of scenario b's sampling.")
    g.add_argument("--request-timeout-s", type=float, default=600.0,
                   help="A request still unfinished after this long counts as an error.")
    g = p.add_argument_group("scenario a: shared system prompt")
    g.add_argument("--shared-requests", type=positive, default=64,
                   help="Requests, each the system prompt + its own question.")
    g.add_argument("--shared-concurrency", type=positive, default=64,
                   help="Most requests in flight (the default sends them all at once). All "
                   "streams share one gRPC connection: above 64 the scheduler needs "
                   "--scheduler-arg=--max-calls-per-peer=N.")
    g.add_argument("--system-tokens", type=positive, default=1000,
                   help="Tokens of the shared system prompt.")
    g.add_argument("--question-tokens", type=positive, default=20,
                   help="Tokens of each request's unique question.")
    g.add_argument("--max-tokens", type=positive, default=16,
                   help="Tokens generated per request (greedy, ignore_eos).")
    g = p.add_argument_group("scenario b: GRPO shape")
    g.add_argument("--grpo-prompts", type=positive, default=8,
                   help="Unique prompts, one request each, all sent at once.")
    g.add_argument("--grpo-n", type=positive, default=16,
                   help="Samples per prompt (GenerateRequest.n; at most the scheduler's "
                   "--max-n).")
    g.add_argument("--grpo-prompt-tokens", type=positive, default=100,
                   help="Tokens per prompt.")
    g.add_argument("--grpo-max-tokens", type=positive, default=128,
                   help="Tokens generated per sample (ignore_eos).")
    g.add_argument("--grpo-temperature", type=float, default=1.0,
                   help="Sampling temperature (each request with its own fixed seed).")
    g = p.add_argument_group("scenario c: multi-turn replay")
    g.add_argument("--turns", type=positive, default=10, help="Turns of the conversation.")
    g.add_argument("--turn-tokens", type=positive, default=30,
                   help="Tokens of each new user turn.")
    g.add_argument("--turn-max-tokens", type=positive, default=32,
                   help="Tokens of each reply (greedy, ignore_eos: every reply has them all).")
    g = p.add_argument_group("scenario itl: inter-token latency under load")
    g.add_argument("--itl-levels", type=parse_levels, default="16,64",
                   help="Concurrency levels (streams in flight), comma list.")
    g.add_argument("--itl-requests", type=int, default=0,
                   help="Requests per level: max(level, this).")
    g.add_argument("--itl-prompt-tokens", type=positive, default=100,
                   help="Tokens per unique prompt.")
    g.add_argument("--itl-max-tokens", type=positive, default=64,
                   help="Tokens generated per request (greedy, ignore_eos).")
    p.add_argument("--smoke", action="store_true",
                   help="Tiny run for tests (about a minute at most, best on stories260K): 1 "
                   "round, 1 warm-up request; a: 4 requests of 48 + 8 tokens, 4 new; b: 2 "
                   "prompts of 16 tokens x n=2, 4 new; c: 3 turns of 8 tokens, 4 new; itl: level "
                   "2, 2 requests of 16 tokens, 4 new (overrides those flags).")
    args = p.parse_args(argv)
    if args.smoke:
        args.rounds, args.warmup = 1, 1
        args.shared_requests, args.shared_concurrency = 4, 4
        args.system_tokens, args.question_tokens, args.max_tokens = 48, 8, 4
        args.grpo_prompts, args.grpo_n, args.grpo_prompt_tokens, args.grpo_max_tokens = 2, 2, 16, 4
        args.turns, args.turn_tokens, args.turn_max_tokens = 3, 8, 4
        args.itl_levels, args.itl_requests = [2], 2
        args.itl_prompt_tokens, args.itl_max_tokens = 16, 4
    if args.warmup < 0 or args.itl_requests < 0:
        p.error("--warmup and --itl-requests must be >= 0")
    configs = args.config or DEFAULT_CONFIGS
    names = [name for name, _ in configs]
    if len(set(names)) != len(names):
        p.error(f"--config names must differ, got {','.join(names)}")
    args.config = [(name, list(flags)) for name, flags in configs]
    return args


# ---------------------------------------------------------------------------------------------
# Configurations against what this astr-scheduler offers


def scheduler_flags(bin_dir):
    """The long flags `astr-scheduler --help` lists (a boolean --x also takes --no-x)."""
    path = os.path.join(bin_dir, "astr-scheduler")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"no astr-scheduler in {bin_dir} (--bin-dir)")
    r = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    text = r.stdout + r.stderr
    flags = set(re.findall(r"(?m)^\s*(--[A-Za-z0-9][A-Za-z0-9-]*)", text))
    if "--workers" not in flags:
        raise RuntimeError(f"{path} --help lists no --workers flag (rc {r.returncode}): "
                           f"{text[:300]}")
    return flags


def _is_false(value):
    return value is not None and value.lower() in ("false", "0", "no", "off")


def plan_configs(configs, max_step_ms, known):
    """The configs this scheduler can run: [(name, flags)], [skipped], [notes].

    Flags it does not list: --prefix-cache skips its config (there is no cache to turn on),
    --no-prefix-cache and --max-step-ms are dropped (the build behaves as without them); any other
    raises ValueError. A dropped flag's separate value (a following non-flag item) goes too."""
    runnable, skipped, notes = [], [], []
    for name, flags in configs:
        flags = list(flags)
        if max_step_ms is not None and not any(f.split("=", 1)[0] == STEP_FLAG for f in flags):
            flags.append(f"{STEP_FLAG}={max_step_ms}")
        kept, skip, i = [], None, 0
        while i < len(flags):
            arg = flags[i]
            i += 1
            if not arg.startswith("--"):
                kept.append(arg)
                continue
            flag, eq, value = arg.partition("=")
            base = "--" + flag[5:] if flag.startswith("--no-") else flag
            if flag in known or base in known:
                kept.append(arg)
                continue
            if base == PREFIX_FLAG and flag == PREFIX_FLAG and not _is_false(value if eq else None):
                skip = f"this astr-scheduler has no {PREFIX_FLAG} flag"
                break
            if base not in (PREFIX_FLAG, STEP_FLAG):
                raise ValueError(f"--config {name}: astr-scheduler has no flag {flag}")
            notes.append(f"config {name}: dropped {arg} (this astr-scheduler has no {base} flag)")
            if not eq and i < len(flags) and not flags[i].startswith("--"):
                i += 1  # its value
        if skip:
            skipped.append({"name": name, "scheduler_args": flags, "reason": skip})
            notes.append(f"config {name} skipped: {skip}")
        else:
            runnable.append((name, kept))
    return runnable, skipped, notes


# ---------------------------------------------------------------------------------------------
# One request on each kind of server


class Result(bh.StreamResult):
    """bench_http's per-stream figures, per sample of an n > 1 request, plus the cache counts."""

    __slots__ = ("cached_tokens", "computed_tokens", "slot_tokens", "outputs", "_t_prev")

    def __init__(self):
        super().__init__()
        self.cached_tokens = None
        self.computed_tokens = None  # set by servers that report it (llama-server)
        self.slot_tokens = None
        self.outputs = {}  # sample index -> generated token ids
        self._t_prev = {}

    def on_sample(self, index, ids, t0):
        if not ids:
            return
        self.outputs.setdefault(index, []).extend(ids)
        if self.ttft_s is None or index in self._t_prev:
            self._t_prev[index] = self.on_tokens(len(ids), t0, self._t_prev.get(index, t0))
        else:  # another sample's first tokens: no gap within that sample yet
            self._t_prev[index] = time.perf_counter()
            self.tokens += len(ids)

    def computed(self, prompt_len):
        if self.computed_tokens is not None:
            return self.computed_tokens
        prompt = self.prompt_tokens if self.prompt_tokens is not None else prompt_len
        return prompt - (self.cached_tokens or 0)


class Target:
    """One server of the sitting: an astr config's scheduler, or llama-server."""

    def __init__(self, name, kind):
        self.name = name
        self.kind = kind  # "astr" or "llama"

    async def stream(self, ids, max_tokens, res, n=1, temperature=0.0, seed=None):
        raise NotImplementedError

    async def stats(self):
        return None

    async def close(self):
        pass


class AstrTarget(Target):
    def __init__(self, name, grpc_addr, pb, pb_grpc, timeout_s):
        super().__init__(name, "astr")
        self.pb = pb
        self.timeout_s = timeout_s
        # One channel (one HTTP/2 connection) for all streams, as a client library would use.
        self.channel = grpc.aio.insecure_channel(grpc_addr)
        self.stub = pb_grpc.GenerateStub(self.channel)

    async def stream(self, ids, max_tokens, res, n=1, temperature=0.0, seed=None):
        pb = self.pb
        req = pb.GenerateRequest(token_ids=pb.TokenIds(ids=ids), n=n)
        req.sampling.temperature = temperature
        req.sampling.ignore_eos = True
        req.sampling.max_tokens = max_tokens
        if seed is not None:
            req.sampling.seed = seed
        t0 = time.perf_counter()
        async for m in self.stub.GenerateStream(req, timeout=self.timeout_s):
            res.on_sample(m.index, list(m.token_ids), t0)
            if m.HasField("usage"):
                res.usage_tokens = m.usage.completion_tokens
                res.prompt_tokens = m.usage.prompt_tokens
                res.cached_tokens = m.usage.cached_tokens
        res.end_s = time.perf_counter() - t0

    async def tokenize(self, text, special):
        r = await self.stub.Tokenize(
            self.pb.TokenizeRequest(text=text, add_special_tokens=special), timeout=60)
        return list(r.token_ids)

    async def stats(self):
        s = await self.stub.GetServerStats(self.pb.GetServerStatsRequest(), timeout=60)
        return {"steps": s.steps, "preemptions": s.preemptions,
                "requests_refused": s.requests_refused}

    async def close(self):
        await self.channel.close()


class LlamaTarget(Target):
    def __init__(self, base_url, connections, timeout_s):
        super().__init__(LLAMA, "llama")
        self.url = f"{base_url.rstrip('/')}/completion"
        self.timeout_s = timeout_s
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        self.client = httpx.AsyncClient(limits=limits)

    async def stream(self, ids, max_tokens, res, n=1, temperature=0.0, seed=None):
        if n != 1:
            raise ValueError("llama-server's /completion has no n")
        # llama-server's own fields (tools/server/server-schema.cpp): n_predict, ignore_eos,
        # cache_prompt; each streamed chunk carries its token in `tokens`, the last one
        # (`stop: true`) the timings.
        body = {"prompt": ids, "n_predict": max_tokens, "temperature": temperature,
                "ignore_eos": True, "cache_prompt": True, "stream": True, "return_tokens": True}
        if seed is not None:
            body["seed"] = seed
        t0 = time.perf_counter()
        async with self.client.stream("POST", self.url, json=body, timeout=self.timeout_s) as r:
            if r.status_code != 200:
                text = (await r.aread()).decode("utf-8", "replace")
                raise RuntimeError(f"HTTP {r.status_code}: {text[:300]}")
            async for ev in bh.sse_events(r):
                if "error" in ev:
                    raise RuntimeError(f"error event: {json.dumps(ev)[:300]}")
                res.on_sample(0, ev.get("tokens") or [], t0)
                if ev.get("stop"):
                    timings = ev.get("timings") or {}
                    res.prompt_tokens = ev.get("tokens_evaluated")
                    res.usage_tokens = ev.get("tokens_predicted")
                    res.cached_tokens = timings.get("cache_n")
                    res.computed_tokens = timings.get("prompt_n")
                    res.slot_tokens = ev.get("tokens_cached")
        res.end_s = time.perf_counter() - t0

    async def close(self):
        await self.client.aclose()


# ---------------------------------------------------------------------------------------------
# Prompts


class PromptMaker:
    """Token-id prompts of exact lengths: random common words, tokenized by the served model."""

    def __init__(self, target, seed):
        self.target = target
        self.seed = seed

    def rng(self, *key):
        return random.Random(":".join(str(k) for k in (self.seed,) + key))

    async def ids(self, rng, label, n_tokens, special):
        """`label` (keeps prompts unique from their first tokens) + words, cut to n_tokens."""
        words = n_tokens
        while True:
            text = label + " ".join(rng.choice(bh.WORDS) for _ in range(words))
            ids = await self.target.tokenize(text, special)
            if len(ids) >= n_tokens:
                return ids[:n_tokens]
            words *= 2

    async def unique(self, rng, tag, count, n_tokens):
        return [await self.ids(rng, f"{tag}-{i}. ", n_tokens, True) for i in range(count)]


async def make_data(args, maker, scenario, rnd):
    rng = maker.rng("round", rnd, scenario)
    if scenario == "a":
        system = await maker.ids(rng, f"System {rnd}. ", args.system_tokens, True)
        questions = [await maker.ids(rng, f" Question {rnd}-{i}: ", args.question_tokens, False)
                     for i in range(args.shared_requests)]
        return {"prompts": [system + q for q in questions]}
    if scenario == "b":
        prompts = await maker.unique(rng, f"g{rnd}", args.grpo_prompts, args.grpo_prompt_tokens)
        seeds = [rng.randrange(1, 2**63) for _ in prompts]
        return {"prompts": prompts, "seeds": seeds}
    if scenario == "c":
        turns = [await maker.ids(rng, f"Turn {rnd}-{k}: " if k == 0 else f" Turn {rnd}-{k}: ",
                                 args.turn_tokens, k == 0) for k in range(args.turns)]
        return {"turns": turns}
    levels = {}
    for level in args.itl_levels:
        count = max(level, args.itl_requests)
        levels[level] = await maker.unique(rng, f"i{rnd}-{level}", count, args.itl_prompt_tokens)
    return {"levels": levels}


# ---------------------------------------------------------------------------------------------
# Scenarios: each returns (figures for the JSON, private lists for the summary, outputs)


async def wave(target, prompts, concurrency, max_tokens, **kw):
    """Every prompt as one stream, at most `concurrency` in flight; returns (results, wall_s)."""
    sem = asyncio.Semaphore(concurrency)
    results = [Result() for _ in prompts]

    async def one(i):
        async with sem:
            try:
                await target.stream(prompts[i], max_tokens, results[i],
                                    **{k: v[i] for k, v in kw.items()})
            except Exception as e:  # noqa: BLE001 - every failure is a counted error
                results[i].error = f"{type(e).__name__}: {e}"[:300]

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(len(prompts))))
    return results, time.perf_counter() - t0


def wave_figures(results, prompts, wall_s, expected_tokens):
    """bench_http's per-wave figures plus the prompt / cached / computed token sums."""
    fig = bh.summarize_level(results, wall_s, expected_tokens)
    ok = [(r, p) for r, p in zip(results, prompts) if r.error is None]
    private = {k: fig.pop(k) for k in ("ttft_s", "itl_s", "e2e_s")}
    fig.pop("prompt_tokens_mean")
    fig["prompt_tokens"] = sum(r.prompt_tokens if r.prompt_tokens is not None else len(p)
                               for r, p in ok)
    fig["cached_tokens"] = sum(r.cached_tokens or 0 for r, _ in ok)
    fig["computed_prefill_tokens"] = sum(r.computed(len(p)) for r, p in ok)
    slots = [r.slot_tokens for r, _ in ok if r.slot_tokens is not None]
    if slots:
        fig["slot_tokens"] = sum(slots)
    fig["ttft_ms_p50"] = bh.pct_ms(private["ttft_s"], 50)
    fig["ttft_ms_p99"] = bh.pct_ms(private["ttft_s"], 99)
    fig["tokens_per_s"] = round(fig["tokens_per_s"], 2)
    fig["wall_s"] = round(fig["wall_s"], 3)
    return fig, private


def outputs_of(results):
    return [None if r.error else [r.outputs.get(i, []) for i in sorted(r.outputs)]
            for r in results]


async def run_a(args, target, data):
    prompts = data["prompts"]
    results, wall = await wave(target, prompts, args.shared_concurrency, args.max_tokens)
    fig, private = wave_figures(results, prompts, wall, args.max_tokens)
    return fig, private, outputs_of(results)


async def run_b(args, target, data):
    prompts = data["prompts"]
    count = len(prompts)
    results, wall = await wave(target, prompts, count, args.grpo_max_tokens,
                               n=[args.grpo_n] * count,
                               temperature=[args.grpo_temperature] * count, seed=data["seeds"])
    fig, private = wave_figures(results, prompts, wall, args.grpo_n * args.grpo_max_tokens)
    fig["samples"] = count * args.grpo_n
    return fig, private, outputs_of(results)


async def run_c(args, target, data):
    conversation, turns, errors, replies = [], [], [], []
    t0 = time.perf_counter()
    for k, user in enumerate(data["turns"]):
        prompt = conversation + user
        r = Result()
        try:
            await target.stream(prompt, args.turn_max_tokens, r)
        except Exception as e:  # noqa: BLE001 - a counted error; the conversation stops there
            r.error = f"{type(e).__name__}: {e}"[:300]
        if r.error is None and r.tokens != args.turn_max_tokens:
            r.error = f"streamed {r.tokens} tokens, expected {args.turn_max_tokens}"
        if r.error:
            errors.append(f"turn {k + 1}: {r.error}")
            break
        reply = r.outputs.get(0, [])
        replies.append(reply)
        turn = {
            "turn": k + 1,
            "prompt_tokens": r.prompt_tokens if r.prompt_tokens is not None else len(prompt),
            "cached_tokens": r.cached_tokens or 0,
            "computed_prefill_tokens": r.computed(len(prompt)),
            "ttft_ms": round(r.ttft_s * 1e3, 2),
        }
        if r.slot_tokens is not None:
            turn["slot_tokens"] = r.slot_tokens
        turns.append(turn)
        conversation = prompt + reply
    wall = time.perf_counter() - t0
    fig = {
        "wall_s": round(wall, 3),
        "turns_done": len(turns),
        "errors": len(errors),
        "error_samples": errors[:3],
        "prompt_tokens": sum(t["prompt_tokens"] for t in turns),
        "cached_tokens": sum(t["cached_tokens"] for t in turns),
        "computed_prefill_tokens": sum(t["computed_prefill_tokens"] for t in turns),
        "ttft_ms_sum": round(sum(t["ttft_ms"] for t in turns), 2),
        "turns": turns,
    }
    return fig, {}, [[reply] for reply in replies]


async def run_itl(args, target, data):
    levels, private, outputs = {}, {}, []
    for level, prompts in data["levels"].items():
        results, wall = await wave(target, prompts, level, args.itl_max_tokens)
        fig, priv = wave_figures(results, prompts, wall, args.itl_max_tokens)
        fig["itl_ms_p50"] = bh.pct_ms(priv["itl_s"], 50)
        fig["itl_ms_p99"] = bh.pct_ms(priv["itl_s"], 99)
        levels[str(level)] = fig
        private[str(level)] = priv
        outputs.extend(outputs_of(results))
    fig = {"errors": sum(f["errors"] for f in levels.values()), "levels": levels}
    return fig, private, outputs


RUNNERS = {"a": run_a, "b": run_b, "c": run_c, "itl": run_itl}


def same_output(outputs, reference):
    pairs = [(o, r) for o, r in zip(outputs, reference) if o is not None and r is not None]
    return {"same": sum(o == r for o, r in pairs), "compared": len(pairs)}


# ---------------------------------------------------------------------------------------------
# The sitting


async def warm_up(args, targets, maker):
    if not args.warmup:
        return
    rng = maker.rng("warmup")
    prompts = await maker.unique(rng, "w", args.warmup, min(args.itl_prompt_tokens, 32))
    for t in targets:
        log(f"warm-up, {t.name}: {args.warmup} requests")
        results, _ = await wave(t, prompts, 1, 4)
        failed = [r.error for r in results if r.error]
        if failed:
            raise RuntimeError(f"warm-up on {t.name} failed: {failed[:2]}")


def stats_delta(before, after):
    if before is None or after is None:
        return None
    return {k: after[k] - before[k] for k in after}


async def bench(args, astr_targets, llama):
    maker = PromptMaker(astr_targets[0], args.seed)
    everyone = astr_targets + ([llama] if llama else [])
    await warm_up(args, everyone, maker)
    reference = astr_targets[0].name
    runs = []
    for rnd in range(args.rounds):
        for scenario in args.scenarios:
            data = await make_data(args, maker, scenario, rnd)
            targets = list(astr_targets)
            if llama and scenario in LLAMA_SCENARIOS:
                targets.append(llama)
            order = targets if rnd % 2 == 0 else targets[::-1]
            outputs, done = {}, []
            for t in order:
                log(f"round {rnd}, scenario {scenario}: {t.name}")
                before = await t.stats()
                fig, private, outs = await RUNNERS[scenario](args, t, data)
                delta = stats_delta(before, await t.stats())
                run = {"round": rnd, "scenario": scenario, "target": t.name, **fig}
                if delta is not None:
                    run["server"] = delta
                run["_private"] = private
                outputs[t.name] = outs
                done.append((t, run))
                log(f"  {progress_line(scenario, run)}")
            for t, run in done:  # in the order they ran
                if scenario != "itl" and t.kind == "astr" and t.name != reference:
                    run["same_output"] = {"reference": reference,
                                          **same_output(outputs[t.name], outputs[reference])}
                runs.append(run)
    summary = summarize(args, runs, [t.name for t in everyone])
    for run in runs:
        del run["_private"]
    return runs, summary


def progress_line(scenario, run):
    if scenario == "c":
        return (f"{run['turns_done']} turns in {run['wall_s']:.2f} s, TTFT sum "
                f"{run['ttft_ms_sum']:.0f} ms, cached {run['cached_tokens']}, computed "
                f"{run['computed_prefill_tokens']}, errors {run['errors']}")
    if scenario == "itl":
        return "; ".join(f"level {lv}: {f['tokens_per_s']:.1f} tok/s, ITL p50 {f['itl_ms_p50']} "
                         f"ms, errors {f['errors']}" for lv, f in run["levels"].items())
    return (f"{run['tokens_per_s']:.1f} tok/s, {run['requests']} requests in "
            f"{run['wall_s']:.2f} s, TTFT p50 {run['ttft_ms_p50']} ms, cached "
            f"{run['cached_tokens']}, errors {run['errors']}")


def med(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    m = float(np.median(values))
    return int(m) if m.is_integer() else round(m, 2)


def summarize(args, runs, target_names):
    """Per scenario and target: the rounds folded together (latencies pooled, sums per round as
    series: median, min, one value per round)."""
    summary = {}
    for scenario in args.scenarios:
        summary[scenario] = {}
        for name in target_names:
            rs = [r for r in runs if r["scenario"] == scenario and r["target"] == name]
            if not rs:
                continue
            if scenario in ("a", "b"):
                fig = wave_summary(rs, [r["_private"] for r in rs])
            elif scenario == "c":
                fig = multi_turn_summary(rs)
            else:
                fig = {"levels": {}, "errors": sum(r["errors"] for r in rs)}
                for level in rs[0]["levels"]:
                    sub = [r["levels"][level] for r in rs]
                    priv = [r["_private"][level] for r in rs]
                    lf = wave_summary(sub, priv)
                    itl = [x for p in priv for x in p["itl_s"]]
                    lf["itl_ms_p50"] = bh.pct_ms(itl, 50)
                    lf["itl_ms_p99"] = bh.pct_ms(itl, 99)
                    fig["levels"][level] = lf
            same = [r["same_output"] for r in rs if "same_output" in r]
            if same:
                fig["same_output"] = {"reference": same[0]["reference"],
                                      "same": sum(s["same"] for s in same),
                                      "compared": sum(s["compared"] for s in same)}
            summary[scenario][name] = fig
    return summary


def wave_summary(rs, privs):
    ttft = [x for p in privs for x in p["ttft_s"]]
    e2e = [x for p in privs for x in p["e2e_s"]]
    fig = {
        "wall_s": bh.series([r["wall_s"] for r in rs], 3),
        "tokens_per_s": bh.series([r["tokens_per_s"] for r in rs]),
        "ttft_ms_p50": bh.pct_ms(ttft, 50), "ttft_ms_p99": bh.pct_ms(ttft, 99),
        "e2e_ms_p50": bh.pct_ms(e2e, 50),
        "prompt_tokens": bh.series([r["prompt_tokens"] for r in rs]),
        "cached_tokens": bh.series([r["cached_tokens"] for r in rs]),
        "computed_prefill_tokens": bh.series([r["computed_prefill_tokens"] for r in rs]),
        "requests": sum(r["requests"] for r in rs),
        "errors": sum(r["errors"] for r in rs),
    }
    if all("server" in r for r in rs):
        fig["preemptions"] = sum(r["server"]["preemptions"] for r in rs)
    return fig


def multi_turn_summary(rs):
    turns = []
    for k in range(max(r["turns_done"] for r in rs)):
        at = [r["turns"][k] for r in rs if len(r["turns"]) > k]
        turn = {"turn": k + 1}
        for key in ("prompt_tokens", "cached_tokens", "computed_prefill_tokens", "ttft_ms"):
            turn[key] = med([t[key] for t in at])
        turns.append(turn)
    return {
        "turns": turns,
        "ttft_ms_sum": bh.series([r["ttft_ms_sum"] for r in rs]),
        "wall_s": bh.series([r["wall_s"] for r in rs], 3),
        "prompt_tokens": bh.series([r["prompt_tokens"] for r in rs]),
        "cached_tokens": bh.series([r["cached_tokens"] for r in rs]),
        "computed_prefill_tokens": bh.series([r["computed_prefill_tokens"] for r in rs]),
        "errors": sum(r["errors"] for r in rs),
    }


async def amain(args, clusters, pb, pb_grpc):
    astr_targets = [AstrTarget(name, addr, pb, pb_grpc, args.request_timeout_s)
                    for name, addr in clusters]
    llama = None
    if args.llama_server:
        llama = LlamaTarget(args.llama_server, args.shared_concurrency + 8,
                            args.request_timeout_s)
    try:
        return await bench(args, astr_targets, llama)
    finally:
        for t in astr_targets + ([llama] if llama else []):
            await t.close()


def _on_sigterm(signum, frame):
    raise SystemExit(128 + signum)  # unwinds through main's finally: every server is stopped


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    started = []
    log_dir = tempfile.mkdtemp(prefix="bench-prefix-cache-logs-")
    stub_dir = None
    try:
        known = scheduler_flags(args.bin_dir)
        try:
            configs, skipped, notes = plan_configs(args.config, args.max_step_ms, known)
        except ValueError as e:
            log(str(e))
            return 2
        if not configs:
            log("no config can run on this astr-scheduler: " + "; ".join(notes))
            return 2
        for note in notes:
            log(note)
        stub_dir, pb, pb_grpc = bh.load_stubs()
        args.model = args.model or bh.default_model()
        clusters = []
        for name, flags in configs:
            servers, grpc_addr, http_url = bh.start_astr(
                args, log_dir, tag=f"-{name}", scheduler_args=args.scheduler_arg + flags)
            started.extend(servers)
            bh.wait_http_ready(http_url)
            clusters.append((name, grpc_addr))
        if args.llama_server:
            bh.wait_http_ready(args.llama_server.rstrip("/"))
        start_info = bh.machine_info()
        t_start = time.time()
        runs, summary = asyncio.run(amain(args, clusters, pb, pb_grpc))
        doc = {
            "benchmark": "bench_prefix_cache",
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start)),
            "duration_s": round(time.time() - t_start, 1),
            "prefix_cache_flag": PREFIX_FLAG in known,
            "max_step_ms_flag": STEP_FLAG in known,
            "notes": notes,
            "config": {
                "model": args.model, "worker_threads": args.threads,
                "kv_cache_mb": args.kv_cache_mb, "worker_args": args.worker_arg,
                "scheduler_args": args.scheduler_arg,
                "configs": [{"name": n, "scheduler_args": f} for n, f in configs],
                "skipped_configs": skipped,
                "llama_server": args.llama_server,
                "scenarios": {s: SCENARIOS[s] for s in args.scenarios},
                "rounds": args.rounds, "warmup": args.warmup, "seed": args.seed,
                "a": {"requests": args.shared_requests, "concurrency": args.shared_concurrency,
                      "system_tokens": args.system_tokens,
                      "question_tokens": args.question_tokens, "max_tokens": args.max_tokens},
                "b": {"prompts": args.grpo_prompts, "n": args.grpo_n,
                      "prompt_tokens": args.grpo_prompt_tokens,
                      "max_tokens": args.grpo_max_tokens, "temperature": args.grpo_temperature},
                "c": {"turns": args.turns, "turn_tokens": args.turn_tokens,
                      "max_tokens": args.turn_max_tokens},
                "itl": {"levels": args.itl_levels,
                        "requests": args.itl_requests or "level",
                        "prompt_tokens": args.itl_prompt_tokens,
                        "max_tokens": args.itl_max_tokens},
            },
            "machine": {**start_info, "loadavg_end": list(os.getloadavg())},
            "summary": summary,
            "runs": runs,
        }
        return bh.write_document(doc, runs)
    except BaseException:
        log(f"failed; server logs kept in {log_dir}")
        log_dir = None
        raise
    finally:
        bh.cleanup(started, stub_dir, log_dir)


if __name__ == "__main__":
    sys.exit(main())
