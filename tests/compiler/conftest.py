"""Compile tests write into a temporary cache and leave Dynamo, Inductor's environment and this
process's in-use locks as they found them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CPU_TOML = Path(__file__).parents[2] / "src" / "torch_fl" / "description" / "builtin" / "cpu.toml"

TINY = '''
import torch


def factory():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    return model, (torch.randn(2, 4),)
'''


@pytest.fixture(autouse=True)
def compile_cache(monkeypatch, tmp_path):
    from torch_fl.compiler import cache, isa, jit

    root = tmp_path / "cache"
    monkeypatch.setenv("FL_CACHE_DIR", str(root))
    for var in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "CXX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(jit, "_pointed_at", None)
    monkeypatch.setattr(isa, "_memo_path", None)  # a test's entry must not answer the next test's probes
    yield root
    cache.release()
    if "torch._dynamo" in sys.modules:  # importing it only to reset it costs seconds
        sys.modules["torch._dynamo"].reset()


def cpu_description(tmp_path: Path, compile_section: str, **top: str) -> Path:
    """A copy of the built-in cpu description with another [compile] section (and top-level keys)."""
    text = CPU_TOML.read_text()
    head, rest = text.split("[compile]", 1)
    for key, value in top.items():
        head = head.replace(f'\n{key} = ""', f'\n{key} = "{value}"')
    tail = rest.split("\n[", 1)[1]
    path = tmp_path / "cpu.toml"
    path.write_text(f"{head}[compile]\n{compile_section}\n\n[{tail}")
    return path


@pytest.fixture
def use_description(monkeypatch, tmp_path):
    """Make a modified cpu description the one in force (FL_DESCRIPTION overrides the built-in; child
    processes inherit it)."""
    import torch_fl

    def use(compile_section: str, **top: str) -> Path:
        path = cpu_description(tmp_path, compile_section, **top)
        monkeypatch.setenv("FL_DESCRIPTION", str(path))
        torch_fl.reset()
        return path

    return use


@pytest.fixture
def tiny_model(tmp_path) -> str:
    path = tmp_path / "tiny.py"
    path.write_text(TINY)
    return f"{path}:factory"


@pytest.fixture
def spawn():
    """Start `torchfl ARGS` (or `python -c CODE` with code=...) in a fresh process, output piped."""
    started: list[subprocess.Popen] = []

    def start(*args: str, code: str | None = None) -> subprocess.Popen:
        command = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "torch_fl", *args]
        proc = subprocess.Popen(command, env=dict(os.environ), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
