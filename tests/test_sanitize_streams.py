"""The stream sanitizer (routing/emu/sanitizer.py, torch.fl.sanitize) on emu:cuda, emu:npu and emu:mlu.

The event-handler cases of PyTorch's test/test_cuda_sanitizer.py, written again as user code on an emulated
chip: every "bad" program is reported (with both accesses), every "good" one is silent. Then what the
sanitizer adds: frees without record_stream, host access to unfinished non-blocking copies, host syncs by
line, device work in a forked DataLoader worker.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

import torch_fl
from stream_fixtures import chip_fixture, sanitizer_reports, side_stream  # noqa: F401 (a fixture)
from torch_fl.routing.emu.sanitizing import sanitize


# good programs: ordered accesses --------------------------------------------------------------------------
def read_after_write_on_one_stream(mod, d):
    x = torch.ones(4, device=d)
    x.mul_(2)
    x.sum()
    return locals()


def write_after_read_on_one_stream(mod, d):
    x = torch.ones(4, device=d)
    y = x + 1
    x.zero_()
    return locals()


def reads_on_two_streams(mod, d):
    x = torch.ones(4, device=d)
    side = side_stream(mod)
    with mod.stream(side):
        a = x * 2
    b = x * 3
    return locals()


def read_after_wait_stream(mod, d):
    x = torch.ones(4, device=d)
    side = side_stream(mod)
    with mod.stream(side):
        x.sum()
    return locals()


def read_after_event_wait(mod, d):
    x = torch.ones(4, device=d)
    x.add_(1)
    done = mod.Event()
    done.record()
    side = mod.Stream()
    side.wait_event(done)
    with mod.stream(side):
        x.sum()
    return locals()


# the host's three ways to wait for a side stream: each orders the tensor it made before the default stream's read
HOST_WAITS = {"device_synchronize": lambda mod, side: mod.synchronize(),
              "stream_synchronize": lambda mod, side: side.synchronize(),
              "event_synchronize": lambda mod, side: side.record_event().synchronize()}


def read_after_the_host_waits(how):
    def program(mod, d):
        side = mod.Stream()
        with mod.stream(side):
            x = torch.ones(4, device=d)
        HOST_WAITS[how](mod, side)
        x.sum()
        return locals()

    program.__name__ = f"read_after_{how}"
    return program


def transitive_waits(mod, d):
    first, second, third = mod.Stream(), mod.Stream(), mod.Stream()
    with mod.stream(first):
        x = torch.ones(4, device=d)
        e1 = first.record_event()
    second.wait_event(e1)
    e2 = second.record_event()
    third.wait_event(e2)
    with mod.stream(third):
        x.sum()
    third.synchronize()
    return locals()


def freed_after_record_stream(mod, d):
    x = torch.ones(8, device=d)
    side = side_stream(mod)
    with mod.stream(side):
        x.sum()
    x.record_stream(side)
    del x
    return locals()


def freed_after_record_stream_of_a_view(mod, d):
    x = torch.ones(8, device=d)
    side = side_stream(mod)
    with mod.stream(side):
        x.sum()
    x[4:].record_stream(side)  # (CUDA's record_stream marks the whole block: a view at an offset covers x)
    del x
    return locals()


def view_used_on_a_side_stream_and_its_base_recorded(mod, d):
    x = torch.ones(8, device=d)
    tail = x[4:]
    side = side_stream(mod)
    with mod.stream(side):
        tail.sum()
    x.record_stream(side)
    del x, tail
    return locals()


def host_read_after_sync(mod, d):
    host = torch.ones(4, device=d).to("cpu", non_blocking=True)
    mod.current_stream().synchronize()
    host.sum()
    return locals()


GOOD = [read_after_write_on_one_stream, write_after_read_on_one_stream, reads_on_two_streams,
        read_after_wait_stream, read_after_event_wait, *map(read_after_the_host_waits, HOST_WAITS),
        transitive_waits, freed_after_record_stream, freed_after_record_stream_of_a_view,
        view_used_on_a_side_stream_and_its_base_recorded, host_read_after_sync]


# bad programs --------------------------------------------------------------------------------------------
def read_after_write_on_two_streams(mod, d):
    x = torch.ones(4, device=d)
    x.add_(1)
    with mod.stream(mod.Stream()):
        x.sum()
    return locals()


def write_after_read_on_two_streams(mod, d):
    x = torch.ones(4, device=d)
    side = side_stream(mod)
    with mod.stream(side):
        x.sum()
    x.zero_()
    return locals()


def write_after_write_on_two_streams(mod, d):
    x = torch.ones(4, device=d)
    side = side_stream(mod)
    x.fill_(2)
    with mod.stream(side):
        x.fill_(3)
    return locals()


def wait_recorded_before_the_write(mod, d):
    x = torch.ones(4, device=d)
    early = mod.Event()
    early.record()
    x.add_(1)  # after the event: the wait does not cover it
    side = mod.Stream()
    side.wait_event(early)
    with mod.stream(side):
        x.sum()
    return locals()


def one_of_a_list_unsynchronised(mod, d):
    a, b = torch.ones(2, device=d), torch.ones(2, device=d)
    side = side_stream(mod)
    with mod.stream(side):
        b.mul_(2)
    torch.cat([a, b])
    return locals()


def race_through_a_view_at_an_offset(mod, d):
    x = torch.ones(8, device=d)
    side = side_stream(mod)
    with mod.stream(side):
        x[4:].add_(1)
    x[4:].sum()  # (a second view at the same place: the same memory, not a new allocation)
    return locals()


BAD = [read_after_write_on_two_streams, write_after_read_on_two_streams, write_after_write_on_two_streams,
       wait_recorded_before_the_write, one_of_a_list_unsynchronised, race_through_a_view_at_an_offset]


@pytest.mark.parametrize("program", GOOD, ids=lambda f: f.__name__)
def test_good_programs_are_silent(chip, program):
    assert sanitizer_reports(program, *chip) == []


@pytest.mark.parametrize("program", BAD, ids=lambda f: f.__name__)
def test_bad_programs_are_reported(chip, program):
    reports = sanitizer_reports(program, *chip)
    assert len(reports) == 1, reports
    assert "data race" in reports[0] and "now:" in reports[0] and "before:" in reports[0]
    assert "test_sanitize_streams.py" in reports[0]  # the user's lines, not torch's


def test_a_race_names_both_accesses_and_stops_at_the_op(chip):
    mod, d = chip
    with sanitize():
        x = torch.ones(4, device=d)
        x.add_(1)
        with mod.stream(mod.Stream()), pytest.raises(RuntimeError, match="torch-fl stream sanitizer") as found:
            torch.mul(x, 2)
    text = str(found.value)
    assert "aten::mul on stream" in text and "reading from argument 'self'" in text
    assert "aten::add_ on the default stream" in text and "writing to argument 'self'" in text
    assert "torch.mul(x, 2)" in text and "x.add_(1)" in text  # the two source lines
    assert "wait_stream" in text  # the fix


def test_memory_freed_without_record_stream_is_reported(chip):
    mod, d = chip

    def program(mod, d):
        x = torch.ones(8, device=d)
        side = side_stream(mod)
        with mod.stream(side):
            x.sum()
        del x  # no record_stream, no wait: the allocator may hand it out while `side` still reads it

    reports = sanitizer_reports(program, mod, d)
    assert len(reports) == 1 and "freed while another stream may still use it" in reports[0]
    assert "record_stream" in reports[0]


def test_memory_used_through_a_view_on_another_stream_is_checked_at_its_free(chip):
    """The view is sliced on the side stream, but its memory is the allocation's, made on the default stream."""
    mod, d = chip

    def program(mod, d):
        x = torch.ones(8, device=d)
        side = side_stream(mod)
        with mod.stream(side):
            tail = x[4:]
            tail.mul_(2)
        del x, tail

    reports = sanitizer_reports(program, mod, d)
    assert len(reports) == 1 and "freed while another stream may still use it" in reports[0], reports
    assert "allocated on the default stream" in reports[0] and "aten::mul_ on stream" in reports[0]


def test_host_access_to_an_unfinished_non_blocking_copy_is_reported(chip):
    mod, d = chip

    def read_too_early(mod, d):
        host = torch.ones(4, device=d).to("cpu", non_blocking=True)
        host.sum()

    def write_source_too_early(mod, d):
        source = torch.ones(4, pin_memory=True)
        torch.empty(4, device=d).copy_(source, non_blocking=True)
        source.fill_(2)

    (read,) = sanitizer_reports(read_too_early, mod, d)
    assert "the host reads a tensor while a non_blocking=True device-to-host copy" in read
    assert "host.sum()" in read and "to(\"cpu\", non_blocking=True)" in read
    (write,) = sanitizer_reports(write_source_too_early, mod, d)
    assert "the host writes a tensor while a non_blocking=True host-to-device copy" in write


def test_host_syncs_are_counted_by_line(chip):
    mod, d = chip
    with sanitize() as check:
        x = torch.ones(4, device=d)
        for _ in range(3):
            x.sum().item()
        mod.synchronize()
    syncs = check.host_syncs()
    assert syncs[0]["what"] == "item()" and syncs[0]["count"] == 3 and "x.sum().item()" in syncs[0]["where"]
    assert any(s["what"] == "synchronize()" for s in syncs)


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown kind 'memory'"):
        sanitize("memory")


@pytest.mark.slow  # a fresh process: a DataLoader worker forked after the device was used
@pytest.mark.parametrize(("name", "text"), [("npu", "Cannot re-initialize NPU in forked subprocess"),
                                            ("mlu", "Cannot re-initialize MLU in forked subprocess")])
def test_device_work_in_a_forked_worker_raises_the_vendors_error(name, text):
    code = textwrap.dedent(f"""
        import torch, torch_fl
        from torch.utils.data import DataLoader, Dataset
        from torch_fl.routing.emu.sanitizing import sanitize; sanitize()

        class Data(Dataset):
            def __len__(self):
                return 2

            def __getitem__(self, i):
                return torch.ones(2, device="{name}") * i

        torch.ones(1, device="{name}")
        for batch in DataLoader(Data(), num_workers=1, timeout=60, multiprocessing_context="fork"):
            pass
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "FL_DEVICE": f"emu:{name}", "OMP_NUM_THREADS": "1"})
    assert done.returncode != 0 and text in done.stderr and "'spawn' start method" in done.stderr, done.stderr[-2000:]


# a side-stream prefetcher (the pattern of NVIDIA apex's imagenet data_prefetcher and timm's PrefetchLoader,
# written here in this project's words): clean as written, reported when one synchronisation is left out
class Prefetcher:
    def __init__(self, mod, d, batches, wait=True, record=True):
        self.mod, self.d, self.wait, self.record = mod, d, wait, record
        self.batches, self.side = iter(batches), mod.Stream()
        self.scale = torch.full((1,), 0.5).to(d)  # (a blocking copy on the default stream: synchronised)
        self.load()

    def load(self):
        host = next(self.batches, None)
        if host is None:
            self.ready = None
            return
        with self.mod.stream(self.side):
            self.ready = host.to(self.d, non_blocking=True).float().mul_(self.scale)

    def next(self):
        if self.wait:
            self.mod.current_stream().wait_stream(self.side)
        batch = self.ready
        if batch is not None and self.record:
            batch.record_stream(self.mod.current_stream())
        self.load()
        return batch


@pytest.mark.parametrize(("wait", "record", "expected"), [(True, True, None), (False, True, "data race"),
                                                         (True, False, "freed while another stream")])
def test_a_prefetcher_is_clean_and_each_missing_sync_is_reported(chip, wait, record, expected):
    mod, d = chip
    batches = [torch.randint(0, 9, (4, 6), dtype=torch.uint8).pin_memory() for _ in range(4)]
    model = torch.nn.Linear(6, 2).to(d)
    with sanitize(raise_errors=False) as check:
        loader = Prefetcher(mod, d, batches, wait=wait, record=record)
        batch = loader.next()
        while batch is not None:
            model(batch).sum().backward()
            batch = loader.next()
        mod.synchronize()
    if expected is None:
        assert check.reports == []
    else:
        assert check.reports and all(expected in r for r in check.reports), check.reports[:1]


def test_activation_offloading_to_pinned_memory_is_clean(chip):
    _, d = chip
    w = torch.randn(8, 8, device=d, requires_grad=True)
    with sanitize() as check, torch.autograd.graph.save_on_cpu(pin_memory=True):
        (w.sin() @ w).sum().backward()
    assert check.reports == [] and w.grad is not None


def test_a_sync_chip_is_checked_too():
    """A race on a sync-submission chip is harmless there, and wrong on every async chip the code may run on."""
    with torch_fl.emulate("minimal") as activation:
        mod, d = getattr(torch, activation.device.type), activation.device
        reports = sanitizer_reports(read_after_write_on_two_streams, mod, d)
    assert len(reports) == 1 and "data race" in reports[0]


def test_fl_sanitize_turns_the_sanitizer_on_from_the_start():
    """FL_SANITIZE=streams (docs/env.md): the same check as torch.fl.sanitize(), from the device's registration
    on, with no code change; the race stops at the op with the sanitizer's text."""
    assert torch_fl.sanitize is sanitize
    code = textwrap.dedent("""
        import torch, torch_fl
        x = torch.ones(4, device="npu")
        x.add_(1)
        with torch.npu.stream(torch.npu.Stream()):
            torch.mul(x, 2)
    """)
    env = {**__import__("os").environ, "FL_DEVICE": "emu:npu", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**env, "FL_SANITIZE": "streams"})
    assert done.returncode != 0 and "torch-fl stream sanitizer" in done.stderr, done.stderr[-2000:]
    assert "aten::mul on stream" in done.stderr
    quiet = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
