#!/usr/bin/env bash
# The Python package: builds `pip install ./python` into a virtual environment of its own (numpy and
# pytest from PyPI; never torch) and runs its tests (python/tests, the C++ tests' goldens among them).
# The environment lives under build/python-venv; a fresh clone creates it.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/python-venv
if [ ! -x "$venv/bin/python" ]; then
  # Debian's python3 needs python3-venv for this; install-deps.sh installs it where apt-get is the way.
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip >/dev/null
"$venv/bin/python" -m pip install --quiet numpy pytest
# The CPU package: its CUDA side (built by default where nvcc is found) needs a GPU to test and minutes of
# nvcc; CI compile-checks it instead (ctest nvcc_compile_python), and the GPU run builds and tests it.
"$venv/bin/python" -m pip install --quiet ./python -C cmake.define.SPECDEC_PYTHON_CUDA=OFF
# From the repository root, so that `import specdec` finds the installed package, not python/specdec.
"$venv/bin/python" -m pytest -q python/tests
