#!/usr/bin/env bash
# Prints a PYTHONPATH under which `import arctic_inference.suffix_decoding` is Arctic Inference 0.3.0's
# own SuffixDecoding (its C++ suffix tree compiled as its nanobind module `_C`, and its cache.py): the
# test oracle of include/specdec/tree/suffix.hpp, never a dependency of the library. First use: fetches
# the source distribution from PyPI (SHA-256 checked), installs nanobind and numpy (pinned) beside it
# with pip, builds only csrc/suffix_decoding (~30 s). Cache: $SPECDEC_CACHE, else ~/.cache/specdec.
set -euo pipefail
version=0.3.0
sha256=7f22e3e1b1071c6061c0d6951be17c0fb50b08d06d6e543144c8f52faba60a36
url="https://files.pythonhosted.org/packages/63/c1/573fa2f00097cd9cc1167b31fd900b2482f58f3491867cebdd5516626533/arctic_inference-$version.tar.gz"
cache="${SPECDEC_CACHE:-$HOME/.cache/specdec}"
oracle="$cache/arctic-inference-$version-oracle"
pkg="$oracle/python/arctic_inference/suffix_decoding"
if ! ls "$pkg"/_C*.so >/dev/null 2>&1; then
  mkdir -p "$cache/sdist"
  sdist="$cache/sdist/arctic_inference-$version.tar.gz"
  if [ ! -s "$sdist" ] || ! echo "$sha256  $sdist" | sha256sum --check --status; then
    echo "specdec: fetching arctic-inference==$version source (PyPI, 226 kB)" >&2
    # `pip download` cannot: the sdist's setup.py imports torch to prepare its metadata.
    python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$url" "$sdist.part"
    mv "$sdist.part" "$sdist"
  fi
  echo "$sha256  $sdist" | sha256sum --check --status || { echo "specdec: $sdist does not have SHA-256 $sha256" >&2; exit 1; }
  rm -rf "$oracle" && mkdir -p "$oracle/src" "$pkg"
  tar -xzf "$sdist" -C "$oracle/src" --strip-components=1 "arctic_inference-$version/csrc/suffix_decoding" \
    "arctic_inference-$version/arctic_inference/suffix_decoding"
  # --target installs beside the oracle, nothing into the system; the variable keeps a PEP 668 pip from refusing.
  PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet --disable-pip-version-check --target "$oracle/deps" nanobind==2.9.2 numpy==2.2.6 >&2
  PYTHONPATH="$oracle/deps" cmake -S "$oracle/src/csrc/suffix_decoding" -B "$oracle/build" -DCMAKE_BUILD_TYPE=Release \
    -DPython_EXECUTABLE="$(command -v python3)" >&2
  PYTHONPATH="$oracle/deps" cmake --build "$oracle/build" -j"$(nproc)" >&2
  cp "$oracle/src/arctic_inference/suffix_decoding/"{__init__,cache}.py "$pkg/"
  : > "$oracle/python/arctic_inference/__init__.py"  # only suffix_decoding is needed of the package
  cp "$oracle/build"/_C*.so "$pkg/"
fi
echo "$oracle/python:$oracle/deps"
