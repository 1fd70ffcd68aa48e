#!/usr/bin/env bash
# Prints the path of the pinned llama.cpp source tree (cmake/llama_cpp.pin), fetching it on first use:
# `pip download` of the llama-cpp-python source distribution (~77 MB, PyPI is the only network access),
# its SHA-256 checked against the pin, then its vendor/llama.cpp extracted into the cache.
# Cache: $SPECDEC_CACHE, else ~/.cache/specdec.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck disable=SC1091
source <(grep -E '^LLAMA_CPP_[A-Z0-9_]+=' "$root/cmake/llama_cpp.pin")
cache="${SPECDEC_CACHE:-$HOME/.cache/specdec}"
tree="$cache/llama.cpp-${LLAMA_CPP_COMMIT:0:12}"
if [ ! -f "$tree/include/llama.h" ]; then
  sdist="$cache/sdist/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
  if [ ! -s "$sdist" ] || ! echo "$LLAMA_CPP_PYTHON_SHA256  $sdist" | sha256sum --check --status; then
    mkdir -p "$cache/sdist"
    rm -f "$sdist"
    echo "specdec: fetching llama.cpp (pip download llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION source, ~77 MB)" >&2
    python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$cache/sdist" \
      "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" >&2
  fi
  if ! echo "$LLAMA_CPP_PYTHON_SHA256  $sdist" | sha256sum --check --status; then
    echo "specdec: $sdist does not have the pinned SHA-256 ($LLAMA_CPP_PYTHON_SHA256)" >&2
    exit 1
  fi
  rm -rf "$tree.part" && mkdir -p "$tree.part"
  tar -xzf "$sdist" -C "$tree.part" --strip-components=3 "llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
  rm -f "$tree.part/.git"  # a submodule pointer into llama-cpp-python's repository, which is not here
  rm -rf "$tree" && mv "$tree.part" "$tree"
fi
echo "$tree"
