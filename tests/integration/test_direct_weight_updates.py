"""The direct route of weight updates (docs/rl.md "The direct route"): the scheduler reserves an
update (Admin.BeginDirectUpdate), the trainer streams the bytes straight to every worker's
StageWeights, and the scheduler commits (Admin.CommitDirectUpdate). The served output after it is
the offline engine's on the new weights; every failure leaves the served version in place and
ends the reservation, so the next update goes through."""

import json
import time

import grpc
import numpy as np
import pytest

import astr
import harness
import weights as W
from harness import apb, request

pytestmark = pytest.mark.skipif(bool(harness.missing_binaries()), reason="binaries not built")

PROMPTS = [[1, 403, 407, 261, 378], [1, 298, 315, 421]]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("direct")
    return W.old_and_new(root, seed=3)


@pytest.fixture(scope="module")
def offline(models):
    """Greedy ids of `astr run` on each model, computed once per prompt."""
    cache = {}

    def ids(which, prompt):
        key = (which, tuple(prompt))
        if key not in cache:
            cache[key] = harness.offline_run(models[which], prompt_ids=prompt, max_tokens=16,
                                             extra=("--dtype", "f32"))["token_ids"]
        return cache[key]
    return ids


def start(make_cluster, models, workers=2):
    c = make_cluster(model=models["old"], num_workers=workers, worker_flags={"dtype": "f32"},
                     scheduler_flags={"admin_token_file": models["token"],
                                      "tokenizer": harness.STORIES})
    return c, c.scheduler.admin_stub()


def greedy(c, prompt):
    return list(c.stub.Generate(request(token_ids=prompt, max_tokens=16),
                                timeout=harness.RPC_TIMEOUT_S).completions[0].token_ids)


def serves(c, offline, which):
    return all(greedy(c, p) == offline(which, p) for p in PROMPTS)


def code_of(call):
    with pytest.raises((grpc.RpcError, astr.AstrError)) as e:
        call()
    err = e.value
    if isinstance(err, astr.AstrError):
        return err.code, err.message
    return err.code(), err.details()


def begin(admin, timeout_ms=0):
    return admin.BeginDirectUpdate(apb.BeginDirectUpdateRequest(timeout_ms=timeout_ms),
                                   metadata=W.auth(), timeout=30)


def commit(admin, update_id, stages, label="", discard=False):
    req = apb.CommitDirectUpdateRequest(update_id=update_id, label=label, discard=discard)
    for worker, answer in stages:
        req.stages.add(worker=worker, staged_id=answer.staged_id, tensors=answer.tensors,
                       bytes=answer.bytes)
    return admin.CommitDirectUpdate(req, metadata=W.auth(), timeout=60)


def stage(address, tensors, **kw):
    """One worker's StageWeights, sent by this process as a trainer would."""
    with grpc.insecure_channel(address) as ch:
        return harness.wpb_grpc.WorkerStub(ch).StageWeights(W.messages(tensors, **kw), timeout=60)


def test_direct_push_serves_the_new_weights(make_cluster, models, offline):
    c, admin = start(make_cluster, models)
    assert serves(c, offline, "old")
    client = astr.AdminClient(c.scheduler.admin_address, token=W.TOKEN)
    sync = astr.WeightSync(client, transport="direct", bucket_bytes=1 << 16)
    reply = sync.push(models["new_t"].items(), label="direct-1")
    assert (reply.version, reply.label, reply.workers, reply.tensors) == \
        (1, "direct-1", 2, len(models["new_t"]))
    assert reply.bytes == sum(a.nbytes for a in models["new_t"].values())
    v = W.version(admin)
    assert (v.version, v.label) == (1, "direct-1")
    assert offline("new", PROMPTS[0]) != offline("old", PROMPTS[0])  # the update matters
    assert serves(c, offline, "new")
    # Tokens carry the new version, and both workers hold the pushed bytes.
    got = c.stub.Generate(request(token_ids=PROMPTS[0], max_tokens=4),
                          timeout=harness.RPC_TIMEOUT_S).completions[0]
    assert W.spans(got) == [(1, 0, 4)]
    sums = admin.GetWeightsChecksum(apb.GetWeightsChecksumRequest(), metadata=W.auth(), timeout=60)
    want = {s.name: s.xxh64 for s in W.manifest(models["new_t"]).tensors}
    checked = [t for t in sums.tensors if t.name in want]
    assert len(checked) == len(want)
    assert all(t.consistent and t.xxh64 == want[t.name] for t in checked)
    # The reservation ended with the commit: the scheduler route and the direct one both go on.
    assert W.push(admin, models["old_t"]).version == 2
    assert serves(c, offline, "old")
    assert sync.push(models["new_t"], label="direct-3").version == 3
    assert serves(c, offline, "new")
    # `astr admin update-weights --direct` sends a checkpoint the same way.
    r = harness.run_cli("admin", "update-weights", "--server", c.scheduler.admin_address,
                        "--token-file", models["token"], "--from-safetensors", models["old"],
                        "--direct", "--label", "cli", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["version"] in (4, "4")
    assert (W.version(admin).version, W.version(admin).label) == (4, "cli")
    assert serves(c, offline, "old")
    client.close()


def test_reservation_holds_off_other_updates_then_lapses(make_cluster, models, offline):
    c, admin = start(make_cluster, models, workers=1)
    r = begin(admin, timeout_ms=2000)
    assert list(r.workers) == [w.address for w in c.workers] and r.version == 0
    assert len(r.update_id) == 32
    for call in (lambda: W.push(admin, models["new_t"]),
                 lambda: begin(admin),
                 lambda: admin.UpdateWeightsFromDisk(
                     apb.UpdateWeightsFromDiskRequest(path=models["new"]), metadata=W.auth(),
                     timeout=60)):
        code, msg = code_of(call)
        assert code == grpc.StatusCode.ABORTED and r.update_id in msg, msg
    code, msg = code_of(lambda: commit(admin, "0" * 32, []))
    assert code == grpc.StatusCode.NOT_FOUND and "update_id" in msg
    # A stage made within the reservation, committed after it lapsed, is refused.
    answer = stage(c.workers[0].address, models["new_t"])
    time.sleep(2.2)
    code, msg = code_of(lambda: commit(admin, r.update_id, [(c.workers[0].address, answer)]))
    assert code == grpc.StatusCode.NOT_FOUND and "lapsed" in msg, msg
    assert W.version(admin).version == 0 and serves(c, offline, "old")
    # The lapsed reservation holds nothing any more.
    assert W.push(admin, models["new_t"]).version == 1
    assert serves(c, offline, "new")


@pytest.mark.parametrize("case", ["checksum", "missing_stage", "unknown_worker", "named_twice",
                                  "replaced_stage", "discard"])
def test_bad_direct_updates_leave_the_old_weights(make_cluster, models, offline, case):
    c, admin = start(make_cluster, models)
    addresses = [w.address for w in c.workers]
    r = begin(admin)
    t = models["new_t"]
    if case == "checksum":
        bad = W.manifest(t)
        bad.tensors[2].xxh64 ^= 1
        code, msg = code_of(lambda: stage(addresses[0], t, spec=bad))
        assert code == grpc.StatusCode.DATA_LOSS and list(t)[2] in msg, msg
        answers = [(addresses[1], stage(addresses[1], t))]
        reply = commit(admin, r.update_id, answers, discard=True)  # what the SDK does
        assert reply.version == 0
    else:
        answers = [(a, stage(a, t)) for a in addresses]
        if case == "missing_stage":
            stages, want = answers[:1], (grpc.StatusCode.INVALID_ARGUMENT, addresses[1])
        elif case == "unknown_worker":
            stages = answers + [("127.0.0.1:1", answers[0][1])]
            want = (grpc.StatusCode.INVALID_ARGUMENT, "stages[2].worker")
        elif case == "named_twice":
            stages = answers + answers[:1]
            want = (grpc.StatusCode.INVALID_ARGUMENT, "named twice")
        elif case == "replaced_stage":
            # Worker 1 staged again (a stray trainer): the id given to the scheduler is stale,
            # so that worker refuses to switch and the other one switches back.
            stage(addresses[1], models["old_t"])
            stages, want = answers, (grpc.StatusCode.FAILED_PRECONDITION, addresses[1])
        else:
            stages, want = answers, None
        if want is None:
            assert commit(admin, r.update_id, stages, discard=True).version == 0
        else:
            code, msg = code_of(lambda: commit(admin, r.update_id, stages))
            assert want[1] in msg and "version 0 still serving" in msg, msg
            if case != "replaced_stage":
                assert code == want[0], msg
    assert W.version(admin).version == 0
    assert serves(c, offline, "old")
    # The reservation is over: the next update goes through at once.
    code, msg = code_of(lambda: commit(admin, r.update_id, []))
    assert code == grpc.StatusCode.NOT_FOUND
    sync = astr.WeightSync(astr.AdminClient(c.scheduler.admin_address, token=W.TOKEN),
                           transport="direct")
    assert sync.push(t).version == 1
    assert serves(c, offline, "new")


def test_sdk_reports_the_workers_error_and_discards(make_cluster, models, offline):
    c, admin = start(make_cluster, models)
    client = astr.AdminClient(c.scheduler.admin_address, token=W.TOKEN)
    sync = astr.WeightSync(client, transport="direct")
    name = next(iter(models["new_t"]))
    wrong = {name: np.zeros((3, 5), np.float32)}
    with pytest.raises(astr.AstrError) as e:
        sync.push(wrong)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.message.startswith("worker 127.0.0.1:") and name in e.value.message
    assert W.version(admin).version == 0 and serves(c, offline, "old")
    # No reservation is left behind: a push through the scheduler goes through at once.
    assert W.push(admin, models["new_t"], timeout=30).version == 1
    with pytest.raises(TypeError):
        astr.WeightSync(None, transport="direct")
    client.close()
