#!/usr/bin/env python3
"""bench_quant.py: astr's CPU engine against llama.cpp on the same GGUF files, in one sitting;
one JSON document on stdout, progress on stderr.

    .cache/venv/bin/python tools/bench_quant.py --llama-bin /path/to/llama.cpp/build/bin \\
        --models /tmp/llama-0.85b-Q4_K_M.gguf,/tmp/llama-0.85b-Q8_0.gguf --rounds 2

For every round and model (the order of the two programs reversed every other round, because the
machine's memory bandwidth drifts within minutes):
  astr     build/bin/astr-bench --threads T --batch-sizes 1,16 --prompt-len 128
           --decode-steps 16 --read-bandwidth-mb 1024: prefill tok/s (128-token prompt), decode
           tok/s at batch 1 and 16 (32-token contexts), the GB/s of weights read per batch-1 step
           (astr reads every weight once per step; a MoE model, the dense weights and
           num_experts_per_tok of num_experts experts per layer), and the machine's read bandwidth measured by
           the same program before and after;
  llama    llama-bench -t T -p 128 -n 32 -r 3 -o json (prefill and batch-1 decode) and
           llama-batched-bench -t T -tb T -c 4096 -npp 32 -ntg 16 -npl 16 (16 parallel
           sequences, its S_TG t/s);
  rss      each of astr-bench (batch 1) and llama-bench (-r 1) once more under /usr/bin/time -v:
           peak resident set size with the same 128-token prompt and 32 decode tokens (null
           without /usr/bin/time).
Figures are medians over rounds; `ratio` is astr / llama.cpp (for RSS: lower is better).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr[-2000:]}")
    return p


def peak_rss_mib(cmd, env=None):
    if not Path("/usr/bin/time").exists():  # Debian's `time` package
        log("no /usr/bin/time: peak RSS not measured")
        return None
    p = run(["/usr/bin/time", "-v"] + cmd, env=env)
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    return int(m.group(1)) / 1024 if m else None


def astr_run(args, model):
    cmd = [str(args.astr_bench), "--model", model, "--threads", str(args.threads),
           "--batch-sizes", "1,16", "--prompt-len", "128", "--decode-steps", "16",
           "--read-bandwidth-mb", str(args.read_mb)]
    d = json.loads(run(cmd).stdout)
    dec = {x["batch"]: x for x in d["decode"]}
    return {"prefill_tok_s": d["prefill"]["tok_per_s"], "b1_tok_s": dec[1]["tok_per_s"],
            "b16_tok_s": dec[16]["tok_per_s"], "b1_weight_gb_s": dec[1].get("weight_gb_per_s"),
            "weight_bytes": d.get("weight_bytes"), "isa": d.get("isa"),
            "batch1_read_bytes": d.get("batch1_read_bytes"),
            "read_gb_s": [d.get("read_gb_per_s_before"), d.get("read_gb_per_s_after")]}


def llama_run(args, model, env):
    bench = json.loads(run([str(args.llama_bin / "llama-bench"), "-m", model, "-t",
                            str(args.threads), "-p", "128", "-n", "32", "-r", "3", "-o", "json"],
                           env=env).stdout)
    out = {}
    for r in bench:
        if r.get("n_prompt") == 128 and r.get("n_gen") == 0:
            out["prefill_tok_s"] = r["avg_ts"]
        if r.get("n_gen") == 32 and r.get("n_prompt") == 0:
            out["b1_tok_s"] = r["avg_ts"]
            out["model_bytes"] = r.get("model_size")
    text = run([str(args.llama_bin / "llama-batched-bench"), "-m", model, "-t", str(args.threads),
                "-tb", str(args.threads), "-c", "4096", "-npp", "32", "-ntg", "16", "-npl", "16"],
               env=env).stdout
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 10 and cells[2] == "16":
            out["b16_tok_s"] = float(cells[7])  # S_TG t/s
    return out


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", required=True, help="comma-separated GGUF files")
    ap.add_argument("--llama-bin", type=Path, required=True,
                    help="folder with llama-bench and llama-batched-bench")
    ap.add_argument("--astr-bench", type=Path, default=ROOT / "build/bin/astr-bench")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--read-mb", type=int, default=1024,
                    help="MiB astr-bench streams to measure the read bandwidth")
    args = ap.parse_args(argv)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = f"{args.llama_bin}:{env.get('LD_LIBRARY_PATH', '')}"
    models = [m for m in args.models.split(",") if m]
    runs = {m: {"astr": [], "llama": []} for m in models}
    for rnd in range(args.rounds):
        for m in models:
            order = ["astr", "llama"] if rnd % 2 == 0 else ["llama", "astr"]
            for who in order:
                log(f"round {rnd + 1}: {who} on {m}")
                runs[m][who].append(astr_run(args, m) if who == "astr" else llama_run(args, m, env))
    doc = {"threads": args.threads, "rounds": args.rounds, "models": []}
    for m in models:
        log(f"peak RSS: {m}")
        rss_astr = peak_rss_mib([str(args.astr_bench), "--model", m, "--threads",
                                 str(args.threads), "--batch-sizes", "1", "--prompt-len", "128",
                                 "--prefill-reps", "1", "--decode-steps", "32"])
        rss_llama = peak_rss_mib([str(args.llama_bin / "llama-bench"), "-m", m, "-t",
                                  str(args.threads), "-p", "128", "-n", "32", "-r", "1"], env=env)
        entry = {"model": m, "file_bytes": os.path.getsize(m), "astr": {}, "llama_cpp": {},
                 "ratio": {}}
        for key in ("prefill_tok_s", "b1_tok_s", "b16_tok_s"):
            a = median(r.get(key) for r in runs[m]["astr"])
            b = median(r.get(key) for r in runs[m]["llama"])
            entry["astr"][key], entry["llama_cpp"][key] = a, b
            entry["ratio"][key] = a / b if a and b else None
        entry["astr"]["b1_weight_gb_s"] = median(r["b1_weight_gb_s"] for r in runs[m]["astr"])
        entry["astr"]["weight_bytes"] = runs[m]["astr"][0]["weight_bytes"]
        entry["astr"]["isa"] = runs[m]["astr"][0]["isa"]
        entry["read_gb_s"] = [v for r in runs[m]["astr"] for v in r["read_gb_s"]]
        mb = runs[m]["llama"][0].get("model_bytes")
        # A step reads one row of an untied embedding table and a MoE model's active experts only:
        # llama.cpp's share of its file is taken to be astr's share of its weights
        # (batch1_read_bytes / weight_bytes).
        read = runs[m]["astr"][0].get("batch1_read_bytes")
        entry["astr"]["batch1_read_bytes"] = read
        if mb and read and entry["astr"]["weight_bytes"]:
            mb = mb * read / entry["astr"]["weight_bytes"]
        if mb and entry["llama_cpp"]["b1_tok_s"]:
            entry["llama_cpp"]["b1_weight_gb_s"] = mb * entry["llama_cpp"]["b1_tok_s"] / 1e9
        entry["astr"]["peak_rss_mib"], entry["llama_cpp"]["peak_rss_mib"] = rss_astr, rss_llama
        entry["ratio"]["peak_rss"] = rss_astr / rss_llama if rss_astr and rss_llama else None
        doc["models"].append(entry)
    json.dump(doc, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
