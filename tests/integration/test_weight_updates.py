"""Weight updates through astr.v1.Admin (docs/rl.md): a pushed checkpoint is served exactly as if
the workers had loaded it (greedy ids equal `astr run` on a folder holding the new weights, and
logprobs equal an independent float64 forward pass of them), versions are reported per token,
every failure leaves the served version in place, and the admin port needs its token."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import grpc
import numpy as np
import pytest
import xxhash

import harness
import weights as W
from harness import apb, pb, request, unary

sys.path.insert(0, os.path.join(harness.SOURCE_DIR, "tests", "python"))
from reference_llama import ReferenceModel, log_softmax  # noqa: E402

pytestmark = pytest.mark.skipif(bool(harness.missing_binaries()), reason="binaries not built")

PROMPTS = [[1, 403, 407, 261, 378], [1, 298, 315, 421], [1, 432, 383, 286, 261, 376, 298]]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("weights")
    return W.old_and_new(root, seed=1)


def start(make_cluster, models, model=None, workers=1, **scheduler_flags):
    scheduler_flags.setdefault("admin_token_file", models["token"])
    scheduler_flags.setdefault("tokenizer", harness.STORIES)
    c = make_cluster(model=model or models["old"], num_workers=workers,
                     worker_flags={"dtype": "f32"}, scheduler_flags=scheduler_flags)
    return c, c.scheduler.admin_stub()


def greedy(c, prompt, max_tokens=24, **kw):
    return c.stub.Generate(request(token_ids=prompt, max_tokens=max_tokens, **kw),
                           timeout=harness.RPC_TIMEOUT_S).completions[0]


def offline_ids(model, prompt, max_tokens):
    return harness.offline_run(model, prompt_ids=prompt, max_tokens=max_tokens,
                               extra=("--dtype", "f32"))["token_ids"]


def code_of(call):
    with pytest.raises(grpc.RpcError) as e:
        call()
    return e.value.code(), e.value.details()


def test_admin_needs_the_token(make_cluster, models):
    c, admin = start(make_cluster, models)
    req = apb.GetWeightVersionRequest()
    assert code_of(lambda: admin.GetWeightVersion(req, timeout=10))[0] == \
        grpc.StatusCode.UNAUTHENTICATED
    assert code_of(lambda: admin.GetWeightVersion(req, metadata=W.auth("wrong"), timeout=10))[0] == \
        grpc.StatusCode.PERMISSION_DENIED
    assert code_of(lambda: admin.GetWeightVersion(req, metadata=[("authorization", W.TOKEN)],
                                                  timeout=10))[0] == grpc.StatusCode.UNAUTHENTICATED
    # A push without the token changes nothing, and generation is unaffected.
    code, _ = code_of(lambda: admin.UpdateWeights(W.messages(models["new_t"]), timeout=30))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert list(greedy(c, PROMPTS[0]).token_ids) == offline_ids(models["old"], PROMPTS[0], 24)
    assert W.version(admin).version == 0


def test_no_token_file_refuses_every_call(make_cluster, models):
    c, admin = start(make_cluster, models, admin_token_file=None)
    code, msg = code_of(lambda: admin.GetWeightVersion(apb.GetWeightVersionRequest(),
                                                       metadata=W.auth(), timeout=10))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "--admin-token-file" in msg


def test_push_serves_the_new_weights_on_two_workers(make_cluster, models):
    c, admin = start(make_cluster, models, workers=2)
    for p in PROMPTS:
        assert list(greedy(c, p).token_ids) == offline_ids(models["old"], p, 24)
    r = W.push(admin, models["new_t"], label="step-1")
    assert (r.version, r.label, r.workers, r.tensors) == (1, "step-1", 2, len(models["new_t"]))
    assert r.bytes == sum(a.nbytes for a in models["new_t"].values())
    v = W.version(admin)
    assert (v.version, v.label) == (1, "step-1") and v.committed_unix_ns > 0
    ref = ReferenceModel.load(models["new"])
    for p in PROMPTS:
        want = offline_ids(models["new"], p, 24)
        assert want != offline_ids(models["old"], p, 24)  # the update matters
        got = greedy(c, p, return_logprobs=True)
        assert list(got.token_ids) == want
        assert W.spans(got) == [(1, 0, 24)] and got.weight_version == 1
        rows = ref.score(p, list(got.token_ids))
        for tok, lp, row in zip(got.token_ids, got.logprobs, rows):
            assert abs(lp - row[tok]) < 1e-4
    # `astr generate --json` shows which version computed the tokens, streamed and unary.
    for mode in ([], ["--no-stream"]):
        r = harness.run_cli("generate", "--server", c.scheduler.address, "--prompt-ids",
                            ",".join(map(str, PROMPTS[0])), "--max-tokens", "5",
                            "--temperature", "0", "--json", *mode)
        assert r.returncode == 0, r.stderr
        lines = [json.loads(line) for line in r.stdout.splitlines()]
        got = [(int(sp.get("version", 0)), sp.get("start", 0), sp["count"])
               for m in lines for c_ in m.get("completions", [m])
               for sp in c_.get("weight_versions", [])]
        joined = []
        for v, st, n in got:  # a stream's messages each carry the spans of their own tokens
            if joined and joined[-1][0] == v and joined[-1][1] + joined[-1][2] == st:
                joined[-1] = (v, joined[-1][1], joined[-1][2] + n)
            else:
                joined.append((v, st, n))
        assert joined == [(1, 0, 5)], got
    # Processed logprobs (temperature 0.7) of sampled tokens against the reference too.
    got = c.stub.Generate(request(token_ids=PROMPTS[0], max_tokens=16, temperature=0.7, seed=5,
                                  return_logprobs=True, logprobs_mode=pb.LOGPROBS_MODE_PROCESSED),
                          timeout=60).completions[0]
    rows = ref.score(PROMPTS[0], list(got.token_ids))
    for tok, lp, row in zip(got.token_ids, got.logprobs, rows):
        assert abs(lp - log_softmax(row / 0.7)[tok]) < 1e-4


def test_checksums_match_the_pushed_bytes(make_cluster, models):
    c, admin = start(make_cluster, models, workers=2)
    names = ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight"]
    before = admin.GetWeightsChecksum(apb.GetWeightsChecksumRequest(names=names),
                                      metadata=W.auth(), timeout=30)
    assert [t.source for t in before.tensors] == ["file", "file"]
    part = {n: models["new_t"][n] for n in names}
    W.push(admin, part)
    cs = admin.GetWeightsChecksum(apb.GetWeightsChecksumRequest(), metadata=W.auth(), timeout=30)
    by_name = {t.name: t for t in cs.tensors}
    assert len(by_name) == len(models["old_t"])
    for n in names:
        t = by_name[n]
        assert (t.source, t.dtype, list(t.shape)) == ("pushed", "f32", list(part[n].shape))
        assert t.xxh64 == xxhash.xxh64_intdigest(np.ascontiguousarray(part[n]).tobytes())
        assert t.consistent
    assert by_name["model.norm.weight"].source == "file"
    code, msg = code_of(lambda: admin.GetWeightsChecksum(
        apb.GetWeightsChecksumRequest(names=["model.nope"]), metadata=W.auth(), timeout=30))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "model.nope" in msg


def push_partial_and_check(c, admin, models, base, keep, seed, name):
    """Pushes perturbed copies of the tensors of `base` that `keep` selects; the served greedy
    ids then equal astr run's on a folder of `base` with those tensors replaced."""
    base_t = models[base + "_t"]
    part = W.perturbed({n: base_t[n] for n in base_t if keep(n)}, seed=seed, scale=0.05)
    mixed = dict(base_t)
    mixed.update(part)
    folder = W.write_folder(models[base], mixed, str(models["root"] / name))
    W.push(admin, part)
    for p in PROMPTS:
        assert list(greedy(c, p).token_ids) == offline_ids(folder, p, 24)


def test_partial_update_keeps_the_other_tensors(make_cluster, models):
    c, admin = start(make_cluster, models)
    push_partial_and_check(c, admin, models, "old",
                           lambda n: ".layers.0." in n or n == "lm_head.weight", 7, "partial")


def test_gguf_worker_takes_hugging_face_tensors(make_cluster, models):
    # The worker serves the GGUF (interleaved q/k rows); the pushed HF rows are permuted for it.
    c, admin = start(make_cluster, models, model=harness.STORIES)
    W.push(admin, models["new_t"])
    for p in PROMPTS:
        assert list(greedy(c, p).token_ids) == offline_ids(models["new"], p, 24)


def test_gguf_worker_takes_a_hugging_face_checkpoint_from_disk(make_cluster, models):
    # A trainer's save_pretrained folder (rotate-half q/k rows) into workers serving the GGUF
    # (interleaved rows): served like the offline engine on that folder, on both workers; then a
    # partial push over it (its base now the folder) like the offline engine on the mix.
    c, admin = start(make_cluster, models, model=harness.STORIES, workers=2)
    r = admin.UpdateWeightsFromDisk(apb.UpdateWeightsFromDiskRequest(path=models["new"]),
                                    metadata=W.auth(), timeout=120)
    assert (r.version, r.workers) == (1, 2)
    for p in PROMPTS:
        assert list(greedy(c, p).token_ids) == offline_ids(models["new"], p, 24)
    push_partial_and_check(c, admin, models, "new", lambda n: ".layers.1." in n, 9,
                           "disk_then_partial")


def test_from_disk(make_cluster, models, tmp_path):
    c, admin = start(make_cluster, models, workers=2)
    r = admin.UpdateWeightsFromDisk(apb.UpdateWeightsFromDiskRequest(path=models["new"],
                                                                     label="disk"),
                                    metadata=W.auth(), timeout=120)
    assert (r.version, r.workers) == (1, 2)
    for p in PROMPTS:
        assert list(greedy(c, p).token_ids) == offline_ids(models["new"], p, 24)
    # Another model's folder is refused, naming what differs; a missing path too.
    other = str(tmp_path / "other")
    subprocess.run([harness.ASTR_BIN, "make-model", "--format", "hf", "--dtype", "f32",
                    "--layers", "2", "--out", other], check=True, capture_output=True)
    code, msg = code_of(lambda: admin.UpdateWeightsFromDisk(
        apb.UpdateWeightsFromDiskRequest(path=other), metadata=W.auth(), timeout=60))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "not the served model" in msg
    code, msg = code_of(lambda: admin.UpdateWeightsFromDisk(
        apb.UpdateWeightsFromDiskRequest(path=str(tmp_path / "missing")), metadata=W.auth(),
        timeout=60))
    assert "missing" in msg and "version 1 still serving" in msg
    assert W.version(admin).version == 1
    assert list(greedy(c, PROMPTS[0]).token_ids) == offline_ids(models["new"], PROMPTS[0], 24)


def _bad_spec(models, change):
    spec = W.manifest(models["new_t"])
    change(spec)
    return spec


@pytest.mark.parametrize("case", ["unknown_name", "shape", "dtype", "checksum", "truncated",
                                  "twice", "chunk_order"])
def test_a_bad_push_leaves_the_old_weights(make_cluster, models, case):
    c, admin = start(make_cluster, models, workers=2)
    t = models["new_t"]
    first = next(iter(t))
    kw = {}
    if case == "unknown_name":
        kw["spec"] = _bad_spec(models, lambda s: setattr(s.tensors[3], "name", "model.layers.9.x"))
        want = (grpc.StatusCode.INVALID_ARGUMENT, "model.layers.9.x")
    elif case == "shape":
        kw["spec"] = _bad_spec(models, lambda s: s.tensors[2].shape.__setitem__(0, 7))
        want = (grpc.StatusCode.INVALID_ARGUMENT, list(t)[2])
    elif case == "dtype":
        kw["spec"] = _bad_spec(models, lambda s: setattr(s.tensors[1], "dtype", "int8"))
        want = (grpc.StatusCode.INVALID_ARGUMENT, list(t)[1])
    elif case == "checksum":
        kw["spec"] = _bad_spec(models, lambda s: setattr(s.tensors[4], "xxh64", 12345))
        want = (grpc.StatusCode.DATA_LOSS, list(t)[4])
    elif case == "truncated":
        kw["drop_last"] = True
        want = (grpc.StatusCode.INVALID_ARGUMENT, list(t)[-1])
    elif case == "twice":
        kw["spec"] = _bad_spec(models, lambda s: setattr(s.tensors[1], "name", first))
        want = (grpc.StatusCode.INVALID_ARGUMENT, "named twice")
    else:
        def swapped():
            msgs = list(W.messages(t))
            a = msgs[1].chunks[0]
            a.offset += 8
            return iter(msgs)
        code, msg = code_of(lambda: admin.UpdateWeights(swapped(), metadata=W.auth(), timeout=60))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "in order" in msg
        want = None
    if want is not None:
        code, msg = code_of(lambda: W.push(admin, t, **kw))
        assert code == want[0], msg
        assert want[1] in msg and "version 0 still serving" in msg, msg
    assert W.version(admin).version == 0
    assert list(greedy(c, PROMPTS[0]).token_ids) == offline_ids(models["old"], PROMPTS[0], 24)
    # A good push goes through afterwards.
    assert W.push(admin, t).version == 1
    assert list(greedy(c, PROMPTS[0]).token_ids) == offline_ids(models["new"], PROMPTS[0], 24)


def test_cancelled_push_leaves_the_old_weights(make_cluster, models):
    c, admin = start(make_cluster, models, workers=2)
    gate, done = threading.Event(), threading.Event()

    def slow():
        for i, m in enumerate(W.messages(models["new_t"])):
            if i == 3:
                gate.set()
                done.wait(60)  # the client gives up meanwhile
            yield m

    fut = admin.UpdateWeights.future(slow(), metadata=W.auth(), timeout=120)
    try:
        assert gate.wait(30)
        fut.cancel()
        with pytest.raises(grpc.FutureCancelledError):
            fut.result()
        assert W.version(admin).version == 0
        # The next push waits for the cancelled one to be torn down, then goes through.
        assert W.push(admin, models["new_t"]).version == 1
    finally:
        done.set()


PUSHER = r'''
import sys, time
sys.path.insert(0, sys.argv[1])
import harness, weights as W
from safetensors.numpy import load_file
import grpc
t = load_file(sys.argv[3] + "/model.safetensors")
ch = grpc.insecure_channel(sys.argv[2])
admin = harness.apb_grpc.AdminStub(ch)
def msgs():
    for i, m in enumerate(W.messages(t)):
        if i == 3:
            print("half-way", flush=True)
            time.sleep(600)
        yield m
admin.UpdateWeights(msgs(), metadata=W.auth(), timeout=900)
'''


def test_killed_trainer_leaves_the_old_weights(make_cluster, models):
    c, admin = start(make_cluster, models, workers=2)
    env = dict(os.environ)
    proc = subprocess.Popen([sys.executable, "-c", PUSHER, os.path.dirname(harness.__file__),
                             c.scheduler.admin_address, models["new"]],
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "half-way"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        proc.kill()
    # The scheduler notices the broken stream and drops the stage; a new push waits for that and
    # is accepted.
    r = W.push(admin, models["new_t"])
    assert r.version == 1
    assert list(greedy(c, PROMPTS[0]).token_ids) == offline_ids(models["new"], PROMPTS[0], 24)


def test_worker_killed_mid_push(make_cluster, models):
    c, admin = start(make_cluster, models, workers=2)
    gate = threading.Event()
    release = threading.Event()

    def held():
        for i, m in enumerate(W.messages(models["new_t"])):
            if i == 3:
                gate.set()
                release.wait(60)
            yield m


    fut = admin.UpdateWeights.future(held(), metadata=W.auth(), timeout=120)
    assert gate.wait(30)
    c.workers[1].proc.kill()
    release.set()
    with pytest.raises(grpc.RpcError) as e:
        fut.result()
    assert c.workers[1].address in e.value.details() and "version 0 still serving" in \
        e.value.details()
    assert W.version(admin).version == 0
    # The surviving worker still serves the old weights, then takes a good push.
    assert list(greedy(c, PROMPTS[0]).token_ids) == offline_ids(models["old"], PROMPTS[0], 24)
    deadline = time.monotonic() + 30
    while True:  # until the scheduler has marked the dead worker down
        try:
            r = W.push(admin, models["new_t"])
            break
        except grpc.RpcError as err:
            assert time.monotonic() < deadline, err
            time.sleep(0.5)
    assert (r.version, r.workers) == (1, 1)
    assert list(greedy(c, PROMPTS[0]).token_ids) == offline_ids(models["new"], PROMPTS[0], 24)


def test_gpu_only_verbs_say_why(make_cluster, models):
    c, admin = start(make_cluster, models)
    code, msg = code_of(lambda: admin.InitWeightUpdateGroup(
        apb.InitWeightUpdateGroupRequest(group_name="g"), metadata=W.auth(), timeout=10))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "cuda" in msg and "cpu" in msg
    code, msg = code_of(lambda: admin.ReleaseMemory(apb.ReleaseMemoryRequest(), metadata=W.auth(),
                                                    timeout=10))
    assert code == grpc.StatusCode.FAILED_PRECONDITION


def test_malformed_bytes_are_refused_and_change_nothing(make_cluster, models):
    """The scheduler reads each message from its bytes (no protobuf object): a message that is not
    an UpdateWeightsRequest is refused naming it, and nothing reaches a switch."""
    c, admin = start(make_cluster, models, workers=2)
    ch = grpc.insecure_channel(c.scheduler.admin_address)
    raw = ch.stream_unary("/astr.v1.Admin/UpdateWeights", request_serializer=lambda b: b,
                          response_deserializer=apb.UpdateWeightsResponse.FromString)
    first = apb.UpdateWeightsRequest(manifest=W.manifest(models["new_t"])).SerializeToString()
    for bad in (b"\x0b", b"\x12\x05\x1a\x09abc", b"\x12"):
        with pytest.raises(grpc.RpcError) as e:
            raw(iter([first, bad]), metadata=W.auth(), timeout=60)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
        assert "malformed UpdateWeightsRequest" in e.value.details()
        assert "version 0 still serving" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:  # the first message itself
        raw(iter([b"\x12\x03\x08"]), metadata=W.auth(), timeout=60)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    ch.close()
    assert W.version(admin).version == 0
    assert list(greedy(c, PROMPTS[0]).token_ids) == offline_ids(models["old"], PROMPTS[0], 24)
    assert W.push(admin, models["new_t"]).version == 1
