"""The stream sanitizer, issue 38's remaining items: collectives, views of one allocation, pageable sources.

- A collective of the emulated process group (routing/emu/dist.py) reads and writes its tensors on the current
  stream, as NCCL's does on its stream, and its work's wait() orders the stream then current after it: a race
  between a collective and another stream's kernel is reported, a waited one is not.
- Views share their base's memory: an access is checked against every overlapping span of its allocation, so
  `x[4:]` on one stream and `x` on another race, and `x[:4]` and `x[4:]` do not.
- A non-blocking copy to the device from pageable host memory is synchronous for the host (CUDA and torch_npu
  stage the source before the call returns): changing the source afterwards is no race; from pinned memory it
  is. A non-blocking copy into a pageable host tensor is complete when it returns, for the same reason.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from stream_fixtures import chip_fixture, group_fixture, sanitizer_reports, side_stream  # noqa: F401 (fixtures)
from torch_fl.routing.emu.sanitizing import sanitize

RACE = "a data race on a tensor of"


# views of one allocation ---------------------------------------------------------------------------------
def view_written_base_read(mod, d):
    x = torch.ones(8, device=d)
    side = side_stream(mod)
    with mod.stream(side):
        x[4:].add_(1)
    x.sum()  # the whole tensor: its bytes 16..32 are the view's
    return locals()


def base_written_view_read(mod, d):
    x = torch.ones(8, device=d)
    side = side_stream(mod)
    x.mul_(2)
    with mod.stream(side):
        x[6:].sum()
    return locals()


def reshaped_view_written_strided_view_read(mod, d):
    x = torch.ones(4, 4, device=d)
    side = side_stream(mod)
    with mod.stream(side):
        x.view(16)[5:7].zero_()
    x[:, 1].sum()  # a column: elements 1, 5, 9, 13
    return locals()


def disjoint_views_on_two_streams(mod, d):
    x = torch.ones(8, device=d)
    x.add_(1)  # (the whole tensor, before either stream's view: ordered by the wait below)
    side = side_stream(mod)
    with mod.stream(side):
        x[:4].mul_(3)
    x[4:].mul_(5)
    x[4:].sum()
    return locals()


def views_ordered_by_a_wait(mod, d):
    x = torch.ones(8, device=d)
    side = side_stream(mod)
    with mod.stream(side):
        x[4:].add_(1)
    mod.current_stream().wait_stream(side)
    x.sum()
    return locals()


@pytest.mark.parametrize("program", [view_written_base_read, base_written_view_read,
                                     reshaped_view_written_strided_view_read], ids=lambda f: f.__name__)
def test_a_view_and_its_base_on_two_streams_race(chip, program):
    reports = sanitizer_reports(program, *chip)
    assert len(reports) == 1, reports
    assert RACE in reports[0] and "now:" in reports[0] and "before:" in reports[0]
    assert "test_sanitizer_r5.py" in reports[0]


@pytest.mark.parametrize("program", [disjoint_views_on_two_streams, views_ordered_by_a_wait],
                         ids=lambda f: f.__name__)
def test_disjoint_or_ordered_views_are_silent(chip, program):
    assert sanitizer_reports(program, *chip) == []


def test_the_race_through_a_view_names_both_lines(chip):
    mod, d = chip
    reports = sanitizer_reports(view_written_base_read, mod, d)
    assert "aten::sum on the default stream" in reports[0] and "x.sum()" in reports[0]
    assert "aten::add_ on stream" in reports[0] and "x[4:].add_(1)" in reports[0]


def test_an_allocation_freed_after_its_view_was_used_on_another_stream_is_reported(chip):
    mod, d = chip
    with sanitize(raise_errors=False) as check:
        x = torch.ones(8, device=d)
        side = side_stream(mod)
        with mod.stream(side):
            x[2:5].sum()
        del x
        torch.ones(1, device=d)  # (a free is reported at the next op)
    assert len(check.reports) == 1 and "freed while another stream may still use it" in check.reports[0]


# collectives ---------------------------------------------------------------------------------------------
def written_on_a_side_stream_then_all_reduced(mod, d):
    x = torch.ones(4, device=d)
    side = side_stream(mod)
    with mod.stream(side):
        x.mul_(2)
    dist.all_reduce(x)  # the default stream: nothing orders it after the mul_
    return locals()


def written_on_a_side_stream_waited_then_all_reduced(mod, d):
    x = torch.ones(4, device=d)
    side = side_stream(mod)
    with mod.stream(side):
        x.mul_(2)
    mod.current_stream().wait_stream(side)
    dist.all_reduce(x)
    return locals()


def async_all_reduce_on_a_side_stream_used_without_wait(mod, d):
    x = torch.ones(4, device=d)
    side = side_stream(mod)
    with mod.stream(side):
        work = dist.all_reduce(x, async_op=True)
    x.add_(1)  # the default stream: the all-reduce may still be writing x
    work.wait()
    return locals()


def async_all_reduce_on_a_side_stream_waited(mod, d):
    x = torch.ones(4, device=d)
    side = side_stream(mod)
    with mod.stream(side):
        work = dist.all_reduce(x, async_op=True)
    work.wait()  # (on the default stream: it now waits for the all-reduce, as NCCL's work.wait() makes it)
    x.add_(1)
    return locals()


def all_gather_input_written_on_a_side_stream(mod, d):
    x = torch.ones(4, device=d)
    out = torch.empty(4 * dist.get_world_size(), device=d)
    side = side_stream(mod)
    with mod.stream(side):
        x.fill_(3)
    (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, x)  # (torch >= 2.13's name)
    return locals()


def broadcast_from_the_root_while_another_stream_reads(mod, d):
    x = torch.ones(4, device=d)
    side = side_stream(mod)
    with mod.stream(side):
        x.sum()
    dist.broadcast(x, src=0)  # the root only reads: two reads are no race
    return locals()


@pytest.mark.parametrize(("program", "names"), [
    (written_on_a_side_stream_then_all_reduced,
     ("now:    c10d::allreduce_ on the default stream", "before: aten::mul_ on stream", "dist.all_reduce(x)")),
    (async_all_reduce_on_a_side_stream_used_without_wait,
     ("now:    aten::add_ on the default stream", "before: c10d::allreduce_ on stream",
      "work = dist.all_reduce(x, async_op=True)", "work.wait() while the stream that uses its tensors")),
    (all_gather_input_written_on_a_side_stream,
     ("now:    c10d::_allgather_base_ on the default stream", "reading from argument 'input'",
      "before: aten::fill_ on stream")),
], ids=lambda v: v.__name__ if callable(v) else "")
def test_a_collective_racing_with_another_stream_is_reported(group, program, names):
    reports = sanitizer_reports(program, *group)
    assert len(reports) == 1, reports
    assert RACE in reports[0] and all(n in reports[0] for n in names), reports[0]


@pytest.mark.parametrize("program", [written_on_a_side_stream_waited_then_all_reduced,
                                     async_all_reduce_on_a_side_stream_waited,
                                     broadcast_from_the_root_while_another_stream_reads], ids=lambda f: f.__name__)
def test_an_ordered_collective_is_silent(group, program):
    assert sanitizer_reports(program, *group) == []


def test_collectives_outside_the_sanitizer_return_the_backends_work(group):
    _, d = group
    x = torch.ones(4, device=d)
    work = dist.all_reduce(x, async_op=True)
    assert type(work).__name__ != "_Ordered"  # (nothing of the sanitizer on the path when it is off)
    work.wait()
    with sanitize():
        assert type(dist.all_reduce(x, async_op=True)).__name__ == "_Ordered"


# pageable and pinned sources of non-blocking copies ------------------------------------------------------
@pytest.mark.parametrize("issue", ["copy_", "to"])
def test_a_pageable_source_changed_after_a_non_blocking_copy_is_no_race(chip, issue):
    _, d = chip
    src = torch.arange(4.0)
    assert not src.is_pinned()
    with sanitize(raise_errors=False) as check:
        if issue == "copy_":
            out = torch.zeros(4, device=d).copy_(src, non_blocking=True)
        else:
            out = src.to(d, non_blocking=True)
        src.zero_()  # the copy was staged before the call returned: the host may reuse its buffer
        got = out.cpu()
    assert check.reports == []
    assert got.tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("issue", ["copy_", "to"])
def test_a_pinned_source_changed_after_a_non_blocking_copy_is_reported(chip, issue):
    _, d = chip
    src = torch.arange(4.0, pin_memory=True)
    with sanitize(raise_errors=False) as check:
        if issue == "copy_":
            torch.zeros(4, device=d).copy_(src, non_blocking=True)
        else:
            src.to(d, non_blocking=True)
        src.zero_()
    assert len(check.reports) == 1, check.reports
    assert "the host writes a tensor while a non_blocking=True host-to-device copy from it" in check.reports[0]
    assert "src.zero_()" in check.reports[0]


def test_a_non_blocking_copy_into_pageable_host_memory_is_complete_when_it_returns(chip):
    mod, d = chip
    host = torch.empty(4)
    with sanitize(raise_errors=False) as check:
        host.copy_(torch.arange(4.0, device=d), non_blocking=True)
        total = host.sum()
    assert check.reports == [] and total.item() == 6
    pinned = torch.empty(4, pin_memory=True)
    pinned.copy_(torch.arange(4.0, device=d), non_blocking=True)
    assert pinned.isnan().all()  # (pinned: deferred until a sync, as before)
    mod.synchronize()
    assert pinned.tolist() == [0, 1, 2, 3]


def test_halves_of_one_pinned_staging_buffer_are_two_buffers(chip):
    _, d = chip
    staging = torch.arange(8.0, pin_memory=True)
    with sanitize(raise_errors=False) as check:
        first = torch.zeros(4, device=d).copy_(staging[:4], non_blocking=True)
        second = torch.zeros(4, device=d).copy_(staging[4:], non_blocking=True)
        staging[4:].zero_()  # the second copy's source: reported
        refill_done = len(check.reports)
        staging[:4].fill_(7)  # the first copy's source, still in flight: reported too
    assert refill_done == 1 and len(check.reports) == 2, check.reports
    assert all("host-to-device copy from it" in r for r in check.reports)
    del first, second


def test_the_other_half_of_a_pinned_staging_buffer_is_free_to_refill(chip):
    _, d = chip
    staging = torch.arange(8.0, pin_memory=True)
    with sanitize(raise_errors=False) as check:
        out = torch.zeros(4, device=d).copy_(staging[:4], non_blocking=True)
        staging[4:].fill_(7)  # (double buffering: the half no copy reads)
        got = out.cpu()
    assert check.reports == [] and got.tolist() == [0, 1, 2, 3]
