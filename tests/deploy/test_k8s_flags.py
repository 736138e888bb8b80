"""Drift between the Kubernetes manifests (deploy/k8s) and the binaries they run: for every
container whose command is astr-scheduler, astr-worker or astr,

- every `--flag` of its args is one the binary's `--help` lists, with a value of the flag's type
  (a `$(VAR)` Kubernetes expands must be in the container's env);
- every port it declares, probes, is scraped on, or a Service sends to is bound by one of its
  listen flags (`--listen`, `--http-listen`, `--admin-listen`, `--metrics-listen`) on a
  non-loopback address, and every such non-loopback listen port is declared;
- every flag value that is an absolute path lies on one of its volume mounts (the root file
  system is read-only and holds only the image);
- the health services its probes ask for are served by the real binary (started on loopback with
  the test model), where an unknown service is NOT_FOUND.

Binaries from $ASTR_BIN_DIR (ctest sets it; by hand: ASTR_BIN_DIR=/path/to/build/bin), default
build/bin of this tree. Skips (with that reason) only where no kubectl is installed."""

import functools
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import k8s_render as k8s  # noqa: E402
from k8s_render import INSTALLS  # noqa: E402

pytestmark = pytest.mark.skipif(k8s.KUBECTL is None, reason=k8s.NO_KUBECTL)

BIN_DIR = Path(os.environ.get("ASTR_BIN_DIR") or k8s.REPO / "build" / "bin")

_HELP_FLAG_RE = re.compile(r"^  --([a-z0-9][a-z0-9-]*)(?: <([a-z]+)>)?$", re.M)
_VAR_RE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _bin(binary):
    path = BIN_DIR / binary
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} not built (build it, or set ASTR_BIN_DIR to where it is)")
    return path


@functools.lru_cache(maxsize=None)
def help_flags(binary, *words):
    """{flag: type ("string", "int", ... or None for a switch)} from `BINARY [WORDS] --help`."""
    r = subprocess.run([str(_bin(binary)), *words, "--help"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, f"{binary} {' '.join(words)} --help exited {r.returncode}: {r.stderr}"
    flags = {m.group(1): m.group(2) for m in _HELP_FLAG_RE.finditer(r.stdout)}
    assert "help" in flags, f"no flags parsed from {binary} --help:\n{r.stdout}"
    return flags


def command_words(container):
    """The words before the first flag (astr's command and verb: `astr admin version ...`)."""
    words = []
    for arg in container.get("args") or []:
        if str(arg).startswith("-"):
            break
        words.append(str(arg))
    return words


def flag_args(container):
    """{flag: value} of the args after the command words (see k8s.parse_args)."""
    words = command_words(container)
    return k8s.parse_args({**container, "args": (container.get("args") or [])[len(words):]})


def astr_containers(name):
    """[(PodTemplate, container)] of a kustomization's containers that run an astr binary."""
    out = [(t, c) for t in k8s.pod_templates(k8s.render(name)) for c in t.containers()
           if k8s.binary(c)]
    assert out, f"{name}: no container runs an astr binary"
    return out


def where(name, t, c):
    return f"{name}: {t.name} container {c['name']} ({k8s.binary(c)})"


def check_value(kind, value, env):
    """Why `value` does not fit a flag of type `kind`, or None. $(VAR)s must be in env."""
    missing = [v for v in _VAR_RE.findall(value or "") if v not in env]
    if missing:
        return f"$({missing[0]}) is not in the container's env (Kubernetes would pass it as is)"
    if _VAR_RE.search(value or ""):
        return None  # known at run time only
    if kind is None:
        if value not in (None, "true", "false"):
            return f"a switch given {value!r}"
    elif value is None:
        return f"needs a {kind} value"
    elif kind == "int" and not re.fullmatch(r"-?\d+", value):
        return f"{value!r} is not an int"
    elif kind in ("float", "double") and not re.fullmatch(r"-?\d+(\.\d*)?", value):
        return f"{value!r} is not a number"
    return None


# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", INSTALLS)
def test_command_is_the_binary_in_the_image(name):
    for t, c in astr_containers(name):
        assert c["command"] == [f"/usr/local/bin/{k8s.binary(c)}"], where(name, t, c)


@pytest.mark.parametrize("name", INSTALLS)
def test_every_flag_is_one_the_binary_knows(name):
    errors = []
    for t, c in astr_containers(name):
        binary = k8s.binary(c)
        known = help_flags(binary, *command_words(c))
        env = {e["name"] for e in c.get("env") or []}
        for flag, value in flag_args(c).items():
            if flag not in known and not (flag.startswith("no-") and known.get(flag[3:], 1) is
                                          None):
                errors.append(f"{where(name, t, c)}: --{flag} is not in `{binary} --help`")
                continue
            why = check_value(known.get(flag), value, env)
            if why:
                errors.append(f"{where(name, t, c)}: --{flag}: {why}")
    assert not errors, "\n".join(errors)


def _service_target_ports(docs, template, container):
    """[(what, port)] of the Services that send to this pod: their targetPorts, resolved."""
    out = []
    declared = k8s.container_ports(container)
    for svc in k8s.find(docs, "Service"):
        if template not in k8s.selected(docs, svc["spec"].get("selector")):
            continue
        for p in svc["spec"]["ports"]:
            target = p.get("targetPort", p["port"])
            out.append((f"Service {svc['metadata']['name']} port {p['port']}",
                        declared.get(target, target)))
    return out


def _pod_monitor_ports(template, container):
    out = []
    for pm in k8s.find(k8s.render("monitoring"), "PodMonitor"):
        if k8s.selector_matches(pm["spec"]["selector"], template.labels):
            for ep in pm["spec"]["podMetricsEndpoints"]:
                out.append((f"PodMonitor {pm['metadata']['name']}",
                            k8s.container_ports(container).get(ep["port"], ep["port"])))
    return out


@pytest.mark.parametrize("name", INSTALLS)
def test_every_port_is_bound_by_a_listen_flag(name):
    docs = k8s.render(name)
    errors = []
    for t, c in astr_containers(name):
        bound = k8s.listen_ports(c)
        used = [(f"containerPort {p.get('name', '')}", p["containerPort"])
                for p in c.get("ports") or []]
        used += [(kind, k8s.container_ports(c).get(k8s.probe_port(p), k8s.probe_port(p)))
                 for kind, p in k8s.probes(c)]
        used += _service_target_ports(docs, t, c)
        if "prometheus.io/port" in t.annotations and c in t.containers(init=False):
            used.append(("prometheus.io/port", int(t.annotations["prometheus.io/port"])))
        used += _pod_monitor_ports(t, c)
        for what, port in used:
            if port not in bound:
                errors.append(f"{where(name, t, c)}: {what} {port} is bound by no listen flag "
                              f"(they bind {sorted(bound) or 'nothing'})")
            elif k8s.is_loopback(bound[port][1]):
                errors.append(f"{where(name, t, c)}: {what} {port}: --{bound[port][0]} binds "
                              f"it on loopback, out of reach")
        declared = {p["containerPort"] for p in c.get("ports") or []}
        for port, (flag, host) in bound.items():
            if not k8s.is_loopback(host) and port not in declared:
                errors.append(f"{where(name, t, c)}: --{flag} port {port} is not declared")
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("name", INSTALLS)
def test_path_values_are_on_volume_mounts(name):
    errors = []
    checked = 0
    for t, c in astr_containers(name):
        for flag, value in flag_args(c).items():
            if value and value.startswith("/"):
                checked += 1
                if k8s.mount_for(c, value) is None:
                    errors.append(f"{where(name, t, c)}: --{flag}={value} is on no volume mount")
    assert checked, f"{name}: no path flags (--model, --admin-token-file) found"
    assert not errors, "\n".join(errors)


def _probe_services():
    """{binary: {health service names its probes ask for}} over every installation."""
    out = {}
    for name in INSTALLS:
        for _, c in astr_containers(name):
            for _, p in k8s.probes(c):
                if "grpc" in p:
                    out.setdefault(k8s.binary(c), set()).add(p["grpc"].get("service", ""))
    return out


def test_probed_health_services_are_served():
    """Starts one worker (the test model) and a scheduler on loopback and asks each for the
    health services its probes name: each must be SERVING, while a made-up one is NOT_FOUND
    (so SERVING means the service is registered, not a catch-all)."""
    wanted = _probe_services()
    assert set(wanted) == {"astr-scheduler", "astr-worker"}, wanted
    _bin("astr-worker"), _bin("astr-scheduler")
    os.environ["ASTR_BIN_DIR"] = str(BIN_DIR)
    sys.path.insert(0, str(k8s.REPO / "tests" / "integration"))
    import grpc
    import harness

    if not os.path.exists(harness.STORIES):
        pytest.fail(f"test model missing: {harness.STORIES} (set ASTR_SHARED_DIR)")
    with tempfile.TemporaryDirectory(prefix="astr-k8s-flags-") as log_dir:
        cluster = harness.make_cluster(log_dir)
        try:
            addresses = {"astr-worker": cluster.workers[0].address,
                         "astr-scheduler": cluster.scheduler.address}
            errors = []
            for binary, services in sorted(wanted.items()):
                with grpc.insecure_channel(addresses[binary]) as ch:
                    stub = harness.health_pb2_grpc.HealthStub(ch)

                    def check(service):
                        req = harness.health_pb2.HealthCheckRequest(service=service)
                        try:
                            status = stub.Check(req, timeout=10).status
                            return harness.health_pb2.HealthCheckResponse.ServingStatus.Name(
                                status)
                        except grpc.RpcError as e:
                            return e.code().name

                    assert check("astr-no-such-service") == "NOT_FOUND", binary
                    for service in sorted(services):
                        got = check(service)
                        if got != "SERVING":
                            errors.append(f"{binary}: health service {service!r}: {got}")
            assert not errors, "\n".join(errors)
        finally:
            cluster.close()
