"""The progress of the commands that walk files, `torchfl scan` and `torchfl fix` (not a command itself)."""

from __future__ import annotations

import contextlib
import time
from typing import Any


class FileProgress(contextlib.AbstractContextManager["FileProgress"]):
    """The progress of a long scan or fix: nothing for its first 2 s (most runs are shorter, and a linter
    prints nothing but its findings), then a stage line ("scanning 5,000 files") with torch_fl.report's
    status line under it (done/total files, the time, an ETA). Only to a terminal and never with
    --quiet (torch_fl.report.progress_enabled). Call it with (files done, files in all or None)."""

    AFTER = 2.0  # seconds before anything is shown

    def __init__(self, verb: str) -> None:
        self.verb = verb
        self.started = time.monotonic()
        self.stage: Any = None
        self.off = False
        self.stack = contextlib.ExitStack()

    def __call__(self, done: int, total: int | None) -> None:
        if self.stage is None:
            if self.off or time.monotonic() - self.started < self.AFTER:
                return
            from ..report import progress_enabled, stage

            if not progress_enabled():
                self.off = True
                return
            what = f"{self.verb} {total:,} files" if total is not None else f"{self.verb} files"
            self.stage = self.stack.enter_context(stage(what, total=total, unit="files"))
            self.stage.started = self.started  # the ETA counts from the start of the run
        self.stage.done = done

    def __exit__(self, *exc: object) -> None:
        self.stack.close()  # the status line is cleared before the report goes to the same terminal
