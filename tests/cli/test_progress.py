"""Progress on long commands (issue 31): stage lines with counts and an ETA on stderr, only to a terminal,
and never with --quiet. The end-to-end checks run `torchfl coverage` with stderr on a pseudo-terminal,
on a pipe, and on a terminal with --quiet."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest

import _torch_fl_cli
from torch_fl import report
from torch_fl.cli import COMMANDS, PROGRESS, build_parser
from torch_fl.report import Stage, progress, set_progress, stage

SRC = Path(_torch_fl_cli.__file__).resolve().parent
EXAMPLES = SRC.parent / "examples"
STAMP = "] "  # every stage line starts '[HH:MM:SS] '


def test_progress_goes_to_a_terminal_only(stderr):
    stream = stderr(tty=False)
    progress("tracing")
    assert stream.getvalue() == ""  # a pipe, a file, a CI log
    stream = stderr(tty=True)
    progress("tracing")
    assert stream.getvalue().endswith("] tracing\n")
    set_progress(False)  # --quiet
    stream = stderr(tty=True)
    progress("tracing")
    assert stream.getvalue() == ""


def test_a_stage_counts_and_estimates_the_time_left():
    st = Stage("timing", total=60, unit="steps", started=100.0)
    st.advance(20)
    assert st.status(112.0) == "20/60 steps, 12 s, about 24 s left"
    assert Stage("tracing", unit="op calls", done=7426, started=0.0).status(75.0) == "7,426 op calls, 1 min 15 s"
    assert Stage("loading", started=0.0).status(3.5) == "3 s"


def test_the_status_line_appears_after_the_stage_has_run_a_while(stderr, monkeypatch):
    monkeypatch.setattr(report, "_STATUS_AFTER", 0.2)
    monkeypatch.setattr(report, "_TICK", 0.05)
    stream = stderr(tty=True)
    report._progress.wake.set()  # a thread left from an earlier test restarts with the short tick
    time.sleep(0.1)
    report._progress.wake.clear()
    with stage("tracing a model", unit="op calls") as st:
        st.advance(1234)
        deadline = time.monotonic() + 10
        while "1,234 op calls" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
    text = stream.getvalue()
    assert "] tracing a model\n" in text and "\r\x1b[K  ... 1,234 op calls, " in text
    assert text.endswith("\r\x1b[K")  # the status line is cleared when the stage ends
    set_progress(False)  # a stage is still counted when progress is off
    with stage("not shown", total=3) as st:
        st.advance()
    assert st.done == 1 and "not shown" not in stream.getvalue()


def test_every_long_command_takes_quiet():
    for name in sorted(PROGRESS):
        parser = build_parser([name])
        help_text = parser._subparsers._group_actions[0].choices[name].format_help()
        assert "-q, --quiet" in help_text, name
    assert set(PROGRESS) <= set(COMMANDS)


def _coverage(*extra: str, tty: bool) -> tuple[int, str, str]:
    """`torchfl coverage` of the CNN on the minimal chip; stderr on a pseudo-terminal (tty) or a pipe."""
    argv = [sys.executable, str(SRC / "_torch_fl_cli.py"), "coverage", f"{EXAMPLES / 'cnn.py'}:factory",
            "--device", "minimal", *extra]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    if not tty:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
        return done.returncode, done.stdout, done.stderr
    master, slave = pty.openpty()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=slave, env=env) as proc:
        os.close(slave)
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the other end closed (Linux: EIO)
                break
            if not chunk:
                break
            chunks.append(chunk)
        out = proc.stdout.read().decode()
        proc.wait(timeout=300)
    os.close(master)
    return proc.returncode, out, b"".join(chunks).decode(errors="replace")


@pytest.mark.slow  # three coverage runs in fresh processes
def test_coverage_progress_on_a_terminal_off_when_piped_or_quiet():
    rc, out, err = _coverage(tty=True)
    assert rc == 0 and "Operator coverage of" in out
    assert f"{STAMP}loading " in err and f"{STAMP}tracing a forward pass of " in err, err
    assert "\x1b" not in out and STAMP not in out  # the report itself stays clean
    rc, out, err = _coverage(tty=False)
    assert rc == 0 and "Operator coverage of" in out
    assert err == "", err
    rc, out, err = _coverage("--quiet", tty=True)
    assert rc == 0 and "Operator coverage of" in out
    assert STAMP not in err and "\x1b" not in err, err
