"""Streams, events and non-blocking copies of emulated chips (routing/emu/streams.py): objects of their own
with an order, deferred host results on async chips, pinned host memory; on emu:cuda, emu:npu and emu:mlu."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_fl
from stream_fixtures import chip_fixture  # noqa: F401 (a fixture)


def test_current_stream_is_the_default_stream_outside_a_context(chip):
    mod, d = chip
    assert mod.current_stream() == mod.default_stream() and mod.current_stream() is mod.default_stream()
    assert mod.current_stream().stream_id == 0 and mod.current_stream().device == d
    s = mod.Stream()
    with mod.stream(s):
        assert mod.current_stream() is s
        with mod.stream(None):  # (None: no change, as torch.cuda.stream(None))
            assert mod.current_stream() is s
    assert mod.current_stream() is mod.default_stream()
    with s:  # a stream is its own context manager, as torch.Stream is
        assert torch.accelerator.current_stream() is s
    assert torch.accelerator.current_stream(d) is mod.default_stream()


def test_new_streams_are_distinct(chip):
    mod, _ = chip
    a, b = mod.Stream(), mod.Stream(priority=-1)
    assert a != b and a.stream_id != b.stream_id and len({a, b, mod.default_stream()}) == 3
    assert isinstance(a, torch.Stream) and b.priority == -1
    generic = torch.Stream(device=chip[1]), torch.Stream(device=chip[1])  # (PyTorch's constructor: stream 0 each)
    assert generic[0] != generic[1] and all(isinstance(s, mod.Stream) for s in generic)
    assert isinstance(torch.Stream(device="cpu"), torch.Stream)


def test_wait_event_takes_the_chips_event_and_refuses_a_foreign_object(chip):
    mod, d = chip
    s, e = mod.Stream(), mod.Event()
    s.wait_event(e)  # (once: "Unknown device: <random>", a Python object read as a C++ torch.Event)
    e.record(s)
    mod.current_stream().wait_event(e)
    assert isinstance(e, torch.Event) and torch.Event(device=d).device == d
    with pytest.raises(TypeError, match="takes an event of the emulated chip"):
        s.wait_event(object())
    # PyTorch's own C++ method handed the chip's stream and event reads real objects: the same answer each time
    outcomes = set()
    for _ in range(5):
        try:
            torch.Stream.wait_event(s, e)
            outcomes.add("ok")
        except RuntimeError as exc:
            outcomes.add(str(exc))
    assert len(outcomes) == 1, outcomes


def test_events_time_and_order_work(chip):
    mod, d = chip
    start, end = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
    start.record()
    torch.ones(64, 64, device=d) @ torch.ones(64, 64, device=d)
    end.record()
    end.synchronize()
    assert start.query() and end.query() and start.elapsed_time(end) >= 0
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        mod.Event().elapsed_time(end)


def test_a_non_blocking_copy_to_the_host_holds_poison_until_a_sync_covers_it(chip):
    mod, d = chip
    x = torch.arange(4.0, device=d)
    host = torch.empty(4, pin_memory=True)
    host.copy_(x, non_blocking=True)
    assert host.isnan().all()  # read before a sync: what a GPU or NPU may show, deterministically
    mod.current_stream().synchronize()
    assert host.tolist() == [0, 1, 2, 3]

    for sync in (lambda s, e: mod.synchronize(), lambda s, e: s.synchronize(), lambda s, e: e.synchronize(),
                 lambda s, e: torch.accelerator.synchronize(), lambda s, e: x.sum().item(),
                 lambda s, e: x.cpu()):
        out = (x * 2).to("cpu", non_blocking=True)
        assert out.is_pinned() and out.isnan().all()
        event = mod.current_stream().record_event()
        sync(mod.current_stream(), event)
        assert out.tolist() == [0, 2, 4, 6]


def test_integers_and_bools_are_poisoned_too(chip):
    mod, d = chip
    ints = torch.arange(3, device=d).to("cpu", non_blocking=True)
    flags = torch.zeros(3, dtype=torch.bool, device=d).to("cpu", non_blocking=True)
    assert ints.tolist() == [torch.iinfo(torch.int64).max] * 3 and flags.all()
    mod.synchronize()
    assert ints.tolist() == [0, 1, 2] and not flags.any()


def test_a_sync_of_another_stream_does_not_cover_the_copy(chip):
    mod, d = chip
    side = mod.Stream()
    x = torch.ones(3, device=d)
    with mod.stream(side):
        host = x.to("cpu", non_blocking=True)
    mod.default_stream().synchronize()
    assert host.isnan().all()
    side.synchronize()
    assert host.tolist() == [1, 1, 1]


def test_query_answers_false_once_while_a_copy_is_in_flight(chip):
    mod, d = chip
    host = torch.ones(2, device=d).to("cpu", non_blocking=True)
    event = mod.current_stream().record_event()
    assert event.query() is False and host.tolist() == [1, 1]  # (a poll loop ends: the copy then lands)
    assert event.query() is True and mod.current_stream().query() is True


def test_device_work_ordered_after_the_copy_sees_its_values(chip):
    """save_on_cpu(pin_memory=True)'s offload and reload: the reload on the same stream (or on one that waited
    for the copy's event) reads the real values, with no host sync between; an unordered stream reads poison."""
    mod, d = chip
    x = torch.arange(3.0, device=d)
    offloaded = x.to("cpu", non_blocking=True)
    assert offloaded.to(d, non_blocking=True).tolist() == [0, 1, 2]

    offloaded = (x + 1).to("cpu", non_blocking=True)
    done = mod.current_stream().record_event()
    waiting, unordered = mod.Stream(), mod.Stream()
    with mod.stream(unordered):
        assert torch.empty(3, device=d).copy_(offloaded, non_blocking=True).isnan().all().item()
    waiting.wait_event(done)
    with mod.stream(waiting):
        assert torch.empty(3, device=d).copy_(offloaded, non_blocking=True).tolist() == [1, 2, 3]


def test_a_non_blocking_copy_to_the_device_reads_pinned_memory_when_its_stream_reaches_it(chip):
    """A host buffer changed after a non-blocking host-to-device copy was issued from it: the device gets the
    changed values, as a GPU or NPU reading the buffer later would, until a sync or later work on the stream."""
    mod, d = chip
    for issue in (lambda src: torch.zeros(4, device=d).copy_(src, non_blocking=True),
                  lambda src: src.to(d, non_blocking=True)):
        src = torch.ones(4, pin_memory=True)
        dst = issue(src)
        src.fill_(7)  # the chip has not read src yet
        mod.synchronize()
        src.fill_(9)  # read by now: too late to change the device's copy
        assert dst.tolist() == [7] * 4

    src = torch.ones(4, pin_memory=True)
    dst = src.to(d, non_blocking=True)
    src.fill_(5)
    later = dst * 2  # later work on the same stream: the chip read src before it
    src.fill_(9)
    assert later.tolist() == [10] * 4 and dst.tolist() == [5] * 4

    # a copy on a side stream: work on another stream does not reach it, until that stream waits for its event
    side, src = mod.Stream(), torch.ones(4, pin_memory=True)
    with mod.stream(side):
        dst = src.to(d, non_blocking=True)
        copied = side.record_event()
    src.fill_(3)
    torch.ones(2, device=d).sum()  # (the default stream, unordered: the copy may still be pending)
    src.fill_(4)
    mod.current_stream().wait_event(copied)
    assert (dst + 0).tolist() == [4] * 4
    src.fill_(5)
    assert dst.tolist() == [4] * 4
    # nothing left to land: the dispatch's hook is gone again (the dispatch pays one global read)
    from torch_fl.routing.emu import tensor
    assert tensor.on_device_op is None


def test_a_non_blocking_copy_from_pageable_memory_reads_it_when_issued(chip):
    # (CUDA and torch_npu stage pageable memory before the call returns: changing it after is safe)
    _, d = chip
    src = torch.ones(4)
    dst = src.to(d, non_blocking=True)
    src.fill_(7)
    assert dst.tolist() == [1] * 4


def test_each_host_sync_lands_a_pending_copy_to_the_device(chip):
    mod, d = chip
    for sync in (lambda s, e: mod.synchronize(), lambda s, e: s.synchronize(), lambda s, e: e.synchronize(),
                 lambda s, e: torch.accelerator.synchronize()):
        src = torch.zeros(2, pin_memory=True)
        dst = src.to(d, non_blocking=True)
        event = mod.current_stream().record_event()
        src.fill_(1)
        sync(mod.current_stream(), event)
        src.fill_(2)
        assert dst.tolist() == [1, 1]
    src = torch.zeros(2, pin_memory=True)
    dst = src.to(d, non_blocking=True)
    event = mod.current_stream().record_event()
    src.fill_(1)
    assert event.query() is False and event.query() is True  # (a poll loop ends: the copy lands)
    src.fill_(2)
    assert dst.tolist() == [1, 1]


def test_record_stream_is_accepted(chip):
    mod, d = chip
    side = mod.Stream()
    x = torch.ones(3, device=d)
    with mod.stream(side):
        y = x * 2
    x.record_stream(side)
    assert y.tolist() == [2, 2, 2]


def test_torchscript_compiles_the_factories_the_emulator_wraps(chip):
    """The pin_memory wrappers replace torch.zeros_like & co. in torch's namespace; TorchScript's builtin table
    must know them (torch_npu's test_ops_jit and jit/test_builtins scripted them: 'Could not get qualified
    name for class zeros_like')."""

    @torch.jit.script
    def scripted(x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x) + torch.ones(2) + torch.tensor([1.0, 2.0]) + torch.arange(2)

    assert scripted(torch.ones(2)).tolist() == [2.0, 4.0]
    assert "aten::zeros_like" in str(scripted.graph)


def test_pinned_host_memory_from_every_factory(chip):
    _, d = chip
    for made in (torch.empty(3, pin_memory=True), torch.zeros(2, 2, pin_memory=True),
                 torch.full((2,), 7.0, pin_memory=True), torch.ones(1).pin_memory(),
                 torch.empty_like(torch.ones(2), pin_memory=True), torch.arange(3, pin_memory=True)):
        assert made.device.type == "cpu" and made.is_pinned()
    assert not torch.empty(2).is_pinned()
    with torch.device("meta"):  # (a device context still sees PyTorch's factories through the wrappers)
        assert torch.arange(4).device.type == "meta"
    with pytest.raises(RuntimeError, match="Only dense CPU tensors can be pinned"):
        torch.empty(2, device=d, pin_memory=True)


def test_save_on_cpu_with_pinned_memory_trains_as_without(chip):
    _, d = chip
    w = torch.randn(8, 8, device=d, requires_grad=True)
    (w.sin() @ w).sum().backward()
    expected, w.grad = w.grad.cpu(), None
    with torch.autograd.graph.save_on_cpu(pin_memory=True):
        (w.sin() @ w).sum().backward()
    torch.testing.assert_close(w.grad.cpu(), expected)


def test_a_sync_chip_completes_every_copy_when_issued():
    with torch_fl.emulate("minimal") as activation:
        d = activation.device
        mod = getattr(torch, d.type)
        host = torch.arange(3.0, device=d).to("cpu", non_blocking=True)
        assert host.tolist() == [0, 1, 2]  # (streams.submission = "sync": nothing is deferred)
        src = torch.ones(2, pin_memory=True)
        dst = src.to(d, non_blocking=True)
        src.fill_(7)
        assert dst.tolist() == [1, 1]
        assert mod.current_stream() is mod.default_stream() and mod.Stream() != mod.Stream()


# The vendors' own names, in fresh processes (the slot's name is fixed once per process) --------------------
_VENDOR_SCRIPT = textwrap.dedent("""
    import json, torch, torch_fl
    name = "{name}"
    mod = getattr(torch, name)
    s, e = mod.Stream(), mod.Event(enable_timing=True)
    s.wait_event(e)
    out = {{"current_is_default": mod.current_stream() == mod.default_stream(),
           "distinct": mod.Stream() != mod.Stream(), "stream": type(s).__name__, "device": str(s.device)}}
    x = torch.arange(3.0, device=name)
    host = x.to("cpu", non_blocking=True)
    out["before_sync"] = host.isnan().all().item()
    mod.synchronize()
    out["after_sync"] = host.tolist()
    out["pinned"] = torch.empty(2, pin_memory=True).is_pinned()
    w = torch.randn(4, 4, device=name, requires_grad=True)
    with torch.autograd.graph.save_on_cpu(pin_memory=True):
        (w * w).sum().backward()
    out["offload"] = torch.equal(w.grad.cpu(), 2 * w.detach().cpu())
    print(json.dumps(out))
""")


def _run(code: str, env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a fresh process per chip
@pytest.mark.parametrize("name", ["npu", "mlu"])
def test_streams_under_the_vendors_name(name):
    out = _run(_VENDOR_SCRIPT.format(name=name), {"FL_DEVICE": f"emu:{name}"})
    assert out == {"current_is_default": True, "distinct": True, "stream": "Stream", "device": f"{name}:0",
                   "before_sync": True, "after_sync": [0, 1, 2], "pinned": True, "offload": True}


@pytest.mark.slow  # a fresh process: the CUDA alias for the whole process
def test_cuda_streams_and_events_under_the_alias():
    code = textwrap.dedent("""
        import json, torch, torch_fl
        s, e = torch.cuda.Stream(), torch.cuda.Event()
        s.wait_event(e)  # (was "Unknown device: <random>" / "Event device type CPU does not match")
        out = {"current_is_default": torch.cuda.current_stream() == torch.cuda.default_stream(),
               "distinct": torch.cuda.Stream() != torch.cuda.Stream()}
        with torch.cuda.stream(s):
            out["in_context"] = torch.cuda.current_stream() == s
        w = torch.randn(4, 4, device="cuda", requires_grad=True)
        with torch.autograd.graph.save_on_cpu(pin_memory=True):  # (torch.cuda.is_available(): pins)
            (w * w).sum().backward()
        out["offload"] = torch.equal(w.grad.cpu(), 2 * w.detach().cpu())
        host = torch.ones(2, device="cuda").to("cpu", non_blocking=True)
        out["poison"] = host.isnan().all().item()
        torch.cuda.synchronize()
        out["after"] = host.tolist()
        print(json.dumps(out))
    """)
    out = _run(code, {"FL_DEVICE": "emu:cuda", "FL_CUDA_ALIAS": "1"})
    assert out == {"current_is_default": True, "distinct": True, "in_context": True, "offload": True,
                   "poison": True, "after": [1, 1]}
