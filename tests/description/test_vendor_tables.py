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

# npu_native_functions_by_codegen.yaml of a torch_npu wheel: yaml.dump's layout (keys sorted, lists at
# column 0, a bare name for torch_npu's own kernels)
NPU_CODEGEN = """\
backend: NPU
cpp_namespace: at_npu::native
autograd:
- func: _thnn_fused_gru_cell(Tensor input_gates, Tensor hidden_gates, Tensor hx, Tensor? input_bias=None, Tensor? hidden_bias=None) -> (Tensor, Tensor)
  impl_ns: op_api
custom:
- device_check: NoCheck
  exposed: true
  func: npu_format_cast.Tensor(Tensor self, Tensor dst) -> Tensor
- dispatch:
    CompositeExplicitAutograd: empty_with_format
  exposed: true
  func: empty_with_format(int[] size, *, ScalarType? dtype=None, int acl_format=2) -> Tensor
quant:
- func: int_repr(Tensor self) -> Tensor
  impl_ns: acl_op
supported:
- empty_strided
- func: copy_
  op_api: true
- empty_with_format
- device_check: NoCheck
  func: resize_as_
- func: abs(Tensor self) -> Tensor
  impl_ns: acl_op, op_api
- func: gelu.out(Tensor self, *, str approximate='none', Tensor(a!) out) -> Tensor(a!)
  impl_ns: op_api
  structured: true
- func: _coalesce(Tensor self) -> Tensor
  sparse: op_api
- func: add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)
  impl_ns: acl_op, op_api
  sparse: op_api
symint:
- as_strided_
- func: embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1) -> Tensor
  impl_ns: acl_op, op_api
"""
# the registration strings of its libtorch_npu.so: NUL-terminated, tail-merged (abs ends _foreach_abs)
NPU_LIBRARY = (b"\x7fELF\0junk\0empty_strided\0copy_\0resize_as_\0_foreach_abs\0gelu.out\0add.out\0"
               b"as_strided_\0embedding\0_thnn_fused_gru_cell\0")


def write_wheel(folder: Path, version: str, built: tuple[int, int, int], codegen: str = NPU_CODEGEN,
                library: bytes = NPU_LIBRARY) -> Path:
    """A torch_npu wheel with what the generator reads: METADATA, the codegen op list, the library."""
    import zipfile

    path = folder / f"torch_npu-{version}-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in ((f"torch_npu-{version}.dist-info/METADATA",
                            f"Metadata-Version: 2.1\nName: torch_npu\nVersion: {version}\n"),
                           ("torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml", codegen),
                           ("torch_npu/lib/libtorch_npu.so", library)):
            archive.writestr(zipfile.ZipInfo(name, date_time=(*built, 0, 0, 0)), data)
    return path


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
def test_npu_codegen_entries(gen):
    dense, autograd, skipped = gen.parse_npu_codegen(NPU_CODEGEN)
    assert dense == {"aten::empty_strided.default", "aten::copy_.default", "aten::resize_as_.default",
                     "aten::abs.default", "aten::gelu.out", "aten::add.out", "aten::as_strided_.default",
                     "aten::embedding.default", "aten::_thnn_fused_gru_cell.default"}
    assert autograd == {"aten::_thnn_fused_gru_cell.default"}
    # npu:: custom ops (also when torch_npu lists them as supported), quantized and sparse-only entries
    assert skipped == {"custom": 2, "quant": 1, "supported (an npu:: custom op)": 1, "supported (sparse only)": 1}
    with pytest.raises(ValueError, match=r"by_codegen.yaml:2: unexpected layout"):
        gen.parse_npu_codegen("supported:\n  - abs\n")


def test_every_op_is_a_registration_string_of_the_library(gen):
    dense, _, _ = gen.parse_npu_codegen(NPU_CODEGEN)
    assert gen.unregistered_in_library(dense, NPU_LIBRARY) == []
    assert gen.unregistered_in_library({"aten::scatter_reduce.two", "aten::junk.default"}, NPU_LIBRARY) == \
        ["aten::scatter_reduce.two"]  # 'junk' is a string of the library, 'scatter_reduce.two' is not


def test_newest_release_of_a_line_is_the_latest_built(gen, tmp_path):
    assert gen.release_key("2.9.0.post9") < gen.release_key("2.9.1") < gen.release_key("2.10.0")
    with pytest.raises(ValueError, match="not a final release"):
        gen.release_key("2.6.0rc1")
    write_wheel(tmp_path, "2.9.1", (2026, 5, 11))
    write_wheel(tmp_path, "2.9.0.post9", (2026, 10, 15))  # a post release of 2.9.0 built after 2.9.1
    write_wheel(tmp_path, "2.5.1", (2024, 11, 1))
    write_wheel(tmp_path, "2.5.1.post1", (2025, 7, 29))
    chosen = gen.newest_per_line([str(tmp_path)])
    assert {line: (wheel.version, older) for line, (wheel, older) in chosen.items()} == {
        "2.9": ("2.9.0.post9", ["2.9.1"]), "2.5": ("2.5.1.post1", ["2.5.1"])}
    assert chosen["2.9"][0].built == "2026-10-15" and len(chosen["2.9"][0].sha256) == 64


def test_musa_dispatch_rule(gen):
    text = ("- func: abs\n- func: amax.out\n  dispatch:\n    PrivateUse1: AMaxOut\n"
            "- func: q_only\n  dispatch:\n    QuantizedPrivateUse1: q\n"
            "- func: both\n  dispatch:\n    PrivateUse1, QuantizedPrivateUse1: b\n  autogen: both.out\n")
    assert gen.parse_musa(text) == {"aten::abs.default", "aten::amax.out", "aten::both.default",
                                    "aten::both.out"}


def test_xpu_fallback_list(gen):
    text = 'x;\n  std::vector<std::string> fallback_list = {\n  "linalg_eig",\n  "ormqr.out", // c\n};\n"later"'
    assert gen.parse_xpu_fallback(text) == {"aten::linalg_eig.default", "aten::ormqr.out"}


def test_generate_from_wheels_and_read_back(gen, tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    write_wheel(wheels, "2.1.0.post17", (2025, 10, 23), NPU_CODEGEN.replace("- func: gelu.out", "- func: gelu"),
                NPU_LIBRARY + b"gelu\0")
    write_wheel(wheels, "2.5.1", (2024, 11, 1), NPU_CODEGEN.replace("- func: abs", "- func: logit"),
                NPU_LIBRARY + b"logit\0")
    write_wheel(wheels, "2.5.1.post1", (2025, 7, 29))
    npu = tmp_path / "pytorch"
    docs = npu / "docs/zh/api/native_api/pytorch_2-13-0"
    docs.mkdir(parents=True)
    (docs / "torch.md").write_text(ASCEND_DOC, encoding="utf-8")
    out = tmp_path / "tables"
    assert gen.main(["--vendor", "npu", "--wheel", str(wheels), "--repo", f"Ascend/pytorch={npu}",
                     "--out-dir", str(out)]) == 0
    table = read_vendor_table(out / "npu.txt")
    assert table.versions == ("2.1", "2.5") and table.plugin == "torch_npu"
    assert table.header["releases"] == "2.1=2.1.0.post17 2.5=2.5.1.post1"  # the newest of each line
    first = table.sources()[0]
    assert first.startswith("pypi:torch-npu==2.1.0.post17 torch_npu-2.1.0.post17-cp311") and " sha256:" in first
    assert "built 2025-10-23" in first
    assert any("Ascend/pytorch@unknown (not a git checkout)" in s for s in table.sources())
    common = {"aten::empty_strided.default", "aten::copy_.default", "aten::resize_as_.default", "aten::abs.default",
              "aten::add.out", "aten::as_strided_.default", "aten::embedding.default",
              "aten::_thnn_fused_gru_cell.default"}
    # the backward ops PyTorch's formula of an autograd: op calls come with it
    backward = {"aten::_thnn_differentiable_gru_cell_backward.default", "aten::_thnn_fused_gru_cell_backward.default"}
    assert table.ops("2.5") == common | backward | {"aten::gelu.out"}
    assert table.ops("2.1") == common | backward | {"aten::gelu.default"}
    assert "aten::logit.default" not in table.ops(None)  # only 2.5.1 has it, and 2.5.1.post1 is read
    # documented input dtypes (torch.abs, F.gelu); a limit on another argument or an unknown word is not
    assert table.dtype_limits == {"aten::abs": {"float16", "float32", "bfloat16"}, "aten::gelu": {"float32"}}
    assert any("torch-nn-functional.md: not in this checkout" in s for s in table.sources())
    assert table.changes("2.1")["aten::gelu.out"] == "native from 2.5"
    assert table.changes("2.5")["aten::gelu.default"] == "native in 2.1 (not in 2.5)"
    assert "aten::abs.default" not in table.changes("2.1")
    # --verify regenerates from the same sources: equal; from another wheel of a line: the table differs
    args = ["--verify", "--out-dir", str(out), "--repo", f"Ascend/pytorch={npu}"]
    assert gen.main([*args, "--wheel", str(wheels)]) == 0
    (wheels / "torch_npu-2.5.1.post1-cp311-cp311-manylinux_2_28_x86_64.whl").unlink()
    assert gen.main([*args, "--wheel", str(wheels)]) == 1


def test_a_wheel_whose_op_list_the_library_does_not_register_is_refused(gen, tmp_path):
    write_wheel(tmp_path, "2.5.1", (2024, 11, 1), NPU_CODEGEN.replace("- func: abs", "- func: logit"))
    (tmp_path / "docs").mkdir()
    with pytest.raises(ValueError, match=r"1 ops of .* not registered in torch_npu/lib/libtorch_npu.so .*logit"):
        gen.main(["--vendor", "npu", "--wheel", str(tmp_path), "--repo", f"Ascend/pytorch={tmp_path / 'docs'}",
                  "--out-dir", str(tmp_path / "out")])


def test_branch_tables_keep_what_every_release_of_a_line_registers(gen, tmp_path, monkeypatch):
    repo = tmp_path / "torch_musa"
    (repo / "torch_musa/csrc/aten/ops").mkdir(parents=True)
    yaml = repo / "torch_musa/csrc/aten/ops/musa_functions.yaml"
    texts = {"v2.7.0": "- func: abs\n- func: sub.out\n", "v2.7.1": "- func: abs\n- func: add.out\n",
             "v2.5.0": "- func: abs\n"}

    class Tags(gen.Checkout):  # a work tree read at a tag: the test's texts
        def read(self, relpath, ref=None):
            return texts[ref]

    source = gen.VendorSource("MooreThreads/torch_musa", str(yaml.relative_to(repo)), "entries",
                              {"2.5": ("v2.5.0",), "2.7": ("v2.7.0", "v2.7.1")})
    vendor = gen.Vendor("musa", "torch_musa", "torch_musa", (source,))
    versions, rows, sources, releases = gen.vendor_rows(vendor, {source.repo: Tags(source.repo, str(repo))})
    assert versions == ["2.5", "2.7"] and releases == {"2.5": "v2.5.0", "2.7": "v2.7.0,v2.7.1"}
    assert rows == {"aten::abs.default": ("native", {"2.5", "2.7"})}  # sub.out, add.out: one release only
    assert "line 2.7 = the 1 ops all of v2.7.0, v2.7.1 register (2 ops of only some left out)" in sources[-1]


def test_repo_argument_errors(gen, capsys):
    with pytest.raises(SystemExit, match="OWNER/NAME=PATH"):
        gen.main(["--vendor", "npu", "--wheel", "x.whl", "--repo", "just-a-path"])
    with pytest.raises(SystemExit, match="needs --wheel PATH"):
        gen.main(["--vendor", "npu"])
    with pytest.raises(SystemExit, match="needs --repo intel/torch-xpu-ops=PATH"):
        gen.main(["--vendor", "xpu"])
    assert gen.main(["--verify"]) == 1  # no source given: nothing verified
    assert "npu: not verified" in capsys.readouterr().err


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
    # each vendor file at a named commit or in a released wheel by its sha256 (xpu adds the torch wheel's own
    # XPU kernels, by torch version)
    assert table.sources() and all(re.search(r"@[0-9a-f]{40} |^pypi:\S+==\S+ \S+\.whl sha256:[0-9a-f]{64} ", s)
                                   or s.startswith("torch ") for s in table.sources())
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
    # Ascend registers gelu.out only (from 2.7; gelu itself before); PyTorch's generated kernel runs gelu and
    # gelu_ through it
    desc = torch_fl.description("npu")
    table, version, _ = desc.native_table()
    assert "aten::gelu.out" in table.ops(version) and "aten::gelu.default" not in table.ops(version)
    assert {"aten::gelu.default", "aten::gelu_.default"} <= desc.native_ops()
    assert probe.structured_delegates()["aten::gelu_.default"] == "aten::gelu.out"


def test_description_says_which_table_and_version():
    desc = torch_fl.description("npu")
    assert desc.native_source.startswith("table tables/npu.txt (torch_npu 2.14: the newest")
    assert "torch_npu is not installed" in desc.native_source
    asked = desc.with_plugin_version("2.5.1")
    assert "torch_npu 2.5: plugin version 2.5.1 asked for" in asked.native_source


def test_plugin_version_changes_the_native_set():
    desc = torch_fl.description("npu")
    table = desc.native_table()[0]
    later = {op for op, why in table.changes("2.5").items() if why.startswith("native from")}
    later = later & set(probe.all_aten_ops()) - probe.composite_ops()
    assert later, "Ascend added ops after 2.5 (e.g. _chunk_cat from 2.7)"
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
    assert route.kind == "fallback" and "route=fallback" in route.source
    assert table.route("aten::add.Tensor", "float32").kind == "native"


# Facts of the released plugins (the committed tables; scripts/gen_op_tables.py --verify checks them
# against the wheels and tags they name) -------------------------------------------------------------------
def test_npu_lines_are_the_released_ones():
    table = read_vendor_table(TABLES / "npu.txt")
    releases = dict(item.split("=") for item in table.header["releases"].split())
    # one line per torch_npu release line on PyPI (no 2.2 was released), each read from its newest release
    assert table.versions == ("2.1", "2.3", "2.4", "2.5", "2.6", "2.7", "2.8", "2.9", "2.10", "2.11", "2.12",
                              "2.13", "2.14")
    assert releases["2.1"] == "2.1.0.post17" and releases["2.5"] == "2.5.1.post1" and releases["2.14"] == "2.14.0"
    assert releases["2.9"] == "2.9.0.post9"  # built 2026-10-15, after 2.9.1 (2026-05-11), and a superset of it
    # the default line (nothing installed) is the newest release
    assert torch_fl.description("npu").native_table()[1] == "2.14" == table.versions[-1]
    assert table.select(None)[0] == "2.14"


def test_npu_facts_of_the_released_wheels():
    table = read_vendor_table(TABLES / "npu.txt")
    scatter_reduce = {"aten::scatter_reduce.two", "aten::scatter_reduce.two_out", "aten::scatter_reduce_.two"}
    for line in ("2.1", "2.3", "2.4", "2.5", "2.6", "2.8"):  # 2.1.0.post17, 2.5.1.post1, ... lack it
        assert not scatter_reduce & table.ops(line), line
    assert scatter_reduce <= table.ops("2.7") and scatter_reduce <= table.ops("2.14")
    # logit: in 2.1.0.post17, not in 2.3.1.post6 or 2.4.0.post4 (nor 2.5.1; 2.5.1.post1, the 2.5 line, has it)
    assert "aten::logit.default" in table.ops("2.1")
    assert "aten::logit.default" not in table.ops("2.3") | table.ops("2.4")
    assert "aten::logit.default" in table.ops("2.5")
    # torch_npu's own kernels, npu:: custom ops are not aten rows
    assert {"aten::empty_strided.default", "aten::copy_.default"} <= table.ops("2.1") & table.ops("2.14")
    assert "aten::empty_with_format.default" not in table.rows


def test_xpu_facts_of_the_release_branch():
    table = read_vendor_table(TABLES / "xpu.txt")
    assert any("(release/2.13; torch 2.13) yaml/native/native_functions.yaml" in s for s in table.sources())
    native = table.ops(None)
    # torch-xpu-ops' codegen input, not the obsolete yaml/xpu_functions.yaml
    for op in ("aten::dot.default", "aten::avg_pool3d.default", "aten::_foreach_add.List", "aten::_ctc_loss.default",
               "aten::_fft_c2c.default", "aten::_fused_adam_.default", "aten::_thnn_fused_lstm_cell.default"):
        assert op in native, op
    assert "aten::mm.out" in native  # PyTorch's own oneDNN kernel (the torch wheel's native_functions.yaml)
    assert "aten::linalg_eig.default" in table.ops(None, "fallback")


def test_mlu_and_musa_lines_are_release_branches_and_tags():
    mlu = read_vendor_table(TABLES / "mlu.txt")
    assert mlu.header["releases"] == "2.1=r1.22_pt2.1.0 2.3=r1.22_pt2.3.0 2.4=r1.22_pt2.4.0"
    assert "aten::_foreach_add.List" not in mlu.ops(None)  # only on the r2.x_develop branches
    musa = read_vendor_table(TABLES / "musa.txt")
    assert "2.7=v2.7.0,v2.7.1" in musa.header["releases"]
    # added in v2.7.1: not every 2.7 release registers it
    assert "aten::_assert_async.default" not in musa.ops("2.7")


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
    from torch_fl.analysis import doctor_text
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
    rows = dict(doctor_text._route_rows({"routes": {"native": 1}, "route_default": "translate-or-error",
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
    assert "aten::bitwise_left_shift.Tensor_out" not in desc.native_ops()  # Ascend: in 2.7, 2.9-
    assert "torch_npu" not in sys.modules
