"""`torchfl describe`: TOML that loads back unchanged, the listing, and a probe of the live device."""

from __future__ import annotations

import torch_fl
from torch_fl.cli import main
from torch_fl.description.loader import load, parse


def test_describe_prints_a_description_that_loads_back(capsys):
    assert main(["describe", "npu"]) == 0
    assert parse(capsys.readouterr().out, "<stdout>") == torch_fl.description("npu")


def test_describe_list_names_every_description(capsys):
    assert main(["describe", "--list"]) == 0
    out = capsys.readouterr().out
    for name in torch_fl.descriptions():
        assert f"\n{name} " in out


def test_describe_probe_writes_the_live_device(tmp_path, capsys):
    path = tmp_path / "probed.toml"
    assert main(["describe", "--probe", "-o", str(path)]) == 0
    probed = load(path)
    assert probed.native_source == "list" and "aten::mm.default" in probed.native_ops()
    assert probed.native_ops() == torch_fl.description("cpu").native_ops()   # the CPU is probed too
    assert {"float32", "int64", "bool"} <= set(probed.dtypes)
    assert "Probed from the live device cpu" in probed.data["summary"]


def test_unknown_name_exits_2_with_a_suggestion(capsys):
    assert main(["describe", "cdua"]) == 2  # bad input (docs/cli.md, exit status)
    assert "Did you mean 'cuda'?" in capsys.readouterr().err
