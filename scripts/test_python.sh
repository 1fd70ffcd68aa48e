#!/usr/bin/env bash
# The Python package: builds `pip install ./python` into a virtual environment of its own (numpy and
# pytest, and ml_dtypes for numpy bf16 arrays, from PyPI; never torch) and runs its tests (python/tests, the C++ tests' goldens among them).
# The environment lives under build/python-venv; a fresh clone creates it.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/python-venv
if [ ! -x "$venv/bin/python" ]; then
  # Debian's python3 needs python3-venv for this; install-deps.sh installs it where apt-get is the way.
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip >/dev/null
"$venv/bin/python" -m pip install --quiet numpy pytest "ml_dtypes==0.7.0"
# The package as a user installs it (SPECDEC_PYTHON_CUDA left at AUTO: CPU only where no GPU is visible,
# though nvcc may be installed), built incrementally in a directory of this script's under build/.
# The install must write nothing into the source tree (a read-only checkout installs): python/ is listed
# before and after.
# The distribution was once named `specdec` (PyPI's `specdec` is an unrelated project): an old install
# would share the `specdec` folder with this one.
"$venv/bin/python" -m pip uninstall --quiet --yes specdec >/dev/null 2>&1 || true
listing() { find python -path '*/__pycache__' -prune -o -print | sort; }
before="$(listing)"
"$venv/bin/python" -m pip install --quiet ./python -C "build-dir=$PWD/build/python-build/{wheel_tag}"
if [ "$before" != "$(listing)" ]; then
  echo "test_python.sh: pip install ./python wrote into the source tree:" >&2
  diff <(echo "$before") <(listing) >&2 || true
  exit 1
fi
if ! ls /proc/driver/nvidia/gpus/* >/dev/null 2>&1 && ! nvidia-smi -L 2>/dev/null | grep -q GPU; then
  "$venv/bin/python" -c 'import specdec, sys; sys.exit("test_python.sh: a CUDA side was built with no GPU visible" if specdec.cuda else 0)'
fi
# Arctic Inference's own suffix module as the oracle of SuffixTree's array methods (built once, cached;
# scripts/test.sh's second phase builds the same).
SPECDEC_SUFFIX_ORACLE="$(scripts/fetch_suffix_oracle.sh)"
export SPECDEC_SUFFIX_ORACLE
# From the repository root, so that `import specdec` finds the installed package, not python/specdec.
"$venv/bin/python" -m pytest -q python/tests
