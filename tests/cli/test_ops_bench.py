"""`torchfl ops-bench` (analysis/ops_bench.py, cli/ops_bench.py): native ops timed against their route
alternatives in paired rounds, verdicts written into a user description overlay, and coverage / grade
showing the overlay's slow ops as 'native but slow'."""

from __future__ import annotations

import json
import time

import pytest
import torch

import torch_fl
from torch_fl.analysis.ops_bench import SLOW, Timing, paired_speedups, write_overlay
from torch_fl.description import registry
from torch_fl.description.loader import parse
from torch_fl.errors import DescriptionError
from torch_fl.routing.install import GET_KERNEL_SINCE, supports_key_routing

needs_get_kernel = pytest.mark.skipif(not supports_key_routing(),
                                      reason=f"needs torch >= {GET_KERNEL_SINCE} (torch.library.get_kernel)")

@pytest.fixture
def fresh_registry():
    registry.reload()
    yield
    registry.reload()
    torch_fl.reset()


def load_file(path):
    """The overlay as torch-fl loads it (validated by the schema, merged with the description it extends)."""
    return parse(path.read_text(), str(path))


def nothing() -> None:
    pass


def test_paired_speedups_find_the_faster_alternative():
    candidates = {"device": (_null, lambda: time.sleep(0.002)),
                  "fast": (_null, nothing), "same": (_null, lambda: time.sleep(0.002))}
    device_s, alternatives = paired_speedups(candidates, nothing, rounds=3)
    assert device_s >= 0.002
    assert alternatives["fast"]["speedup"] > 10 * SLOW
    assert alternatives["fast"]["low"] > SLOW
    assert 0.5 < alternatives["same"]["speedup"] < 2


def _null():
    import contextlib

    return contextlib.nullcontext()


def test_the_verdict_is_slow_only_when_an_alternative_is_clearly_faster():
    timing = Timing("aten::gelu.default", "float32", "native", 1e-3,
                    {"translate": {"seconds": 5e-4, "speedup": 2.0, "low": 1.6},
                     "reference": {"seconds": 9e-4, "speedup": 1.1, "low": 0.9}})
    assert (timing.verdict, timing.faster) == ("slow", "translate")
    # a median past the threshold is not enough: a quarter of the rounds found it no faster
    timing.alternatives["translate"]["low"] = SLOW - 0.01
    assert (timing.verdict, timing.faster) == ("measured", None)


def test_overlay_is_written_updated_and_loads(tmp_path):
    path = tmp_path / "cpu.toml"
    write_overlay(path, "cpu", {"aten::mm.default": {"float32": "slow", "float16": "measured"},
                                "aten::gelu.default": {"float32": "measured"}})
    desc = load_file(path)
    assert desc.name == "cpu" and desc.data["extends"] == "cpu"
    assert desc.data["ops"]["measured"] == {"aten::mm.default": ["float16", "float32"],
                                            "aten::gelu.default": ["float32"]}
    assert desc.data["ops"]["slow"] == {"aten::mm.default": ["float32"]}
    # measured again: mm float32 is no longer slow, gelu now is; the rest stays
    write_overlay(path, "cpu", {"aten::mm.default": {"float32": "measured"},
                                "aten::gelu.default": {"float32": "slow"}})
    ops = load_file(path).data["ops"]
    assert ops["slow"] == {"aten::gelu.default": ["float32"]}
    assert ops["measured"]["aten::mm.default"] == ["float16", "float32"]
    with pytest.raises(DescriptionError, match=r"this overlay describes 'cpu', not 'npu'.*Fix: write the "
                                               r"measurements of 'npu' to another file"):
        write_overlay(path, "npu", {})


def test_cli_measures_a_model_and_writes_the_overlay(models, tmp_path, capsys):
    from torch_fl.cli import main

    overlay, out = tmp_path / "cpu.toml", tmp_path / "o.json"
    assert main(["ops-bench", f"{models}:mlp", "--device", "cpu", "--op", "aten::gelu", "--op", "aten::addmm",
                 "--rounds", "2", "--overlay", str(overlay), "--json", str(out), "-q"]) == 0
    data = json.loads(out.read_text())
    rows = {r["op"]: r for r in data["timings"]}
    assert set(rows) == {"aten::gelu.default", "aten::addmm.default"}
    assert "translate" in rows["aten::gelu.default"]["alternatives"]
    assert rows["aten::gelu.default"]["skipped"]["reference"] == "the device is the reference (the CPU)"
    assert data["overlay"] == str(overlay) and data["description"] == "cpu"
    measured = load_file(overlay).data["ops"]["measured"]
    assert measured == {"aten::gelu.default": ["float32"], "aten::addmm.default": ["float32"]}
    assert "Native ops against their alternatives" in capsys.readouterr().out


def test_cli_refuses_an_overlay_in_a_missing_folder(models, tmp_path, capsys):
    from torch_fl.cli import main

    assert main(["ops-bench", f"{models}:mlp", "--device", "cpu", "--overlay", str(tmp_path / "no" / "x.toml"),
                 "-q"]) == 2
    assert "the folder" in capsys.readouterr().err


def test_opinfo_samples_without_a_model(capsys):
    from torch_fl.cli import main

    assert main(["ops-bench", "--device", "emu:npu", "--op", "aten::sigmoid", "--rounds", "1", "--json", "-",
                 "-q"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "PyTorch's OpInfo samples (float32)" and data["description"] == "npu"
    row = next(r for r in data["timings"] if r["op"] == "aten::sigmoid.default")
    assert row["skipped"]["reference"].startswith("an emulated chip computes on the CPU")
    # PyTorch's OpInfo module freezes torch.backends' flags on import; the command must not leave them so
    # (a later torch.backends.cudnn.benchmark = True in the same process raised)
    assert not torch.backends.flags_frozen()


@needs_get_kernel
def test_a_registered_kernel_faster_than_the_native_one_makes_it_slow_and_coverage_says_so(
        models, tmp_path, monkeypatch, capsys, fresh_registry):
    from torch_fl.cli import main

    monkeypatch.setenv("FL_ROUTE", "")
    torch_fl.reset()
    handle = torch_fl.register_kernel("aten::gelu.default", lambda x, approximate="none": x, device_type="cpu")
    site = tmp_path / "site"
    site.mkdir()
    out = tmp_path / "o.json"
    try:
        assert main(["ops-bench", f"{models}:wide_gelu", "--device", "cpu", "--no-train", "--op", "aten::gelu",
                     "--rounds", "3", "--overlay", str(site / "cpu.toml"), "--json", str(out), "-q"]) == 0
    finally:
        handle.remove()
        torch_fl.reset()
    row = json.loads(out.read_text())["timings"][0]
    assert (row["op"], row["route"], row["verdict"], row["faster"]) == ("aten::gelu.default", "kernel", "slow",
                                                                        "kernel")
    capsys.readouterr()
    monkeypatch.setenv("FL_DESCRIPTION_PATH", str(site))
    registry.reload()
    assert main(["coverage", f"{models}:mlp", "--device", "cpu", "--json", "-", "-q"]) == 0
    cov = json.loads(capsys.readouterr().out)
    assert cov["summary"]["native_slow"] == [{"op": "aten::gelu.default", "dtype": "float32", "calls": 1}]
    assert [op["op"] for op in cov["ops"] if op.get("slow")] == ["aten::gelu.default"]
    assert main(["coverage", f"{models}:mlp", "--device", "cpu", "-q"]) == 0
    text = capsys.readouterr().out
    assert "Native but slow on cpu" in text and "native but slow      1 call" in text


def test_an_op_filter_that_matches_nothing_says_so(models, capsys):
    from torch_fl.cli import main

    assert main(["ops-bench", f"{models}:mlp", "--device", "cpu", "--op", "aten::conv2d", "--rounds", "1", "-q"]) == 0
    out = capsys.readouterr().out
    assert "measured  0 native (op, dtype) pairs, 0 slow" in out
    assert "--op aten::conv2d matched no native op of" in out


def test_a_model_the_device_cannot_run_exits_1_naming_the_op(models, tmp_path, capsys):
    from torch_fl.cli import main

    out = tmp_path / "e.json"
    assert main(["ops-bench", f"{models}:bf16", "--device", "emu:minimal", "--json", str(out), "-q"]) == 1
    err = capsys.readouterr().err
    assert "emu:minimal cannot run" in err and "Traceback" not in err
    assert "bfloat16" in json.loads(out.read_text())["error"]


def test_opt_in_preference_routes_ops_whose_translation_wins_in_every_dtype(tmp_path, capsys):
    from torch_fl.analysis.ops_bench import preferred_translations
    from torch_fl.cli import main
    from torch_fl.routing.table import RouteTable

    def row(op, dtype, verdict, faster):
        return {"op": op, "dtype": dtype, "verdict": verdict, "faster": faster}

    timings = [row("aten::a.default", "float32", "slow", "translate"),
               row("aten::a.default", "float16", "slow", "translate"),
               row("aten::b.default", "float32", "slow", "translate"),
               row("aten::b.default", "float16", "measured", None),  # b holds its own in float16
               row("aten::c.default", "float32", "slow", "reference")]  # the CPU: copies not counted
    assert preferred_translations(timings) == ["aten::a.default"]
    path = tmp_path / "cpu.toml"
    write_overlay(path, "cpu", {"aten::ones_like.default": {"float32": "slow"}}, prefer=["aten::ones_like.default"])
    desc = load_file(path)
    assert desc.data["ops"]["translate"] == ["aten::ones_like.default"]
    assert str(RouteTable(desc).route("aten::ones_like.default", "float32").kind) == "translate"
    assert main(["ops-bench", "--device", "cpu", "--prefer", "-q"]) == 2
    assert "give --overlay FILE too" in capsys.readouterr().err


def test_a_sample_that_raises_when_timed_is_named_not_fatal():
    import torch

    from torch_fl.analysis.ops_bench import Sample, _measure

    bad = Sample(torch.ops.aten.__rshift__.Tensor, "float32", "native", (torch.ones(2), torch.ones(2)), {})
    report = _measure([bad], "m", "cpu", "cpu", train=False, rounds=1, ops=None)
    assert report.data["timings"] == [] and report.data["failed"][0]["op"] == "aten::__rshift__.Tensor"
    assert any("aten::__rshift__.Tensor (float32) was not measured" in w and "not implemented for 'Float'" in w
               for w in report.warnings)
