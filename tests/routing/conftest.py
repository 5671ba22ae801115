"""Fixtures of the routing tests."""

from __future__ import annotations

import warnings

import pytest

import torch_fl


@pytest.fixture
def d():
    """The emulated cuda device, its fallback warnings silenced (a test module may define its own `d`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch_fl.errors.FallbackWarning)
        with torch_fl.emulate("cuda") as activation:
            yield activation.device
