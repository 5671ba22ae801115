"""The emulated chip as a device of its own (emu:N, PyTorch's PrivateUse1 slot as a Python backend):
device work is checked against the description, host work is never touched, forgotten .to(device)
calls fail as on a real accelerator."""

from __future__ import annotations

import copy
import gc
import io
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import torch_fl
from chip_process import run_python  # tests/chip_process.py
from torch_fl.routing import emu

ROOT = Path(__file__).parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
sys.path[:0] = [str(ROOT / "examples"), str(FIXTURES)]
import cnn  # noqa: E402
import gpt  # noqa: E402
import hf_style  # noqa: E402
import unusual  # noqa: E402

CHIPS = ["emu:minimal", "emu:mps", "emu:cuda"]


def _train(factory, device, steps=2):
    model, inputs, loss_fn = factory()
    model = model.to(device)
    inputs = tuple(t.to(device) for t in inputs)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(*inputs), *inputs)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("factory", [
    lambda: gpt.factory(batch=2, context=16), lambda: cnn.factory(batch=2, size=16), unusual.factory,
], ids=["gpt", "cnn", "unusual"])
def test_examples_train_like_plain_cpu(monkeypatch, request, chip, factory):
    if chip == "emu:minimal" and "unusual" in request.node.name:
        pytest.skip("minimal has no complex dtype: test_unusual_needs_complex_on_minimal")
    reference = _train(factory, "cpu")
    monkeypatch.setenv("FL_DEVICE", chip)
    torch_fl.reset()
    torch_fl.reset_route_stats()
    device = torch_fl.device()
    assert device.type == "emu"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch_fl.errors.FallbackWarning)
        emulated = _train(factory, device)       # the factory samples its inputs on the host, under emulation
    torch.testing.assert_close(emulated, reference, rtol=1e-4, atol=1e-5)
    ops = {r["op"] for r in torch_fl.route_stats()}
    assert not {op for op in ops if op.startswith(("aten::randn", "aten::randint", "aten::normal"))}


def test_unusual_needs_complex_on_minimal(monkeypatch):
    # rfft(...).abs() makes complex64 on the device: minimal's precision.dtypes has none, as on that chip
    monkeypatch.setenv("FL_DEVICE", "emu:minimal")
    torch_fl.reset()
    with pytest.raises(torch_fl.errors.UnsupportedOperatorError, match="complex64"):
        _train(unusual.factory, torch_fl.device())


@pytest.mark.parametrize("chip", CHIPS)
def test_hf_style_host_sampling_is_never_checked(monkeypatch, chip):
    reference = hf_style.train("cpu")
    monkeypatch.setenv("FL_DEVICE", chip)
    torch_fl.reset()
    torch_fl.reset_route_stats()
    emulated = hf_style.train(torch_fl.device())
    torch.testing.assert_close(emulated, reference, rtol=1e-4, atol=1e-5)
    ops = {r["op"] for r in torch_fl.route_stats()}
    # the host's sampling and collate (randint with a CPU generator, randn, stack of int64) are absent
    assert not ops & {"aten::randint.low_generator", "aten::randn.generator", "aten::stack.default"}
    transfers = torch_fl.route_stats()["transfers"]
    assert transfers["h2d_calls"] >= 3 * 3 and transfers["syncs"] >= 3  # 3 batches of 3, loss.item()


@pytest.mark.slow
@pytest.mark.parametrize(("fl_device", "fails"), [("cpu", False), ("emu:cuda", True)])
def test_forgotten_to_device_fails_only_on_the_chip(fl_device, fails):
    env = {**os.environ, "FL_DEVICE": fl_device}
    env.pop("FL_ROUTE", None)
    run = subprocess.run([sys.executable, str(FIXTURES / "forgot_to.py")], env=env, capture_output=True,
                         text=True, timeout=300)
    if not fails:
        assert run.returncode == 0 and "ok" in run.stdout, run.stderr
        return
    assert run.returncode != 0
    assert "RuntimeError: Expected all tensors to be on the same device" in run.stderr
    assert "emu:0 and cpu" in run.stderr


def test_zero_dim_host_scalars_mix_like_on_a_real_accelerator():
    with torch_fl.emulate("cuda") as activation:
        x = torch.ones(3, device=activation.device)
        y = x * torch.tensor(2.0) + torch.tensor(1)
        assert y.device == activation.device and y.cpu().tolist() == [3.0, 3.0, 3.0]
        with pytest.raises(RuntimeError, match=r"same device.*emu:0 and cpu"):
            x + torch.ones(3)


def test_two_emulated_devices_in_one_process(monkeypatch):
    monkeypatch.setenv("FL_DEVICE", "emu:cuda")
    monkeypatch.setenv("FL_EMU_DEVICES", "2")
    torch_fl.reset()
    assert torch_fl.devices() == [torch.device("emu", 0), torch.device("emu", 1)]
    assert torch.emu.device_count() == 2
    a = torch.arange(4.0, device=torch_fl.device("acc0"))
    b = torch.arange(4.0, device=torch_fl.device("acc1"))
    assert (a.device, b.device) == (torch.device("emu", 0), torch.device("emu", 1))
    with pytest.raises(RuntimeError, match="emu:0 and emu:1"):
        a + b
    moved = b.to("emu:0")
    assert moved.device == torch.device("emu", 0) and (a + moved).cpu().tolist() == [0.0, 2.0, 4.0, 6.0]
    lin = torch.nn.Linear(4, 2).to("emu:1")
    assert lin(b).device == torch.device("emu", 1)
    with pytest.raises(RuntimeError, match="does not exist"):
        torch.zeros(1, device="emu:2")


def test_module_views_inplace_parameters():
    with torch_fl.emulate("cuda") as activation:
        d = activation.device
        x = torch.zeros(4, 4, device=d)
        row = x[1]
        row.add_(3)                          # in place through a view writes the base
        assert x.sum().item() == 12.0
        x.t_()
        assert x[:, 1].cpu().tolist() == [3.0] * 4
        p = torch.nn.Parameter(torch.ones(2, device=d))
        assert isinstance(p, torch.nn.Parameter) and p.device == d and p.requires_grad
        same = x.add_(1)
        assert same is x


@pytest.mark.parametrize("options", [{"foreach": False}, {"foreach": True}, {"fused": True}],
                         ids=["single", "foreach", "fused"])
def test_optimizers_step_like_plain_cpu(options):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 1))
    x = torch.randn(16, 8)
    twin = copy.deepcopy(model)

    def run(model, x):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, **options)
        sgd = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
        for step in range(3):
            for o in (opt, sgd):
                o.zero_grad()
            model(x).pow(2).mean().backward()
            (opt if step % 2 else sgd).step()
        return [p.detach().cpu() for p in model.parameters()]

    expected = run(model, x)
    with torch_fl.emulate("cuda") as activation:
        got = run(twin.to(activation.device), x.to(activation.device))
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


def test_save_and_load_with_map_location():
    with torch_fl.emulate("cuda") as activation:
        d = activation.device
        model = torch.nn.Linear(3, 2).to(d)
        buffer = io.BytesIO()
        torch.save(model.state_dict(), buffer)
        buffer.seek(0)
        state = torch.load(buffer)                              # weights-only, back on the device
        assert {v.device for v in state.values()} == {d}
        buffer.seek(0)
        on_host = torch.load(buffer, map_location="cpu")
        assert {type(v) for v in on_host.values()} == {torch.Tensor}
        torch.testing.assert_close(on_host["weight"], model.weight.detach().cpu())
        host_file = io.BytesIO()
        torch.save({"w": torch.arange(3.0)}, host_file)
        host_file.seek(0)
        mapped = torch.load(host_file, map_location="emu")
        assert mapped["w"].device == d and mapped["w"].cpu().tolist() == [0.0, 1.0, 2.0]
        model.load_state_dict(state)
        whole = io.BytesIO()
        torch.save(model, whole)                                 # the module, Parameters and all
        whole.seek(0)
        again = torch.load(whole, weights_only=False)
        assert isinstance(again.weight, torch.nn.Parameter) and again.weight.device == d


def test_generator_on_the_device_reproduces():
    with torch_fl.emulate("cuda") as activation:
        d = activation.device
        g = torch.Generator(device=d)
        assert g.device == d and isinstance(g, torch.Generator)
        first = torch.randn(5, device=d, generator=g.manual_seed(3))
        again = torch.randn(5, device=d, generator=g.manual_seed(3))
        assert torch.equal(first.cpu(), again.cpu())
        assert isinstance(torch.default_generator, torch.Generator)
        assert torch.Generator().device == torch.device("cpu")


def test_autocast_takes_the_chips_dtype():
    with torch_fl.emulate("minimal") as activation:
        d = activation.device
        a = torch.randn(4, 4, device=d)
        with torch.autocast(d.type):
            product = a @ a
            normed = torch.nn.functional.layer_norm(product, (4,))
        assert product.dtype == torch.float16        # minimal's autocast_dtype; CPU autocast gives bf16
        assert normed.dtype == torch.float32          # the float32 list, as on CUDA


def test_transfers_syncs_and_memory_are_counted():
    torch_fl.reset_route_stats()
    with torch_fl.emulate("cuda") as activation:
        d = activation.device
        before = emu.memory_allocated(d.index)
        x = torch.ones(256, device=d)                # made on the device: no transfer
        host = torch.ones(128).to(d)                 # 512 bytes to the device
        assert emu.memory_allocated(d.index) - before == 256 * 4 + 128 * 4
        x.sum().item()
        x.cpu()
        x.tolist()
        repr(x)
        del x, host
        assert emu.memory_allocated(d.index) == before
    transfers = torch_fl.route_stats()["transfers"]
    assert transfers["h2d_bytes"] == 512 and transfers["h2d_calls"] == 1
    assert transfers["d2h_calls"] == 2 and transfers["d2h_bytes"] == 2 * 256 * 4   # .cpu(), .tolist()
    assert transfers["syncs"] == 4
    assert torch_fl.routing.route_log()["transfers"] == transfers


def test_host_tensors_are_never_routed():
    torch_fl.reset_route_stats()
    with torch_fl.emulate("minimal"):
        torch.randn(4, 4, dtype=torch.float64).sum()
        torch.stack([torch.arange(3), torch.arange(3)])
        torch.randint(0, 5, (3,), generator=torch.Generator().manual_seed(0))
    assert list(torch_fl.route_stats()) == []
    assert torch_fl.route_stats()["transfers"]["h2d_calls"] == 0


@pytest.mark.slow
def test_vendor_owned_privateuse1_tests_run_without_the_emulated_device():
    # tests/test_runtime.py plays a vendor plugin on PrivateUse1; this session's emulated device owns the
    # slot, so those tests run in a process that never borrows it.
    env = {**os.environ, "TORCH_FL_TEST_NO_EMU": "1"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(ROOT / "tests" / "test_runtime.py")],
                         env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-3000:]
    assert "skipped" not in run.stdout.splitlines()[-1], run.stdout[-500:]


def test_doctor_says_which_emulator_is_active(monkeypatch):
    from torch_fl.analysis.doctor import collect, render_doctor_text

    monkeypatch.setenv("FL_DEVICE", "emu:minimal")
    torch_fl.reset()
    data = collect()
    assert data["device"]["resolved"] == "emu:0"
    emulation = data["emulation"]
    assert emulation["emulator"] == "device" and emulation["borrowed"] and emulation["privateuse1"] == "emu"
    assert "PrivateUse1 slot is borrowed as 'emu'" in render_doctor_text(data, [], [])


def test_dataloader_pin_memory_with_the_emulated_device():
    # minGPT's Trainer: DataLoader(pin_memory=True). With PrivateUse1 the current accelerator, PyTorch
    # pins for it, which needs an allocator a Python backend cannot register; host memory stands in.
    data = torch.utils.data.TensorDataset(torch.arange(8.0).reshape(4, 2))
    with torch_fl.emulate("cuda") as activation:
        batches = list(torch.utils.data.DataLoader(data, batch_size=2, pin_memory=True))
        assert [b[0].to(activation.device, non_blocking=True).device for b in batches] == [activation.device] * 2
        assert all(b[0].is_pinned() for b in batches)  # (pinned as on the chip: recorded, storage.py)
    assert torch.ones(2).pin_memory().is_pinned() is True
    assert torch.ones(2).is_pinned() is False


def test_runtime_facade_reports_the_emulated_devices_tensors(monkeypatch):
    # the leak watch under emulation: torch.fl.memory_allocated() is the device's live tensor bytes,
    # not the process's resident set (minimal's memory.allocator is "host")
    monkeypatch.setenv("FL_DEVICE", "emu:minimal")
    torch_fl.reset()
    d = torch_fl.device()
    gc.collect()  # device tensors of earlier tests, freed now rather than in the middle of this one
    gc.disable()
    try:
        base = torch.fl.memory_allocated()
        torch.fl.reset_peak_memory_stats()
        x = torch.ones(1024, device=d)
        assert torch.fl.memory_allocated() - base == 4096
        del x
        assert torch.fl.memory_allocated() == base and torch.fl.max_memory_allocated() - base == 4096
        torch.fl.reset_peak_memory_stats()
        assert torch.fl.max_memory_allocated() == base
    finally:
        gc.enable()
    torch.fl.empty_cache()
    assert torch.fl.device_count() == 1 and torch.fl.is_available()


@pytest.mark.parametrize(("before", "why"), [
    ("torch.utils.rename_privateuse1_backend('fakenpu')", "belongs to 'fakenpu' (a vendor plugin)"),
], ids=["vendor-owns-privateuse1"])
@pytest.mark.slow
def test_dispatch_mode_emulator_when_the_device_cannot_exist(before, why):
    script = (f"import torch\n{before}\nimport torch_fl\n"
              "from torch_fl.analysis.doctor import collect\n"
              "dev = torch_fl.device('emu:minimal')\n"
              "print('DEVICE', dev, torch_fl.routing.active().emulated)\n"
              "try:\n    torch.randn(2, dtype=torch.float64) * 2\nexcept Exception as e:\n"
              "    print('CHECKED', type(e).__name__)\n"
              "print('DOCTOR', collect('emu:minimal')['emulation']['emulator'])\n")
    run = run_python(script)  # no FL_DEVICE: the script names the device
    assert "DEVICE cpu True" in run.stdout            # the CPU under the dispatch mode
    assert "CHECKED UnsupportedOperatorError" in run.stdout  # every CPU op of the block is checked
    assert "DOCTOR dispatch mode" in run.stdout
    assert why in run.stderr                          # logged once, with the reason


@pytest.mark.slow
def test_the_device_exists_when_a_backward_ran_first():
    # PyTorch's engine fixes its device queues at the first backward of the process; the emulated devices'
    # backward runs on the calling thread (routing/emu/engine.py), which needs none of them
    script = ("import torch\nx = torch.ones(1, requires_grad=True); (x * 2).sum().backward()\n"
              "import torch_fl\ndev = torch_fl.device('emu:minimal')\n"
              "w = torch.ones(3, device=dev, requires_grad=True); (w * w).sum().backward()\n"
              "print('DEVICE', dev, w.grad.device, w.grad.cpu().tolist())\n")
    run = run_python(script)  # no FL_DEVICE: the script names the device
    assert "DEVICE emu:0 emu:0 [2.0, 2.0, 2.0]" in run.stdout


@pytest.mark.parametrize("chip", CHIPS)
def test_transformers_gpt2_with_host_sampling(monkeypatch, chip):
    # The report: a Hugging Face GPT-2 script stopped at aten::randint.low_generator on
    # emu:minimal. Runs where transformers is installed (a test-only dependency; not in the venv by default:
    # pip install --target DIR transformers, then PYTHONPATH=DIR).
    transformers = pytest.importorskip("transformers")

    def run(device):
        torch.manual_seed(0)
        # no dropout: the emulated device draws from its own generator, as a chip does (a CPU run's masks differ)
        config = transformers.GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = transformers.GPT2LMHeadModel(config).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        generator = torch.Generator().manual_seed(0)
        losses = []
        for _ in range(2):
            ids = torch.randint(0, 128, (4, 32), generator=generator)           # host sampling
            batch = {"input_ids": ids, "attention_mask": torch.stack([torch.ones(32, dtype=torch.long)] * 4),
                     "labels": ids.clone()}                                     # host collate
            out = model(**{k: v.to(device) for k, v in batch.items()})
            opt.zero_grad()
            out.loss.backward()
            opt.step()
            losses.append(out.loss.item())
        return losses

    reference = run("cpu")
    monkeypatch.setenv("FL_DEVICE", chip)
    torch_fl.reset()
    torch_fl.reset_route_stats()
    torch.testing.assert_close(run(torch_fl.device()), reference, rtol=1e-4, atol=1e-5)
    assert not any("randint" in r["op"] or "stack" in r["op"] for r in torch_fl.route_stats())


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_torch_compile_traces_through_the_emulated_device(backend):
    # Inductor has no code generator for a Python backend; the tracing backends work.
    torch._dynamo.reset()
    with torch_fl.emulate("cuda") as activation:
        model = torch.nn.Linear(4, 2).to(activation.device)
        x = torch.randn(3, 4, device=activation.device)
        out = torch.compile(model, backend=backend)(x)
        out.sum().backward()
        assert out.device == activation.device and model.weight.grad.device == activation.device
        torch.testing.assert_close(out.cpu(), model(x).cpu())


def test_like_and_new_factories_asked_for_the_host_make_host_tensors(d):
    # torch_mlu's test/storage/test_storage.py test_new_with_file2: torch.empty_like(device_tensor, device="cpu")
    # is a host tensor (it then takes a host storage with set_), as on every PyTorch device
    x = torch.tensor([1.0, 2.0], device=d)
    for made in (torch.empty_like(x, device="cpu"), torch.zeros_like(x, device="cpu"),
                 x.new_zeros(3, device="cpu"), x.new_empty((2,), device=torch.device("cpu"))):
        assert type(made) is torch.Tensor and made.device.type == "cpu"
    host = torch.empty_like(x, device="cpu")
    host.set_(torch.UntypedStorage(8), 0, (2,), (1,))
    assert host.device.type == "cpu" and host.shape == (2,)
    for made in (torch.ones_like(x), x.new_ones(2), torch.zeros_like(x, device=d)):
        assert made.device == d
