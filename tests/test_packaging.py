"""What the source distribution carries: the project, never a local cache (issue 42: hypothesis' example
database shipped 146 files)."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_sdist_carries_no_local_cache(tmp_path):
    builders = pytest.importorskip("hatchling.builders.sdist")
    (ROOT / ".hypothesis" / "examples").mkdir(parents=True, exist_ok=True)  # what a test run leaves
    built = next(iter(builders.SdistBuilder(str(ROOT)).build(directory=str(tmp_path), versions=["standard"])))
    with tarfile.open(built) as archive:
        names = archive.getnames()
    caches = [n for n in names if any(f"/{part}/" in f"/{n}/" for part in
                                      (".hypothesis", ".pytest_cache", ".ruff_cache", ".venv", "__pycache__"))]
    assert not caches, caches[:5]
    assert any(n.endswith("src/torch_fl/__init__.py") for n in names)
    assert any(n.endswith("docs/routing.md") for n in names)
