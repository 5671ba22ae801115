"""`import torch.fl.X` gives torch_fl.X itself: one torch-fl per process (issue 22: `import
torch.fl.distributed` loaded a second copy, torch.fl.device and torch.fl.errors among it, and
init_process_group then failed)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

import torch_fl


def _duplicates() -> list[str]:
    return [name for name, module in list(sys.modules.items()) if name.startswith("torch.fl.")
            and module is not sys.modules.get("torch_fl." + name[len("torch.fl."):])]


@pytest.mark.parametrize("name", ["distributed", "distributed.launch", "description.registry", "errors",
                                  "compiler.trust", "routing.stats"])
def test_torch_fl_submodules_are_the_torch_fl_modules(name):
    alias = importlib.import_module(f"torch.fl.{name}")
    assert alias is importlib.import_module(f"torch_fl.{name}")
    assert alias.__spec__.name == f"torch_fl.{name}" and alias.__name__ == f"torch_fl.{name}"
    assert _duplicates() == []


def test_exceptions_from_either_name_are_one_class():
    from torch.fl.errors import ConfigError

    assert ConfigError is torch_fl.errors.ConfigError
    with pytest.raises(torch_fl.errors.ConfigError):
        raise ConfigError("x")


@pytest.mark.slow
def test_init_process_group_through_the_torch_fl_spelling(tmp_path):
    code = """
import socket, sys
import torch, torch_fl
import torch.fl.distributed as fld
import torch.distributed as dist
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
fld.init_process_group(init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1, timeout=30)
dist.destroy_process_group()
print("copies", [k for k in sys.modules if k.startswith("torch.fl.")
                 and sys.modules[k] is not sys.modules.get("torch_fl." + k[9:])])
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=200)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "copies []" in done.stdout
