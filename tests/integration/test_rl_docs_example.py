"""The trainer loop of docs/rl.md runs as written against a live scheduler and two workers: three
iterations of rollouts, a loss, an update, a push through the SDK's WeightSync, pause and resume,
each serving the next version."""

import os
import re
import subprocess
import sys

import pytest

import harness
import weights as W

pytestmark = pytest.mark.skipif(bool(harness.missing_binaries()), reason="binaries not built")


def docs_example():
    text = open(os.path.join(harness.SOURCE_DIR, "docs", "rl.md")).read()
    # The whole program (it starts with its imports); other python blocks are fragments.
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if b.startswith("import")]
    assert len(blocks) == 1, "docs/rl.md should hold one whole python example"
    return blocks[0]


def test_docs_rl_example_runs(make_cluster, tmp_path):
    model = W.convert_stories(str(tmp_path / "stories"))
    token = W.token_file(str(tmp_path))
    c = make_cluster(model=model, num_workers=2, worker_flags={"dtype": "f32"},
                     scheduler_flags={"admin_token_file": token, "tokenizer": harness.STORIES})
    script = tmp_path / "rl_example.py"
    # The harness's staging of the SDK (sdk/python/protogen.py) makes `import astr` the tree's SDK.
    script.write_text("import sys\nsys.path.insert(0, %r)\nimport harness  # stages astr\n"
                      % os.path.dirname(harness.__file__) + docs_example())
    env = dict(os.environ, ASTR_SERVER=c.scheduler.address, ASTR_ADMIN=c.scheduler.admin_address,
               ASTR_TOKEN_FILE=token, ASTR_MODEL_DIR=model)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    versions = [int(v) for v in re.findall(r"serving version (\d+)", r.stdout)]
    assert versions == [1, 2, 3], r.stdout
