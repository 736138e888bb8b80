#!/usr/bin/env bash
# Installs every Debian and pip package that building, running and testing astr needs. Idempotent:
# packages already present are skipped. Run as root on Debian 12 (uses sudo when not root).
set -euo pipefail

APT_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libgtest-dev libgmock-dev nlohmann-json3-dev libgoogle-glog-dev libxxhash-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libboost1.81-dev
  libboost-context1.81-dev
  python3 python3-pip python3-venv
  clang-format clang-tidy
  libssl-dev openssl
  clang-14 libclang-rt-14-dev time
)
# The container image tests (tests/deploy): podman (run through runc) builds and runs the images,
# debootstrap makes their Debian base here, shellcheck lints the images' entrypoint. iproute2's
# `ip netns` makes the hosts of tests/integration/test_worker_membership_netns.py.
DEPLOY_TEST_PACKAGES=(podman runc debootstrap shellcheck iproute2)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${APT_PACKAGES[@]}" "${DEPLOY_TEST_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# kubectl renders deploy/k8s for tests/deploy (`kubectl kustomize`). Debian's kubernetes-client
# (kubectl 1.20, kustomize v2.0.3: the manifests keep to its syntax) only where no kubectl is
# installed, so a newer one already on the machine is never replaced.
if ! command -v kubectl >/dev/null 2>&1; then
  echo "setup: installing Debian package: kubernetes-client (kubectl)"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends kubernetes-client
fi

# Python packages used by the tests and tools, in a project-local virtual environment.
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="$ROOT/.cache/venv"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$ROOT/scripts/requirements.txt"

# XGrammar's C++ core (structured outputs), built from its PyPI source distribution.
"$ROOT/scripts/xgrammar.sh"
echo "setup: done"
