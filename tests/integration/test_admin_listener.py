"""The admin listener opens only when asked: with neither --admin-listen nor --admin-token-file a
scheduler takes no admin port, so two schedulers with default flags share one machine; a token
file alone opens it on the documented default address, and it then answers admin calls."""

import os
import tempfile

import grpc
import pytest

import harness


def test_two_default_schedulers_share_a_machine(log_dir):
    clusters = []
    try:
        for _ in range(2):
            c = harness.Cluster(tempfile.mkdtemp(dir=log_dir))
            clusters.append(c)
            c.start_worker()
            c.start_scheduler(admin_listen=None, http_listen=None)
        for c in clusters:
            log = c.scheduler.proc.log_text()
            assert "no admin service" in log and "admin service on" not in log, log[-2000:]
            r = harness.unary(c.stub, harness.request(token_ids=[1, 403, 407], max_tokens=4)).one()
            assert len(r.token_ids) == 4
    finally:
        for c in clusters:
            c.close()


def test_token_file_alone_opens_the_default_admin_address(log_dir):
    from astr.v1 import admin_pb2 as apb

    token_path = os.path.join(tempfile.mkdtemp(dir=log_dir), "token")
    with open(token_path, "w") as f:
        f.write("s3cret\n")
    c = harness.Cluster(tempfile.mkdtemp(dir=log_dir))
    try:
        c.start_worker()
        c.start_scheduler(admin_listen=None, http_listen=None, admin_token_file=token_path)
        address = c.scheduler.proc.wait_log(harness._ADMIN_RE)
        assert address == "127.0.0.1:50053"
        c.scheduler.admin_address = address
        admin = c.scheduler.admin_stub()
        with pytest.raises(grpc.RpcError) as e:
            admin.GetWeightVersion(apb.GetWeightVersionRequest(), timeout=harness.RPC_TIMEOUT_S)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        r = admin.GetWeightVersion(apb.GetWeightVersionRequest(), timeout=harness.RPC_TIMEOUT_S,
                                   metadata=[("authorization", "Bearer s3cret")])
        assert r is not None
    finally:
        c.close()
