"""What the source distribution carries: the project's files, never a local cache (issue 42: hypothesis'
example database shipped 146 files) nor what a command left in the checkout."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CACHES = (".hypothesis", ".pytest_cache", ".ruff_cache", ".venv", "__pycache__")


def test_the_sdist_carries_the_project_and_no_local_cache(tmp_path: Path) -> None:
    builders = pytest.importorskip("hatchling.builders.sdist")
    # A copy of the checkout (the shared one is left alone), with what a test run and a command leave in it.
    tree = tmp_path / "tree"
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(".git", ".venv", *CACHES, "dist", "build"))
    for cache in (".hypothesis/examples/0a1b", "tests/.hypothesis/examples/2c3d", ".pytest_cache/v/cache/nodeids",
                  "src/torch_fl/__pycache__/x.cpython-311.pyc", "tests/__pycache__/y.cpython-311.pyc"):
        (tree / cache).parent.mkdir(parents=True, exist_ok=True)
        (tree / cache).write_text("left by a run\n")
    for stray in ("torchfl-env.lock", "report.html", "findings.json"):  # the defaults and examples of commands
        (tree / stray).write_text("{}\n")
    built = next(iter(builders.SdistBuilder(str(tree)).build(directory=str(tmp_path / "dist"),
                                                              versions=["standard"])))
    with tarfile.open(built) as archive:
        names = [name.split("/", 1)[1] for name in archive.getnames() if "/" in name]
    caches = [n for n in names if any(f"/{part}/" in f"/{n}/" for part in CACHES) or n.endswith(".pyc")]
    assert not caches, caches[:5]
    top = {name.split("/", 1)[0] for name in names}
    assert top <= {"src", "tests", "docs", "scripts", "benchmarks", "examples", ".ci", "pyproject.toml", "README.md",
                   "Makefile", ".pre-commit-hooks.yaml", "PKG-INFO", ".gitignore"}, top
    for wanted in ("src/torch_fl/__init__.py", "src/_torch_fl_cli.py", "docs/routing.md", "docs/cli.md",
                   "tests/test_packaging.py", "pyproject.toml", "README.md"):
        assert wanted in names, wanted
