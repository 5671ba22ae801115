"""Host syncs per step in bench and grade (issue 38: 'a per-step count of host syncs with their source lines in
route stats, bench and grade'): the same lines `torchfl profile` names, counted in one routed step."""

from __future__ import annotations

import re

import pytest
from test_profile_syncs import MODEL, line_of  # the model whose lines wait, beside this file

from torch_fl.analysis.bench import bench
from torch_fl.analysis.model import load_model
from torch_fl.report import render_text


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("syncs") / "syncing.py"
    path.write_text(MODEL)
    return path


@pytest.mark.parametrize("device", ["cpu", "emu:npu"])
def test_bench_counts_the_host_syncs_of_a_step_by_line(model_file, device):
    report = bench(load_model(f"{model_file}:factory"), device, steps=2, warmup=1, train=False, block=2)
    syncs = report.data["host_syncs"]
    where = {s["where"] for s in syncs["sites"]}
    assert line_of(model_file, "# ITEM") in where and line_of(model_file, "# SYNC") in where, syncs
    assert syncs["per_step"] == sum(s["count"] for s in syncs["sites"]) >= 3
    assert syncs["device_is_host"] is (device == "cpu")
    text = render_text(report)
    assert re.search(rf"host syncs +{syncs['per_step']} per step from {len(syncs['sites'])} source lines", text)
    assert f"Host syncs per step: {syncs['per_step']}" in text


def test_bench_of_a_step_without_syncs_says_none(model_file):
    report = bench(load_model(f"{model_file}:quiet"), "emu:npu", steps=2, warmup=1, train=False, block=2)
    assert report.data["host_syncs"]["per_step"] == 0
    assert re.search(r"host syncs +0 per step from 0 source lines", render_text(report))


def test_grade_shows_the_host_syncs_bench_counted(model_file):
    from torch_fl.analysis.grade import grade

    report = grade(load_model(f"{model_file}:factory"), "emu:npu", steps=4, warmup=1, preflight=False)
    syncs = report.data["measurements"]["bench"]["host_syncs"]
    assert syncs["per_step"] >= 3 and line_of(model_file, "# ITEM") in {s["where"] for s in syncs["sites"]}
    text = render_text(report)
    assert re.search(rf"host syncs +{syncs['per_step']} per step from {len(syncs['sites'])} source lines", text)
    assert f"Host syncs per step: {syncs['per_step']}" in text
