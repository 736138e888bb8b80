#!/usr/bin/env python3
"""bench_http.py: streaming serving over astr's OpenAI-compatible HTTP API (SSE) against its gRPC
API (astr.v1.Generate/GenerateStream), and optionally against llama.cpp's llama-server; one JSON
document on stdout, progress on stderr.

    .cache/venv/bin/python tools/bench_http.py --levels 1,16,64 --rounds 3 \\
        --llama-server http://127.0.0.1:8080

It starts one astr-worker and one astr-scheduler (--http-listen) on 127.0.0.1, or attaches to
running ones (--grpc / --http). For each round, each concurrency level and each server in turn
(astr HTTP, astr gRPC, llama-server; the order reversed every other round) it sends --requests
streaming completions with at most `level` in flight: a unique prompt of --prompt-words words
(~1.05 tokens each), greedy, ignore_eos, --max-tokens tokens each. The servers are interleaved
because this machine's memory bandwidth swings by ~1.8x within minutes: only figures of one
sitting compare.

Per stream, client side: TTFT (request sent -> first chunk carrying a token) and inter-token
latencies (the gap between two token-carrying chunks, divided evenly over the chunk's tokens).
Per server and level: aggregate output tokens/s (tokens / wall time from the first request sent to
the last stream's end), TTFT and ITL p50/p99, errors (failed requests, and streams that did not
return exactly --max-tokens tokens).

Tokens are counted from the streams themselves: astr's HTTP chunks carry `token_ids`
(`return_token_ids: true`), its gRPC messages `token_ids`; llama-server's chunks carry one token
each. The final usage (HTTP `stream_options.include_usage`, gRPC `usage`, llama-server's usage)
is the check on the count.
"""

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

import grpc
import numpy as np

try:
    import httpx
except ImportError:  # the project venv has the httpx2 fork (same API) through openai
    import httpx2 as httpx

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A fixed vocabulary of plain English words: prompts are random sequences of them, so that no two
# prompts share a prefix longer than a few tokens (no prefix-cache hits on either server).
WORDS = (
    "the of and to in is was for on that with as by at from his her they which this be are had "
    "not but have one all were when an their there been has more if will would who so no out up "
    "into than them can only other new some could time these two may first then do any like my "
    "now over such our man me even most made after also did many before must through back years "
    "where much your way well down should because each just those people how too little state "
    "good very make world still own see men work long get here between both life being under "
    "never day same another know while last might us great old year off come since against go "
    "came right used take three river garden window letter market silver winter music paper "
    "station forest engine doctor island mountain valley bridge harbor lantern meadow orchard"
).split()


# The name log lines start with (a program that imports this module sets its own).
LOG_NAME = "bench_http"


def log(msg):
    print(f"[{LOG_NAME} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_levels(text):
    levels = [int(x) for x in text.split(",") if x.strip()]
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"--levels must be positive integers, got {text!r}")
    return levels


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="bench_http.py",
        description="Streaming serving benchmark: astr HTTP (SSE) vs astr gRPC GenerateStream "
        "vs llama-server, interleaved; prints one JSON document on stdout.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--bin-dir", default=os.environ.get("ASTR_BIN_DIR")
                   or os.path.join(REPO, "build", "bin"),
                   help="Directory of astr-worker and astr-scheduler (when they are started here).")
    p.add_argument("--model", default=None,
                   help="Model file for the started worker. Default: scripts/default_model.sh's.")
    p.add_argument("--threads", type=int, default=1,
                   help="--threads of the started astr-worker (match llama-server's -t).")
    p.add_argument("--kv-cache-mb", type=int, default=1024,
                   help="--kv-cache-mb of the started astr-worker.")
    p.add_argument("--worker-arg", action="append", default=[],
                   help="Extra flag for the started astr-worker (repeatable, e.g. "
                   "--worker-arg=--dtype=f32).")
    p.add_argument("--scheduler-arg", action="append", default=[],
                   help="Extra flag for the started astr-scheduler (repeatable).")
    p.add_argument("--grpc", default=None, metavar="HOST:PORT",
                   help="Attach to a running astr-scheduler's gRPC API instead of starting "
                   "one (needs --http too).")
    p.add_argument("--http", default=None, metavar="URL",
                   help="Base URL of the attached scheduler's HTTP API, e.g. "
                   "http://127.0.0.1:8000.")
    p.add_argument("--llama-server", default=None, metavar="URL",
                   help="Also benchmark this llama-server (base URL; /v1/completions is used). It "
                   "must serve the same model with -np >= the largest level and -c large enough "
                   "for that many prompts + --max-tokens.")
    p.add_argument("--transports", default="http,grpc",
                   help="Which astr transports to measure: http, grpc or both (comma list).")
    p.add_argument("--levels", type=parse_levels, default="1,16,64",
                   help="Concurrency levels (streams in flight), comma list.")
    p.add_argument("--requests", type=int, default=0,
                   help="Requests per level, server and round; 0 = max(4, level): one wave.")
    p.add_argument("--rounds", type=int, default=3,
                   help="Rounds: each runs every level on every server, interleaved.")
    p.add_argument("--max-tokens", type=int, default=64,
                   help="Tokens generated per request (ignore_eos: every request generates "
                   "them all).")
    p.add_argument("--prompt-words", type=int, default=96,
                   help="Words per prompt (~1.05 tokens per word with SmolLM2's tokenizer: ~100 "
                   "tokens; the JSON has the served prompt_tokens_mean).")
    p.add_argument("--warmup", type=int, default=2,
                   help="Unmeasured requests per server before the first round.")
    p.add_argument("--request-timeout-s", type=float, default=300.0,
                   help="A request still unfinished after this long counts as an error.")
    p.add_argument("--seed", type=int, default=1, help="Seed of the prompts' words.")
    p.add_argument("--smoke", action="store_true",
                   help="Tiny run for tests: levels 1,2, 2 requests, 4 tokens, 8-word prompts, "
                   "1 round, no warm-up (overrides those flags).")
    args = p.parse_args(argv)
    if args.smoke:
        args.levels, args.requests, args.max_tokens = [1, 2], 2, 4
        args.prompt_words, args.rounds, args.warmup = 8, 1, 0
    args.transports = [t for t in args.transports.split(",") if t]
    bad = [t for t in args.transports if t not in ("http", "grpc")]
    if bad or not args.transports:
        p.error(f"--transports: expected http and/or grpc, got {bad or 'nothing'}")
    if bool(args.grpc) != bool(args.http):
        p.error("--grpc and --http attach together (both or neither)")
    if args.rounds < 1 or args.max_tokens < 1 or args.prompt_words < 1 or args.requests < 0:
        p.error("--rounds, --max-tokens and --prompt-words must be >= 1, --requests >= 0")
    return args


# ---------------------------------------------------------------------------------------------
# astr processes


_SETPRIV = shutil.which("setpriv")


class Server:
    """One started astr-worker or astr-scheduler, its output in a log file; dies with us."""

    def __init__(self, name, argv, log_dir):
        self.name = name
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self._log = open(self.log_path, "wb")
        # PR_SET_PDEATHSIG through setpriv: a killed benchmark leaves no server behind.
        full = ([_SETPRIV, "--pdeathsig", "KILL", "--"] if _SETPRIV else []) + argv
        log(f"starting {name}: {' '.join(argv)}")
        self.proc = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT)

    def wait_for(self, pattern, timeout_s=120):
        """Waits for `pattern` (groups HOST, PORT) in the log; returns "HOST:PORT"."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            with open(self.log_path, "rb") as f:
                m = re.search(pattern, f.read().decode("utf-8", "replace"))
            if m:
                return f"{m.group(1)}:{m.group(2)}"
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; log: "
                                   f"{self.log_path}")
            time.sleep(0.05)
        raise RuntimeError(f"{self.name}: no {pattern!r} in {timeout_s} s; log: {self.log_path}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def default_model():
    r = subprocess.run([os.path.join(REPO, "scripts", "default_model.sh")], capture_output=True,
                       text=True, cwd=REPO, timeout=60)
    path = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    if r.returncode != 0 or not os.path.exists(path):
        raise RuntimeError(f"scripts/default_model.sh found no model: {r.stderr.strip()}")
    return path


def start_astr(args, log_dir, tag="", scheduler_args=None):
    """Starts a worker and a scheduler; returns (servers, grpc address, http base URL).

    `tag` is appended to their names (and log files), so several pairs can run side by side;
    `scheduler_args` replaces args.scheduler_arg as the scheduler's extra flags."""
    if scheduler_args is None:
        scheduler_args = args.scheduler_arg
    worker = Server(f"worker{tag}", [
        os.path.join(args.bin_dir, "astr-worker"), "--model", args.model,
        "--listen", "127.0.0.1:0", "--backend", "cpu", "--threads", str(args.threads),
        "--kv-cache-mb", str(args.kv_cache_mb)] + args.worker_arg, log_dir)
    servers = [worker]
    try:
        worker_addr = worker.wait_for(r"listening on (\S+):(\d+)")
        sched = Server(f"scheduler{tag}", [
            os.path.join(args.bin_dir, "astr-scheduler"), "--workers", worker_addr,
            "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--admin-listen", ""]
            + list(scheduler_args), log_dir)
        servers.insert(0, sched)
        grpc_addr = sched.wait_for(r"listening on (\S+):(\d+)")
        http_addr = sched.wait_for(r"http api on (\S+):(\d+)")
    except BaseException:
        for s in servers:
            s.stop()
        raise
    return servers, grpc_addr, f"http://{http_addr}"


def wait_http_ready(base_url, timeout_s=120):
    """Polls GET /health (astr and llama-server both serve it) until 200."""
    end = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < end:
        try:
            r = httpx.get(f"{base_url}/health", timeout=5)
            if r.status_code == 200:
                return
            last = r.status_code
        except httpx.HTTPError as e:
            last = repr(e)
        time.sleep(0.2)
    raise RuntimeError(f"{base_url}/health not 200 after {timeout_s} s (last: {last})")


def served_model(base_url):
    """The model id astr's HTTP API serves (requests must name it)."""
    r = httpx.get(f"{base_url}/v1/models", timeout=30)
    r.raise_for_status()
    return r.json()["data"][0]["id"]


def load_stubs():
    """The astr.v1 modules generated from this tree's protos (as the integration harness does)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "astr_sdk_protogen", os.path.join(REPO, "sdk", "python", "protogen.py"))
    protogen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(protogen)
    out = tempfile.mkdtemp(prefix="bench-http-stubs-")
    protogen.stage(out, os.path.join(REPO, "protos"))
    protogen.activate(out)
    from astr.v1 import generate_pb2, generate_pb2_grpc

    return out, generate_pb2, generate_pb2_grpc


# ---------------------------------------------------------------------------------------------
# One stream per client kind. Each returns a StreamResult; `t0` is taken just before the request
# is sent.


class StreamResult:
    __slots__ = ("ttft_s", "itl_s", "tokens", "usage_tokens", "prompt_tokens", "end_s", "error")

    def __init__(self):
        self.ttft_s = None
        self.itl_s = []
        self.tokens = 0
        self.usage_tokens = None
        self.prompt_tokens = None
        self.end_s = None
        self.error = None

    def on_tokens(self, count, t0, t_prev):
        """Records a chunk of `count` tokens arriving now; returns the new arrival time."""
        now = time.perf_counter()
        if count <= 0:
            return t_prev
        if self.ttft_s is None:
            self.ttft_s = now - t0
        else:
            self.itl_s.extend([(now - t_prev) / count] * count)
        self.tokens += count
        return now


async def sse_events(response):
    """The JSON payloads of an SSE response's `data:` lines, until `data: [DONE]`."""
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue  # blank separators, comments (": ping"), event names
        data = line[5:].strip()
        if data == "[DONE]":
            return
        yield json.loads(data)


async def http_stream(client, url, body, res, timeout_s, count_tokens):
    """One /v1/completions SSE stream; `count_tokens(choice)` says how many tokens a chunk adds."""
    t0 = time.perf_counter()
    t_prev = t0
    async with client.stream("POST", url, json=body, timeout=timeout_s) as r:
        if r.status_code != 200:
            text = (await r.aread()).decode("utf-8", "replace")
            raise RuntimeError(f"HTTP {r.status_code}: {text[:300]}")
        async for ev in sse_events(r):
            if "error" in ev:
                raise RuntimeError(f"error event: {json.dumps(ev)[:300]}")
            for choice in ev.get("choices") or []:
                t_prev = res.on_tokens(count_tokens(choice), t0, t_prev)
            usage = ev.get("usage")
            if usage:
                res.usage_tokens = usage.get("completion_tokens")
                res.prompt_tokens = usage.get("prompt_tokens")
    res.end_s = time.perf_counter() - t0


def astr_http_body(model, prompt, max_tokens):
    return {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
            "return_token_ids": True}


def llama_body(prompt, max_tokens):
    # llama-server: max_tokens is its n_predict; ignore_eos and cache_prompt are its own fields.
    return {"prompt": prompt, "max_tokens": max_tokens, "n_predict": max_tokens,
            "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}


def astr_count(choice):
    return len(choice.get("token_ids") or [])


def llama_count(choice):
    # One partial chunk per sampled token; the final chunk (finish_reason set) carries none.
    return 1 if choice.get("finish_reason") is None else (1 if choice.get("text") else 0)


async def grpc_stream(stub, pb, prompt, max_tokens, res, timeout_s):
    req = pb.GenerateRequest(text=prompt)
    req.sampling.temperature = 0.0
    req.sampling.ignore_eos = True
    req.sampling.max_tokens = max_tokens
    t0 = time.perf_counter()
    t_prev = t0
    call = stub.GenerateStream(req, timeout=timeout_s)
    async for m in call:
        t_prev = res.on_tokens(len(m.token_ids), t0, t_prev)
        if m.HasField("usage"):
            res.usage_tokens = m.usage.completion_tokens
            res.prompt_tokens = m.usage.prompt_tokens
    res.end_s = time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------
# Levels


class Target:
    """One server as the benchmark sees it: a name and how to run one stream on it."""

    def __init__(self, name, run_one, close):
        self.name = name
        self.run_one = run_one  # async (prompt, StreamResult) -> None
        self.close = close  # async () -> None


def make_targets(args, grpc_addr, http_url, pb, pb_grpc):
    max_level = max(args.levels)
    targets = []
    limits = httpx.Limits(max_connections=max_level + 8, max_keepalive_connections=max_level + 8)
    if "http" in args.transports:
        client = httpx.AsyncClient(limits=limits)
        url = f"{http_url}/v1/completions"
        model = served_model(http_url)

        async def run_http(prompt, res):
            await http_stream(client, url, astr_http_body(model, prompt, args.max_tokens), res,
                              args.request_timeout_s, astr_count)

        targets.append(Target("astr_http", run_http, client.aclose))
    if "grpc" in args.transports:
        # One channel (one HTTP/2 connection) for all streams, as a client library would use.
        channel = grpc.aio.insecure_channel(grpc_addr)
        stub = pb_grpc.GenerateStub(channel)

        async def run_grpc(prompt, res):
            await grpc_stream(stub, pb, prompt, args.max_tokens, res, args.request_timeout_s)

        targets.append(Target("astr_grpc", run_grpc, channel.close))
    if args.llama_server:
        lclient = httpx.AsyncClient(limits=limits)
        lurl = f"{args.llama_server.rstrip('/')}/v1/completions"

        async def run_llama(prompt, res):
            await http_stream(lclient, lurl, llama_body(prompt, args.max_tokens), res,
                              args.request_timeout_s, llama_count)

        targets.append(Target("llama_server", run_llama, lclient.aclose))
    return targets


class Prompts:
    """Unique prompts: random word sequences from one seeded generator, never repeated."""

    def __init__(self, words, seed):
        self.words = words
        self.rng = random.Random(seed)
        self.count = 0

    def next(self):
        self.count += 1
        body = " ".join(self.rng.choice(WORDS) for _ in range(self.words))
        return f"{self.count}. {body}"


async def run_level(target, level, requests, prompts, max_tokens):
    """`requests` streams, at most `level` in flight; returns the level's figures."""
    sem = asyncio.Semaphore(level)
    results = [StreamResult() for _ in range(requests)]
    batch = [prompts.next() for _ in range(requests)]

    async def one(i):
        async with sem:
            try:
                await target.run_one(batch[i], results[i])
            except Exception as e:  # noqa: BLE001 - every failure is a counted error
                results[i].error = f"{type(e).__name__}: {e}"[:300]

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(requests)))
    wall = time.perf_counter() - t0
    return summarize_level(results, wall, max_tokens)


def summarize_level(results, wall_s, max_tokens):
    errors = []
    for r in results:
        if r.error is None and r.tokens != max_tokens:
            r.error = f"streamed {r.tokens} tokens, expected {max_tokens}"
        if r.error is None and r.usage_tokens is not None and r.usage_tokens != r.tokens:
            r.error = f"usage says {r.usage_tokens} tokens, streamed {r.tokens}"
        if r.error:
            errors.append(r.error)
    ok = [r for r in results if r.error is None]
    tokens = sum(r.tokens for r in results)
    prompt_tokens = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    return {
        "wall_s": wall_s,
        "requests": len(results),
        "output_tokens": tokens,
        "tokens_per_s": tokens / wall_s if wall_s > 0 else 0.0,
        "errors": len(errors),
        "error_samples": sorted(set(errors))[:3],
        "prompt_tokens_mean": float(np.mean(prompt_tokens)) if prompt_tokens else None,
        "ttft_s": [r.ttft_s for r in ok if r.ttft_s is not None],
        "itl_s": [x for r in ok for x in r.itl_s],
        "e2e_s": [r.end_s for r in ok if r.end_s is not None],
    }


def pct_ms(values, q):
    return round(float(np.percentile(values, q)) * 1e3, 2) if values else None


def series(values, digits=2):
    return {"median": float(np.median(values)), "min": float(np.min(values)),
            "values": [round(v, digits) for v in values]}


def aggregate(runs):
    """Per server and level: the rounds' figures folded together (latencies pooled)."""
    out = {}
    for run in runs:
        out.setdefault(run["server"], {}).setdefault(str(run["level"]), []).append(run)
    summary = {}
    for server, levels in out.items():
        summary[server] = {}
        for level, rs in levels.items():
            ttft = [x for r in rs for x in r["_ttft_s"]]
            itl = [x for r in rs for x in r["_itl_s"]]
            e2e = [x for r in rs for x in r["_e2e_s"]]
            prompt = [r["prompt_tokens_mean"] for r in rs if r["prompt_tokens_mean"] is not None]
            summary[server][level] = {
                "tokens_per_s": series([r["tokens_per_s"] for r in rs]),
                "ttft_ms_p50": pct_ms(ttft, 50), "ttft_ms_p99": pct_ms(ttft, 99),
                "itl_ms_p50": pct_ms(itl, 50), "itl_ms_p99": pct_ms(itl, 99),
                "e2e_ms_p50": pct_ms(e2e, 50),
                "requests": sum(r["requests"] for r in rs),
                "errors": sum(r["errors"] for r in rs),
                "prompt_tokens_mean": round(float(np.mean(prompt)), 1) if prompt else None,
            }
    return summary


async def bench(args, targets):
    prompts = Prompts(args.prompt_words, args.seed)
    for t in targets:
        if args.warmup:
            log(f"warm-up: {args.warmup} requests on {t.name}")
            w = await run_level(t, 1, args.warmup, prompts, args.max_tokens)
            if w["errors"]:
                raise RuntimeError(f"warm-up on {t.name} failed: {w['error_samples']}")
    runs = []
    for rnd in range(args.rounds):
        order = targets if rnd % 2 == 0 else targets[::-1]
        for level in args.levels:
            requests = args.requests or max(4, level)
            for t in order:
                r = await run_level(t, level, requests, prompts, args.max_tokens)
                log(f"round {rnd} level {level} {t.name}: {r['tokens_per_s']:.1f} tok/s, "
                    f"{r['requests']} requests in {r['wall_s']:.2f} s, errors {r['errors']}")
                run = {"round": rnd, "level": level, "server": t.name}
                run.update({k: v for k, v in r.items() if k not in ("ttft_s", "itl_s", "e2e_s")})
                run["tokens_per_s"] = round(run["tokens_per_s"], 2)
                run["wall_s"] = round(run["wall_s"], 3)
                run.update({"_ttft_s": r["ttft_s"], "_itl_s": r["itl_s"], "_e2e_s": r["e2e_s"]})
                runs.append(run)
    summary = aggregate(runs)
    for run in runs:
        for k in ("_ttft_s", "_itl_s", "_e2e_s"):
            del run[k]
    return runs, summary


def write_document(doc, runs):
    """The benchmark's one JSON document on stdout; logs the failed requests of `runs`."""
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    errors = sum(r["errors"] for r in runs)
    if errors:
        log(f"{errors} failed requests (see runs[].error_samples)")
    return 0


def cleanup(started, stub_dir, log_dir):
    """Stops every started process and removes the stub and (unless kept) log directories."""
    for s in started:
        s.stop()
    if stub_dir:
        shutil.rmtree(stub_dir, ignore_errors=True)
    if log_dir:
        shutil.rmtree(log_dir, ignore_errors=True)


def machine_info():
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                         "")
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": model, "loadavg": list(os.getloadavg())}


async def amain(args, grpc_addr, http_url, pb, pb_grpc):
    targets = make_targets(args, grpc_addr, http_url, pb, pb_grpc)
    try:
        return await bench(args, targets)
    finally:
        for t in targets:
            await t.close()


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = []
    log_dir = tempfile.mkdtemp(prefix="bench-http-logs-")
    stub_dir = None
    try:
        stub_dir, pb, pb_grpc = load_stubs()
        if args.grpc:
            grpc_addr, http_url = args.grpc, args.http.rstrip("/")
        else:
            args.model = args.model or default_model()
            started, grpc_addr, http_url = start_astr(args, log_dir)
        wait_http_ready(http_url)
        if args.llama_server:
            wait_http_ready(args.llama_server.rstrip("/"))
        start_info = machine_info()
        t_start = time.time()
        runs, summary = asyncio.run(amain(args, grpc_addr, http_url, pb, pb_grpc))
        doc = {
            "benchmark": "bench_http",
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start)),
            "duration_s": round(time.time() - t_start, 1),
            "config": {
                "model": args.model, "worker_threads": None if args.grpc else args.threads,
                "attached": bool(args.grpc), "grpc": grpc_addr, "http": http_url,
                "llama_server": args.llama_server, "levels": args.levels,
                "requests": args.requests or "max(4, level)", "rounds": args.rounds,
                "max_tokens": args.max_tokens, "prompt_words": args.prompt_words,
                "warmup": args.warmup,
            },
            "machine": {**start_info, "loadavg_end": list(os.getloadavg())},
            "summary": summary,
            "runs": runs,
        }
        return write_document(doc, runs)
    except BaseException:
        log(f"failed; server logs kept in {log_dir}")
        log_dir = None
        raise
    finally:
        cleanup(started, stub_dir, log_dir)


if __name__ == "__main__":
    sys.exit(main())
