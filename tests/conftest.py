"""Every test starts from a clean torch-fl state: no FL_* variables, no config files, nothing cached."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import torch_fl
from torch_fl import _env
from torch_fl.device import emulated_devices

pytest_plugins = ["fast_budget"]  # make test-fast: a test over 4 s of CPU time not marked slow fails the session

# The emulated device exists before any test runs a backward pass: PyTorch's autograd engine fixes its
# devices at the first backward of the process (FL_DEVICE=emu:NAME does this at import). Tests that play a
# vendor plugin owning PrivateUse1 run in a process without it (TORCH_FL_TEST_NO_EMU=1).
if not os.environ.get("TORCH_FL_TEST_NO_EMU"):
    emulated_devices(create=True)


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
    # FL_ROUTE_LOG set by a test registered an at-exit write to its temporary path, gone by then.
    from torch_fl.routing import stats

    stats._log_path.clear()


@pytest.fixture(scope="session")
def models() -> Path:
    """The model file of the profile, bench, grade and ops-bench tests (tests/analysis/coverage_fixtures.py):
    `f"{models}:mlp"`."""
    return Path(__file__).resolve().parent / "analysis" / "coverage_fixtures.py"
