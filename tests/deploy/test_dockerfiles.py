"""Lint and contract checks of the container images' sources (deploy/docker/), without building
them: hadolint on both Dockerfiles, shellcheck on the entrypoint, and the contract the Kubernetes
manifests rely on (docs/deploy.md, "Container images"): multi-stage, a runtime stage that copies
only the binaries (and the CUDA plugin) to /usr/local/bin (/usr/local/lib), USER 10001, the
entrypoint dispatcher, no build tools or -dev packages at run time. The image itself is built
and run by test_container_image.py (slow)."""

import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

import dockerfiles as df

KINDS = sorted(df.DOCKERFILES)
SERVICE_BINARIES = ["bin/astr-scheduler", "bin/astr-worker", "bin/astr"]
EXPECTED_BINARIES = {
    "cpu": SERVICE_BINARIES,
    "cuda": SERVICE_BINARIES + ["lib/libastr_backend_cuda.so"],
}
# CMake targets that produce them.
EXPECTED_TARGETS = {
    "cpu": {"astr-scheduler", "astr-worker", "astr"},
    "cuda": {"astr-scheduler", "astr-worker", "astr", "astr_backend_cuda"},
}
ENTRYPOINT = "/usr/local/bin/astr-entrypoint"
# Packages that would mean a build tree or toolchain in the runtime image.
BUILD_TOOLS = {"build-essential", "gcc", "g++", "cpp", "clang", "cmake", "ninja-build", "make",
               "pkg-config", "protobuf-compiler", "protobuf-compiler-grpc", "git", "ccache"}


def tool(name):
    """A lint tool from the venv (scripts/requirements.txt) or the PATH, else skip."""
    venv = os.path.join(os.path.dirname(sys.executable), name)
    path = venv if os.access(venv, os.X_OK) else shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed (scripts/setup.sh installs it)")
    return path


@pytest.mark.parametrize("kind", KINDS)
def test_hadolint_finds_nothing(kind):
    r = subprocess.run([tool("hadolint"), "--no-color", df.DOCKERFILES[kind]],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"hadolint {df.DOCKERFILES[kind]}:\n{r.stdout}{r.stderr}"


def test_shellcheck_finds_nothing_in_the_entrypoint():
    r = subprocess.run([tool("shellcheck"), df.ENTRYPOINT_SCRIPT],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"shellcheck {df.ENTRYPOINT_SCRIPT}:\n{r.stdout}{r.stderr}"


@pytest.mark.parametrize("kind", KINDS)
def test_stages_are_build_binaries_runtime(kind):
    names = [s.name for s in df.stages(df.DOCKERFILES[kind])]
    # runtime last: a plain `docker build` (no --target) makes the runtime image.
    assert names == ["build", "binaries", "runtime"], names


def test_base_images_are_build_args():
    cpu = df.global_args(df.DOCKERFILES["cpu"])
    assert cpu.get("BASE_IMAGE") == "debian:bookworm-slim", cpu
    for s in df.stages(df.DOCKERFILES["cpu"]):
        assert s.base in ("${BASE_IMAGE}", "scratch"), (s.name, s.base)

    cuda = df.global_args(df.DOCKERFILES["cuda"])
    assert re.fullmatch(r"13\.\d+\.\d+", cuda.get("CUDA_VERSION", "")), cuda
    assert cuda.get("BUILD_IMAGE") == "nvidia/cuda:${CUDA_VERSION}-devel-ubuntu24.04", cuda
    assert cuda.get("RUNTIME_IMAGE") == "nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu24.04", cuda
    bases = {s.name: s.base for s in df.stages(df.DOCKERFILES["cuda"])}
    assert bases == {"build": "${BUILD_IMAGE}", "binaries": "scratch",
                     "runtime": "${RUNTIME_IMAGE}"}, bases


@pytest.mark.parametrize("kind", KINDS)
def test_build_stage_builds_only_the_service_targets(kind):
    runs = " ".join(i.value for i in df.stage(df.DOCKERFILES[kind], "build").all("RUN"))
    assert "-DASTR_BUILD_TESTS=OFF" in runs
    match = re.search(r"cmake --build .*?--target ((?:[\w-]+ ?)+)", runs)
    assert match, runs
    assert set(match.group(1).split()) == EXPECTED_TARGETS[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_build_stage_copies_every_source_folder_the_build_reads(kind):
    with open(os.path.join(df.SOURCE_DIR, "CMakeLists.txt")) as f:
        subdirs = re.findall(r"^\s*add_subdirectory\((\S+?)[)\s]", f.read(), re.M)
    top = {d.split("/")[0] for d in subdirs if d != "tests"}
    copied = set()
    for copy in df.stage(df.DOCKERFILES[kind], "build").all("COPY"):
        flags, sources, _ = df.copy_parts(copy.value)
        assert not flags, f"line {copy.line}: {copy.value}"
        for src in sources:
            assert os.path.exists(os.path.join(df.SOURCE_DIR, src)), f"line {copy.line}: {src}"
            copied.add(src.rstrip("/"))
    assert top <= copied, f"not copied into the build stage: {sorted(top - copied)}"
    assert "CMakeLists.txt" in copied


@pytest.mark.parametrize("kind", KINDS)
def test_binaries_stage_holds_only_the_built_files(kind):
    s = df.stage(df.DOCKERFILES[kind], "binaries")
    assert s.base == "scratch"
    assert [i.name for i in s.instructions] == ["COPY"] * len(s.instructions)
    for copy in s.instructions:
        flags, sources, _ = df.copy_parts(copy.value)
        assert flags == {"from": "build"}, f"line {copy.line}: {copy.value}"
        for src in sources:
            assert re.fullmatch(r"/src/build/(bin|lib)/[\w.+-]+", src), f"line {copy.line}: {src}"
    assert sorted(df.binaries(df.DOCKERFILES[kind])) == sorted(EXPECTED_BINARIES[kind])


@pytest.mark.parametrize("kind", KINDS)
def test_runtime_stage_copies_only_binaries_and_the_entrypoint(kind):
    s = df.stage(df.DOCKERFILES[kind], "runtime")
    assert not s.all("ADD")
    landed = set()
    for copy in s.all("COPY"):
        flags, sources, dest = df.copy_parts(copy.value)
        if flags == {"from": "binaries"}:
            for src in sources:
                folder = os.path.dirname(src).lstrip("/")  # bin or lib
                assert dest == f"/usr/local/{folder}/", f"line {copy.line}: {copy.value}"
                landed.add(os.path.join(dest, os.path.basename(src)))
        else:
            assert (flags, sources, dest) == ({}, ["deploy/docker/entrypoint.sh"], ENTRYPOINT), (
                f"line {copy.line}: {copy.value}")
    want = {"/usr/local/" + b for b in EXPECTED_BINARIES[kind]}
    assert landed == want


def test_cuda_plugin_lands_where_the_worker_looks():
    # worker/backend_loader.cc: the plugin is <directory of the executable>/../lib/<name>.
    with open(os.path.join(df.SOURCE_DIR, "worker", "backend_loader.cc")) as f:
        assert '"/../lib/" ASTR_CUDA_PLUGIN_NAME' in f.read()
    s = df.stage(df.DOCKERFILES["cuda"], "runtime")
    dests = [df.copy_parts(c.value) for c in s.all("COPY")]
    assert (({"from": "binaries"}, ["/lib/libastr_backend_cuda.so"], "/usr/local/lib/")
            in dests), dests


@pytest.mark.parametrize("kind", KINDS)
def test_runtime_stage_runs_as_10001_through_the_entrypoint(kind):
    s = df.stage(df.DOCKERFILES[kind], "runtime")
    users = s.all("USER")
    assert users and users[-1].value == "10001", [u.value for u in users]
    runs = " ".join(i.value for i in s.all("RUN"))
    assert "groupadd --gid 10001 astr" in runs and "useradd --uid 10001 --gid 10001" in runs
    entry = s.all("ENTRYPOINT")
    assert len(entry) == 1 and df.exec_form(entry[0].value) == [ENTRYPOINT], entry
    cmd = s.all("CMD")
    assert len(cmd) == 1 and df.exec_form(cmd[0].value) == ["--help"], cmd
    # A WORKDIR the process never writes to: Kubernetes runs it with readOnlyRootFilesystem.
    assert [w.value for w in s.all("WORKDIR")] == ["/"]
    assert "mkdir /models" in runs


@pytest.mark.parametrize("kind", KINDS)
def test_runtime_stage_installs_no_build_tools(kind):
    s = df.stage(df.DOCKERFILES[kind], "runtime")
    packages = [p for r in s.all("RUN") for p in df.apt_packages(r.value)]
    assert packages
    assert not [p for p in packages if p.endswith("-dev") or p in BUILD_TOOLS], packages
    assert "rm -rf /var/lib/apt/lists/*" in " ".join(r.value for r in s.all("RUN"))


def _setup_packages():
    script = os.path.join(df.SOURCE_DIR, "scripts", "setup.sh")
    r = subprocess.run(
        ["bash", "-c", 'eval "$(sed -n "/^APT_PACKAGES=(/,/^)/p" "$1")"; '
                       'printf "%s\\n" "${APT_PACKAGES[@]}"', "_", script],
        capture_output=True, text=True, check=True, timeout=30)
    return set(r.stdout.split())


def test_cpu_build_packages_are_setup_sh_packages():
    # The same Debian release as scripts/setup.sh: the build needs nothing setup.sh does not
    # install, so a build that works on a machine set up with it works in the image.
    build = df.stage(df.DOCKERFILES["cpu"], "build")
    packages = {p for r in build.all("RUN") for p in df.apt_packages(r.value)}
    setup = _setup_packages()
    assert "libgrpc++-dev" in setup
    assert packages <= setup, sorted(packages - setup)


def test_cuda_build_packages_are_the_cpu_ones_under_ubuntu_names():
    def build_packages(kind):
        s = df.stage(df.DOCKERFILES[kind], "build")
        return {p for r in s.all("RUN") for p in df.apt_packages(r.value)}

    # Ubuntu 24.04 has Boost 1.83, not 1.81 (CMake asks for 1.81 or newer).
    cpu = build_packages("cpu") - {"libboost1.81-dev"} | {"libboost1.83-dev"}
    assert build_packages("cuda") == cpu


def test_dockerignore_leaves_out_build_trees_and_caches():
    with open(os.path.join(df.SOURCE_DIR, ".dockerignore")) as f:
        patterns = {line.strip() for line in f if line.strip() and not line.startswith("#")}
    assert {".git", "build", "build-*", ".cache"} <= patterns, patterns


@pytest.fixture()
def entrypoint_with_fakes():
    """entrypoint.sh with its `exec /usr/local/bin/...` pointed at a folder of fake binaries,
    each printing its name, its pid and its arguments."""
    d = tempfile.mkdtemp(prefix="astr-entrypoint-")
    for name in ("astr-scheduler", "astr-worker", "astr"):
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.write(f'#!/bin/sh\necho "{name} $$ $*"\n')
        os.chmod(path, 0o755)
    with open(df.ENTRYPOINT_SCRIPT) as f:
        text = f.read()
    assert text.count("exec /usr/local/bin/") == 3
    script = os.path.join(d, "entrypoint.sh")
    with open(script, "w") as f:
        f.write(text.replace("exec /usr/local/bin/", f"exec {d}/"))
    yield script
    shutil.rmtree(d)


@pytest.mark.parametrize("role,binary", [("scheduler", "astr-scheduler"),
                                         ("worker", "astr-worker"), ("astr", "astr")])
def test_entrypoint_execs_the_role_binary(entrypoint_with_fakes, role, binary):
    p = subprocess.Popen(["sh", entrypoint_with_fakes, role, "--listen", "0.0.0.0:1", "a b"],
                         stdout=subprocess.PIPE, text=True)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 0
    # Same pid: the shell was replaced (exec), so SIGTERM sent to PID 1 reaches the binary.
    assert out == f"{binary} {p.pid} --listen 0.0.0.0:1 a b\n"


@pytest.mark.parametrize("args", [[], ["--help"], ["-h"], ["help"]])
def test_entrypoint_usage_lists_the_roles(args):
    r = subprocess.run(["sh", df.ENTRYPOINT_SCRIPT, *args], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    for role in ("scheduler", "worker", "astr"):
        assert re.search(rf"^  {role} ARGS\.\.\.", r.stdout, re.M), r.stdout


def test_entrypoint_refuses_an_unknown_role():
    r = subprocess.run(["sh", df.ENTRYPOINT_SCRIPT, "astr-worker", "--help"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "unknown role 'astr-worker'" in r.stderr
