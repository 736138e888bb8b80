"""TLS and mutual TLS on every endpoint (public gRPC, admin gRPC, HTTP, scheduler -> worker), their
reload on SIGHUP, and the public API's keys with per-key rate and concurrency limits
(docs/reliability.md).

The certificates are made here with the openssl command line: a CA, a second CA nobody trusts,
server and client certificates signed by each, and an expired one. Every refusal is checked to be
clear to the client and to leave the server serving the next, good, call.
"""
import os
import re
import signal
import socket
import ssl
import subprocess
import time

import grpc
import httpx2 as httpx
import openai
import pytest

import harness
import openai_http as oh
import weights as W
from harness import apb, apb_grpc, pb, pb_grpc, wpb, wpb_grpc

KEY = "sk-tls-test-0123456789"
SAN = "subjectAltName=IP:127.0.0.1,DNS:localhost\n"


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


class Pki:
    """Certificates in `d`: <name>.pem and <name>.key."""

    def __init__(self, d):
        self.d = str(d)
        with open(os.path.join(self.d, "san.ext"), "w") as f:
            f.write(SAN)
        for ca in ("ca", "evil-ca"):
            openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key",
                    "-out", f"{ca}.pem", "-days", "2", "-subj", f"/CN={ca}", cwd=self.d)

    def path(self, name, ext="pem"):
        return os.path.join(self.d, f"{name}.{ext}")

    def issue(self, name, ca="ca", days=2, cn=None):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                f"{name}.csr", "-subj", f"/CN={cn or name}", cwd=self.d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", str(days), "-extfile",
                "san.ext", cwd=self.d)
        return self.path(name), self.path(name, "key")

    def read(self, name, ext="pem"):
        with open(self.path(name, ext), "rb") as f:
            return f.read()

    def grpc_creds(self, ca="ca", client=None):
        return grpc.ssl_channel_credentials(
            root_certificates=self.read(ca),
            private_key=self.read(client, "key") if client else None,
            certificate_chain=self.read(client) if client else None)

    def ssl_context(self, ca="ca", client=None):
        ctx = ssl.create_default_context(cafile=self.path(ca))
        if client:
            ctx.load_cert_chain(self.path(client), self.path(client, "key"))
        return ctx


def peer_cn(address, ctx, alpn=None):
    """The CN of the certificate the server at `address` presents (a fresh TLS handshake)."""
    host, port = address.rsplit(":", 1)
    if alpn:
        ctx.set_alpn_protocols(alpn)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=host) as s:
            subject = dict(x[0] for x in s.getpeercert()["subject"])
            return subject["commonName"]


def start(name, argv, log_dir):
    p = harness.ServerProcess(name, argv, log_dir)
    p.wait_listening()
    return p


@pytest.fixture(scope="module")
def tls(log_dir, tmp_path_factory):
    """A worker and a scheduler, every endpoint on mutual TLS, API keys required."""
    d = tmp_path_factory.mktemp("pki")
    pki = Pki(d)
    pki.issue("worker")
    pki.issue("scheduler-client")  # what the scheduler presents to the worker
    pki.issue("server", cn="server-1")
    pki.issue("client")
    pki.issue("evil-client", ca="evil-ca")
    keys = d / "api.keys"
    keys.write_text(f"{KEY} name=tester\n")
    token = W.token_file(str(d))
    logs = str(tmp_path_factory.mktemp("logs"))
    worker = start("worker", [
        harness.WORKER_BIN, "--model", harness.STORIES, "--listen", "127.0.0.1:0",
        "--backend", "cpu", "--threads", "1",
        "--tls-cert-file", pki.path("worker"), "--tls-key-file", pki.path("worker", "key"),
        "--tls-client-ca-file", pki.path("ca")], logs)
    sched = start("scheduler", [
        harness.SCHEDULER_BIN, "--workers", worker.address, "--listen", "127.0.0.1:0",
        "--admin-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
        "--admin-token-file", token, "--api-key-file", str(keys),
        "--tls-cert-file", pki.path("server"), "--tls-key-file", pki.path("server", "key"),
        "--tls-client-ca-file", pki.path("ca"),
        "--worker-tls-ca-file", pki.path("ca"),
        "--worker-tls-cert-file", pki.path("scheduler-client"),
        "--worker-tls-key-file", pki.path("scheduler-client", "key")], logs)
    sched.admin_address = sched.wait_log(harness._ADMIN_RE)
    sched.http_address = sched.wait_log(harness._HTTP_RE)
    yield pki, worker, sched, keys
    sched.kill()
    worker.kill()


def generate(address, creds, metadata=(("authorization", "Bearer " + KEY),), timeout=30):
    with grpc.secure_channel(address, creds) as ch:
        stub = pb_grpc.GenerateStub(ch)
        r = stub.Generate(harness.request(token_ids=[1, 2, 3], max_tokens=4), metadata=metadata,
                          timeout=timeout)
        return list(r.completions[0].token_ids)


def test_mutual_tls_end_to_end_equals_the_offline_run(tls):
    pki, worker, sched, _ = tls
    ids = generate(sched.address, pki.grpc_creds(client="client"))
    want = harness.offline_run(harness.STORIES, prompt_ids=[1, 2, 3], max_tokens=4)["token_ids"]
    assert ids == want, (ids, want)
    # The admin service: TLS too, and its own token (an API key is not an admin token).
    with grpc.secure_channel(sched.admin_address, pki.grpc_creds(client="client")) as ch:
        stub = apb_grpc.AdminStub(ch)
        v = stub.GetWeightVersion(apb.GetWeightVersionRequest(), metadata=W.auth(), timeout=30)
        assert v.version >= 0
        with pytest.raises(grpc.RpcError) as e:
            stub.GetWeightVersion(apb.GetWeightVersionRequest(),
                                  metadata=(("authorization", "Bearer " + KEY),), timeout=30)
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED


@pytest.mark.parametrize("why,creds", [
    ("no client certificate", lambda pki: pki.grpc_creds()),
    ("a client certificate of another CA", lambda pki: pki.grpc_creds(client="evil-client")),
    ("the server checked against another CA", lambda pki: pki.grpc_creds(ca="evil-ca",
                                                                          client="client")),
])
def test_refused_handshakes_leave_the_server_serving(tls, why, creds):
    pki, _, sched, _ = tls
    with pytest.raises(grpc.RpcError) as e:
        generate(sched.address, creds(pki), timeout=5)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE, (why, e.value)
    assert generate(sched.address, pki.grpc_creds(client="client"))


def test_plaintext_clients_of_tls_endpoints_are_refused(tls):
    pki, worker, sched, _ = tls
    for address in (sched.address, sched.admin_address, worker.address):
        with grpc.insecure_channel(address) as ch:
            with pytest.raises(grpc.RpcError) as e:
                pb_grpc.GenerateStub(ch).GetServerStats(pb.GetServerStatsRequest(), timeout=5)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE, address
    # HTTP: plain HTTP to the HTTPS port gets no response, only a closed connection.
    with pytest.raises((httpx.HTTPError, ConnectionError)):
        httpx.get(f"http://{sched.http_address}/health", timeout=5)
    assert generate(sched.address, pki.grpc_creds(client="client"))


def test_an_expired_certificate_is_refused(tls, tmp_path):
    pki, _, _, _ = tls
    cert, key = pki.issue("expired", days=-1)
    w = start("expired-worker", [
        harness.WORKER_BIN, "--model", harness.STORIES, "--listen", "127.0.0.1:0",
        "--backend", "cpu", "--threads", "1", "--tls-cert-file", cert, "--tls-key-file", key],
        str(tmp_path))
    try:
        with grpc.secure_channel(w.address, pki.grpc_creds()) as ch:
            with pytest.raises(grpc.RpcError) as e:
                wpb_grpc.WorkerStub(ch).Info(wpb.InfoRequest(), timeout=5)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        # A scheduler dialing it gives up naming the worker.
        r = subprocess.run([harness.SCHEDULER_BIN, "--workers", w.address, "--listen",
                            "127.0.0.1:0", "--admin-listen", "", "--connect-timeout-s", "2",
                            "--worker-tls-ca-file", pki.path("ca")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0
        assert w.address in r.stderr, r.stderr[-2000:]
    finally:
        w.kill()


def test_api_keys_on_grpc(tls):
    pki, _, sched, _ = tls
    creds = pki.grpc_creds(client="client")
    for metadata, why in [((), "missing"), ((("authorization", "Bearer sk-wrong"),), "wrong"),
                          ((("authorization", KEY),), "no Bearer")]:
        with pytest.raises(grpc.RpcError) as e:
            generate(sched.address, creds, metadata=metadata)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED, why
        assert KEY not in e.value.details()
    # Stats (probes, dashboards) need no key.
    with grpc.secure_channel(sched.address, creds) as ch:
        pb_grpc.GenerateStub(ch).GetServerStats(pb.GetServerStatsRequest(), timeout=30)


def test_https_with_the_openai_client(tls):
    pki, _, sched, _ = tls
    url = f"https://{sched.http_address}/v1"
    http = httpx.Client(verify=pki.ssl_context(client="client"))
    client = openai.OpenAI(base_url=url, api_key=KEY, http_client=http, max_retries=0)
    model = client.models.list().data[0].id
    out = client.completions.create(model=model, prompt="Once upon a time", max_tokens=4,
                                    temperature=0)
    assert out.usage.completion_tokens == 4
    chunks = list(client.completions.create(model=model, prompt="Once", max_tokens=3,
                                            temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=url, api_key="nope", http_client=http,
                      max_retries=0).models.list()
    # Without a client certificate the handshake fails.
    with pytest.raises(httpx.HTTPError):
        httpx.get(url + "/models", verify=pki.ssl_context(), timeout=5)


def test_the_cli_speaks_tls_with_an_api_key(tls):
    pki, _, sched, _ = tls
    env = dict(os.environ, ASTR_API_KEY=KEY)
    r = subprocess.run([harness.ASTR_BIN, "generate", "--server", sched.address,
                        "--tls-ca-file", pki.path("ca"), "--tls-cert-file", pki.path("client"),
                        "--tls-key-file", pki.path("client", "key"), "--prompt", "Once",
                        "--max-tokens", "3"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([harness.ASTR_BIN, "info", "--server", sched.address, "--connect-timeout-s",
                        "3"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and sched.address in r.stderr, r.stderr


def test_sighup_reloads_certificates_and_keeps_them_when_the_new_files_are_bad(tls):
    pki, _, sched, keys = tls
    grpc_ctx = lambda: pki.ssl_context(client="client")  # noqa: E731
    assert peer_cn(sched.address, grpc_ctx(), alpn=["h2"]) == "server-1"
    assert peer_cn(sched.http_address, grpc_ctx()) == "server-1"
    # A new certificate in place of the old one: new connections get it after SIGHUP.
    pki.issue("server", cn="server-2")
    sched.signal(signal.SIGHUP)
    harness.wait_until(lambda: peer_cn(sched.address, grpc_ctx(), alpn=["h2"]) == "server-2",
                       timeout=10, interval=0.1)
    assert peer_cn(sched.http_address, grpc_ctx()) == "server-2"
    assert generate(sched.address, pki.grpc_creds(client="client"))
    # A broken file: refused with a log line, the certificate in use stays.
    with open(pki.path("server"), "w") as f:
        f.write("-----BEGIN CERTIFICATE-----\nnot base64\n")
    sched.signal(signal.SIGHUP)
    sched.wait_log(re.compile(r"kept the old (TLS certificate) \(gRPC\)()"))
    time.sleep(2 * 1.0)  # two watch intervals: nothing may change
    assert peer_cn(sched.address, grpc_ctx(), alpn=["h2"]) == "server-2"
    assert peer_cn(sched.http_address, grpc_ctx()) == "server-2"
    assert generate(sched.address, pki.grpc_creds(client="client"))
    # API keys reload on the same signal.
    keys.write_text(f"{KEY} name=tester\nsk-second-key name=second\n")
    pki.issue("server", cn="server-3")
    sched.signal(signal.SIGHUP)
    harness.wait_until(lambda: peer_cn(sched.http_address, grpc_ctx()) == "server-3", timeout=10,
                       interval=0.1)
    assert generate(sched.address, pki.grpc_creds(client="client"),
                    metadata=(("authorization", "Bearer sk-second-key"),))


# ---------------------------------------------------------------------------------------------
# Per-key limits (plaintext cluster: the limits do not depend on the transport)


def test_per_key_rate_and_concurrency_limits(make_cluster, tmp_path):
    keys = tmp_path / "api.keys"
    keys.write_text("sk-rate-aaaaaaaa name=slow rps=0.2 burst=2\n"
                    "sk-conc-bbbbbbbb name=one max_concurrent=1\n")
    c = make_cluster(scheduler_flags={"api_key_file": str(keys)})
    rate = (("authorization", "Bearer sk-rate-aaaaaaaa"),)
    conc = (("authorization", "Bearer sk-conc-bbbbbbbb"),)
    tok = pb.TokenizeRequest(text="hi")
    for _ in range(2):
        c.stub.Tokenize(tok, metadata=rate, timeout=30)
    with pytest.raises(grpc.RpcError) as e:
        c.stub.Tokenize(tok, metadata=rate, timeout=30)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "'slow'" in e.value.details() and "sk-rate" not in e.value.details()
    # HTTP: the same bucket, 429 with Retry-After.
    r = oh.post(c.scheduler.http_address, "/tokenize", {"prompt": "hi"},
                headers={"Authorization": "Bearer sk-rate-aaaaaaaa"})
    assert r.status == 429 and r.headers.get("retry-after"), r
    # The other key is not limited by the first one's rate.
    c.stub.Tokenize(tok, metadata=conc, timeout=30)

    # One generation open at a time: a long stream holds the slot.
    long_req = harness.request(token_ids=[1, 2, 3], max_tokens=400, ignore_eos=True)
    first = c.stub.GenerateStream(long_req, metadata=conc, timeout=60)
    next(first)  # it is running
    with pytest.raises(grpc.RpcError) as e:
        c.stub.Generate(harness.request(token_ids=[1], max_tokens=2), metadata=conc, timeout=30)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "'one'" in e.value.details()
    r = oh.post(c.scheduler.http_address, "/v1/completions",
                {"prompt": "Once", "max_tokens": 2},
                headers={"Authorization": "Bearer sk-conc-bbbbbbbb"})
    assert r.status == 429, r
    assert "'one'" in r.json()["error"]["message"]
    first.cancel()
    harness.wait_until(lambda: c.stats().running_requests == 0, timeout=10)
    out = c.stub.Generate(harness.request(token_ids=[1], max_tokens=2), metadata=conc, timeout=30)
    assert len(out.completions[0].token_ids) == 2
