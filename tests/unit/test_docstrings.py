"""The examples in the core's and the contract's docstrings run as written (doctest), so
a reader who copies one gets what it shows."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def modules() -> list[str]:
    names = []
    for part in ("penumbra", "contract"):
        for path in sorted((ROOT / part).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] != "__main__":
                names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


@pytest.mark.parametrize("name", modules())
def test_the_examples_of_a_module_run_as_written(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0
