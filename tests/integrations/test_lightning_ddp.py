"""Lightning DDP over two emulated devices: two processes, each on its own emu:0, gradients all-reduced
through the emu c10d backend (registered when the emulator activates), weights equal to a CPU DDP run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("pytorch_lightning")

SCRIPT = textwrap.dedent('''
    import json, sys, torch, torch.nn as nn
    import pytorch_lightning as pl
    import torch_fl.integrations.lightning  # noqa: F401

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(4, 2)
        def training_step(self, batch, i):
            x, y = batch
            print(f"rank {self.global_rank} batch on {x.device} weights on {self.layer.weight.device}", flush=True)
            return nn.functional.mse_loss(self.layer(x), y)
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)
        def train_dataloader(self):
            g = torch.Generator().manual_seed(0)
            data = torch.utils.data.TensorDataset(torch.randn(16, 4, generator=g), torch.randn(16, 2, generator=g))
            return torch.utils.data.DataLoader(data, batch_size=4)

    if __name__ == "__main__":
        pl.seed_everything(0)
        model = Tiny()
        trainer = pl.Trainer(accelerator=sys.argv[1], devices=2, strategy="ddp", max_steps=2, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(model)
        # a file per rank: two ranks printing to one pipe once lost a rank's line
        weights = model.layer.weight.detach().cpu().flatten().tolist()
        with open(f"weights-{sys.argv[1]}-rank{trainer.global_rank}.json", "w") as f:
            json.dump(weights, f)
''')


def _run(tmp_path, accelerator: str, env: dict[str, str]) -> tuple[dict[str, list[float]], str]:
    script = tmp_path / "ddp.py"
    script.write_text(SCRIPT)
    full = {**os.environ, **env, "PYTHONWARNINGS": "ignore"}
    full.pop("LOCAL_RANK", None)
    done = subprocess.run([sys.executable, str(script), accelerator], cwd=tmp_path, env=full, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return {f"rank {path.stem.rsplit('rank', 1)[1]}": json.loads(path.read_text())
            for path in sorted(tmp_path.glob(f"weights-{accelerator}-rank*.json"))}, done.stdout


@pytest.mark.slow
def test_ddp_on_two_emulated_devices_matches_cpu_ddp(tmp_path):
    emu, out = _run(tmp_path, "torchfl", {"FL_DEVICE": "emu:cuda", "FL_EMU_DEVICES": "2"})
    assert "rank 1 batch on emu:0 weights on emu:0" in out
    cpu, _ = _run(tmp_path, "cpu", {})
    assert set(emu) == {"rank 0", "rank 1"} == set(cpu)
    assert emu["rank 0"] == pytest.approx(emu["rank 1"])  # all-reduced: the ranks agree
    assert emu["rank 0"] == pytest.approx(cpu["rank 0"], abs=1e-5)


PLAIN = textwrap.dedent('''
    import os, socket, torch, torch.distributed as dist, torch_fl
    torch.fl.device()  # activates the emulator, which registers the emu c10d backend
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # plain torch.distributed, naming the device only (as Lightning's DDP does)
    dist.init_process_group(rank=0, world_size=1, device_id=torch.device("emu:0"))
    on_device, on_host = torch.arange(3.0, device="emu:0"), torch.arange(3.0)
    dist.all_reduce(on_device)
    dist.all_reduce(on_host)
    print(dist.get_backend(), on_device.device, on_device.cpu().tolist(), on_host.tolist())
    dist.destroy_process_group()
''')


def test_plain_init_process_group_by_emulated_device():
    env = {**os.environ, "FL_DEVICE": "emu:cuda", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-c", PLAIN], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["emu", "emu:0", "[0.0,", "1.0,", "2.0]", "[0.0,", "1.0,", "2.0]"]
