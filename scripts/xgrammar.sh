#!/usr/bin/env bash
# Builds XGrammar's C++ core (the grammar engine behind structured outputs, docs/structured.md) as a
# static library into .cache/xgrammar/install, from its source distribution on PyPI, fetched by
# name and version and checked against its sha256. Nothing of it is kept in the repository. Called
# by scripts/setup.sh; idempotent (an install of this version is kept).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VERSION=0.2.9
SHA256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
BASE="$ROOT/.cache/xgrammar"
PREFIX="$BASE/install"
if [ -f "$PREFIX/VERSION" ] && [ "$(cat "$PREFIX/VERSION")" = "$VERSION" ] &&
   [ -f "$PREFIX/lib/libxgrammar.a" ]; then
  exit 0
fi
PY="${PYTHON:-$ROOT/.cache/venv/bin/python}"
[ -x "$PY" ] || PY=python3
mkdir -p "$BASE"
TARBALL="$BASE/xgrammar-$VERSION.tar.gz"
if [ ! -f "$TARBALL" ] || ! echo "$SHA256  $TARBALL" | sha256sum -c --status; then
  echo "setup: fetching xgrammar $VERSION (source distribution) from PyPI"
  "$PY" - "$VERSION" "$SHA256" "$TARBALL" <<'EOF'
import hashlib, json, sys, urllib.parse, urllib.request
version, sha, out = sys.argv[1:4]
api = "https://pypi.org/pypi/xgrammar/json"
meta = json.load(urllib.request.urlopen(api, timeout=120))
sdists = [u for u in meta["releases"].get(version, []) if u["packagetype"] == "sdist"]
if not sdists:
    sys.exit(f"xgrammar {version} has no source distribution on PyPI")
url = urllib.parse.urljoin(api, sdists[0]["url"])
data = urllib.request.urlopen(url, timeout=300).read()
if hashlib.sha256(data).hexdigest() != sha:
    sys.exit(f"xgrammar {version}: sha256 mismatch for {url}")
open(out, "wb").write(data)
EOF
fi
echo "setup: building xgrammar $VERSION (C++ core, static)"
rm -rf "$BASE/src" "$BASE/build" "$PREFIX"
mkdir -p "$BASE/src"
tar xzf "$TARBALL" -C "$BASE/src" --strip-components=1
# Its cmake/config.cmake turns the Python bindings on; a config.cmake in the build folder is read
# instead of it.
mkdir -p "$BASE/build"
cat > "$BASE/build/config.cmake" <<'CFG'
set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)
set(XGRAMMAR_BUILD_CXX_TESTS OFF)
set(XGRAMMAR_ENABLE_CPPTRACE OFF)
set(XGRAMMAR_ENABLE_COVERAGE OFF)
set(XGRAMMAR_ENABLE_INTERNAL_CHECK OFF)
CFG
# Its flags put -Werror and -flto=auto before CMAKE_CXX_FLAGS: these come after and win (a plain
# archive that any linker reads; warnings of a newer compiler are not errors here).
cmake -S "$BASE/src" -B "$BASE/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS="-fno-lto -Wno-error" -DCMAKE_INSTALL_PREFIX="$PREFIX" > "$BASE/configure.log"
cmake --build "$BASE/build" -j "$(nproc)" > "$BASE/build.log"
cmake --install "$BASE/build" > /dev/null
echo "$VERSION" > "$PREFIX/VERSION"
rm -rf "$BASE/build"
