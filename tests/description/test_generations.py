"""Product generations of one chip (npu: Atlas A2; npu-a3, npu-910, npu-310p): descriptions that extend
another, their dtype facts (CANN's aclnn pages, docs/descriptions.md "Generations"), and the refusals
that name the generation and the one to use instead.

PyTorch names the PrivateUse1 slot once per process and the test session registers it as 'emu', so the
emulated npu generations run in fresh processes with FL_DEVICE set."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import torch_fl
from chip_process import run_on_chip  # tests/chip_process.py
from torch_fl.cli import main
from torch_fl.description import registry
from torch_fl.description.generations import generations
from torch_fl.description.loader import parse
from torch_fl.errors import DescriptionError, UnknownDescriptionError
from torch_fl.routing.table import RouteTable

MATMULS = ("aten::mm.default", "aten::bmm.default", "aten::addmm.default", "aten::matmul.default")


@pytest.fixture
def fresh_registry():
    registry.reload()
    yield
    registry.reload()


def test_the_generations_of_npu_are_descriptions_that_extend_it():
    npu = torch_fl.description("npu")
    assert npu.generation.startswith("Atlas A2 training series") and npu.data["extends"] == ""
    assert [d.name for d in generations(npu)] == ["npu", "npu-910", "npu-a3", "npu-310p"]
    for name, base, generation in (("npu-a3", "npu", "Atlas A3 training series"),
                                   ("npu-910", "npu", "Atlas training series"),
                                   ("npu-310p", "npu-910", "Atlas inference series")):
        desc = torch_fl.description(name)
        assert desc.data["extends"] == base and desc.generation.startswith(generation)
        assert desc.device_type == "npu" and desc.plugin == "torch_npu"  # the rest comes from npu
        assert desc.section("ops")["table"] == "tables/npu.txt" and "aten::mm.default" in desc.native_ops()
        assert desc.section("detect")["priority"] < npu.section("detect")["priority"]  # auto-detection: npu
        assert [d.name for d in generations(desc)] == ["npu", "npu-910", "npu-a3", "npu-310p"]
    assert [d.name for d in generations(torch_fl.description("cuda"))] == ["cuda"]


@pytest.mark.parametrize("name, bf16", [("npu", True), ("npu-a3", True), ("npu-910", False), ("npu-310p", False)])
def test_bfloat16_matmuls_per_generation(name, bf16):
    desc = torch_fl.description(name)
    table = RouteTable(desc)
    for op in MATMULS:
        assert desc.takes(op, "bfloat16") is bf16, op
        assert desc.takes(op, "float16") and desc.takes(op, "float32")
    assert table.route("aten::mm.default", "bfloat16").kind == ("native" if bf16 else "unsupported")
    assert table.route("aten::mm.default", "float16").kind == "native"
    assert ("bfloat16" in desc.dtypes) is bf16  # 910/310P: no BFLOAT16 in any aclnn kernel
    assert desc.section("ops")["fused_attention"] is bf16  # aclnnFlashAttentionScore: Atlas A2 and later


def test_the_aclnn_rows_replace_the_api_pages_rows_on_a2_only():
    # (the documented rows: the tests' dtypes join them on every generation, test below)
    a2 = torch_fl.description("npu").documented_op_dtypes()
    first = torch_fl.description("npu-910").documented_op_dtypes()
    for op in ("aten::mm", "aten::bmm", "aten::addmm", "aten::matmul", "aten::silu", "aten::cumsum"):
        assert "bfloat16" in a2[op] and "bfloat16" not in first[op], op
        assert set(a2[op]) - {"bfloat16"} == set(first[op]), op  # the page's row plus bfloat16, nothing else
    assert first["aten::mm"] == ["float16", "float32"]


def test_a_bfloat16_refusal_names_the_generation_and_the_fix():
    route = RouteTable(torch_fl.description("npu-910")).route("aten::mm.default", "bfloat16")
    assert "precision.dtypes has no bfloat16 on Atlas training series" in route.source
    assert "'npu' (Atlas A2 training series (Ascend 910B)), 'npu-a3'" in route.source
    assert "use --device npu (FL_BACKEND=npu; FL_DEVICE=emu:npu emulates it)" in route.source
    assert "here compute in float32 or float16" in route.source
    # a refusal by an op's own dtype limit says so, with the generation
    route = RouteTable(torch_fl.description("npu")).route("aten::gather.default", "float64")
    assert route.kind == "unsupported"
    assert "ops.dtypes: aten::gather takes bfloat16, bool, float16, float32, int16, int32, int64 on Atlas A2 " \
           "training series" in route.source


@pytest.mark.parametrize("name", ["npu", "npu-a3", "npu-910", "npu-310p"])
def test_where_the_docs_and_the_vendors_tests_disagree_the_chip_follows_the_tests(name):
    # aclnnMm's page lists no float64, but torch_npu's own tests compute float64 mm on the chip (gradcheck in
    # test/npu/test_gradcheck.py, float64 models in test/optim/test_optim.py): both sources are recorded, and
    # the emulated chip runs what the tests run
    desc = torch_fl.description(name)
    assert "float64" not in desc.documented_op_dtypes()["aten::mm"]
    assert desc.dtype_sources("aten::mm.default", "float64") == {"documentation": False, "tests": True}
    assert desc.takes("aten::mm.default", "float64")
    assert RouteTable(desc).route("aten::mm.default", "float64").kind == "native"
    # complex128: not in the documented precision.dtypes, created and computed by torch_npu's test_sparse.py
    assert "complex128" not in desc.documented_dtypes and "complex128" in desc.dtypes
    assert desc.dtype_sources(None, "complex128") == {"documentation": False, "tests": True}
    # where both say yes, both are recorded; where neither does, the chip refuses
    assert desc.dtype_sources("aten::mm.default", "float32") == {"documentation": True, "tests": False}
    assert not desc.takes("aten::silu.default", "float64")
    assert ("bfloat16" in desc.dtypes) is (name in ("npu", "npu-a3"))  # the tests add no bfloat16
    # int32 max: test_sparse_coo.py's assertEqual takes the max of an int32 difference on the chip
    assert desc.dtype_sources("aten::max.default", "int32") == {"documentation": False, "tests": True}
    assert RouteTable(desc).route("aten::max.default", "int32").kind == "native"
    # complex64 matmuls, gather, nonzero, masked_select, equal: test_ops_jit.py runs them in torch.cfloat, but the
    # vendor's CI disables those cases on the chip (test/unsupported_test_cases/.pytorch-disabled-tests.json), so
    # they are no source: both say no, and the chip refuses
    for op in ("aten::mm.default", "aten::bmm.default", "aten::addbmm.default", "aten::gather.default",
               "aten::nonzero.default", "aten::masked_select.default", "aten::equal.default"):
        assert desc.dtype_sources(op, "complex64") == {"documentation": False, "tests": False}, op
        assert RouteTable(desc).route(op, "complex64").kind == "unsupported", op


def test_mlu_follows_its_tests_on_complex128():
    desc = torch_fl.description("mlu")
    assert "complex128" in desc.dtypes and "complex128" not in desc.documented_dtypes
    assert desc.dtype_sources(None, "complex128") == {"documentation": False, "tests": True}


def test_routes_show_bfloat16_mm(capsys):
    assert main(["routes", "show", "--device", "npu", "--op", "aten::mm", "--dtype", "bfloat16"]) == 0
    out = capsys.readouterr().out
    assert "4 native, 0 translate, 0 fallback, 0 kernel, 0 unsupported" in out
    main(["routes", "show", "--device", "npu-910", "--op", "aten::mm", "--dtype", "bfloat16"])
    out = capsys.readouterr().out
    assert "0 native" in out and "4 unsupported" in out
    assert "Atlas training series" in out and "--device npu" in out


def test_describe_a_generation_prints_toml_that_loads_back(capsys):
    assert main(["describe", "npu-910"]) == 0
    out = capsys.readouterr().out
    assert 'extends = "npu"' in out
    assert parse(out, "<stdout>") == torch_fl.description("npu-910")


def test_an_unknown_generation_gets_a_did_you_mean(capsys):
    assert main(["describe", "npu-91"]) == 2  # bad input
    assert "Did you mean 'npu-910'?" in capsys.readouterr().err
    with pytest.raises(UnknownDescriptionError, match="Did you mean 'npu-a3'"):
        torch_fl.description("npu-a2")


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_site_description_extends_a_builtin(tmp_path, monkeypatch, fresh_registry):
    # in another folder: the vendor table stays the built-in one's; [ops.dtypes] merges entry by entry
    # (its own detect.priority: npu's 60 inherited would tie with npu, an error, see test_registry)
    _write(tmp_path / "site", "mine.toml", 'schema = 1\nname = "ascend-910b4"\nextends = "npu"\n'
           'generation = "Atlas A2 (910B4)"\n[detect]\npriority = 61\n[ops.dtypes]\n"aten::mm" = ["float16"]\n')
    monkeypatch.setenv("FL_DESCRIPTION_PATH", str(tmp_path / "site"))
    desc = torch_fl.description("ascend-910b4")
    assert desc.documented_op_dtypes()["aten::mm"] == ["float16"]
    assert desc.op_dtypes()["aten::mm"] == ["float16", "float64"]  # npu's tested dtypes join it
    assert "bfloat16" in desc.op_dtypes()["aten::bmm"]  # npu's own entry, kept
    assert Path(desc.section("ops")["table"]).is_absolute() and "aten::mm.default" in desc.native_ops()
    assert desc.generation == "Atlas A2 (910B4)" and desc.name in [d.name for d in generations(desc)]


def test_a_site_npu_replaces_the_base_of_the_builtin_generations(tmp_path, monkeypatch, fresh_registry):
    # a site's npu.toml that extends the built-in npu: the built-in npu-a3 then extends the site's npu
    _write(tmp_path / "site", "npu.toml", 'schema = 1\nname = "npu"\nextends = "npu"\n'
           '[precision]\nautocast_dtype = "bfloat16"\n')
    monkeypatch.setenv("FL_DESCRIPTION_PATH", str(tmp_path / "site"))
    assert torch_fl.description("npu").autocast_dtype == "bfloat16"
    assert torch_fl.description("npu-a3").autocast_dtype == "bfloat16"
    assert torch_fl.description("npu-910").autocast_dtype == "float16"  # its own key wins
    assert "npu" in registry.shadowed()


def test_extends_an_unknown_description_is_an_error_with_a_suggestion(tmp_path, monkeypatch, fresh_registry):
    path = _write(tmp_path / "site", "bad.toml", 'schema = 1\nname = "bad"\nextends = "nup"\n')
    monkeypatch.setenv("FL_DESCRIPTION_PATH", str(tmp_path / "site"))
    with pytest.raises(DescriptionError, match=re.escape("extends 'nup', which is not a known description. Did "
                                                         "you mean 'npu'?")) as caught:
        registry.descriptions()
    assert f"{path}:3: [extends]" in str(caught.value)  # the file, the line, the key


def test_descriptions_that_extend_each_other_are_an_error(tmp_path, monkeypatch, fresh_registry):
    _write(tmp_path / "site", "a.toml", 'schema = 1\nname = "a"\nextends = "b"\n')
    _write(tmp_path / "site", "b.toml", 'schema = 1\nname = "b"\nextends = "a"\n')
    monkeypatch.setenv("FL_DESCRIPTION_PATH", str(tmp_path / "site"))
    with pytest.raises(DescriptionError, match="extends this file back"):
        registry.descriptions()


BF16_MM = r'''
import json, torch, torch_fl
a, b = torch.randn(4, 8), torch.randn(8, 3)
out = {}
try:
    r = torch.mm(a.bfloat16().npu(), b.bfloat16().npu())
    out["mm"] = [str(r.dtype), r.device.type, torch.equal(r.cpu(), a.bfloat16() @ b.bfloat16())]
except torch_fl.errors.UnsupportedOperatorError as exc:
    out["error"] = str(exc)
print(json.dumps(out))
'''


def _emulate(name: str) -> dict:
    return run_on_chip(BF16_MM, name)


def test_emulated_npu_runs_a_bfloat16_mm():
    assert _emulate("npu") == {"mm": ["torch.bfloat16", "npu", True]}


def test_emulated_npu_910_refuses_a_bfloat16_mm_naming_the_generation_and_the_fix():
    error = _emulate("npu-910")["error"]
    assert "emu:npu-910" in error and "bfloat16" in error
    assert "'npu-910' (Atlas training series (Ascend 910, 910 Pro A/B)) has no bfloat16" in error
    assert "'npu' (Atlas A2 training series (Ascend 910B))" in error and "FL_DEVICE=emu:npu" in error


MODEL = '''
import torch

def factory():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    return model.to(torch.bfloat16), (torch.randn(8, 16, dtype=torch.bfloat16),), None
'''


def test_coverage_of_a_bfloat16_model(tmp_path, capsys):
    spec = f"{_write(tmp_path, 'bf16_mlp.py', MODEL)}:factory"
    assert main(["coverage", spec, "--device", "npu", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["summary"]["unsupported_calls"] == 0
    routes = {(o["op"], o["dtype"]): o["route"] for o in report["ops"]}
    assert routes[("aten::addmm.default", "bfloat16")] == "native"
    assert main(["coverage", spec, "--device", "npu-910", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["summary"]["unsupported_calls"] > 0
    addmm = [o for o in report["ops"] if o["op"] == "aten::addmm.default" and o["dtype"] == "bfloat16"]
    assert addmm and "no bfloat16 on Atlas training series" in addmm[0]["source"]


FOLLOWS_THE_TESTS = r'''
import json, torch, torch_npu
out = {}
# torch_npu's test/npu/test_gradcheck.py: slow-mode gradcheck in float64 on the chip (mm, sigmoid, max, randn_like)
x = torch.rand(4, 4, dtype=torch.float64, device="npu", requires_grad=True)
out["gradcheck"] = torch.autograd.gradcheck(lambda t: (t @ t).sigmoid(), x, fast_mode=False)
out["batched"] = torch.autograd.gradcheck(lambda t: t.mul(5), x, check_batched_grad=True)
# torch_npu's test/test_sparse.py creates complex128 on the chip
z = torch.randn(3, dtype=torch.complex128, device="npu")
out["complex128"] = str((z * z.conj()).real.dtype)
# the complex64 bmm of test_ops_jit.py's addbmm case, which the vendor's CI disables on the chip: refused
a = torch.randn(2, 3, 4, dtype=torch.complex64, device="npu")
try:
    torch.bmm(a, a.transpose(1, 2))
except RuntimeError as exc:
    out["complex64_bmm"] = str(exc).splitlines()[0]
# test/test_sparse_coo.py: the max of an int32 difference
out["int32_max"] = torch.tensor([3, -7, 5], dtype=torch.int32, device="npu").max().item()
print(json.dumps(out))
'''


def test_the_emulated_npu_runs_what_the_vendors_tests_run():
    out = run_on_chip(FOLLOWS_THE_TESTS, "npu")
    assert out.pop("complex64_bmm").startswith("aten::bmm.default is not supported on emu:npu")
    assert out == {"gradcheck": True, "batched": True, "complex128": "torch.float64", "int32_max": 5}
