# shellcheck shell=bash
# Sourced by the by-hand torch checks (tools/check_torch_rendezvous.sh, tools/transformers_goldens.sh):
#
#   source tools/torch_venv.sh VENV [PACKAGE...]
#
# Makes VENV with torch from PyPI (without its CUDA dependencies, but for the few libraries its
# import loads; nothing here uses a GPU) and the extra PACKAGEs, and exports LD_LIBRARY_PATH so that
# `"$VENV/bin/python" -c 'import torch'` works on this machine (its CUDA 13 toolkit). Idempotent.
torch_venv() {
  local venv="$1"
  shift
  if [ ! -x "$venv/bin/python" ]; then
    "$(command -v python3)" -m venv "$venv"
  fi
  if ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
    "$venv/bin/pip" install -q --no-deps torch
    local req
    req="$("$venv/bin/python" - <<'PYEOF'
import importlib.metadata as m
want = ("nvidia-nccl", "nvidia-cusparselt", "nvidia-nvshmem", "nvidia-cufile")
print(" ".join(r.split(";")[0].replace(" ", "") for r in m.requires("torch") or []
               if r.startswith(want)))
PYEOF
)"
    # shellcheck disable=SC2086
    # libcufile comes with cuda-toolkit[cufile] in torch's own requirements: its wheel alone here.
    "$venv/bin/pip" install -q --no-deps $req nvidia-cufile typing_extensions sympy mpmath networkx jinja2 \
      markupsafe fsspec filelock
  fi
  if [ $# -gt 0 ]; then
    local missing=()
    local p
    for p in "$@"; do
      "$venv/bin/python" -c "import ${p//-/_}" 2>/dev/null || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then "$venv/bin/pip" install -q "${missing[@]}"; fi
  fi
  local nv ld="" d
  nv="$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')/nvidia"
  for d in "$nv"/*/lib; do [ -d "$d" ] && ld="$ld:$d"; done
  export LD_LIBRARY_PATH="${ld#:}:${CUDA_HOME:-/usr/local/cuda}/lib64:${LD_LIBRARY_PATH:-}"
}
torch_venv "$@"
