"""The SDK as a package: a wheel built from a fresh copy of sdk/python + protos/ (as
`pip install ./sdk/python` builds it) installs an importable `astr` with generated, typed astr.v1
modules equal to what protoc makes of the current protos; the tree-staged SDK used by the tests
and by the integration harness is never shadowed by another `astr` on the path."""

import glob
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile

import pytest

from grpc_tools import protoc
from google.protobuf import descriptor_pb2

from sdk_testing import PROTO_ROOT, SDK_DIR, SOURCE_DIR, astr

PIP_TIMEOUT_S = 120
PROTO_FILES = sorted(os.path.relpath(p, PROTO_ROOT)
                     for p in glob.glob(os.path.join(PROTO_ROOT, "astr", "v1", "*.proto")))


def protoc_descriptors(tmp_path):
    """FileDescriptorProtos of protos/astr/v1/*.proto, compiled here by protoc itself."""
    out = tmp_path / "descriptors.pb"
    assert protoc.main(["protoc", f"-I{PROTO_ROOT}", f"--descriptor_set_out={out}"]
                       + PROTO_FILES) == 0
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    for f in files:
        for message in f.message_type:
            _drop_json_names(message)
    return {f.name: f for f in files}


def _drop_json_names(message):
    """protoc's descriptor sets carry each field's json_name; the descriptors embedded in
    generated Python code do not."""
    for field in message.field:
        field.ClearField("json_name")
    for nested in message.nested_type:
        _drop_json_names(nested)


def module_descriptors(modules):
    return {m.DESCRIPTOR.name: descriptor_pb2.FileDescriptorProto.FromString(
        m.DESCRIPTOR.serialized_pb) for m in modules}


def run_python(code, cwd, pythonpath):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(pythonpath))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_tree_modules_are_the_current_protos(tmp_path):
    import importlib

    modules = [importlib.import_module("astr.v1." + os.path.basename(f)[:-len(".proto")] + "_pb2")
               for f in PROTO_FILES]
    assert module_descriptors(modules) == protoc_descriptors(tmp_path)
    for module in modules:
        assert os.path.dirname(module.__file__) == os.path.dirname(astr.v1.__file__)


def test_wheel_from_a_fresh_copy_installs_a_typed_package(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(SDK_DIR, repo / "sdk" / "python", ignore=shutil.ignore_patterns(
        "build", "dist", "*.egg-info", "__pycache__", "*_pb2*.py*"))
    shutil.copytree(PROTO_ROOT, repo / "protos")
    dist, site = tmp_path / "dist", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(pip + ["wheel", "--no-deps", "--no-build-isolation", "-w", str(dist),
                          str(repo / "sdk" / "python")],
                   check=True, timeout=PIP_TIMEOUT_S, cwd=tmp_path)
    (wheel,) = glob.glob(str(dist / "*.whl"))
    subprocess.run(pip + ["install", "--no-deps", "--no-index", "--target", str(site), wheel],
                   check=True, timeout=PIP_TIMEOUT_S, cwd=tmp_path)

    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = next(z.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines()
                if line.startswith("Requires-Dist:") and "extra ==" not in line]
    # The generated code checks grpcio >= the grpcio-tools that made it.
    assert f"grpcio>={importlib.metadata.version('grpcio-tools')}" in requires
    assert any(r.startswith("protobuf>=") for r in requires)
    assert not any(n.startswith(("protogen", "setup")) for n in names)

    report = json.loads(run_python(f"""
        import glob, json, os
        import astr
        from astr.v1 import admin_pb2_grpc, generate_pb2_grpc
        package = os.path.dirname(astr.__file__)
        modules = {{}}
        for proto in {PROTO_FILES!r}:
            stem = os.path.basename(proto)[:-len(".proto")]
            module = __import__("astr.v1." + stem + "_pb2", fromlist=["x"])
            modules[proto] = module.DESCRIPTOR.serialized_pb.hex()
        print(json.dumps({{
            "file": astr.__file__,
            "typed": os.path.exists(os.path.join(package, "py.typed")),
            "stubs": sorted(os.path.basename(p) for p in glob.glob(package + "/v1/*.pyi")),
            "descriptors": modules,
            "unresolved": [name for name in astr.__all__ if not hasattr(astr, name)],
        }}))
    """, cwd=str(tmp_path), pythonpath=[str(site)]))
    assert report["file"] == str(site / "astr" / "__init__.py")
    assert report["typed"]
    assert report["stubs"] == sorted(os.path.basename(f)[:-len(".proto")] + "_pb2.pyi"
                                     for f in PROTO_FILES)
    expected = protoc_descriptors(tmp_path)
    assert {name: descriptor_pb2.FileDescriptorProto.FromString(bytes.fromhex(hex_pb))
            for name, hex_pb in report["descriptors"].items()} == expected
    assert report["unresolved"] == []  # every export imports (WeightSync lazily)


@pytest.fixture
def stale_astr(tmp_path):
    """A directory holding an old, regular `astr` package, as an earlier install would."""
    stale = tmp_path / "stale"
    (stale / "astr" / "v1").mkdir(parents=True)
    (stale / "astr" / "__init__.py").write_text("STALE = True\n")
    (stale / "astr" / "v1" / "__init__.py").write_text("")
    (stale / "astr" / "v1" / "generate_pb2.py").write_text("raise ImportError('stale stubs')\n")
    return str(stale)


def test_stale_install_shadows_neither_tests_nor_harness(stale_astr, tmp_path):
    out = run_python("""
        import json
        import sdk_testing, astr
        from astr.v1 import generate_pb2
        print(json.dumps([astr.__file__, generate_pb2.__file__, hasattr(astr, "STALE")]))
    """, cwd=os.path.join(SOURCE_DIR, "tests", "python"),
        pythonpath=[stale_astr, os.path.join(SOURCE_DIR, "tests", "python")])
    astr_file, pb_file, stale = json.loads(out)
    assert not stale and not astr_file.startswith(stale_astr)
    assert pb_file.startswith(os.path.dirname(astr_file))

    out = run_python("""
        import json
        import harness, astr
        print(json.dumps([astr.__file__, harness.pb.__file__, harness.wpb.__file__,
                          harness.health_pb2.__file__, hasattr(astr, "STALE")]))
    """, cwd=str(tmp_path),
        pythonpath=[stale_astr, os.path.join(SOURCE_DIR, "tests", "integration")])
    astr_file, pb_file, wpb_file, health_file, stale = json.loads(out)
    root = os.path.dirname(os.path.dirname(astr_file))
    assert not stale and not astr_file.startswith(stale_astr)
    # The harness's stubs are the SDK's own modules, staged from this tree.
    assert pb_file == os.path.join(root, "astr", "v1", "generate_pb2.py")
    assert wpb_file == os.path.join(root, "astr", "v1", "worker_pb2.py")
    assert health_file == os.path.join(root, "itest", "health_pb2.py")


def test_an_astr_imported_from_elsewhere_is_refused(stale_astr, tmp_path):
    out = run_python("""
        import astr  # the stale one
        try:
            import sdk_testing
        except ImportError as e:
            print(e)
    """, cwd=str(tmp_path), pythonpath=[stale_astr, os.path.join(SOURCE_DIR, "tests", "python")])
    assert "already imported from" in out and stale_astr in out
