"""What the SDK tests (test_sdk_*.py) share: the SDK imported from the current tree."""

import importlib.util
import os

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
