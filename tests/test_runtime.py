"""The runtime facade (torch.fl.synchronize, memory, streams, events, ...) on the host CPU, and its
routing to a device module, checked with a fake accelerator module."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import types
from pathlib import Path

import pytest
import torch

import torch_fl
from torch_fl import device_calls, hostmem, runtime
from torch_fl.errors import DeviceNotFoundError

MiB = 2**20
DOCS = Path(__file__).parents[1] / "docs"


# Device management --------------------------------------------------------------------------------
def test_lazy_exports_are_the_runtime_functions():
    for name, module in torch_fl._LAZY.items():
        if module == "runtime":
            assert getattr(torch.fl, name) is getattr(runtime, name)


def test_cpu_device_management():
    assert torch.fl.is_available() is True
    assert torch.fl.is_available("cpu") is True
    assert torch.fl.device_count() == 1
    assert torch.fl.current_device() == 0
    for accepted in (None, 0, "acc0", "cpu", "cpu:0", torch.device("cpu")):
        assert torch.fl.set_device(accepted) is None
    assert torch.fl.synchronize() is None
    assert torch.fl.synchronize("acc0") is None


def test_unknown_device_is_unavailable_not_an_error():
    assert torch.fl.is_available("acc9") is False


def test_set_device_rejects_a_missing_virtual_id():
    with pytest.raises(DeviceNotFoundError, match="acc9") as info:
        torch.fl.set_device("acc9")
    assert isinstance(info.value, ValueError) and "acc0" in str(info.value)


def test_set_device_rejects_a_second_cpu_index():
    with pytest.raises(DeviceNotFoundError, match=r"'cpu:1'.*index 0"):
        torch.fl.set_device("cpu:1")


def test_device_count_counts_virtual_ids_mapped_to_cpu(monkeypatch):
    monkeypatch.setenv("FL_DEVICE_MAP", "acc0=cpu,acc1=cpu")
    torch_fl.reset()
    assert torch.fl.device_count() == 2
    torch.fl.set_device("acc1")
    torch.fl.set_device(1)
    assert torch.fl.current_device("acc1") == 0


def test_fl_device_selects_the_default(monkeypatch):
    monkeypatch.setenv("FL_DEVICE", "acc7")
    torch_fl.reset()
    assert torch.fl.is_available() is False
    with pytest.raises(DeviceNotFoundError, match="acc7"):
        torch.fl.synchronize()


# Memory -------------------------------------------------------------------------------------------
def test_memory_tracks_the_process_resident_set():
    before = torch.fl.memory_allocated()
    assert isinstance(before, int) and before > 0
    x = torch.ones(50 * MiB)  # 200 MB, every page written so it is resident
    during = torch.fl.memory_allocated()
    assert during - before >= 150 * MiB
    peak = torch.fl.max_memory_allocated()
    assert peak >= during
    del x
    after = torch.fl.memory_allocated()
    assert torch.fl.max_memory_allocated() >= peak  # freeing does not lower the peak
    torch.fl.reset_peak_memory_stats()
    lowered = torch.fl.max_memory_allocated()
    assert lowered < peak - 100 * MiB
    assert lowered >= torch.fl.memory_allocated() - 16 * MiB >= 0
    assert after < during


def test_peak_is_at_least_current():
    torch.fl.reset_peak_memory_stats("cpu")
    assert torch.fl.max_memory_allocated("cpu") >= torch.fl.memory_allocated("cpu")


def test_mem_get_info():
    free, total = torch.fl.mem_get_info()
    assert isinstance(free, int) and isinstance(total, int)
    assert 0 < free <= total


def test_mem_get_info_without_proc(monkeypatch):
    monkeypatch.setattr(hostmem, "meminfo", dict)
    free, total = torch.fl.mem_get_info()
    assert 0 <= free <= total and total > 0


def test_empty_cache_is_a_noop_on_cpu():
    assert torch_fl.description("cpu").section("memory")["empty_cache"] is False
    assert torch.fl.empty_cache() is None


# Randomness, precision, properties ----------------------------------------------------------------
def test_manual_seed_makes_randn_reproducible():
    generator = torch.fl.manual_seed(1234)
    assert isinstance(generator, torch.Generator)
    first = torch.randn(8)
    torch.fl.manual_seed(1234)
    assert torch.equal(first, torch.randn(8))
    torch.fl.manual_seed(4321)
    assert not torch.equal(first, torch.randn(8))


def test_autocast_on_cpu_uses_bfloat16():
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    with torch.fl.autocast():
        assert (a @ b).dtype == torch.bfloat16
    with torch.fl.autocast(enabled=False):
        assert (a @ b).dtype == torch.float32


def test_autocast_dtype_override():
    assert torch.fl.autocast("cpu", dtype=torch.float16).fast_dtype == torch.float16
    assert torch.fl.autocast("cpu", dtype="float16").fast_dtype == torch.float16
    with pytest.raises(ValueError, match="float17"):
        torch.fl.autocast("cpu", dtype="float17")


def test_get_device_properties_on_cpu():
    props = torch.fl.get_device_properties()
    assert isinstance(props, runtime.DeviceProperties)
    assert isinstance(props.name, str) and props.name
    assert (props.type, props.index, props.description) == ("cpu", 0, "cpu")
    assert props.total_memory == torch.fl.mem_get_info()[1]
    assert props.multi_processor_count == (os.cpu_count() or 1)
    assert props.vendor == torch_fl.description("cpu").vendor
    with pytest.raises(dataclasses.FrozenInstanceError):
        props.name = "other"  # type: ignore[misc]


def test_dist_backend_on_cpu():
    assert torch.fl.dist_backend() == "gloo"
    assert torch.fl.dist_backend("acc0") == "gloo"


# Streams and events -------------------------------------------------------------------------------
def test_host_event_times_a_sleep():
    start, end = torch.fl.Event(enable_timing=True), torch.fl.Event(enable_timing=True)
    start.record()
    time.sleep(0.05)
    end.record()
    end.synchronize()
    assert start.query() and end.query()
    elapsed = start.elapsed_time(end)
    assert isinstance(elapsed, float) and 40.0 <= elapsed < 10_000.0
    end.wait()


def test_event_timing_errors_match_cuda():
    untimed, timed = torch.fl.Event(), torch.fl.Event(enable_timing=True)
    untimed.record()
    timed.record()
    with pytest.raises(RuntimeError, match="enable_timing"):
        untimed.elapsed_time(timed)
    with pytest.raises(RuntimeError, match="recorded"):
        torch.fl.Event(enable_timing=True).elapsed_time(timed)


def test_host_stream_and_stream_context():
    s = torch.fl.Stream()
    assert isinstance(s, torch.fl.Stream) and s.device == torch.device("cpu")
    with torch.fl.stream(s):
        y = torch.ones(4) * 2
    with torch.fl.stream(None):
        pass
    s.wait_stream(torch.fl.Stream())
    event = s.record_event()
    assert isinstance(event, torch.fl.Event) and event.query()
    s.wait_event(event)
    s.synchronize()
    assert s.query() and y.sum().item() == 8


def test_isinstance_accepts_native_objects():
    assert isinstance(torch.Stream(device="cpu"), torch.fl.Stream)
    assert not isinstance(object(), torch.fl.Event)


# Routing to a device module (a fake accelerator on the privateuseone device type) ---------------------
FAKE_DESCRIPTION = """\
schema = 1
name = "fakeacc"
vendor = "Fake Silicon"
device_type = "privateuseone"
dispatch_key = "PrivateUse1"

[detect]
priority = -1
module = "fake_acc_runtime"

[memory]
allocator = "unified"

[collectives]
backend = "gloo"

[precision]
autocast_dtype = "float16"

[ops]  # a list: no plugin to probe and no vendor op table (the runtime calls are under test, not ops)
native = ["aten::add.Tensor", "aten::mm"]
"""


class _FakeEvent:
    def __init__(self, enable_timing: bool = False):  # like torch.mps.Event: no blocking/interprocess
        self.enable_timing = enable_timing

    def record(self, stream=None): ...
    def synchronize(self): ...
    def query(self): return True
    def wait(self, stream=None): ...
    def elapsed_time(self, end): return 1.5


class _FakeStream:
    def __init__(self, device=None, priority=0):
        self.device, self.priority = device, priority

    def synchronize(self): ...
    def query(self): return True
    def wait_stream(self, other): ...
    def wait_event(self, event): ...
    def record_event(self, event=None): ...


def _fake_module(calls: list) -> types.ModuleType:
    mod = types.ModuleType("fake_acc_runtime")
    mod.is_available = lambda: True
    mod.device_count = lambda: 2
    mod.current_device = lambda: 1
    mod.set_device = lambda device: calls.append(("set_device", device))
    mod.synchronize = lambda: calls.append(("synchronize",))  # no device argument, like torch.mps
    mod.current_allocated_memory = lambda: 1000 + 100 * len(calls)
    mod.recommended_max_memory = lambda: 8000
    mod.driver_allocated_memory = lambda: 3000
    mod.empty_cache = lambda: calls.append(("empty_cache",))
    mod.manual_seed_all = lambda seed: calls.append(("seed", seed))
    mod._is_in_bad_fork = lambda: False
    mod.get_device_properties = lambda device: types.SimpleNamespace(
        name="Fake X1", total_memory=8000, multi_processor_count=64)
    mod.Event, mod.Stream = _FakeEvent, _FakeStream
    mod.stream = lambda s: ("ctx", s)
    return mod


@pytest.fixture
def fake_acc(tmp_path, monkeypatch):
    if torch._C._get_privateuse1_backend_name() != "privateuseone":
        # One PrivateUse1 owner per process: this session's emulated device (tests/conftest.py) has it.
        # tests/routing/test_emu_device.py runs these tests in a process without one.
        pytest.skip("PrivateUse1 is borrowed by the emulated device in this process")
    calls: list = []
    module = _fake_module(calls)
    path = tmp_path / "fakeacc.toml"
    path.write_text(FAKE_DESCRIPTION)
    monkeypatch.setitem(sys.modules, "fake_acc_runtime", module)
    monkeypatch.setattr(torch, "privateuseone", module, raising=False)
    monkeypatch.setenv("FL_DESCRIPTION", str(path))
    monkeypatch.setenv("FL_BACKEND", "fakeacc")
    monkeypatch.setattr(runtime, "_watermarks", hostmem.Watermarks())
    torch_fl.reset()
    return module, calls


def test_device_calls_route_to_the_device_module(fake_acc):
    _, calls = fake_acc
    assert torch.fl.device() == torch.device("privateuseone", 0)
    assert torch.fl.is_available() and torch.fl.device_count() == 2 and torch.fl.current_device() == 1
    torch.fl.set_device("acc1")
    torch.fl.synchronize()
    torch.fl.empty_cache()
    assert calls == [("set_device", torch.device("privateuseone", 1)), ("synchronize",), ("empty_cache",)]


def test_memory_routes_and_falls_back_to_a_watermark(fake_acc):
    _, calls = fake_acc
    assert torch.fl.memory_allocated() == 1000
    calls.extend([None] * 5)
    # The module has no max_memory_allocated: torch.fl's watermark stands in.
    assert torch.fl.max_memory_allocated() == 1500
    calls.clear()
    assert torch.fl.max_memory_allocated() == 1500
    torch.fl.reset_peak_memory_stats()
    assert torch.fl.max_memory_allocated() == 1000
    assert torch.fl.mem_get_info() == (5000, 8000)  # derived from the unified-memory budget


def test_properties_seed_and_backend_route(fake_acc):
    _, calls = fake_acc
    props = torch.fl.get_device_properties("acc1")
    assert props == runtime.DeviceProperties("Fake X1", "privateuseone", 1, 8000, 64, "Fake Silicon", "fakeacc")
    torch.fl.manual_seed(7)
    assert ("seed", 7) in calls
    assert torch.fl.dist_backend() == "gloo"


def test_native_streams_and_events_are_returned_unwrapped(fake_acc):
    event = torch.fl.Event(enable_timing=True, blocking=True)
    assert type(event) is _FakeEvent and event.enable_timing
    assert isinstance(event, torch.fl.Event)
    s = torch.fl.Stream("acc1", priority=-1)
    assert type(s) is _FakeStream and s.device == torch.device("privateuseone", 1) and s.priority == -1
    assert torch.fl.stream(s) == ("ctx", s)


def test_accelerator_is_preferred_and_failures_fall_through(fake_acc, monkeypatch):
    _, calls = fake_acc

    def unsupported(device=None):
        raise RuntimeError("device allocator does not support this")

    accelerator = types.SimpleNamespace(memory_allocated=lambda device=None: 42, synchronize=unsupported)
    monkeypatch.setattr(device_calls, "accelerator", lambda dev: accelerator)
    assert torch.fl.memory_allocated() == 42
    torch.fl.synchronize()
    assert calls[-1] == ("synchronize",)


def test_missing_runtime_call_names_what_was_looked_for(fake_acc):
    module, _ = fake_acc
    del module.synchronize
    with pytest.raises(runtime.RuntimeUnsupportedError, match=r"torch\.privateuseone\.synchronize"):
        torch.fl.synchronize()


def test_the_docs_example_runs(capsys):
    text = (DOCS / "runtime.md").read_text()
    example = text.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(example, "docs/runtime.md", "exec"), {})
    assert "torch.distributed backend: gloo" in capsys.readouterr().out


def test_the_docs_table_covers_every_call():
    text = (DOCS / "runtime.md").read_text()
    for name, module in torch_fl._LAZY.items():
        if module == "runtime":
            assert f"| `{name}" in text, name
