"""Weight updates of a mixture-of-experts model (Qwen3-MoE) through astr.v1.Admin: every expert's
tensors pushed under their Hugging Face names (mlp.experts.E.*, the router mlp.gate), checked by
their checksums, are served exactly as if the worker had loaded them: greedy ids equal `astr run`
on a folder holding the new weights, and logprobs equal an independent float64 forward pass of
them (tests/python/reference_llama.py's MoE block). A push of one expert changes that expert
only. transformers 5 holds a layer's experts stacked (mlp.experts.gate_up_proj [experts, 2 * ffn,
hidden], mlp.experts.down_proj [experts, hidden, ffn], the router as mlp.gate.weight also for
Mixtral): a trainer's state_dict in that form is taken as well."""

import os
import re
import subprocess
import sys

import grpc
import numpy as np
import pytest

import harness
import weights as W
from harness import request

sys.path.insert(0, os.path.join(harness.SOURCE_DIR, "tests", "python"))
from reference_llama import ReferenceModel  # noqa: E402

pytestmark = pytest.mark.skipif(bool(harness.missing_binaries()), reason="binaries not built")

PROMPTS = [[1, 403, 407, 261, 378], [1, 298, 315, 421, 17, 99, 250, 33]]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("moe_weights")
    old = str(root / "old")
    # 8 experts, top-2 renormalized, two MoE layers; the router's weights make routing decisive.
    subprocess.run([harness.ASTR_BIN, "make-model", "--format", "hf", "--dtype", "f32",
                    "--arch", "qwen3_moe", "--layers", "2", "--hidden", "64", "--heads", "4",
                    "--kv-heads", "2", "--head-dim", "16", "--ffn", "96", "--moe-ffn", "32",
                    "--experts", "8", "--experts-per-tok", "2", "--vocab", "512", "--seed", "71",
                    "--init-std", "0.1", "--router-std", "0.5", "--out", old],
                   check=True, stdout=subprocess.DEVNULL)
    old_t = W.load(old)
    new_t = W.perturbed(old_t, seed=2, scale=0.05)
    new = W.write_folder(old, new_t, str(root / "new"))
    # One expert of layer 1 changed (its three tensors), the rest as before.
    one = [n for n in old_t if n.startswith("model.layers.1.mlp.experts.3.")]
    assert len(one) == 3, one
    one_t = W.perturbed(old_t, seed=3, scale=0.2, names=set(one))
    one_folder = W.write_folder(old, one_t, str(root / "one"))
    return {"old": old, "old_t": old_t, "new": new, "new_t": new_t, "one": one_folder,
            "one_t": {n: one_t[n] for n in one}, "token": W.token_file(str(root))}


def start(make_cluster, models):
    c = make_cluster(model=models["old"], num_workers=1, worker_flags={"dtype": "f32"},
                     scheduler_flags={"admin_token_file": models["token"],
                                      "tokenizer": harness.STORIES})
    return c, c.scheduler.admin_stub()


def greedy(c, prompt, max_tokens=16):
    return c.stub.Generate(request(token_ids=prompt, max_tokens=max_tokens, return_logprobs=True),
                           timeout=harness.RPC_TIMEOUT_S).completions[0]


def offline_ids(model, prompt, max_tokens=16):
    return harness.offline_run(model, prompt_ids=prompt, max_tokens=max_tokens,
                               extra=("--dtype", "f32"))["token_ids"]


def test_push_of_every_expert_serves_the_new_weights(make_cluster, models):
    c, admin = start(make_cluster, models)
    for p in PROMPTS:
        assert list(greedy(c, p).token_ids) == offline_ids(models["old"], p)
    assert any(n.endswith("mlp.experts.7.down_proj.weight") for n in models["new_t"])
    r = W.push(admin, models["new_t"], label="moe-1")
    assert (r.version, r.tensors) == (1, len(models["new_t"]))
    assert r.bytes == sum(a.nbytes for a in models["new_t"].values())
    ref = ReferenceModel.load(models["new"])
    for p in PROMPTS:
        want = offline_ids(models["new"], p)
        assert want != offline_ids(models["old"], p)  # the update matters
        got = greedy(c, p)
        assert list(got.token_ids) == want and got.weight_version == 1
        rows = ref.score(p, list(got.token_ids))
        for tok, lp, row in zip(got.token_ids, got.logprobs, rows):
            assert abs(lp - row[tok]) < 1e-4


def test_push_of_one_expert_changes_that_expert_only(make_cluster, models):
    c, admin = start(make_cluster, models)
    r = W.push(admin, models["one_t"], label="expert-3")
    assert (r.version, r.tensors) == (1, 3)
    ref = ReferenceModel.load(models["one"])
    changed = False
    for p in PROMPTS:
        got = greedy(c, p)
        assert list(got.token_ids) == offline_ids(models["one"], p)
        changed |= list(got.token_ids) != offline_ids(models["old"], p)
        rows = ref.score(p, list(got.token_ids))
        for tok, lp, row in zip(got.token_ids, got.logprobs, rows):
            assert abs(lp - row[tok]) < 1e-4
    assert changed, "expert 3 of layer 1 is never routed to by these prompts"


def test_expert_tensor_of_the_wrong_shape_is_refused_by_name(make_cluster, models):
    c, admin = start(make_cluster, models)
    name = "model.layers.0.mlp.experts.5.up_proj.weight"
    bad = {name: models["new_t"][name][:16]}
    with pytest.raises(grpc.RpcError) as e:
        W.push(admin, bad)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "experts.5.up_proj" in e.value.details(), e.value.details()
    assert W.version(admin).version == 0
    assert list(greedy(c, PROMPTS[0]).token_ids) == offline_ids(models["old"], PROMPTS[0])


def transformers5_form(tensors):
    """`tensors` (checkpoint names) as a transformers 5 MoE model's state_dict names them."""
    out, experts = {}, {}
    for name, a in tensors.items():
        m = re.match(r"model\.layers\.(\d+)\.(?:mlp|block_sparse_moe)\.experts\.(\d+)\."
                     r"(gate_proj|up_proj|down_proj|w1|w3|w2)\.weight$", name)
        if m:
            part = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}.get(m[3], m[3])
            experts.setdefault(int(m[1]), {}).setdefault(int(m[2]), {})[part] = a
            continue
        out[name.replace("block_sparse_moe.gate.", "mlp.gate.")] = a
    for layer, by_expert in experts.items():
        order = sorted(by_expert)
        out[f"model.layers.{layer}.mlp.experts.gate_up_proj"] = np.stack(
            [np.concatenate([by_expert[e]["gate_proj"], by_expert[e]["up_proj"]]) for e in order])
        out[f"model.layers.{layer}.mlp.experts.down_proj"] = np.stack(
            [by_expert[e]["down_proj"] for e in order])
    return out


def test_push_of_transformers5_stacked_experts(make_cluster, models):
    c, admin = start(make_cluster, models)
    stacked = transformers5_form(models["new_t"])
    assert stacked["model.layers.1.mlp.experts.gate_up_proj"].shape == (8, 64, 64)
    r = W.push(admin, stacked, label="stacked")
    assert (r.version, r.tensors) == (1, len(stacked))
    for p in PROMPTS:
        assert list(greedy(c, p).token_ids) == offline_ids(models["new"], p)
    # Naming an expert both stacked and on its own is refused, naming the entry.
    both = {"model.layers.0.mlp.experts.down_proj": stacked["model.layers.0.mlp.experts.down_proj"],
            "model.layers.0.mlp.experts.2.down_proj.weight":
                models["new_t"]["model.layers.0.mlp.experts.2.down_proj.weight"]}
    with pytest.raises(grpc.RpcError) as e:
        W.push(admin, both)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "named twice" in e.value.details(), e.value.details()


def test_mixtral_push_in_both_forms(make_cluster, models, tmp_path):
    old = str(tmp_path / "mixtral")
    subprocess.run([harness.ASTR_BIN, "make-model", "--format", "hf", "--dtype", "f32",
                    "--arch", "mixtral", "--layers", "2", "--hidden", "64", "--heads", "4",
                    "--kv-heads", "2", "--head-dim", "16", "--ffn", "48", "--experts", "4",
                    "--experts-per-tok", "2", "--vocab", "512", "--seed", "72", "--init-std", "0.1",
                    "--router-std", "0.5", "--out", old], check=True, stdout=subprocess.DEVNULL)
    old_t = W.load(old)
    assert "model.layers.0.block_sparse_moe.experts.3.w2.weight" in old_t
    new_t = W.perturbed(old_t, seed=4, scale=0.05)
    new = W.write_folder(old, new_t, str(tmp_path / "mixtral-new"))
    c = make_cluster(model=old, num_workers=1, worker_flags={"dtype": "f32"},
                     scheduler_flags={"admin_token_file": models["token"],
                                      "tokenizer": harness.STORIES})
    admin = c.scheduler.admin_stub()
    want = [offline_ids(new, p) for p in PROMPTS]
    assert want != [offline_ids(old, p) for p in PROMPTS]
    for version, form in ((1, new_t), (2, transformers5_form(new_t))):
        r = W.push(admin, form)
        assert (r.version, r.tensors) == (version, len(form))
        assert [list(greedy(c, p).token_ids) for p in PROMPTS] == want


def test_gpt_oss_push_in_its_stacked_form_and_per_expert(make_cluster, models, tmp_path):
    """gpt-oss holds a layer's experts stacked in x @ W form (mlp.experts.gate_up_proj [experts,
    hidden, 2 * ffn] with gate and up columns interleaved, their biases, down_proj [experts, ffn,
    hidden]) both in its checkpoints and in a trainer's state_dict: a push of that form serves the
    new weights (greedy ids of `astr run` on them, logprobs of the float64 reference, which reads
    the stacked form as transformers does); so does one expert's gate_proj pushed on its own."""
    old = str(tmp_path / "gpt-oss")
    subprocess.run([harness.ASTR_BIN, "make-model", "--format", "hf", "--dtype", "f32",
                    "--arch", "gpt_oss", "--layers", "2", "--hidden", "64", "--heads", "4",
                    "--kv-heads", "2", "--head-dim", "16", "--ffn", "48", "--experts", "4",
                    "--experts-per-tok", "2", "--vocab", "512", "--seed", "73", "--init-std", "0.1",
                    "--router-std", "0.5", "--sliding-window", "4", "--out", old],
                   check=True, stdout=subprocess.DEVNULL)
    old_t = W.load(old)
    gate_up = "model.layers.1.mlp.experts.gate_up_proj"
    assert old_t[gate_up].shape == (4, 64, 96), old_t[gate_up].shape
    new_t = W.perturbed(old_t, seed=5, scale=0.05)
    new = W.write_folder(old, new_t, str(tmp_path / "gpt-oss-new"))
    c = make_cluster(model=old, num_workers=1, worker_flags={"dtype": "f32"},
                     scheduler_flags={"admin_token_file": models["token"],
                                      "tokenizer": harness.STORIES})
    admin = c.scheduler.admin_stub()
    want = [offline_ids(new, p) for p in PROMPTS]
    assert want != [offline_ids(old, p) for p in PROMPTS]
    r = W.push(admin, new_t, label="gpt-oss")
    assert (r.version, r.tensors) == (1, len(new_t))
    ref = ReferenceModel.load(new)
    for p, ids in zip(PROMPTS, want):
        got = greedy(c, p)
        assert list(got.token_ids) == ids
        for tok, lp, row in zip(got.token_ids, got.logprobs, ref.score(p, list(got.token_ids))):
            assert abs(lp - row[tok]) < 1e-4
    # Expert 2's gate_proj of layer 1 under its own name: the stacked tensor's even columns.
    one_t = {k: v.copy() for k, v in new_t.items()}
    gate = (new_t[gate_up][2][:, 0::2].T * 1.5).astype(np.float32)  # [ffn, hidden]
    one_t[gate_up][2][:, 0::2] = gate.T
    one = W.write_folder(old, one_t, str(tmp_path / "gpt-oss-one"))
    r = W.push(admin, {"model.layers.1.mlp.experts.2.gate_proj.weight": gate}, label="one")
    assert (r.version, r.tensors) == (2, 1)
    ref, before = ReferenceModel.load(one), ReferenceModel.load(new)
    changed = 0.0
    for p in PROMPTS:
        got = greedy(c, p)
        assert list(got.token_ids) == offline_ids(one, p)
        toks = list(got.token_ids)
        for tok, lp, row, old_row in zip(toks, got.logprobs, ref.score(p, toks),
                                         before.score(p, toks)):
            assert abs(lp - row[tok]) < 1e-4
            changed = max(changed, abs(lp - old_row[tok]))
    assert changed > 1e-3, "expert 2 of layer 1 is never routed to by these prompts"
