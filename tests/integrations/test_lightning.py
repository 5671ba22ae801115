"""PyTorch Lightning trains on torch.fl.device() through Trainer(accelerator="torchfl") (emu:cuda here)."""

from __future__ import annotations

import pytest
import torch

pl = pytest.importorskip("pytorch_lightning")  # a dev extra: installed wherever the tests run

from lightning_tiny import Tiny, pythonpath  # noqa: E402  (this folder's)

import torch_fl  # noqa: E402
from torch_fl.integrations import lightning as fl_pl  # noqa: E402

pytestmark = [pytest.mark.slow,  # each Trainer run is a few seconds on the 2-core machine
              pytest.mark.filterwarnings("ignore:.*LeafSpec.*is deprecated")]  # Lightning's own


def _fit(accelerator, **kwargs) -> tuple[Tiny, pl.Trainer]:
    model = Tiny()
    trainer = pl.Trainer(accelerator=accelerator, max_steps=2, logger=kwargs.pop("logger", False),
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         **kwargs)
    trainer.fit(model)
    return model, trainer


@pytest.fixture
def emu_cuda(monkeypatch):
    monkeypatch.setenv("FL_DEVICE", "emu:cuda")
    torch_fl.reset()
    names = fl_pl.register()
    yield torch.fl.device()
    # The per-device names belong to this FL_DEVICE: leave the registry as the import left it.
    for name in names:
        if name != fl_pl.NAME:
            pl.accelerators.AcceleratorRegistry.remove(name)


def test_trainer_by_name_trains_on_the_emulated_chip(emu_cuda):
    assert emu_cuda == torch.device("emu:0")
    assert "torchfl" in pl.accelerators.AcceleratorRegistry.available_accelerators()
    model, trainer = _fit("torchfl")
    assert model.seen == [("emu:0", "emu:0", "float32")] * 2
    assert trainer.strategy.root_device == emu_cuda
    assert isinstance(trainer.accelerator, fl_pl.TorchFLAccelerator)


def test_str_of_the_device_is_an_accelerator_name(emu_cuda):
    model, _ = _fit(str(emu_cuda))  # "emu:0"
    assert {s[0] for s in model.seen} == {"emu:0"}


def test_unknown_name_lists_torchfl():
    with pytest.raises(Exception, match=r"invalid accelerator name.*torchfl"):
        pl.Trainer(accelerator="emu:7")


@pytest.mark.filterwarnings("ignore:torch.cuda.amp.GradScaler is enabled")  # Lightning's placeholder scaler
@pytest.mark.parametrize(("precision", "dtype"), [("16-mixed", "float16"), ("bf16-mixed", "bfloat16")])
def test_mixed_precision_autocasts_on_the_device(emu_cuda, precision, dtype):
    model, trainer = _fit("torchfl", precision=precision)
    assert model.seen == [("emu:0", "emu:0", dtype)] * 2
    plugin = trainer.strategy.precision_plugin
    assert plugin.device == "emu"
    if precision == "16-mixed":
        # Lightning built a CUDA scaler (disabled on this host); the accelerator's is the device's, enabled.
        assert plugin.scaler is not None and plugin.scaler.is_enabled() and plugin.scaler._device == "emu"


def test_device_stats_monitor_logs_torch_fl_counters(emu_cuda, tmp_path):
    from pytorch_lightning.callbacks import DeviceStatsMonitor
    from pytorch_lightning.loggers import CSVLogger

    logger = CSVLogger(tmp_path)
    _fit("torchfl", callbacks=[DeviceStatsMonitor(cpu_stats=False)], logger=logger, log_every_n_steps=1)
    header = next((tmp_path / "lightning_logs").rglob("metrics.csv")).read_text().splitlines()[0]
    assert "DeviceStatsMonitor.on_train_batch_start/memory_allocated" in header
    assert "DeviceStatsMonitor.on_train_batch_end/max_memory_allocated" in header
    stats = fl_pl.device_stats(emu_cuda)
    assert stats["max_memory_allocated"] >= stats["memory_allocated"] >= 0


def test_seed_everything_and_isolate_rng(emu_cuda):
    from pytorch_lightning import seed_everything
    from pytorch_lightning.utilities.seed import isolate_rng

    def weights() -> torch.Tensor:
        seed_everything(7, verbose=False)
        model, _ = _fit("torchfl")
        return model.layer.weight.detach().cpu()

    assert torch.equal(weights(), weights())
    # isolate_rng saves and restores the host generator (and CUDA's where CUDA is available) around
    # a block that also draws on the emulated chip.
    torch.manual_seed(3)
    first = torch.rand(3)
    torch.manual_seed(3)
    with isolate_rng():
        torch.rand(5, device=emu_cuda)
        torch.rand(5)
    assert torch.equal(torch.rand(3), first)


def test_devices_beyond_the_machine_are_refused(emu_cuda):
    with pytest.raises(ValueError, match=r"devices=\[3\].*1 torch-fl device.*FL_EMU_DEVICES"):
        pl.Trainer(accelerator="torchfl", devices=[3])


def test_an_instance_names_its_own_device(emu_cuda):
    model, trainer = _fit(fl_pl.TorchFLAccelerator("cpu"))
    assert {s[0] for s in model.seen} == {"cpu"} and trainer.strategy.root_device == torch.device("cpu")


ALIAS_SCRIPT = '''
import os, torch, torch_fl
import pytorch_lightning as pl
from pytorch_lightning import seed_everything
from pytorch_lightning.utilities.seed import isolate_rng
import torch_fl.integrations.lightning  # noqa: F401  registers "torchfl" and the device's own names
from lightning_tiny import Tiny

seed_everything(1, verbose=False)
with isolate_rng():  # saves torch.cuda's generators: the alias's, i.e. the emulated chip's
    torch.rand(3, device="cuda" if torch.cuda.is_available() else torch.fl.device())
for accelerator in os.environ["ACCELERATORS"].split(","):
    model = Tiny()
    pl.Trainer(accelerator=accelerator, max_steps=2, logger=False, enable_checkpointing=False,
               enable_progress_bar=False, enable_model_summary=False).fit(model)
    for batch_on, weights_on, _ in model.seen:
        print("step on", batch_on, weights_on)
    print("done", accelerator, torch.fl.device())
'''


@pytest.mark.parametrize(("env", "accelerators", "device"), [
    # "auto" -> Lightning's cuda -> the alias; then torch-fl's own accelerator in the same process
    ({"FL_DEVICE": "emu:cuda", "FL_CUDA_ALIAS": "1"}, ["auto", "torchfl"], "emu:0"),
    ({"FL_DEVICE": "emu:npu"}, ["npu"], "npu:0"),  # an emulated PrivateUse1 chip under its own name
])
def test_fresh_process(env, accelerators, device, tmp_path):
    import os
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(ALIAS_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env={**os.environ, **env, "ACCELERATORS": ",".join(accelerators),
                                             "PYTHONPATH": pythonpath()},
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count(f"step on {device} {device}") == 2 * len(accelerators), done.stdout
    assert all(f"done {name} {device}" in done.stdout for name in accelerators), done.stdout
