"""Build hook of the astr SDK: the astr.v1 modules are generated from the repository's protos when
the package is built (they are never committed). Everything static is in pyproject.toml."""

import atexit
import os
import shutil
import sys
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

# protogen.py sits next to this file and is not part of the package.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import protogen  # noqa: E402

# Generated once per build, before setup() runs, because the install requirements depend on the
# grpcio-tools that generated the code (its modules check grpcio / protobuf versions on import).
_GENERATED = tempfile.mkdtemp(prefix="astr-sdk-build-")
atexit.register(shutil.rmtree, _GENERATED, True)
_VERSIONS = protogen.generate(_GENERATED)


class BuildPyWithProtos(build_py):
    """build_py that also copies the generated astr.v1 modules into the build directory."""

    def run(self) -> None:
        super().run()
        src = os.path.join(_GENERATED, protogen.PROTO_PACKAGE)
        dst = os.path.join(self.build_lib, protogen.PROTO_PACKAGE)
        os.makedirs(dst, exist_ok=True)
        # An earlier in-tree build may have left modules of protos that are gone since.
        for name in os.listdir(dst):
            if "_pb2" in name:
                os.remove(os.path.join(dst, name))
        for name in sorted(os.listdir(src)):
            self.copy_file(os.path.join(src, name), os.path.join(dst, name))


setup(
    install_requires=protogen.runtime_requirements(_VERSIONS),
    cmdclass={"build_py": BuildPyWithProtos},
)
