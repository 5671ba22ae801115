"""``torch_npu.utils._step`` of the emulated plugin: the step time log and the silent check's configuration, checked
as Ascend/pytorch's test/utils/test_step.py checks them, in our words; and the step log of a training loop on the
emulated npu (a fresh process: the chip's name is fixed per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from torch_fl.routing.emu import npu_step

REPO = Path(__file__).resolve().parents[2]


def test_the_silent_checks_config_is_validated_as_the_vendors():
    with pytest.raises(ValueError, match="with_checksum should be true or false"):
        npu_step._prase_asd_config({"with_checksum": "yes"})
    for name in ("cooldown", "strikes_num", "strikes_window", "checksum_cooldown", "upper_thresh1", "upper_thresh2",
                 "grad_sample_interval"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            npu_step._prase_asd_config({name: "invalid"})
        assert any(f"{name} is invalid" in str(w.message) for w in caught), name
    npu_step._prase_asd_config({"with_checksum": "true", "cooldown": "7", "upper_thresh2": "2"})
    assert npu_step.asd_settings["with_checksum"] is True and npu_step.asd_settings["cooldown"] == 7
    assert npu_step.asd_settings["upper_thresh2"] == 100  # below 3: the default


def test_helpers(tmp_path, monkeypatch):
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    assert npu_step._get_uuid() == "127.0.0.1_8888"
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    assert npu_step._get_uuid() == "10.0.0.1_29500"
    assert npu_step._is_loss_module(torch.nn.CrossEntropyLoss()) and not npu_step._is_loss_module(torch.nn.ReLU())
    assert npu_step._validate_path(str(tmp_path)) and not npu_step._validate_path("relative/dir")
    monkeypatch.delenv("PERF_DUMP_PATH", raising=False)
    with pytest.raises(RuntimeError, match="PERF_DUMP_PATH is empty or invalid"):
        npu_step._get_perf_dump_path()
    old = tmp_path / "perf_pt_1_0.log"
    old.write_text("x")
    other = tmp_path / "perf_pt_1_1.log"
    other.write_text("x")
    npu_step.delete_pref_pt_logs(str(tmp_path), 0)
    assert not old.exists() and other.exists()  # only device 0's
    state = npu_step.PerfDumpState()
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    state.add_module_dict(model)
    assert state.is_child_module(model[0]) and not state.is_child_module(model)


STEPS = r'''
import glob, json, os, torch, torch_npu
model, loss = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).npu(), torch.nn.MSELoss()
for _ in range(4):
    loss(model(torch.ones(2, 4, device="npu")), torch.zeros(2, 4, device="npu")).backward()
logs = glob.glob(os.path.join(os.environ["PERF_DUMP_PATH"], "perf_pt_*_0.log"))
lines = open(logs[0]).read().splitlines()
print(json.dumps({"logs": len(logs), "head": [line.split(":")[0] for line in lines[:3]],
                  "steps": sum(line.startswith("[STEPTIME]:") for line in lines)}))
'''


def test_the_step_log_of_a_training_loop_on_the_emulated_npu(tmp_path):
    env = {**os.environ, "FL_DEVICE": "emu:npu", "PERF_DUMP_CONFIG": "enable:true", "PERF_DUMP_PATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", STEPS], capture_output=True, text=True, timeout=300, env=env,
                          cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    # 4 steps of the top-level model (the loss and the model's children start none): 3 intervals logged
    assert out == {"logs": 1, "head": ["[LOCALUUID]", "[FRAMEWORK]", "[UUID]"], "steps": 3}
