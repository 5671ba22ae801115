"""Fixtures and helpers of the stream tests (the sanitizer's and the emulated streams'). A test module imports
the fixtures it uses by their function names, `from stream_fixtures import chip_fixture  # noqa: F401`, and
its tests ask for them by the fixture names, `chip` and `group` (the two names keep a test's argument from
shadowing the import)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist

import torch_fl
from torch_fl.routing.emu.sanitizing import sanitize

CHIPS = ["cuda", "npu", "mlu"]


@pytest.fixture(params=CHIPS, name="chip")
def chip_fixture(request) -> Iterator[tuple[Any, torch.device]]:
    """(device module, device) of an async emulated chip, its fallback warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch_fl.errors.FallbackWarning)
        with torch_fl.emulate(request.param) as activation:
            yield getattr(torch, activation.device.type), activation.device


@pytest.fixture(name="group")
def group_fixture(chip) -> Iterator[tuple[Any, torch.device]]:
    """`chip` with a one-rank process group of its backend (the emulated collectives of routing/emu/dist.py)."""
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is unavailable")
    dist.init_process_group(torch.fl.dist_backend(chip[1]), store=dist.HashStore(), rank=0, world_size=1)
    yield chip
    dist.destroy_process_group()


def side_stream(mod: Any) -> Any:
    """A new stream of the chip's module, ordered after the current stream's work so far (a fork): its first
    use of a tensor the current stream made is no race."""
    side = mod.Stream()
    side.wait_stream(mod.current_stream())
    return side


def sanitizer_reports(program: Callable[[Any, torch.device], Any], mod: Any, d: torch.device) -> list[str]:
    """The sanitizer's reports of program(mod, d), every one kept and none raised. The program returns its
    tensors (its locals()): they outlive the check, so their frees are not its subject."""
    return checked(lambda: program(mod, d))[1]


def checked(run: Callable[[], Any]) -> tuple[Any, list[str]]:
    """(what run returned, the sanitizer's reports): every report kept, none raised."""
    with sanitize(raise_errors=False) as check:
        result = run()
    return result, check.reports
