#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The layer rule of docs/architecture.md, checked: a header in include/specdec/<folder>/ includes
specdec headers only from its own folder and the folders the rule allows it, so the folders form no
loop. A new algorithm's folder is added here and in docs/architecture.md together."""
import pathlib
import re
import sys

# Each folder and the folders below it that it may include (its own always).
ALLOWED = {
    "core": set(),
    "backend": {"core"},
    "policy": {"core", "backend"},
    "tree": {"core", "backend", "policy"},
    "mask": {"core", "backend", "tree"},
    "grammar": {"core", "backend", "tree"},
    "sampling": {"core", "backend", "tree", "grammar"},
    "blocks": {"core", "backend"},
    "io": {"core", "blocks"},
    "interop": {"core", "backend", "policy", "tree", "mask", "grammar", "sampling", "blocks"},
}

root = pathlib.Path(__file__).resolve().parents[1] / "include" / "specdec"
include = re.compile(r'#include <specdec/([a-z_]+)/')
bad = []
for header in sorted(root.rglob("*")):
    if header.suffix not in (".hpp", ".cuh") or header.parent == root:
        continue
    folder = header.relative_to(root).parts[0]
    if folder not in ALLOWED:
        bad.append(f"{header.relative_to(root)}: folder {folder} is not in the layer rule")
        continue
    for used in include.findall(header.read_text()):
        if used != folder and used not in ALLOWED[folder]:
            bad.append(f"{header.relative_to(root)} includes specdec/{used}/: {folder} may include only "
                       f"{', '.join(sorted(ALLOWED[folder])) or 'nothing else'}")
print("\n".join(bad) if bad else f"layer rule holds over {sum(1 for _ in root.rglob('*.hpp'))} headers")
sys.exit(1 if bad else 0)
