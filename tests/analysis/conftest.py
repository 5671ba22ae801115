"""Fixtures of the analysis tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def models() -> Path:
    """The model file of the profile, bench and grade tests (coverage_fixtures.py): `f"{models}:mlp"`."""
    return Path(__file__).resolve().parent / "coverage_fixtures.py"
