#!/usr/bin/env python3
"""bench_structured.py: the cost of structured outputs (docs/structured.md) on one astr-worker +
astr-scheduler pair; one JSON document on stdout, progress on stderr.

    .cache/venv/bin/python tools/bench_structured.py --rounds 3

Compile time. For every schema of tools/schema_corpus.json, in every round: a chat request with
max_tokens 1 constrained by the schema made new for the round (a "description" naming the round,
so the compile cache cannot have it), then the same request again (cached). compile_ms is the
growth of the scheduler's astr:constraint_compile_seconds_total (GET /metrics, read with
prometheus-client's parser) over the first request: the server's own compile time (the trial in a
child process and the scheduler's own compile, docs/structured.md "Limits"). miss_request_ms and
cached_ms are the two requests' wall times (client side, one token each): what a client waits.
Medians over rounds.

Decoding overhead. For each --batch-sizes B: B chat requests at once, each constrained by one
corpus schema (taken in turn) at temperature 1 with its own seed, max_tokens --max-tokens; then
the same B requests unconstrained with ignore_eos and max_tokens set to the token count each
constrained one produced, so both runs generate the same tokens per request and differ only in
the constraint. tok_s = generated tokens / wall time (first request sent -> last answer);
overhead = 1 - constrained tok_s / unconstrained tok_s. The two runs alternate, the order reversed
every other round (the machine's bandwidth drifts). Medians over rounds.
"""

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_http as bh  # noqa: E402  (its processes and helpers)

CORPUS = json.loads((HERE / "schema_corpus.json").read_text())["schemas"]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", default=os.environ.get("ASTR_BIN_DIR")
                   or str(HERE.parent / "build" / "bin"), help="Folder of astr-worker and astr-scheduler.")
    p.add_argument("--model", default=None, help="Model file (default: the default model).")
    p.add_argument("--threads", type=int, default=2, help="Worker CPU threads.")
    p.add_argument("--kv-cache-mb", type=int, default=1024, help="Worker KV cache.")
    p.add_argument("--batch-sizes", default="1,16", help="Comma-separated concurrent requests.")
    p.add_argument("--max-tokens", type=int, default=200, help="Longest constrained output.")
    p.add_argument("--rounds", type=int, default=3, help="Rounds (medians are reported).")
    p.add_argument("--worker-arg", action="append", default=[], help="Extra astr-worker flag.")
    p.add_argument("--scheduler-arg", action="append", default=[], help="Extra astr-scheduler flag.")
    p.add_argument("--smoke", action="store_true",
                   help="One round, batch 1 and 2, 3 schemas, 24 tokens (tests).")
    return p.parse_args(argv)


def schema_format(entry, round_index=None):
    schema = copy.deepcopy(entry["schema"])
    if round_index is not None:
        schema["description"] = f"bench_structured round {round_index}"
    return {"type": "json_schema", "json_schema": {"name": entry["name"], "schema": schema}}


def main(argv=None):
    args = parse_args(argv)
    if args.smoke:
        args.rounds, args.batch_sizes, args.max_tokens = 1, "1,2", 24
    corpus = CORPUS[:3] if args.smoke else CORPUS
    sizes = [int(x) for x in args.batch_sizes.split(",") if x]
    if args.model is None:
        args.model = bh.default_model()
    import openai

    log_dir = tempfile.mkdtemp(prefix="astr-bench-structured-")
    servers, _, http_url = bh.start_astr(args, log_dir)
    try:
        bh.wait_http_ready(http_url)
        client = openai.OpenAI(base_url=http_url + "/v1", api_key="unused", max_retries=0,
                               timeout=600)
        model = client.models.list().data[0].id

        def chat(i, **kw):
            t = time.monotonic()
            r = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": f"Write record {i} as JSON."}],
                **kw)
            return time.monotonic() - t, r

        from prometheus_client.parser import text_string_to_metric_families

        def compile_seconds():
            text = bh.httpx.get(f"{http_url}/metrics", timeout=30).text
            for fam in text_string_to_metric_families(text):
                if fam.name == "astr:constraint_compile_seconds":
                    return sum(s.value for s in fam.samples if s.name.endswith("_total"))
            raise RuntimeError("no astr:constraint_compile_seconds_total in /metrics")

        def compile_delta_ms(**kw):
            """(server compile ms, request wall ms)."""
            before = compile_seconds()
            took, _ = chat(0, **kw)
            return 1000 * (compile_seconds() - before), 1000 * took

        compile_ms = {e["name"]: [] for e in corpus}
        miss_ms = {e["name"]: [] for e in corpus}
        cached_ms = {e["name"]: [] for e in corpus}
        decode = {b: {"constrained": [], "unconstrained": [], "tokens": []} for b in sizes}
        for rnd in range(args.rounds):
            log(f"round {rnd + 1}: compile")
            for e in corpus:
                fmt = schema_format(e, rnd)
                server_ms, wall_ms = compile_delta_ms(max_tokens=1, temperature=0,
                                                      response_format=fmt)
                compile_ms[e["name"]].append(server_ms)
                miss_ms[e["name"]].append(wall_ms)
                cached_ms[e["name"]].append(
                    compile_delta_ms(max_tokens=1, temperature=0, response_format=fmt)[1])
            for b in sizes:
                log(f"round {rnd + 1}: batch {b}")
                jobs = [(i, corpus[i % len(corpus)]) for i in range(b)]
                for e in corpus:  # compiled before timing
                    chat(0, max_tokens=1, temperature=0, response_format=schema_format(e))

                def constrained():
                    with ThreadPoolExecutor(b) as pool:
                        t = time.monotonic()
                        rs = list(pool.map(lambda j: chat(j[0], max_tokens=args.max_tokens,
                                                          temperature=1.0, seed=1000 * rnd + j[0],
                                                          response_format=schema_format(j[1]))[1],
                                           jobs))
                        return time.monotonic() - t, [r.usage.completion_tokens for r in rs]

                def unconstrained(counts):
                    with ThreadPoolExecutor(b) as pool:
                        t = time.monotonic()
                        rs = list(pool.map(lambda j: chat(j[0], max_tokens=counts[j[0]],
                                                          temperature=1.0, seed=1000 * rnd + j[0],
                                                          extra_body={"ignore_eos": True})[1],
                                           jobs))
                        got = [r.usage.completion_tokens for r in rs]
                        assert got == counts, (got, counts)
                        return time.monotonic() - t

                if rnd % 2 == 0:
                    wc, counts = constrained()
                    wu = unconstrained(counts)
                else:  # the unconstrained run first; its counts from a constrained run before it
                    _, counts = constrained()
                    wu = unconstrained(counts)
                    wc, counts2 = constrained()
                    assert counts2 == counts, "seeded constrained runs differ"
                total = sum(counts)
                decode[b]["constrained"].append(total / wc)
                decode[b]["unconstrained"].append(total / wu)
                decode[b]["tokens"].append(total)
        med = statistics.median
        doc = {
            "model": args.model,
            "threads": args.threads,
            "rounds": args.rounds,
            "compile_ms": {k: round(med(v), 3) for k, v in compile_ms.items()},
            "miss_request_ms": {k: round(med(v), 3) for k, v in miss_ms.items()},
            "cached_ms": {k: round(med(v), 3) for k, v in cached_ms.items()},
            "compile_ms_total": round(sum(med(v) for v in compile_ms.values()), 2),
            "miss_request_ms_total": round(sum(med(v) for v in miss_ms.values()), 2),
            "cached_ms_total": round(sum(med(v) for v in cached_ms.values()), 2),
            "decode": [{
                "batch": b,
                "tokens": decode[b]["tokens"],
                "constrained_tok_s": round(med(decode[b]["constrained"]), 2),
                "unconstrained_tok_s": round(med(decode[b]["unconstrained"]), 2),
                "overhead": round(1 - med(decode[b]["constrained"]) / med(decode[b]["unconstrained"]), 4),
                "per_round": {k: [round(x, 2) for x in decode[b][k]]
                              for k in ("constrained", "unconstrained")},
            } for b in sizes],
        }
        print(json.dumps(doc, indent=2))
        return 0
    finally:
        for s in servers:
            s.stop()


if __name__ == "__main__":
    sys.exit(main())
