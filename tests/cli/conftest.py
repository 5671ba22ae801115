"""Shared fixtures of the command tests."""

from __future__ import annotations

import io
import sys

import pytest

from torch_fl.report import end_progress, set_progress


class Terminal(io.StringIO):
    """A stderr that says whether it is a terminal (progress lines go to terminals only)."""

    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.fixture
def stderr(monkeypatch):
    """`stderr(tty=...)` puts a Terminal in sys.stderr; progress is back to its default around the test."""
    def use(tty: bool) -> Terminal:
        stream = Terminal(tty)
        monkeypatch.setattr(sys, "stderr", stream)
        return stream

    previous = set_progress(None)
    yield use
    end_progress()
    set_progress(previous)
