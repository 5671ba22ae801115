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


@pytest.fixture(autouse=True)
def _sys_path_as_it_was():
    """sys.path back as it was after each test: a helper that inserts a folder on every call (9,000 entries
    after the held-out redaction measure) makes torch's Inductor pass a PYTHONPATH over the kernel's 128 KiB
    limit to its subprocesses, and a later `torchfl aot` in the same process fails with E2BIG."""
    saved = list(sys.path)
    yield
    sys.path[:] = saved
