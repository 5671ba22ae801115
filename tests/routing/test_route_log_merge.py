"""FL_ROUTE_LOG shared by several processes: each one's records are added (lock + read-modify-write),
none is lost; a log from a previous run is replaced."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import torch

import torch_fl
from machine_factor import scaled
from torch_fl.routing import stats


def _gelu_calls(n: int) -> None:
    torch_fl.activate("cpu")
    try:
        for _ in range(n):
            torch.nn.functional.gelu(torch.ones(2))
    finally:
        torch_fl.deactivate()


def test_a_concurrent_writers_log_is_added_to(tmp_path, monkeypatch):
    monkeypatch.setenv("FL_ROUTE", "aten::gelu=translate")
    path = tmp_path / "log.json"
    other = {"device": "cpu", "description": "cpu", "processes": 1, "written": time.time() + 1,
             "records": [{"op": "aten::gelu.default", "dtype": "float32", "route": "translate", "calls": 5,
                          "seconds": 0.5},
                         {"op": "aten::bmm.default", "dtype": "float32", "route": "fallback", "calls": 2,
                          "seconds": 0.1}],
             "transfers": {"h2d_bytes": 8, "syncs": 1}}
    path.write_text(json.dumps(other))
    _gelu_calls(3)
    stats.write_route_log(path, merge=True)
    data = json.loads(path.read_text())
    calls = {(r["op"], r["route"]): r["calls"] for r in data["records"]}
    assert calls[("aten::gelu.default", "translate")] == 8 and calls[("aten::bmm.default", "fallback")] == 2
    assert data["processes"] == 2 and data["transfers"]["h2d_bytes"] == 8 and data["transfers"]["syncs"] == 1


def test_a_previous_runs_log_is_replaced_and_a_foreign_file_too(tmp_path, monkeypatch):
    monkeypatch.setenv("FL_ROUTE", "aten::gelu=translate")
    path = tmp_path / "log.json"
    path.write_text(json.dumps({"records": [{"op": "aten::gelu.default", "dtype": "float32",
                                             "route": "translate", "calls": 99}], "written": 1.0}))
    _gelu_calls(2)
    stats.write_route_log(path, merge=True)
    assert [r["calls"] for r in json.loads(path.read_text())["records"]] == [2]
    path.write_text("{not json")
    stats.write_route_log(path, merge=True)
    assert json.loads(path.read_text())["processes"] == 1


_WORKER = """
import os, sys, time, torch, torch_fl
n, start = int(sys.argv[1]), sys.argv[2]
torch.fl.activate('cpu')
for _ in range(n):
    torch.nn.functional.gelu(torch.ones(2))
open(start + '.' + str(os.getpid()), 'w').close()
while not os.path.exists(start):  # every worker exits at once: the writes at exit overlap
    time.sleep(0.01)
"""


@pytest.mark.slow
def test_processes_sharing_fl_route_log_lose_nothing(tmp_path):
    log, start = tmp_path / "log.json", tmp_path / "go"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    env.update(FL_ROUTE_LOG=str(log), FL_ROUTE="aten::gelu=translate")
    counts = [3, 5, 7, 11]
    workers = [subprocess.Popen([sys.executable, "-c", _WORKER, str(n), str(start)], env=env, cwd=tmp_path,
                                stderr=subprocess.PIPE, text=True) for n in counts]
    # the workers' starts (4 interpreters importing torch) take seconds on a quiet machine; a slow start is
    # not a hang, so the bound scales with the machine (tests/machine_factor.py), below pytest-timeout's 600 s
    bound = min(scaled(60), 500)
    deadline = time.monotonic() + bound
    while len(list(tmp_path.glob("go.*"))) < len(workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    start.write_text("")
    errors = [w.communicate(timeout=bound)[1] for w in workers]
    assert all(w.returncode == 0 for w in workers), errors
    data = json.loads(log.read_text())
    gelu = [r for r in data["records"] if r["op"] == "aten::gelu.default" and r["route"] == "translate"]
    assert data["processes"] == len(counts) and [r["calls"] for r in gelu] == [sum(counts)], data
