"""Load for test_worker_membership_netns.py, run inside the scheduler's network namespace (the
scheduler listens on that namespace's loopback): keeps STREAMS GenerateStream calls open, each
request one of the jobs in --jobs, starting the next as one ends, until the file --stop exists;
then lets the open ones finish and writes every request's outcome to --out (JSON).

A line "running" goes to stdout once every stream has received a token."""

import argparse
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

import harness  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--jobs", required=True, help="JSON list of {prompt, seed, max_tokens}")
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--stop", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with open(args.jobs) as f:
        jobs = json.load(f)
    channel = grpc.insecure_channel(args.server)
    stub = harness.pb_grpc.GenerateStub(channel)
    results = []
    lock = threading.Lock()
    started = threading.Semaphore(0)
    counter = [0]

    def run_stream(s):
        first = True
        while not os.path.exists(args.stop):
            with lock:
                n = counter[0]
                counter[0] += 1
            j = n % len(jobs)
            job = jobs[j]
            req = harness.request(token_ids=job["prompt"], max_tokens=job["max_tokens"],
                                  temperature=0.8, seed=job["seed"], request_id=f"s{s}-{n}")
            record = {"job": j, "stream": s, "request": n}
            try:
                def on_message(m, state={"first": first}):
                    if state["first"] and m.token_ids:
                        state["first"] = False
                        started.release()
                result = harness.collect_stream(
                    stub.GenerateStream(req, timeout=120), on_message if first else None)
                sample = result.one()
                record.update(token_ids=sample.token_ids, finish_reason=int(sample.finish_reason),
                              text=sample.text)
            except Exception as e:  # every failure is an outcome the test reports
                record.update(error=f"{type(e).__name__}: {e}")
                if first:
                    started.release()
            first = False
            with lock:
                results.append(record)

    threads = [threading.Thread(target=run_stream, args=(s,), daemon=True)
               for s in range(args.streams)]
    for t in threads:
        t.start()
    for _ in threads:
        started.acquire(timeout=60)
    print("running", flush=True)
    for t in threads:
        t.join(timeout=300)
    with open(args.out + ".tmp", "w") as f:
        json.dump(results, f)
    os.rename(args.out + ".tmp", args.out)


if __name__ == "__main__":
    main()
