"""HF accelerate's Accelerator() and transformers' Trainer train on torch.fl.device() (emu:cuda here)."""

from __future__ import annotations

import pytest
import torch

accelerate = pytest.importorskip("accelerate")  # dev extras: installed wherever the tests run
transformers = pytest.importorskip("transformers")

import torch_fl  # noqa: E402
from torch_fl.integrations.huggingface import ENV, use_fl_device  # noqa: E402

pytestmark = pytest.mark.slow  # transformers' import and a Trainer run take several seconds


@pytest.fixture
def fresh_state(monkeypatch):
    """accelerate keeps one device per process (PartialState's shared state): start and end without it."""
    from accelerate.state import AcceleratorState

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv(ENV, raising=False)  # restored at teardown, whatever use_fl_device set
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


@pytest.fixture
def emu_cuda(monkeypatch, fresh_state):
    monkeypatch.setenv("FL_DEVICE", "emu:cuda")
    torch_fl.reset()
    return torch.fl.device()


def _data(n: int = 8):
    g = torch.Generator().manual_seed(0)
    return torch.utils.data.TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, 2, generator=g))


def _picks_torch_accelerator() -> bool:
    """accelerate >= 1.16 asks torch.accelerator for the device (before: its own list of vendors)."""
    from packaging.version import Version

    return Version(accelerate.__version__) >= Version("1.16")


def test_without_the_helper_accelerate_picks_what_its_version_picks(emu_cuda):
    # The reason the helper exists: before 1.16, accelerate's own order never reaches an emulated chip
    # (it trained on the CPU in silence). From 1.16 it takes torch.accelerator's current accelerator, the
    # emulated device, and then calls torch.accelerator.empty_cache() on it (PyTorch's INTERNAL ASSERT
    # 'Allocator for emu is not a DeviceAllocator' until the emulator answered torch.accelerator's memory API).
    acc = accelerate.Accelerator()
    assert acc.device.type == (emu_cuda.type if _picks_torch_accelerator() else "cpu")  # (1.16: 'emu', no index)
    torch.accelerator.empty_cache()
    x = torch.ones(256, device=emu_cuda)
    assert torch.accelerator.memory_allocated() >= x.nbytes == 1024


@pytest.mark.parametrize("mixed_precision", ["no", "bf16"])
def test_accelerator_trains_two_steps_on_the_device(emu_cuda, mixed_precision):
    assert use_fl_device() == emu_cuda == torch.device("emu:0")
    acc = accelerate.Accelerator(mixed_precision=mixed_precision)
    assert acc.device == emu_cuda
    model = torch.nn.Sequential(torch.nn.Linear(4, 2))
    inner: list[str] = []  # accelerate returns float32 from forward: the dtype inside is what autocast did
    model[0].register_forward_hook(lambda m, i, o: inner.append(str(o.dtype).removeprefix("torch.")))
    before = model[0].weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt, loader = acc.prepare(model, opt, torch.utils.data.DataLoader(_data(), batch_size=4))
    seen = []
    for x, y in loader:
        out = model(x)
        seen.append((str(x.device), str(model[0].weight.device), inner[-1]))
        acc.backward(torch.nn.functional.mse_loss(out.float(), y))
        opt.step()
        opt.zero_grad()
    dtype = "bfloat16" if mixed_precision == "bf16" else "float32"
    assert seen == [("emu:0", "emu:0", dtype)] * 2
    assert not torch.equal(model[0].weight.detach().cpu(), before)  # two steps really updated the weights


def test_trainer_trains_two_steps_on_the_device(emu_cuda, tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    use_fl_device()
    config = GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=32, bos_token_id=0,
                        eos_token_id=0)
    model = GPT2LMHeadModel(config)  # random weights: nothing from the hub

    class Tokens(torch.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids}

    devices: list[str] = []

    class Where(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            devices.append(str(next(model.parameters()).device))

    args = TrainingArguments(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2,
                             report_to=[], save_strategy="no", logging_strategy="no",
                             dataloader_pin_memory=False, disable_tqdm=True)
    assert args.device == emu_cuda
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[Where()])
    result = trainer.train()
    assert result.global_step == 2 and devices == ["emu:0", "emu:0"]
    assert torch.isfinite(torch.tensor(result.training_loss))


def test_too_late_is_refused_with_the_fix(emu_cuda):
    from accelerate.state import PartialState

    chosen = PartialState().device  # created before the helper: the CPU, or emu:0 from accelerate 1.16
    wanted = "cpu" if chosen.type != "cpu" else "emu:0"
    with pytest.raises(RuntimeError, match=rf"already chose {chosen}.*before any of them.*"
                                           rf"ACCELERATE_TORCH_DEVICE={wanted}"):
        use_fl_device(wanted)
