"""Multi-process tests: real ranks (subprocesses, gloo on the CPU, env:// like torchrun) with a hard
timeout on every launch, so that a hang fails the test instead of stalling the suite. The timeout is the
launch's time on a quiet machine scaled by the machine factor (tests/machine_factor.py): a loaded machine
stretches interpreter starts and imports, and a slow launch is not a hang (issue 43)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist

from machine_factor import scaled

WORKERS = Path(__file__).with_name("workers.py")
HANG_CEILING = 500.0  # a scaled launch timeout stays below pytest-timeout's 600 s, which would print less


@dataclass
class Rank:
    rank: int
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def result(self) -> dict:
        lines = [line for line in self.stdout.splitlines() if line.startswith("RESULT=")]
        assert lines, f"rank {self.rank} printed no result (rc {self.returncode}):\n{self.stdout}\n{self.stderr}"
        return json.loads(lines[-1].removeprefix("RESULT="))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch(scenario: str, *args: str, nproc: int = 2, timeout: float = 60,
           env: dict[str, str] | None = None, rank_env: dict[int, dict[str, str]] | None = None,
           wait_for: set[int] | None = None, script: Path = WORKERS) -> list[Rank]:
    """Start `nproc` ranks of `script` (workers.py) SCENARIO and wait at most `timeout` seconds (on a quiet
    machine: scaled here) for the ranks in `wait_for` (default all); every rank still running after that is
    killed. A rank in `wait_for` that is still running at the deadline fails the test."""
    quiet, timeout = timeout, min(scaled(timeout), HANG_CEILING)
    port = _free_port()
    procs = []
    began = time.monotonic()
    for rank in range(nproc):
        rank_vars = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc),
                     "LOCAL_WORLD_SIZE": str(nproc), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                     "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        child_env = {**os.environ, **(env or {}), **rank_vars, **(rank_env or {}).get(rank, {})}
        procs.append(subprocess.Popen([sys.executable, str(script), scenario, *args], env=child_env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    waited = set(range(nproc)) if wait_for is None else wait_for
    results: dict[int, Rank] = {}
    hung = []
    for rank in sorted(waited):
        try:
            out, err = procs[rank].communicate(timeout=max(0.1, timeout - (time.monotonic() - began)))
        except subprocess.TimeoutExpired:
            hung.append(rank)
            continue
        results[rank] = Rank(rank, procs[rank].returncode, out, err, time.monotonic() - began)
    for rank, proc in enumerate(procs):
        if proc.poll() is None:
            proc.kill()
        out, err = proc.communicate()
        results.setdefault(rank, Rank(rank, proc.returncode, out, err, time.monotonic() - began))
    if hung:
        details = "\n".join(f"--- rank {r}\n{results[r].stdout}\n{results[r].stderr}" for r in hung)
        pytest.fail(f"rank(s) {', '.join(map(str, hung))} still running after {timeout:.0f} s ({quiet:g} s on a quiet "
                    f"machine, scaled by tests/machine_factor.py): a hang\n{details}")
    return [results[r] for r in range(nproc)]


@pytest.fixture
def tcp_init_method() -> Callable[[], str]:
    """tcp_init_method() -> "tcp://127.0.0.1:PORT" on a port free now: a one-rank group in this process."""
    return lambda: f"tcp://127.0.0.1:{_free_port()}"


@contextmanager
def _torch_group(seconds: float) -> Iterator[None]:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1,
                            timeout=timedelta(seconds=seconds))
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.fixture
def torch_group() -> Callable[[float], AbstractContextManager[None]]:
    """`with torch_group(SECONDS):` a one-rank gloo group that plain torch.distributed created (no torch-fl
    init_process_group), with that timeout; destroyed at the end of the block."""
    return _torch_group


@pytest.fixture
def launch():
    """The launcher: launch(SCENARIO, *ARGS, nproc=2, timeout=60, env=..., rank_env={1: {...}})."""
    return _launch
