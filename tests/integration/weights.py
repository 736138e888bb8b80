"""Helpers of the weight-update tests: HF checkpoints of stories260K (astr convert) and perturbed
copies written with `safetensors`, and a minimal UpdateWeights client written from admin.proto
(independent of astr's SDK, which has its own tests)."""

import json
import os
import shutil
import subprocess

import numpy as np
import xxhash
from safetensors.numpy import load_file, save_file

import harness
from harness import apb

TOKEN = "test-admin-token-1234"


def auth(token=TOKEN):
    return [("authorization", f"Bearer {token}")]


def convert_stories(out_dir):
    """stories260K as an HF folder in f32 (half-order q/k rows: astr convert permutes them)."""
    if os.path.exists(out_dir):
        shutil.rmtree(out_dir)
    r = subprocess.run([harness.ASTR_BIN, "convert", harness.STORIES, out_dir, "--dtype", "f32"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return out_dir


def load(folder):
    return load_file(os.path.join(folder, "model.safetensors"))


def perturbed(tensors, seed, scale=0.02, names=None):
    """A copy with N(0, scale) noise added to every tensor (or only to `names`)."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, v in tensors.items():
        if names is None or k in names:
            out[k] = (v + rng.normal(0.0, scale, v.shape)).astype(v.dtype)
        else:
            out[k] = v.copy()
    return out


def write_folder(src_folder, tensors, out_dir):
    """An HF folder with `src_folder`'s config and `tensors` as its weights."""
    os.makedirs(out_dir, exist_ok=True)
    for name in ("config.json", "generation_config.json"):
        if os.path.exists(os.path.join(src_folder, name)):
            shutil.copy(os.path.join(src_folder, name), os.path.join(out_dir, name))
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()},
              os.path.join(out_dir, "model.safetensors"))
    return out_dir


def manifest(tensors, label="", checksums=True, dtype="f32"):
    m = apb.WeightManifest(label=label)
    for name, a in tensors.items():
        spec = m.tensors.add(name=name, dtype=dtype, shape=list(a.shape))
        if checksums:
            spec.xxh64 = xxhash.xxh64_intdigest(np.ascontiguousarray(a).tobytes())
    return m


def messages(tensors, label="", bucket_bytes=1 << 16, chunk_bytes=1 << 14, checksums=True,
             spec=None, drop_last=False):
    """The UpdateWeights stream: the manifest, then buckets of ordered chunks."""
    yield apb.UpdateWeightsRequest(manifest=spec or manifest(tensors, label, checksums))
    chunks = []
    for i, (name, a) in enumerate(tensors.items()):
        b = np.ascontiguousarray(a).tobytes()
        for off in range(0, len(b), chunk_bytes):
            chunks.append(apb.WeightChunk(tensor=i, offset=off, data=b[off:off + chunk_bytes]))
    if drop_last:
        chunks = chunks[:-1]
    bucket, size = apb.UpdateWeightsRequest(), 0
    for c in chunks:
        bucket.chunks.append(c)
        size += len(c.data)
        if size >= bucket_bytes:
            yield bucket
            bucket, size = apb.UpdateWeightsRequest(), 0
    if bucket.chunks:
        yield bucket


def push(admin, tensors, label="", timeout=120, **kw):
    return admin.UpdateWeights(messages(tensors, label, **kw), metadata=auth(), timeout=timeout)


def version(admin):
    return admin.GetWeightVersion(apb.GetWeightVersionRequest(), metadata=auth(), timeout=30)


def old_and_new(root, seed, scale=0.02):
    """stories260K as a Hugging Face folder in f32 ("old") and a perturbed copy ("new"), with their
    tensors and an admin token file, under `root`."""
    old = convert_stories(str(root / "old"))
    old_t = load(old)
    new_t = perturbed(old_t, seed=seed, scale=scale)
    new = write_folder(old, new_t, str(root / "new"))
    return {"root": root, "old": old, "old_t": old_t, "new": new, "new_t": new_t,
            "token": token_file(str(root))}


def token_file(tmp_dir):
    path = os.path.join(tmp_dir, "admin.token")
    with open(path, "w") as f:
        f.write(TOKEN + "\n")
    return path


def spans(completion):
    """[(version, start, count)] of a Completion or a folded stream."""
    return [(s.version, s.start, s.count) for s in completion.weight_versions]
