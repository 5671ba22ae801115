"""Vendor op tables: generated from the vendors' registration files, read per plugin version, and the
native set of every PrivateUse1/XPU chip when its backend is not loaded (here: always)."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path

import pytest

import torch_fl
from torch_fl.description import probe
from torch_fl.description.loader import parse
from torch_fl.description.vendor_table import read_vendor_table
from torch_fl.errors import DescriptionError
from torch_fl.routing.table import RouteTable

REPO = Path(__file__).resolve().parents[2]
TABLES = REPO / "src" / "torch_fl" / "description" / "builtin" / "tables"
CHIPS = ("npu", "mlu", "musa", "xpu")

OP_PLUGIN = """\
all_version: [v2.1, v2.2, v2.3, v2.4, v2.5, v2.6, v2.7]
official:
  - func: abs(Tensor self) -> Tensor
    acl_op: all_version
    op_api: all_version

  - func: add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
    acl_op: [v2.1, v2.3]
    op_api: [v2.6, newest]

  - func: gelu(Tensor self, *, str approximate='none') -> Tensor  # a comment
    op_api: v2.1, v2.2

  - func: no_ranges(Tensor self) -> Tensor
    exposed: True

custom:
  - func: npu_thing(Tensor self, SymInt[] size) -> Tensor
    op_api: all_version

symint:
  - func: npu_thing(Tensor self, SymInt[] size) -> Tensor
    op_api: all_version

  - func: embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1) -> Tensor
    op_api: [v2.5, newest]

quant:
  - func: q_scale(Tensor self) -> float
    acl_op: v2.2
"""

TORCH_NPU = """\
backend: NPU
supported:
  - empty_strided
  - func: copy_
    op_api: True
custom:
  - func: npu_format_cast(Tensor self, int acl_format) -> Tensor
"""


ASCEND_DOC = """\
# torch

### torch.abs

**限制与说明**： `input`仅支持fp16，fp32，bf16

### torch.nn.functional.gelu

**限制与说明**：

- `input`仅支持fp32
- `approximate`仅支持none

### torch.sparse_coo_tensor

**限制与说明**：

- `values`仅支持fp16，fp32，int32

### torch.odd

**限制与说明**： `input`仅支持fp32，tf32
"""


# The generator's reading of each vendor format ----------------------------------------------------
def test_op_plugin_version_ranges_and_sections(gen):
    versions, rows, skipped = gen.parse_op_plugin(OP_PLUGIN)
    assert versions == ["2.1", "2.2", "2.3", "2.4", "2.5", "2.6", "2.7"]
    assert rows["aten::abs.default"] == set(versions)
    # acl_op and op_api are two implementations; either registers the op
    assert rows["aten::add.Tensor"] == {"2.1", "2.2", "2.3", "2.6", "2.7"}
    assert rows["aten::gelu.default"] == {"2.1", "2.2"}
    assert rows["aten::embedding.default"] == {"2.5", "2.6", "2.7"}   # symint, not a custom op
    assert "aten::npu_thing.default" not in rows and "aten::q_scale.default" not in rows
    assert "aten::no_ranges.default" not in rows                      # listed with no version
    assert skipped == {"custom": 1, "symint": 1, "quant": 1, "official": 1}


def test_op_plugin_rejects_an_unknown_version(gen):
    with pytest.raises(ValueError, match=r"op_plugin_functions.yaml:4: .*outside all_version"):
        gen.parse_op_plugin("all_version: [v2.1]\nofficial:\n  - func: abs(Tensor self) -> Tensor\n"
                            "    op_api: [v2.1, v3.0]\n")


def test_musa_dispatch_rule(gen):
    text = ("- func: abs\n- func: amax.out\n  dispatch:\n    PrivateUse1: AMaxOut\n"
            "- func: q_only\n  dispatch:\n    QuantizedPrivateUse1: q\n"
            "- func: both\n  dispatch:\n    PrivateUse1, QuantizedPrivateUse1: b\n  autogen: both.out\n")
    assert gen.parse_musa(text) == {"aten::abs.default", "aten::amax.out", "aten::both.default",
                                    "aten::both.out"}


def test_xpu_fallback_list(gen):
    text = 'x;\n  std::vector<std::string> fallback_list = {\n  "linalg_eig",\n  "ormqr.out", // c\n};\n"later"'
    assert gen.parse_xpu_fallback(text) == {"aten::linalg_eig.default", "aten::ormqr.out"}


def test_generate_from_work_trees_and_read_back(gen, tmp_path):
    plugin, npu = tmp_path / "op-plugin", tmp_path / "pytorch"
    (plugin / "op_plugin/config").mkdir(parents=True)
    (plugin / "op_plugin/config/op_plugin_functions.yaml").write_text(OP_PLUGIN, encoding="utf-8")
    (npu / "torch_npu/csrc/aten").mkdir(parents=True)
    (npu / "torch_npu/csrc/aten/npu_native_functions.yaml").write_text(TORCH_NPU, encoding="utf-8")
    docs = npu / "docs/zh/api/native_api/pytorch_2-13-0"
    docs.mkdir(parents=True)
    (docs / "torch.md").write_text(ASCEND_DOC, encoding="utf-8")
    out = tmp_path / "tables"
    assert gen.main(["--vendor", "npu", "--repo", f"Ascend/op-plugin={plugin}",
                     "--repo", f"Ascend/pytorch={npu}", "--out-dir", str(out)]) == 0
    table = read_vendor_table(out / "npu.txt")
    assert table.versions[-1] == "2.7" and table.plugin == "torch_npu"
    assert any("Ascend/op-plugin@unknown (not a git checkout)" in s for s in table.sources())
    assert table.ops("2.7") == {"aten::abs.default", "aten::add.Tensor", "aten::embedding.default",
                                "aten::empty_strided.default", "aten::copy_.default"}
    assert "aten::gelu.default" in table.ops("2.2") and "aten::add.Tensor" not in table.ops("2.4")
    # documented input dtypes (torch.abs, F.gelu); a limit on another argument or an unknown word is not
    assert table.dtype_limits == {"aten::abs": {"float16", "float32", "bfloat16"}, "aten::gelu": {"float32"}}
    assert any("torch-nn-functional.md: not in this checkout" in s for s in table.sources())
    assert table.changes("2.4")["aten::embedding.default"] == "native from 2.5"
    assert table.changes("2.4")["aten::gelu.default"] == "native in 2.1-2.2 (not in 2.4)"
    assert table.changes("2.4")["aten::add.Tensor"] == "native in 2.1-2.3, 2.6-2.7 (not in 2.4)"
    assert table.changes("2.2")["aten::add.Tensor"] == "native in 2.1-2.3, 2.6-2.7"
    assert "aten::abs.default" not in table.changes("2.4")


def test_repo_argument_errors(gen, capsys):
    with pytest.raises(SystemExit, match="OWNER/NAME=PATH"):
        gen.main(["--vendor", "npu", "--repo", "just-a-path"])
    with pytest.raises(SystemExit, match="needs --repo Ascend/op-plugin=PATH"):
        gen.main(["--vendor", "npu"])


def test_a_bad_row_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("# ops: 1\n# plugin-versions: 2.1\naten::abs.default\naten::x.default speed=fast\n",
                   encoding="utf-8")
    with pytest.raises(DescriptionError, match=r"bad.txt:4: .*unknown field"):
        read_vendor_table(bad)


# The checked-in tables against the bar -----------------------------------------------------
@pytest.mark.parametrize("chip", CHIPS)
def test_checked_in_table_names_its_sources(chip):
    table = read_vendor_table(TABLES / f"{chip}.txt")
    # each vendor file at a named commit (xpu adds the torch wheel's own XPU kernels, by torch version)
    assert table.sources() and all(re.search(r"@[0-9a-f]{40} ", s) or s.startswith("torch ")
                                   for s in table.sources())
    assert len(table.ops(table.versions[-1] if table.versions else None)) > 500


@pytest.mark.parametrize("chip", CHIPS)
def test_registered_ops_are_native_and_unregistered_backend_ops_are_not(chip):
    desc = torch_fl.description(chip)
    resolved = desc.native_table()
    assert resolved is not None, "no chip backend is loaded in the test process: the table answers"
    table, version, _ = resolved
    native = desc.native_ops()
    registered = table.ops(version) & set(probe.all_aten_ops())
    assert len(registered & native) / len(registered) >= 0.95
    # A CPU kernel that no composite provides and the vendor does not register (any version) is
    # backend-only: not native on the chip.
    every_line = table.ops(None)
    backend_only = probe.probe_native_ops("CPU") - probe.composite_ops() - every_line - \
        probe.forwarded_ops(every_line) - table.ops(None, "fallback")
    assert len(backend_only) > 50
    assert not backend_only & native


def test_structured_ops_forward_to_a_registered_out_overload():
    # Ascend registers gelu.out only; PyTorch's generated kernel runs gelu and gelu_ through it
    desc = torch_fl.description("npu")
    table = desc.native_table()[0]
    assert "aten::gelu.out" in table.ops(None) and "aten::gelu.default" not in table.ops(None)
    assert {"aten::gelu.default", "aten::gelu_.default"} <= desc.native_ops()
    assert probe.structured_delegates()["aten::gelu_.default"] == "aten::gelu.out"


def test_description_says_which_table_and_version():
    desc = torch_fl.description("npu")
    assert desc.native_source.startswith("table tables/npu.txt (torch_npu 2.15: the newest")
    assert "torch_npu is not installed" in desc.native_source
    asked = desc.with_plugin_version("2.5.1")
    assert "torch_npu 2.5: plugin version 2.5.1 asked for" in asked.native_source


def test_plugin_version_changes_the_native_set():
    desc = torch_fl.description("npu")
    table = desc.native_table()[0]
    later = {op for op, why in table.changes("2.5").items() if why.startswith("native from")}
    later = later & set(probe.all_aten_ops()) - probe.composite_ops()
    assert later, "Ascend added ops after 2.5 (e.g. bitwise shifts from 2.7)"
    assert later <= desc.native_ops()
    assert not later & desc.with_plugin_version("2.5").native_ops()


def test_version_selection():
    table = read_vendor_table(TABLES / "npu.txt")
    assert table.select(None)[0] == table.versions[-1]
    assert table.select("2.5.1.post3")[0] == "2.5"
    version, why = table.select("2.0.1")
    assert version == "2.1" and "oldest line 2.1" in why
    version, why = table.select("9.1")
    assert version == table.versions[-1] and "nearest older" in why
    with pytest.raises(DescriptionError, match=r"not a version like 2\.5"):
        table.select("latest")


def test_documented_dtype_limits_route_other_dtypes_off_the_native_path():
    desc = torch_fl.description("npu")
    assert "float64" not in desc.op_dtypes()["aten::acos"]  # Ascend: torch.acos input without fp64
    table = RouteTable(desc)
    assert table.route("aten::acos.default", "float32").kind == "native"
    assert table.route("aten::acos.default", "float64").kind != "native"
    assert "aten::acos" not in torch_fl.description("cuda").op_dtypes()


def test_xpu_cpu_fallback_list_becomes_fallback_routes():
    table = RouteTable(torch_fl.description("xpu"))
    route = table.route("aten::linalg_eig.default", "float32")
    assert route.kind == "fallback" and "ops.fallback" in route.source
    assert table.route("aten::add.Tensor", "float32").kind == "native"


def test_a_probed_chip_without_a_table_is_an_error_offline():
    desc = parse('schema = 1\nname = "offchip"\ndevice_type = "offchip"\ndispatch_key = "PrivateUse1"\n'
                 'plugin = "offchip_torch"\n', "offchip.toml")
    with pytest.raises(DescriptionError) as err:
        desc.native_ops()
    message = str(err.value)
    assert "offchip_torch is not loaded" in message and "ops.table" in message
    assert "scripts/gen_op_tables.py --vendor" in message


def test_doctor_shows_where_the_live_probe_and_the_table_differ(tmp_path):
    # The CPU is always live, so a CPU-keyed chip with a table is probed, and doctor compares the two
    from torch_fl.analysis import doctor
    from torch_fl.description.vendor_table import probe_vs_table

    (tmp_path / "t.txt").write_text("# ops: 2\n# plugin-versions: 1.0\n# source-1: test\n"
                                    "aten::add.Tensor\naten::_cudnn_rnn.default\n", encoding="utf-8")
    path = tmp_path / "hostchip.toml"
    path.write_text('schema = 1\nname = "hostchip"\ndevice_type = "cpu"\ndispatch_key = "CPU"\n'
                    '[ops]\ntable = "t.txt"\n', encoding="utf-8")
    desc = parse(path.read_text(encoding="utf-8"), str(path))
    assert desc.native_source == "probe" and desc.native_table() is None  # probing is the truth here
    diff = probe_vs_table(desc)
    assert diff["registered"] == 2 and diff["examples_table_not_probed"] == ["aten::_cudnn_rnn.default"]
    assert diff["probed_not_in_table"] > 1000
    rows = dict(doctor._route_rows({"routes": {"native": 1}, "route_default": "translate-or-error",
                                    "native_source": desc.native_source, "probe_vs_table": diff}))
    assert rows["probe vs table"].startswith("1 of the 2 ops the table registers for 1.0 have no kernel here "
                                             "(e.g. aten::_cudnn_rnn.default)")
    assert probe_vs_table(torch_fl.description("npu")) is None  # no torch_npu here: the table answers


def test_the_installed_plugin_picks_its_line(tmp_path, monkeypatch):
    # torch_npu 2.5.1 installed (its metadata; it is never imported): the 2.5 rows answer
    info = tmp_path / "torch_npu-2.5.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_npu\nVersion: 2.5.1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    desc = torch_fl.description("npu").with_plugin_version(None)
    _, version, why = desc.native_table()
    assert (version, why) == ("2.5", "torch_npu 2.5.1 installed")
    assert "aten::bitwise_left_shift.Tensor_out" not in desc.native_ops()  # Ascend: from 2.7
    assert "torch_npu" not in sys.modules
