"""load_aot(model=...) accepts the caller's class for a package built from a file entry point
(`torchfl aot gpt.py:factory`), whose class was recorded under the file's import name."""

from __future__ import annotations

import importlib
import sys

import pytest

from torch_fl.analysis.model import FILE_MODULE_PREFIX, _import
from torch_fl.compiler import aot

GPT = '''
import torch


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)


def factory():
    return GPT(), (torch.randn(2, 4),)
'''


@pytest.fixture
def gpt_file(tmp_path, monkeypatch):
    # another test may have imported a different `gpt` (examples/gpt.py): the user's import must find this one
    for name in ("gpt", "net", "other", "other.net", f"{FILE_MODULE_PREFIX}gpt"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    (tmp_path / "gpt.py").write_text(GPT)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "net.py").write_text(GPT)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path / "gpt.py"
    for name in ("gpt", "net", f"{FILE_MODULE_PREFIX}gpt"):
        sys.modules.pop(name, None)


def test_the_users_import_of_the_file_is_the_recorded_class(gpt_file):
    built = _import(str(gpt_file)).factory()[0]  # what `torchfl aot gpt.py:factory` exported
    recorded = aot.model_identity(built)
    assert recorded["model"] == f"{FILE_MODULE_PREFIX}gpt.GPT"
    mine = importlib.import_module("gpt").GPT()  # `from gpt import GPT` in the user's program
    assert aot.identity_problems(recorded, aot.model_identity(mine)) == []


def test_the_same_name_from_another_file_or_other_weights_is_refused(gpt_file):
    recorded = aot.model_identity(_import(str(gpt_file)).factory()[0])
    net = importlib.import_module("other.net").GPT()  # same class name and weights, another file
    assert [p.split(":")[0] for p in aot.identity_problems(recorded, aot.model_identity(net))] == ["model"]
    mine = importlib.import_module("gpt").GPT()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mine.fc.weight, "data", mine.fc.weight.data + 1)
        assert [p.split(":")[0] for p in aot.identity_problems(recorded, aot.model_identity(mine))] == ["weights"]


@pytest.mark.parametrize(("recorded", "expected", "same"), [
    (f"{FILE_MODULE_PREFIX}gpt.GPT", "gpt.GPT", True),
    (f"{FILE_MODULE_PREFIX}gpt.GPT", "examples.gpt.GPT", True),
    (f"{FILE_MODULE_PREFIX}gpt.GPT", "__main__.GPT", True),  # the class defined in the script itself
    (f"{FILE_MODULE_PREFIX}gpt.Block.Inner", "gpt.Block.Inner", True),
    (f"{FILE_MODULE_PREFIX}gpt.GPT", "gpt.GPT2", False),
    (f"{FILE_MODULE_PREFIX}gpt.GPT", "notgpt.GPT", False),
    ("gpt.GPT", "examples.gpt.GPT", False),  # an importable module: its name is the identity
])
def test_same_file_class(recorded, expected, same):
    assert aot.same_file_class(recorded, expected) is same
