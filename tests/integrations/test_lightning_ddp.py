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

from lightning_tiny import pythonpath

SCRIPT = textwrap.dedent('''
    import json, sys
    import pytorch_lightning as pl
    import torch_fl.integrations.lightning  # noqa: F401
    from lightning_tiny import Tiny

    if __name__ == "__main__":
        pl.seed_everything(0)
        model = Tiny(samples=16)
        trainer = pl.Trainer(accelerator=sys.argv[1], devices=2, strategy="ddp", max_steps=2, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(model)
        # a file per rank: two ranks printing to one pipe once lost a rank's line
        with open(f"rank{trainer.global_rank}-{sys.argv[1]}.json", "w") as f:
            json.dump({"weights": model.layer.weight.detach().cpu().flatten().tolist(), "seen": model.seen}, f)
''')


def _run(tmp_path, accelerator: str, env: dict[str, str]) -> dict[str, dict[str, list]]:
    """Each rank's weights after the DDP run and where its steps ran, by 'rank N'."""
    script = tmp_path / "ddp.py"
    script.write_text(SCRIPT)
    full = {**os.environ, **env, "PYTHONWARNINGS": "ignore", "PYTHONPATH": pythonpath()}
    full.pop("LOCAL_RANK", None)
    done = subprocess.run([sys.executable, str(script), accelerator], cwd=tmp_path, env=full, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return {f"rank {path.stem.split('-', 1)[0].removeprefix('rank')}": json.loads(path.read_text())
            for path in sorted(tmp_path.glob(f"rank*-{accelerator}.json"))}


@pytest.mark.slow
def test_ddp_on_two_emulated_devices_matches_cpu_ddp(tmp_path):
    emu = _run(tmp_path, "torchfl", {"FL_DEVICE": "emu:cuda", "FL_EMU_DEVICES": "2"})
    # both steps of a rank on its own emu:0
    assert emu["rank 1"]["seen"] == [["emu:0", "emu:0", "float32"]] * 2
    cpu = _run(tmp_path, "cpu", {})
    assert set(emu) == {"rank 0", "rank 1"} == set(cpu)
    assert emu["rank 0"]["weights"] == pytest.approx(emu["rank 1"]["weights"])  # all-reduced: the ranks agree
    assert emu["rank 0"]["weights"] == pytest.approx(cpu["rank 0"]["weights"], abs=1e-5)


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
