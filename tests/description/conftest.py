"""Shared fixtures of the description tests."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

GENERATOR = Path(__file__).resolve().parents[2] / "scripts" / "gen_op_tables.py"


@pytest.fixture(scope="module")
def gen() -> Iterator[ModuleType]:
    """scripts/gen_op_tables.py, imported as a module."""
    spec = importlib.util.spec_from_file_location("gen_op_tables", GENERATOR)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    # dataclasses look the defining module up in sys.modules while building the class.
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]
