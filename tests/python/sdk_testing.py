"""What the SDK tests (test_sdk_*.py) share: the SDK imported from the current tree, and real gRPC
servers on 127.0.0.1 with recording fake Admin and Generate servicers.

The fakes implement only the wire contract of admin.proto / generate.proto that the tests need
(the bearer-token check, canned replies, scripted errors); they record what they received so the
tests can compare it with values computed independently of the SDK.
"""

import contextlib
import importlib.util
import os
import threading
from concurrent import futures

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(os.path.dirname(HERE))
SDK_DIR = os.path.join(SOURCE_DIR, "sdk", "python")
PROTO_ROOT = os.path.join(SOURCE_DIR, "protos")


def load_protogen():
    """sdk/python/protogen.py as a module, without putting sdk/python on sys.path."""
    spec = importlib.util.spec_from_file_location(
        "astr_sdk_protogen", os.path.join(SDK_DIR, "protogen.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The SDK staged from this tree (sources + astr.v1 generated from protos/), never an installed one.
astr = load_protogen().import_from_tree()

from astr.v1 import admin_pb2 as apb  # noqa: E402
from astr.v1 import admin_pb2_grpc as apb_grpc  # noqa: E402
from astr.v1 import generate_pb2 as pb  # noqa: E402
from astr.v1 import generate_pb2_grpc as pb_grpc  # noqa: E402

# Seconds a test waits for an event the server side signals (a hang fails instead of blocking).
WAIT_S = 30


class Recorder:
    """Calls received by a fake servicer: (method name, metadata dict, request or request list)."""

    def __init__(self):
        self.calls = []
        self._lock = threading.Lock()

    def add(self, method, context, request):
        metadata = {}
        for key, value in context.invocation_metadata():
            metadata.setdefault(key, []).append(value)
        with self._lock:
            self.calls.append((method, metadata, request))

    def only(self, method):
        """The requests of `method`, in arrival order."""
        with self._lock:
            return [request for name, _, request in self.calls if name == method]

    def metadata(self, method):
        with self._lock:
            return [md for name, md, _ in self.calls if name == method]


class FakeAdmin(apb_grpc.AdminServicer):
    """astr.v1.Admin as admin.proto specifies its authentication: no `authorization` metadata is
    UNAUTHENTICATED, a token other than `token` PERMISSION_DENIED. `errors[method] = (code,
    message)` makes that method fail; `replies[method]` replaces its default reply."""

    def __init__(self, token="secret-token"):
        self.token = token
        self.record = Recorder()
        self.errors = {}
        self.replies = {}

    def _check(self, method, request, context):
        self.record.add(method, context, request)
        values = [v for k, v in context.invocation_metadata() if k == "authorization"]
        if not values:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing authorization metadata")
        if values != [f"Bearer {self.token}"]:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "wrong admin token")
        if method in self.errors:
            context.abort(*self.errors[method])

    def _reply(self, method, default):
        return self.replies.get(method, default)

    def UpdateWeights(self, request_iterator, context):
        requests = []  # recorded before the stream is read, as a server checks auth first
        self._check("UpdateWeights", requests, context)
        for request in request_iterator:
            copy = apb.UpdateWeightsRequest()
            copy.CopyFrom(request)
            requests.append(copy)
        data = sum(len(c.data) for r in requests for c in r.chunks)
        tensors = len(requests[0].manifest.tensors) if requests else 0
        label = requests[0].manifest.label if requests else ""
        return self._reply("UpdateWeights", apb.UpdateWeightsResponse(
            version=7, label=label, tensors=tensors, bytes=data, workers=2))

    def UpdateWeightsFromDisk(self, request, context):
        self._check("UpdateWeightsFromDisk", request, context)
        return self._reply("UpdateWeightsFromDisk",
                           apb.UpdateWeightsResponse(version=3, label=request.label))

    def InitWeightUpdateGroup(self, request, context):
        self._check("InitWeightUpdateGroup", request, context)
        return self._reply("InitWeightUpdateGroup", apb.InitWeightUpdateGroupResponse(
            world_size=3, ranks=[apb.WorkerRank(address="w0", rank=1),
                                 apb.WorkerRank(address="w1", rank=2)]))

    def UpdateWeightsFromDistributed(self, request, context):
        self._check("UpdateWeightsFromDistributed", request, context)
        return self._reply("UpdateWeightsFromDistributed", apb.UpdateWeightsResponse(version=4))

    def DestroyWeightUpdateGroup(self, request, context):
        self._check("DestroyWeightUpdateGroup", request, context)
        return apb.DestroyWeightUpdateGroupResponse()

    def GetWeightVersion(self, request, context):
        self._check("GetWeightVersion", request, context)
        return self._reply("GetWeightVersion", apb.GetWeightVersionResponse(
            version=5, label="step-5", committed_unix_ns=123, paused=apb.PAUSE_MODE_KEEP))

    def GetWeightsChecksum(self, request, context):
        self._check("GetWeightsChecksum", request, context)
        return self._reply("GetWeightsChecksum", apb.GetWeightsChecksumResponse(
            version=5, tensors=[apb.TensorChecksum(name=n, xxh64=i + 1, consistent=True)
                                for i, n in enumerate(request.names)]))

    def Pause(self, request, context):
        self._check("Pause", request, context)
        return self._reply("Pause", apb.PauseResponse(mode=request.mode, frozen=2))

    def Resume(self, request, context):
        self._check("Resume", request, context)
        return self._reply("Resume", apb.ResumeResponse(was_paused=True, paused_ns=10))

    def FlushCache(self, request, context):
        self._check("FlushCache", request, context)
        return self._reply("FlushCache", apb.FlushCacheResponse(pages_freed=9))

    def DrainWorker(self, request, context):
        self._check("DrainWorker", request, context)
        return self._reply("DrainWorker", apb.DrainWorkerResponse(
            address=request.address, finished=3, moved=1, drain_ns=5))

    def ReleaseMemory(self, request, context):
        self._check("ReleaseMemory", request, context)
        return self._reply("ReleaseMemory", apb.ReleaseMemoryResponse(bytes_released=1 << 20))

    def ResumeMemory(self, request, context):
        self._check("ResumeMemory", request, context)
        return self._reply("ResumeMemory", apb.ResumeMemoryResponse(bytes_restored=1 << 20))


class FakeGenerate(pb_grpc.GenerateServicer):
    """astr.v1.Generate with canned replies. `stream_replies` is what GenerateStream sends;
    `stream_error` (code, message) ends the stream with that status after them;
    `block_stream_after` > 0 makes it wait after that many messages until the client goes away
    (then `stream_ended` is set)."""

    def __init__(self):
        self.record = Recorder()
        self.errors = {}
        self.stream_replies = []
        self.stream_error = None
        self.block_stream_after = 0
        self.stream_ended = threading.Event()

    def _check(self, method, request, context):
        self.record.add(method, context, request)
        if method in self.errors:
            context.abort(*self.errors[method])

    def Generate(self, request, context):
        self._check("Generate", request, context)
        return pb.GenerateResponse(
            request_id=request.request_id or "r-1",
            completions=[pb.Completion(index=i, text=f"sample {i}", token_ids=[5, 6])
                         for i in range(max(1, request.n))],
            usage=pb.Usage(prompt_tokens=3, completion_tokens=2 * max(1, request.n)),
            seed=request.sampling.seed if request.sampling.HasField("seed") else 99)

    def GenerateStream(self, request, context):
        self._check("GenerateStream", request, context)
        context.add_callback(self.stream_ended.set)
        for i, reply in enumerate(self.stream_replies):
            yield reply
            if self.block_stream_after and i + 1 == self.block_stream_after:
                self.stream_ended.wait(WAIT_S)
                return
        if self.stream_error is not None:
            context.abort(*self.stream_error)

    def Tokenize(self, request, context):
        self._check("Tokenize", request, context)
        if request.WhichOneof("input") == "chat":
            return pb.TokenizeResponse(token_ids=[1, 2], rendered_prompt="<chat>")
        return pb.TokenizeResponse(token_ids=[ord(c) for c in request.text],
                                   tokens=list(request.text))

    def Detokenize(self, request, context):
        self._check("Detokenize", request, context)
        return pb.DetokenizeResponse(text="".join(chr(t) for t in request.token_ids))

    def GetModelInfo(self, request, context):
        self._check("GetModelInfo", request, context)
        return pb.GetModelInfoResponse(model_name="fake", vocab_size=512, max_n=4)

    def GetServerStats(self, request, context):
        self._check("GetServerStats", request, context)
        return pb.GetServerStatsResponse(waiting_requests=1, running_requests=2)


@contextlib.contextmanager
def serve(admin=None, generate=None):
    """A real gRPC server on 127.0.0.1 (a free port) with the given servicers; yields
    "127.0.0.1:PORT" and stops the server on exit."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8),
        options=[("grpc.max_receive_message_length", -1)])
    if admin is not None:
        apb_grpc.add_AdminServicer_to_server(admin, server)
    if generate is not None:
        pb_grpc.add_GenerateServicer_to_server(generate, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None).wait(WAIT_S)
