#!/usr/bin/env python3
"""bench_fairness.py: one heavy client against N light ones, on astr's gRPC API; per client its
requests, output tokens/s and TTFT; one JSON document on stdout, progress on stderr.

    .cache/venv/bin/python tools/bench_fairness.py --model MODEL.gguf --rounds 2

It starts one astr-worker and one astr-scheduler on 127.0.0.1 per configuration and runs, for
each round, each configuration in turn (order reversed every other round: this machine's memory
bandwidth swings by ~1.8x within minutes, so only figures of one sitting compare):

  before  --no-fair-share --stream-pause-ms 0   (arrival order; never-read streams keep running)
  after   the defaults                          (fair share, never-read streams paused)

Scenarios (--scenarios):
  active   the heavy client keeps --heavy-streams long streams (--heavy-tokens) in flight on one
           connection and reads them; each light client (its own connection) sends one short
           request (--light-tokens) after another. Fair share decides who is admitted next.
  stalled  the heavy client opens --stalled-streams long streams it never reads (a small HTTP/2
           window), then the light clients run as above: without pausing, the never-read streams
           keep computing and holding the KV pool.

Per client: requests finished, output tokens, tokens/s over the window, TTFT p50/p99 (request
sent -> first message carrying a token), and failures (with the first few messages).
"""

import argparse
import json
import os
import sys
import tempfile
import threading
import time

import grpc
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))
from bench_http import Server, log  # noqa: E402  (the same server handling as bench_http.py)
CONFIGS = {
    "before": ["--no-fair-share", "--stream-pause-ms", "0"],
    "after": [],
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--bin-dir", default=os.environ.get("ASTR_BIN_DIR") or os.path.join(REPO, "build", "bin"))
    p.add_argument("--model", required=True, help="Model file or folder the worker serves.")
    p.add_argument("--threads", type=int, default=2, help="Worker threads.")
    p.add_argument("--kv-cache-mb", type=int, default=256, help="Worker KV pool.")
    p.add_argument("--scenarios", default="active,stalled", help="active, stalled or both.")
    p.add_argument("--configs", default="before,after", help="Of: " + ", ".join(CONFIGS))
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--seconds", type=float, default=20.0, help="Measurement window per run.")
    p.add_argument("--light-clients", type=int, default=4)
    p.add_argument("--light-tokens", type=int, default=16)
    p.add_argument("--heavy-streams", type=int, default=64)
    p.add_argument("--heavy-tokens", type=int, default=512)
    p.add_argument("--stalled-streams", type=int, default=200)
    p.add_argument("--stalled-tokens", type=int, default=1500)
    p.add_argument("--request-timeout-s", type=float, default=60.0)
    args = p.parse_args(argv)
    for name in args.configs.split(","):
        if name not in CONFIGS:
            p.error(f"--configs: unknown configuration {name!r}")
    for name in args.scenarios.split(","):
        if name not in ("active", "stalled"):
            p.error(f"--scenarios: unknown scenario {name!r}")
    return args


def load_stubs(out_dir):
    """The astr.v1 stubs generated from this tree's protos by the Python SDK's protogen."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "astr_sdk_protogen", os.path.join(REPO, "sdk", "python", "protogen.py"))
    protogen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(protogen)
    protogen.stage(out_dir, os.path.join(REPO, "protos"))
    protogen.activate(out_dir)
    from astr.v1 import generate_pb2, generate_pb2_grpc  # noqa: E402
    return generate_pb2, generate_pb2_grpc


def start(args, config, log_dir):
    worker = Server(f"worker-{config}",
                    [os.path.join(args.bin_dir, "astr-worker"), "--model", args.model,
                     "--listen", "127.0.0.1:0", "--threads", str(args.threads),
                     "--kv-cache-mb", str(args.kv_cache_mb)], log_dir)
    address = worker.wait_for(r"listening on (\S+):(\d+)")
    scheduler = Server(f"scheduler-{config}",
                       [os.path.join(args.bin_dir, "astr-scheduler"), "--workers", address,
                        "--listen", "127.0.0.1:0", "--stream-stall-timeout-s", "0"] + CONFIGS[config],
                       log_dir)
    return worker, scheduler, scheduler.wait_for(r"listening on (\S+):(\d+)")


class Client:
    """One client's figures over the window."""

    def __init__(self, name):
        self.name = name
        self.ttft = []
        self.tokens = 0
        self.requests = 0
        self.failures = 0
        self.failure_samples = []
        self.lock = threading.Lock()

    def summary(self, seconds):
        ttft = np.array(self.ttft) * 1000 if self.ttft else np.array([0.0])
        return {"client": self.name, "requests": self.requests, "tokens": self.tokens,
                "tokens_per_s": round(self.tokens / seconds, 1),
                "ttft_ms_p50": round(float(np.percentile(ttft, 50)), 1),
                "ttft_ms_p99": round(float(np.percentile(ttft, 99)), 1),
                "failures": self.failures, "failure_samples": self.failure_samples[:3]}


def stream_loop(pb, stub, client, max_tokens, prompt, stop_at, timeout_s):
    """Sends one streaming request after another until stop_at, counting into `client`."""
    while time.monotonic() < stop_at:
        req = pb.GenerateRequest()
        req.token_ids.ids.extend(prompt)
        req.sampling.temperature = 0.0
        req.sampling.max_tokens = max_tokens
        req.sampling.ignore_eos = True
        t0 = time.monotonic()
        first = None
        tokens = 0
        try:
            for m in stub.GenerateStream(req, timeout=timeout_s):
                n = len(m.token_ids)
                if n and first is None:
                    first = time.monotonic() - t0
                tokens += n
                if time.monotonic() >= stop_at + timeout_s:
                    break
        except grpc.RpcError as e:
            with client.lock:
                client.failures += 1
                client.failure_samples.append(f"{e.code().name}: {e.details()}"[:200])
            time.sleep(0.05)
            continue
        with client.lock:
            client.requests += 1
            client.tokens += tokens
            if first is not None:
                client.ttft.append(first)


def run_once(args, pb, pb_grpc, address, scenario, seconds):
    heavy = Client("heavy")
    lights = [Client(f"light{i}") for i in range(args.light_clients)]
    heavy_channel = grpc.insecure_channel(address, options=[
        ("grpc.http2.lookahead_bytes", 1024), ("grpc.http2.bdp_probe", 0)] if scenario == "stalled" else [])
    heavy_stub = pb_grpc.GenerateStub(heavy_channel)
    stalled = []
    threads = []
    start_at = time.monotonic()
    stop_at = start_at + seconds
    if scenario == "stalled":
        for i in range(args.stalled_streams):
            req = pb.GenerateRequest()
            req.token_ids.ids.extend([1, 2 + i % 50, 3])
            req.sampling.temperature = 0.0
            req.sampling.max_tokens = args.stalled_tokens
            req.sampling.ignore_eos = True
            req.sampling.return_logprobs = True
            req.sampling.top_logprobs = 5
            stalled.append(heavy_stub.GenerateStream(req, timeout=seconds + 120))
        time.sleep(2.0)  # the never-read streams fill the pool first
        start_at = time.monotonic()
        stop_at = start_at + seconds
    else:
        for i in range(args.heavy_streams):
            t = threading.Thread(target=stream_loop, args=(
                pb, heavy_stub, heavy, args.heavy_tokens, [1, 10 + i % 50, 11], stop_at,
                args.request_timeout_s), daemon=True)
            threads.append(t)
    channels = []
    for i, light in enumerate(lights):
        ch = grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
        channels.append(ch)
        t = threading.Thread(target=stream_loop, args=(
            pb, pb_grpc.GenerateStub(ch), light, args.light_tokens, [1, 100 + i, 101], stop_at,
            args.request_timeout_s), daemon=True)
        threads.append(t)
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + args.request_timeout_s + 30)
    window = max(time.monotonic() - start_at, 1e-9)
    for x in stalled:
        x.cancel()
    for ch in channels:
        ch.close()
    heavy_channel.close()
    light_sum = [c.summary(window) for c in lights]
    return {
        "heavy": heavy.summary(window) if scenario == "active" else None,
        "light": light_sum,
        "light_tokens_per_s": round(sum(c["tokens_per_s"] for c in light_sum), 1),
        "light_ttft_ms_p50_worst": max(c["ttft_ms_p50"] for c in light_sum),
        "light_ttft_ms_p99_worst": max(c["ttft_ms_p99"] for c in light_sum),
        "light_failures": sum(c["failures"] for c in light_sum),
        "window_s": round(window, 2),
    }


def main(argv):
    args = parse_args(argv)
    log_dir = tempfile.mkdtemp(prefix="astr-bench-fairness-")
    pb, pb_grpc = load_stubs(os.path.join(log_dir, "stubs"))
    configs = args.configs.split(",")
    scenarios = args.scenarios.split(",")
    runs = []
    for r in range(args.rounds):
        order = configs if r % 2 == 0 else list(reversed(configs))
        for config in order:
            worker, scheduler, address = start(args, config, log_dir)
            try:
                for scenario in scenarios:
                    log(f"round {r + 1}: {config} / {scenario} ...")
                    res = run_once(args, pb, pb_grpc, address, scenario, args.seconds)
                    res.update({"round": r + 1, "config": config, "scenario": scenario})
                    log(f"  light tokens/s {res['light_tokens_per_s']}, worst light TTFT p50 "
                        f"{res['light_ttft_ms_p50_worst']} ms, failures {res['light_failures']}"
                        + (f"; heavy tokens/s {res['heavy']['tokens_per_s']}" if res["heavy"] else ""))
                    runs.append(res)
            finally:
                scheduler.stop()
                worker.stop()
    print(json.dumps({"config": {k: v for k, v in vars(args).items()}, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
