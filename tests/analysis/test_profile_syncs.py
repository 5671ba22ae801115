"""Host syncs per step with their source lines (analysis/host_syncs.py, the 'Host syncs per step' section of
`torchfl profile`): the lines of a model that waits for its device, on the CPU and on an emulated chip."""

from __future__ import annotations

import re

import pytest
import torch

from torch_fl.analysis.host_syncs import locate
from torch_fl.analysis.model import load_model
from torch_fl.analysis.profile import profile_model
from torch_fl.report import render_text

MODEL = '''
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.lin(x)
        if y.sum() > -1e9:  # ITEM
            y = y * 1.0
        kept = y[y > 0]  # MASK
        torch.fl.synchronize()  # SYNC
        return y + kept.sum() * 0


def factory():
    torch.manual_seed(0)
    return Net(), (torch.randn(4, 8),)


def quiet():
    torch.manual_seed(0)
    return torch.nn.Linear(8, 8), (torch.randn(4, 8),)
'''


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("syncs") / "syncing.py"
    path.write_text(MODEL)
    return path


def line_of(path, marker: str) -> str:
    number = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if marker in text)
    return f"{path}:{number} in forward"


@pytest.mark.parametrize("device", ["cpu", "emu:npu"])
def test_the_lines_that_wait_are_named(model_file, device):
    data = profile_model(load_model(f"{model_file}:factory"), device, steps=1, warmup=0, train=False).data
    sites = {(s["what"].split(" ")[0], s["where"]): s["count"] for s in data["host_syncs"]["sites"]}
    assert sites[("item()", line_of(model_file, "ITEM"))] == 1
    assert sites[("boolean-mask", line_of(model_file, "MASK"))] == 1
    assert sites[("synchronize()", line_of(model_file, "SYNC"))] == 1
    assert data["host_syncs"]["per_step"] == sum(s["count"] for s in data["host_syncs"]["sites"])
    assert data["host_syncs"]["device_is_host"] == (device == "cpu")


def test_report_section_names_lines_and_says_when_nothing_waits(model_file):
    from torch_fl.analysis.profile import report

    data = profile_model(load_model(f"{model_file}:factory"), "emu:npu", steps=1, warmup=0, train=False).data
    text = render_text(report(data))
    # (the text table may cut a long path short: the line's file name and number are at its end)
    assert "Host syncs per step: 3" in text and line_of(model_file, "MASK").split("/")[-1][:13] in text
    assert re.search(r"host syncs +3 per step from 3 source lines\n", text)
    quiet = profile_model(load_model(f"{model_file}:quiet"), "emu:npu", steps=1, warmup=0, train=False).data
    assert quiet["host_syncs"] == {"per_step": 0, "sites": [], "device_is_host": False}
    assert "No op of the step made the host wait" in render_text(report(quiet))


def test_host_tensors_are_not_syncs_of_a_device():
    # on an emulated chip, .item() of a host tensor waits for nothing
    from torch_fl.routing.current import use_device

    dev = use_device("emu:npu")
    host, on_device = torch.ones(3), torch.ones(3, device=dev)
    found = locate(lambda: (host.sum().item(), on_device.cpu()), dev)
    assert [s["what"].split(" ")[0] for s in found] == ["copy"]


def test_ops_whose_output_size_is_data_are_syncs():
    from torch_fl.routing.current import use_device

    dev = use_device("emu:npu")
    x = torch.tensor([1, 2, 2, 3], device=dev)
    found = locate(lambda: (torch.unique(x), x.repeat_interleave(x), torch.bincount(x),
                            x.repeat_interleave(2)), dev)
    assert sorted(s["what"].split(" ")[0] for s in found) == ["bincount", "repeat_interleave", "torch.unique"]
