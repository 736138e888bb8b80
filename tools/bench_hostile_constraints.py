#!/usr/bin/env python3
"""bench_hostile_constraints.py: what hostile structured-output constraints cost the server
(docs/structured.md "Limits") on one astr-worker + astr-scheduler pair; one JSON document on
stdout, progress on stderr.

    .cache/venv/bin/python tools/bench_hostile_constraints.py

One chat request (max_tokens 8) per case, in turn: the probes of issue 41 (100,000 enum strings,
100,000 choices, 5,000 tools with tool_choice required, 50,000 regex alternatives) and a few that
pass every size limit (16,000 long enum strings, a 20,000-rule EBNF grammar, recursive $ref, a
million-fold counted repetition). Per case: the HTTP status, the error's param and the start of its
message, the seconds to the answer, and the scheduler's resident memory after it (VmRSS of
/proc/PID/status). Meanwhile a second client sends 2-token requests, one after another: their
latency while the hostile requests run (p50, max) against the same requests before them. Then the
scheduler's peak (VmHWM) and its VmRSS at the start and 2 s after the last case.

--bin-dir picks the binaries, so a build of another commit runs the same cases (a server without
limits may take minutes per case: --timeout-s bounds each).
"""

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_http as bh  # noqa: E402  (its processes and helpers)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def words(n, seed, lo=4, hi=12):
    rng = random.Random(seed)
    return ["".join(chr(rng.randint(97, 122)) for _ in range(rng.randint(lo, hi))) for _ in range(n)]


def schema_format(schema):
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}


def cases():
    tools = [{"type": "function", "function": {
        "name": f"f{i}", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}}
        for i in range(5000)]
    chain = ("root ::= r0\n" + "\n".join(f'r{i} ::= "x{i}" r{i + 1} | "y{i}"' for i in range(20000))
             + '\nr20000 ::= "end"')
    return [
        ("enum_100k_strings", schema_format({"enum": words(100_000, 1)})),
        ("choice_100k", {"structured_outputs": {"choice": words(100_000, 2)}}),
        ("tools_5000_required", {"tools": tools, "tool_choice": "required"}),
        ("regex_50k_alternatives", {"structured_outputs": {"regex": "|".join(words(50_000, 3))}}),
        ("enum_16k_long_strings", schema_format({"enum": words(16_000, 4, 60, 60)})),
        ("ebnf_20k_rules", {"structured_outputs": {"grammar": chain}}),
        ("recursive_ref", schema_format({"$defs": {"n": {"type": "object", "properties": {
            "l": {"$ref": "#/$defs/n"}, "r": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"})),
        ("repeat_million", {"structured_outputs": {"regex": "((a{100}){100}){100}"}}),
    ]


def status_mb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", default=os.environ.get("ASTR_BIN_DIR")
                   or str(HERE.parent / "build" / "bin"), help="Folder of astr-worker and astr-scheduler.")
    p.add_argument("--model", default=None, help="Model file (default: the default model).")
    p.add_argument("--threads", type=int, default=2, help="Worker CPU threads.")
    p.add_argument("--kv-cache-mb", type=int, default=256, help="Worker KV cache.")
    p.add_argument("--timeout-s", type=float, default=600, help="Longest wait for one answer.")
    p.add_argument("--cases", default="", help="Comma-separated case names (default: all).")
    p.add_argument("--worker-arg", action="append", default=[], help="Extra astr-worker flag.")
    p.add_argument("--scheduler-arg", action="append", default=[], help="Extra astr-scheduler flag.")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.model is None:
        args.model = bh.default_model()
    chosen = [c for c in cases() if not args.cases or c[0] in args.cases.split(",")]
    log_dir = tempfile.mkdtemp(prefix="astr-bench-hostile-")
    servers, _, http_url = bh.start_astr(args, log_dir)
    try:
        bh.wait_http_ready(http_url)
        pid = servers[0].proc.pid
        model = bh.served_model(http_url)
        client = bh.httpx.Client(timeout=args.timeout_s)

        def chat(extra, max_tokens):
            body = {"model": model, "messages": [{"role": "user", "content": "Hi"}],
                    "max_tokens": max_tokens, "temperature": 0, **extra}
            t = time.monotonic()
            try:
                r = client.post(f"{http_url}/v1/chat/completions", json=body)
                return r, time.monotonic() - t
            except bh.httpx.TimeoutException:
                return None, time.monotonic() - t

        def short_latencies(stop, out):
            c = bh.httpx.Client(timeout=args.timeout_s)
            body = {"model": model, "messages": [{"role": "user", "content": "Hi"}],
                    "max_tokens": 2, "temperature": 0}
            while not stop.is_set():
                t = time.monotonic()
                c.post(f"{http_url}/v1/chat/completions", json=body)
                out.append(time.monotonic() - t)
                time.sleep(0.05)

        chat({}, 2)  # warm
        idle = []
        for _ in range(10):
            idle.append(chat({}, 2)[1])
            time.sleep(0.05)
        start_rss = status_mb(pid, "VmRSS")
        stop = threading.Event()
        loaded = []
        other = threading.Thread(target=short_latencies, args=(stop, loaded))
        other.start()
        results = []
        try:
            for name, extra in chosen:
                log(f"case {name}")
                r, took = chat(extra, 8)
                row = {"case": name, "seconds": round(took, 3), "rss_mb": status_mb(pid, "VmRSS")}
                if r is None:
                    row["status"] = f"no answer in {args.timeout_s} s"
                else:
                    row["status"] = r.status_code
                    if r.status_code != 200:
                        err = r.json().get("error", {})
                        row["param"] = err.get("param")
                        row["message"] = (err.get("message") or "")[:120]
                results.append(row)
                log(f"  {row}")
        finally:
            stop.set()
            other.join()
        time.sleep(2)
        ms = lambda xs, f: round(1000 * f(xs), 1) if xs else None  # noqa: E731
        doc = {
            "model": args.model,
            "bin_dir": args.bin_dir,
            "cases": results,
            "scheduler_rss_mb": {"start": start_rss, "end": status_mb(pid, "VmRSS"),
                                 "peak": status_mb(pid, "VmHWM")},
            "other_client_ms": {
                "idle_p50": ms(idle, statistics.median), "idle_max": ms(idle, max),
                "during_p50": ms(loaded, statistics.median), "during_max": ms(loaded, max),
                "during_requests": len(loaded)},
        }
        print(json.dumps(doc, indent=2))
        return 0
    finally:
        for s in servers:
            s.stop()


if __name__ == "__main__":
    sys.exit(main())
