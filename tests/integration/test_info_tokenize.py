"""Tokenize / Detokenize / GetModelInfo agree with the `astr tokenize` / `astr detokenize` CLI and
the model file's documented facts; both services answer grpc.health.v1 and server reflection."""

import json
import os

import grpc
import pytest
from google.protobuf import descriptor_pb2

import harness
from harness import STORIES, health_pb2, health_pb2_grpc, pb, reflection_pb2, reflection_pb2_grpc

TEXTS = [
    "Once upon a time",
    "Hello world",
    "Tom said: \"Let's go!\"\nThe end.",
    "  spaces  ",
    "naïve café 🙂",
]


def cli_tokenize(text, add_special=True):
    args = ["tokenize", "--model", STORIES, "--text", text, "--json"]
    if not add_special:
        args.append("--no-add-special")
    r = harness.run_cli(*args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def cli_detokenize(ids, keep_special=False):
    args = ["detokenize", "--model", STORIES, "--ids", ",".join(map(str, ids))]
    if keep_special:
        args.append("--keep-special")
    r = harness.run_cli(*args)
    assert r.returncode == 0, r.stderr
    return r.stdout.removesuffix("\n")


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("add_special", [True, False])
def test_tokenize_matches_cli(cluster, text, add_special):
    want = cli_tokenize(text, add_special)
    req = pb.TokenizeRequest(text=text, add_special_tokens=add_special)
    got = cluster.stub.Tokenize(req, timeout=harness.RPC_TIMEOUT_S)
    assert list(got.token_ids) == want["ids"]
    assert list(got.tokens) == want["tokens"]


def test_tokenize_default_adds_bos(cluster):
    got = cluster.stub.Tokenize(pb.TokenizeRequest(text="Once upon a time"), timeout=harness.RPC_TIMEOUT_S)
    assert list(got.token_ids) == [1, 403, 407, 261, 378]  # models/README.md


@pytest.mark.parametrize(
    "ids",
    [
        [1, 403, 407, 261, 378],
        [432, 383, 286, 261, 376, 298, 315, 421],
        [1, 403, 2, 407],  # EOS in the middle: kept or skipped
        [3 + 0xC3, 3 + 0xA9],  # byte tokens <0xC3><0xA9> = "é"
    ],
)
@pytest.mark.parametrize("skip_special", [True, False])
def test_detokenize_matches_cli(cluster, ids, skip_special):
    want = cli_detokenize(ids, keep_special=not skip_special)
    req = pb.DetokenizeRequest(token_ids=ids, skip_special_tokens=skip_special)
    got = cluster.stub.Detokenize(req, timeout=harness.RPC_TIMEOUT_S)
    assert got.text == want


def test_detokenize_invalid_id(cluster):
    with pytest.raises(grpc.RpcError) as e:
        cluster.stub.Detokenize(pb.DetokenizeRequest(token_ids=[1, 512]), timeout=harness.RPC_TIMEOUT_S)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "token_ids" in e.value.details()


def test_model_info(cluster):
    info = cluster.scheduler.model_info()
    # Facts of stories260K.gguf (models/README.md).
    assert info.architecture == "llama"
    assert info.vocab_size == harness.STORIES_VOCAB
    assert info.max_context_tokens == harness.STORIES_CONTEXT
    assert info.bos_token_id == harness.STORIES_BOS
    assert list(info.eos_token_ids) == [harness.STORIES_EOS]
    assert not info.has_chat_template
    assert info.weight_version == 0
    assert info.max_n == 4  # the module cluster's --max-n
    assert info.max_stop_strings > 0
    assert info.model_name
    assert len(info.content_hash) >= 16 and all(ch in "0123456789abcdef" for ch in info.content_hash.lower())

    winfo = cluster.workers[0].info()
    assert info.content_hash == winfo.content_hash
    assert info.model_name == winfo.model_name
    assert len(info.workers) == 1
    w = info.workers[0]
    assert w.address == cluster.workers[0].address
    assert (w.backend, w.dtype) == (winfo.backend, winfo.dtype)
    assert (w.num_pages, w.page_size) == (winfo.num_pages, winfo.page_size)


def test_worker_info(cluster):
    winfo = cluster.workers[0].info()
    assert winfo.model_path == STORIES
    assert winfo.architecture == "llama"
    assert (winfo.vocab_size, winfo.hidden_size, winfo.num_layers) == (512, 64, 5)
    assert (winfo.num_heads, winfo.num_kv_heads, winfo.head_dim) == (8, 4, 8)
    assert winfo.max_context_tokens == 2048
    assert list(winfo.eos_token_ids) == [2]
    assert winfo.backend == "cpu"
    assert (winfo.num_pages, winfo.page_size) == (2048, 16)  # the module cluster's flags
    assert winfo.max_batch > 0 and winfo.max_batch_tokens > 0


def test_content_hash_differs_between_models(new_cluster):
    other = f"{harness.SHARED_DIR}/models/llama-2-tiny-random.gguf"
    if not os.path.exists(other):
        pytest.skip("llama-2-tiny-random.gguf missing")
    c = new_cluster()
    a = c.start_worker(STORIES, num_pages=16)
    b = c.start_worker(other, num_pages=16)
    assert a.info().content_hash != b.info().content_hash


def server_addresses(cluster):
    return [("scheduler", cluster.scheduler.address)] + [("worker", w.address) for w in cluster.workers]


def test_health_serving(cluster):
    for name, addr in server_addresses(cluster):
        with grpc.insecure_channel(addr) as ch:
            r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
            assert r.status == health_pb2.HealthCheckResponse.SERVING, name


def reflect(addr, req):
    with grpc.insecure_channel(addr) as ch:
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        return list(stub.ServerReflectionInfo(iter([req]), timeout=10))[0]


@pytest.mark.parametrize("who,service", [("scheduler", "astr.v1.Generate"), ("worker", "astr.v1.Worker")])
def test_reflection(cluster, who, service):
    addr = dict(server_addresses(cluster))[who]
    r = reflect(addr, reflection_pb2.ServerReflectionRequest(list_services=""))
    names = [s.name for s in r.list_services_response.service]
    assert service in names, names
    assert "grpc.health.v1.Health" in names, names
    r = reflect(addr, reflection_pb2.ServerReflectionRequest(file_containing_symbol=service))
    assert r.WhichOneof("message_response") == "file_descriptor_response", r
    blobs = r.file_descriptor_response.file_descriptor_proto
    files = [descriptor_pb2.FileDescriptorProto.FromString(b) for b in blobs]
    assert any(s.name == service.split(".")[-1] for f in files for s in f.service), [f.name for f in files]


def test_worker_info_idle_counters(cluster):
    harness.unary(cluster.stub, harness.request(token_ids=[1, 403], max_tokens=3))
    harness.wait_workers_idle(cluster)
    assert cluster.workers[0].info().steps > 0
