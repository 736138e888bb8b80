"""The CPU image (deploy/docker/Dockerfile.cpu), built with podman and run (slow).

The base is Debian 12 made here with debootstrap (no registry is contacted: the build is
`FROM localhost/...`), kept in .cache/images/ between runs. The image's runtime stage is built
from the binaries this test run already has (ASTR_BIN_DIR), given as the `binaries` stage with
`--build-context`, so CI does not compile the project a second time inside a container; the
build stage (the operators' default path) is what test_dockerfiles.py lints. Then: each role's
--help, the image's user and contents, and a real worker on the default model in its own network
namespace (loopback only), a scheduler beside it that answers like the offline engine, and the
worker draining on SIGTERM with exit code 0.

Needs root, podman, runc and debootstrap (scripts/setup.sh installs them) and the network to a
Debian mirror ($ASTR_DEBIAN_MIRROR, default deb.debian.org) for debootstrap and the image's
apt-get. docs/deploy.md, "Container images", says what ran where.
"""

import hashlib
import os
import re
import resource
import shutil
import subprocess
import tempfile
import time

import pytest

import dockerfiles as df

SOURCE_DIR = df.SOURCE_DIR
BIN_DIR = os.environ.get("ASTR_BIN_DIR") or os.path.join(SOURCE_DIR, "build", "bin")
CACHE_DIR = os.path.join(SOURCE_DIR, ".cache", "images")
BASE_TAR = os.path.join(CACHE_DIR, "debian-bookworm-minbase.tar")
BASE_IMAGE = "localhost/astr-test-base:bookworm"
BASE_LABEL = "astr.test.rootfs"  # the sha256 of BASE_TAR the base image was imported from
IMAGE = "localhost/astr-test-cpu:latest"
MIRROR = os.environ.get("ASTR_DEBIAN_MIRROR") or "http://deb.debian.org/debian"
WORKER_PORT = 50061
SCHEDULER_PORT = 50051
THREADS = 2
CHAT = "What is the capital of France?"
MAX_TOKENS = 16

TOOLS = ["podman", "runc", "debootstrap"]
missing = [t for t in TOOLS if shutil.which(t) is None]
pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="podman (rootful) and debootstrap need root"),
    pytest.mark.skipif(bool(missing), reason=f"{missing} not installed (scripts/setup.sh)"),
]

ENV = dict(os.environ)


def run(args, timeout, check=True):
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=ENV,
                       stdin=subprocess.DEVNULL)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r


def podman(*args, timeout=120, check=True):
    return run(["podman", *args], timeout=timeout, check=check)


def containers_conf(folder):
    """A containers.conf for this test only (CONTAINERS_CONF), so that it neither depends on nor
    changes the machine's podman settings:
    - runc: crun refuses a hybrid cgroup v1/v2 host ("cgroups in hybrid mode not supported");
    - ulimits: rootful podman raises RLIMIT_NOFILE to 1048576 and RLIMIT_NPROC to 4194304 in every
      container, which needs CAP_SYS_RESOURCE, missing in many sandboxes and CI containers; ask for
      the limits this process has (and RLIMIT_NPROC at most kernel.pid_max, the most one sandbox
      took);
    - cgroupfs and a file events log: no systemd needed."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    with open("/proc/sys/kernel/pid_max") as f:
        pid_max = int(f.read())
    limits = [min(v, cap) if v != resource.RLIM_INFINITY else cap
              for v, cap in ((nofile, 1048576), (nproc, pid_max))]
    path = os.path.join(folder, "containers.conf")
    with open(path, "w") as f:
        f.write("[containers]\n"
                f'default_ulimits = ["nofile={limits[0]}:{limits[0]}", '
                f'"nproc={limits[1]}:{limits[1]}"]\n'
                "[engine]\n"
                'runtime = "runc"\n'
                'cgroup_manager = "cgroupfs"\n'
                'events_logger = "file"\n')
    return path


def remove_tree(path):
    """rm -rf of a debootstrap target, first unmounting what debootstrap may have left mounted in
    it (proc, sys) so that nothing outside the tree is touched."""
    real = os.path.realpath(path)
    with open("/proc/mounts") as f:
        mounts = [line.split()[1] for line in f]
    for m in sorted((m for m in mounts if m.startswith(real + "/")), reverse=True):
        subprocess.run(["umount", "-l", m], check=False)
    subprocess.run(["rm", "-rf", "--one-file-system", path], check=False)


def make_base_tar():
    """debootstrap a minimal Debian 12 into a scratch folder under .cache/images, prune apt's
    caches, and tar it to BASE_TAR (renamed into place only when complete)."""
    os.makedirs(CACHE_DIR, exist_ok=True)
    for name in os.listdir(CACHE_DIR):  # left by a run that was killed
        if name.startswith("rootfs.partial-"):
            remove_tree(os.path.join(CACHE_DIR, name))
        elif name.endswith(".partial"):
            os.remove(os.path.join(CACHE_DIR, name))
    rootfs = tempfile.mkdtemp(prefix="rootfs.partial-", dir=CACHE_DIR)
    os.chmod(rootfs, 0o755)  # the image's / (mkdtemp makes it 0700)
    partial = BASE_TAR + ".partial"
    try:
        run(["debootstrap", "--variant=minbase", "bookworm", rootfs, MIRROR], timeout=900)
        for folder in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for name in os.listdir(os.path.join(rootfs, folder)):
                p = os.path.join(rootfs, folder, name)
                if os.path.isfile(p):
                    os.remove(p)
        run(["tar", "-C", rootfs, "--numeric-owner", "-cf", partial, "."], timeout=300)
        os.replace(partial, BASE_TAR)
    finally:
        remove_tree(rootfs)
        if os.path.exists(partial):
            os.remove(partial)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@pytest.fixture(scope="module", autouse=True)
def podman_settings():
    d = tempfile.mkdtemp(prefix="astr-podman-")
    ENV["CONTAINERS_CONF"] = containers_conf(d)
    yield
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def base_image():
    """localhost/astr-test-base:bookworm, imported from the cached debootstrap tar (made first
    when missing; re-imported when the tar changed)."""
    if not os.path.exists(BASE_TAR):
        make_base_tar()
    digest = sha256(BASE_TAR)
    r = podman("image", "inspect", "--format", "{{index .Labels \"%s\"}}" % BASE_LABEL,
               BASE_IMAGE, check=False)
    if r.returncode != 0 or r.stdout.strip() != digest:
        podman("import", "--change", f"LABEL {BASE_LABEL}={digest}", BASE_TAR, BASE_IMAGE,
               timeout=300)
    return BASE_IMAGE


@pytest.fixture(scope="module")
def image(base_image):
    """The runtime stage of Dockerfile.cpu over base_image, its `binaries` stage replaced by a
    folder staged from this build's binaries (the files the Dockerfile's stage lists)."""
    staged = tempfile.mkdtemp(prefix="astr-image-binaries-")
    build_dir = os.path.dirname(BIN_DIR)
    try:
        for rel in df.binaries(df.DOCKERFILES["cpu"]):
            src = os.path.join(build_dir, rel)
            assert os.path.exists(src), f"{src} missing: build the service targets first"
            os.makedirs(os.path.dirname(os.path.join(staged, rel)), exist_ok=True)
            shutil.copy2(src, os.path.join(staged, rel))
        # --network host: the runtime stage's apt-get reaches the mirror without a bridge.
        podman("build", "--network", "host", "-f", df.DOCKERFILES["cpu"],
               "--build-arg", f"BASE_IMAGE={base_image}",
               "--build-context", f"binaries={staged}", "--target", "runtime",
               "-t", IMAGE, SOURCE_DIR, timeout=600)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    yield IMAGE
    podman("rmi", "-f", IMAGE, check=False)


def in_image(image, *command, entrypoint=None, timeout=120):
    extra = ["--entrypoint", entrypoint] if entrypoint else []
    return podman("run", "--rm", "--network", "none", *extra, image, *command, timeout=timeout)


ROLE_FLAGS = {
    "scheduler": ["--workers", "--listen", "--http-listen", "--admin-listen"],
    "worker": ["--model", "--listen", "--backend", "--threads"],
    "astr": ["generate", "health", "run"],  # the CLI lists its commands
}


@pytest.mark.parametrize("role", sorted(ROLE_FLAGS))
def test_each_role_prints_its_help(image, role):
    out = in_image(image, role, "--help").stdout
    for flag in ROLE_FLAGS[role]:
        assert re.search(rf"^\s+{re.escape(flag)}\b", out, re.M), f"{role} --help:\n{out}"


def test_no_arguments_print_the_roles(image):
    out = in_image(image).stdout
    for role in ROLE_FLAGS:
        assert re.search(rf"^  {role} ARGS\.\.\.", out, re.M), out


def test_a_binary_as_the_command_works(image):
    # Kubernetes manifests set command: ["/usr/local/bin/astr-worker"], bypassing the entrypoint.
    out = in_image(image, "--help", entrypoint="/usr/local/bin/astr-worker").stdout
    assert out.startswith("Usage: astr-worker"), out


def test_the_image_runs_as_10001(image):
    user = podman("image", "inspect", "--format", "{{.Config.User}}", image).stdout.strip()
    assert user == "10001"
    assert in_image(image, "-u", entrypoint="id").stdout.strip() == "10001"
    assert in_image(image, "-g", entrypoint="id").stdout.strip() == "10001"


def test_the_image_holds_no_build_tree_or_toolchain(image):
    script = ('ls -d /src /build 2>/dev/null; find / -xdev -name CMakeCache.txt 2>/dev/null; '
              'for t in gcc cc g++ c++ cmake ninja make; do command -v $t; done; '
              "dpkg-query -W -f '${Package}\\n' | grep -e '-dev$' -e '^build-essential$'; true")
    out = in_image(image, "-c", script, entrypoint="sh").stdout
    assert out == "", f"build leftovers in the image:\n{out}"


def test_the_binaries_find_every_library(image):
    out = in_image(image, "-c", "ldd /usr/local/bin/astr-scheduler /usr/local/bin/astr-worker "
                   "/usr/local/bin/astr", entrypoint="sh").stdout
    assert "not found" not in out, out


def default_model():
    """The default model (scripts/default_model.sh), or None when it is not present."""
    r = subprocess.run([os.path.join(SOURCE_DIR, "scripts", "default_model.sh")],
                       capture_output=True, text=True, cwd=SOURCE_DIR, timeout=300)
    path = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    return path if r.returncode == 0 and os.path.exists(path) else None


@pytest.fixture(scope="module")
def model():
    path = default_model()
    if path is None:
        pytest.skip("default model not present (scripts/default_model.sh)")
    return path


def wait_for_log(name, text, timeout_s=120):
    deadline = time.monotonic() + timeout_s
    while True:
        logs = podman("logs", name, check=False)
        if text in logs.stdout + logs.stderr:
            return
        state = podman("inspect", "--format", "{{.State.Status}}", name).stdout.strip()
        assert state == "running" and time.monotonic() < deadline, (
            f"{name} ({state}) did not log {text!r}:\n{logs.stdout}{logs.stderr}")
        time.sleep(0.5)


def start(image, name, model, *args, network="none"):
    """A detached container as Kubernetes runs it, only stricter: read-only root file system
    without even a writable /tmp, no capabilities, no privilege gain, the model's folder mounted
    read-only at /models."""
    podman("run", "-d", "--name", name, f"--network={network}", "--read-only",
           "--read-only-tmpfs=false", "--cap-drop=all", "--security-opt=no-new-privileges",
           "-v", f"{os.path.dirname(model)}:/models:ro", image, *args)


def exit_code(name):
    return int(podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip())


@pytest.fixture(scope="module")
def worker(image, model):
    """A worker on the default model in its own network namespace (only loopback)."""
    name = f"astr-test-worker-{os.getpid()}"
    start(image, name, model, "worker", "--model", "/models/" + os.path.basename(model),
          "--listen", f"127.0.0.1:{WORKER_PORT}", "--threads", str(THREADS), "--kv-cache-mb", "64")
    try:
        wait_for_log(name, f"listening on 127.0.0.1:{WORKER_PORT}")
        yield name
    finally:
        podman("rm", "-f", "-t", "0", name, check=False)


def test_the_worker_is_pid_1_and_serving(worker):
    # The entrypoint exec'd the binary: it is PID 1 and takes SIGTERM itself.
    assert podman("exec", worker, "cat", "/proc/1/comm").stdout.strip() == "astr-worker"
    r = podman("exec", worker, "astr", "health", "--server", f"127.0.0.1:{WORKER_PORT}",
               "--wait-s", "30")
    assert r.stdout.strip() == "SERVING"


def test_a_scheduler_beside_the_worker_answers_like_the_offline_engine(image, worker, model):
    name = f"astr-test-scheduler-{os.getpid()}"
    # Same network namespace as the worker (as containers of one pod); the scheduler reads the
    # tokenizer from the model path the worker reports, so it mounts /models too.
    start(image, name, model, "scheduler", "--workers", f"127.0.0.1:{WORKER_PORT}",
          "--listen", f"127.0.0.1:{SCHEDULER_PORT}", network=f"container:{worker}")
    try:
        wait_for_log(name, f"listening on 127.0.0.1:{SCHEDULER_PORT}")
        served = podman("exec", name, "astr", "generate", "--server",
                        f"127.0.0.1:{SCHEDULER_PORT}", "--chat", CHAT, "--max-tokens",
                        str(MAX_TOKENS), "--temperature", "0").stdout
        offline = run([os.path.join(BIN_DIR, "astr"), "run", "--model", model, "--chat", CHAT,
                       "--max-tokens", str(MAX_TOKENS), "--temperature", "0", "--threads",
                       str(THREADS), "--backend", "cpu"], timeout=120).stdout
        assert served.strip() and served.strip() == offline.strip(), (served, offline)
        podman("stop", "-t", "60", name, timeout=90)
        assert exit_code(name) == 0, podman("logs", name).stderr
    finally:
        podman("rm", "-f", "-t", "0", name, check=False)


def test_the_worker_drains_on_sigterm_and_exits_0(worker):
    # Last in this file: it stops the module's worker.
    podman("stop", "-t", "60", worker, timeout=90)  # SIGTERM, SIGKILL after 60 s
    r = podman("logs", worker)
    logs = r.stdout + r.stderr
    assert exit_code(worker) == 0, logs
    assert "received SIGTERM" in logs, logs
