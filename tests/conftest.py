"""Every test starts from a clean torch-fl state: no FL_* variables, no config files, nothing cached."""

from __future__ import annotations

import pytest

import torch_fl
from torch_fl import _env


@pytest.fixture(autouse=True)
def clean_torch_fl(monkeypatch, tmp_path_factory):
    for var in _env.ALL:
        monkeypatch.delenv(var.name, raising=False)
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    # Compiles in tests go to a temporary cache, never the user's ~/.cache/torch_fl.
    monkeypatch.setenv("FL_CACHE_DIR", str(home / "cache"))
    monkeypatch.chdir(tmp_path_factory.mktemp("project"))
    torch_fl.reset()
    torch_fl.reset_route_stats()
    yield
    # A test that registered a kernel and failed before removing it must not leak it into the next.
    torch_fl.routing.registered_kernels().clear()
    torch_fl.reset()
