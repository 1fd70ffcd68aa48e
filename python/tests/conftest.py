# SPDX-License-Identifier: Apache-2.0
import json
import pathlib

import pytest

DATA = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data"


@pytest.fixture
def golden():
    """Loads a golden case of the C++ tests (tests/data/...), computed by running the peers' code."""

    def load(relative: str):
        return json.loads((DATA / relative).read_text())

    return load
