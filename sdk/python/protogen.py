"""Builds the SDK's `astr.v1` modules from the repository's protos/astr/v1/*.proto.

Three users, one rule (the generated code is never committed):
- setup.py generates them into the build directory when the package is built or installed;
- the SDK tests and the integration harness stage the whole package from the current tree into a
  temporary directory put first on sys.path (`import_from_tree`), so they always run against the
  current protos and an installed, possibly stale `astr` can never shadow them.

This file is not part of the installed package; load it by path (setup.py puts its own directory on
sys.path; the tests use importlib) so that sdk/python/ itself never lands on sys.path, where its
`astr/` (sources without generated code) would shadow everything else.
"""

from __future__ import annotations

import atexit
import glob
import importlib
import os
import re
import shutil
import sys
import tempfile
from types import ModuleType
from typing import Dict, List, Optional

SDK_DIR = os.path.dirname(os.path.abspath(__file__))
# Where the protos are in a checkout; ASTR_PROTO_ROOT overrides it (a copy of sdk/python elsewhere).
REPO_PROTO_ROOT = os.path.normpath(os.path.join(SDK_DIR, "..", "..", "protos"))
# The proto package, which is also where its modules go inside the Python package.
PROTO_PACKAGE = os.path.join("astr", "v1")
# Written at the root of a staged tree: the SDK sources it was staged from.
STAGE_MARKER = ".astr-sdk-stage"

_GRPC_VERSION_RE = re.compile(r"^GRPC_GENERATED_VERSION = '([^']+)'", re.MULTILINE)
_PROTOBUF_VERSION_RE = re.compile(r"^# Protobuf Python Version: (\S+)$", re.MULTILINE)


def proto_root() -> str:
    """The directory holding astr/v1/*.proto: $ASTR_PROTO_ROOT, else the repository's protos/."""
    root = os.environ.get("ASTR_PROTO_ROOT") or REPO_PROTO_ROOT
    if not glob.glob(os.path.join(root, PROTO_PACKAGE, "*.proto")):
        raise FileNotFoundError(
            f"no {PROTO_PACKAGE}/*.proto under {root}: build the SDK from an astr checkout "
            "(sdk/python next to protos/) or set ASTR_PROTO_ROOT to the protos/ directory"
        )
    return root


def proto_files(root: str) -> List[str]:
    """Every proto of the package astr.v1, relative to `root`, sorted."""
    paths = glob.glob(os.path.join(root, PROTO_PACKAGE, "*.proto"))
    return sorted(os.path.relpath(p, root).replace(os.sep, "/") for p in paths)


def generate(out_root: str, root: Optional[str] = None) -> Dict[str, str]:
    """Writes astr/v1/<name>_pb2.py, _pb2.pyi and _pb2_grpc.py under `out_root` for every proto
    of astr.v1 (grpcio-tools' protoc, in this process).

    Returns the versions the generated code requires at run time: {"grpcio": ..., "protobuf": ...}
    (each generated module checks them on import).
    """
    from grpc_tools import protoc  # build-time dependency only
    import grpc_tools

    root = root or proto_root()
    files = proto_files(root)
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    os.makedirs(out_root, exist_ok=True)
    args = [
        "protoc",
        f"-I{root}",
        f"-I{well_known}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
    ] + files
    if protoc.main(args) != 0:
        raise RuntimeError(f"grpc_tools.protoc failed on {files} (proto root {root})")
    return _required_versions(os.path.join(out_root, PROTO_PACKAGE))


def _required_versions(module_dir: str) -> Dict[str, str]:
    versions: Dict[str, str] = {}
    for path in sorted(glob.glob(os.path.join(module_dir, "*_pb2*.py"))):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for key, pattern in (("grpcio", _GRPC_VERSION_RE), ("protobuf", _PROTOBUF_VERSION_RE)):
            m = pattern.search(text)
            if m:
                versions[key] = m.group(1)
    missing = {"grpcio", "protobuf"} - versions.keys()
    if missing:
        raise RuntimeError(f"generated code in {module_dir} names no {sorted(missing)} version")
    return versions


def runtime_requirements(versions: Dict[str, str]) -> List[str]:
    """The package's install requirements for code generated with `versions` (see generate)."""
    return [f"grpcio>={versions['grpcio']}", f"protobuf>={versions['protobuf']}"]


def stage(out_root: str, root: Optional[str] = None) -> str:
    """Lays the package out under `out_root` as an install would: the sources of sdk/python/astr
    plus the generated astr.v1 modules. Returns `out_root`."""
    src = os.path.join(SDK_DIR, "astr")
    dst = os.path.join(out_root, "astr")
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(
        src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*_pb2.py", "*_pb2.pyi",
                                                "*_pb2_grpc.py")
    )
    generate(out_root, root)
    with open(os.path.join(out_root, STAGE_MARKER), "w", encoding="utf-8") as f:
        f.write(SDK_DIR + "\n")
    return out_root


def _staged_from(directory: str) -> Optional[str]:
    try:
        with open(os.path.join(directory, STAGE_MARKER), encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return None


def activate(out_root: str) -> ModuleType:
    """Puts a staged tree first on sys.path and imports `astr` from it.

    Raises ImportError when `astr` resolves anywhere else (e.g. it was imported earlier from an
    installed copy); a tree staged from these same sources by an earlier call is accepted.
    """
    out_root = os.path.abspath(out_root)
    # First on the path even when `astr` is loaded already: the tree may hold other packages
    # (the integration harness stages its health / reflection stubs next to it).
    sys.path.insert(0, out_root)
    loaded = sys.modules.get("astr")
    if loaded is not None:
        loaded_root = os.path.dirname(os.path.dirname(os.path.abspath(loaded.__file__ or "")))
        if _staged_from(loaded_root) != SDK_DIR:
            raise ImportError(
                f"astr was already imported from {loaded.__file__}, not from a tree staged from "
                f"{SDK_DIR}; import it through protogen.import_from_tree() first"
            )
        return loaded
    importlib.invalidate_caches()
    module = importlib.import_module("astr")
    expected = os.path.join(out_root, "astr", "__init__.py")
    if os.path.abspath(module.__file__ or "") != expected:
        raise ImportError(f"astr resolved to {module.__file__}, expected {expected}")
    return module


def import_from_tree(out_root: Optional[str] = None) -> ModuleType:
    """Stages the package from the current tree (into a temporary directory removed at exit
    unless `out_root` is given) and imports it (see activate)."""
    loaded = sys.modules.get("astr")
    if loaded is not None:
        return activate(os.path.dirname(os.path.dirname(os.path.abspath(loaded.__file__ or ""))))
    if out_root is None:
        out_root = tempfile.mkdtemp(prefix="astr-sdk-")
        atexit.register(shutil.rmtree, out_root, True)
    stage(out_root)
    return activate(out_root)


if __name__ == "__main__":
    # `python sdk/python/protogen.py DIR`: stage the package into DIR (e.g. to try it by hand).
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUT_DIR")
    print(stage(sys.argv[1]))
