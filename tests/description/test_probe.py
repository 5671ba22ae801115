"""Dispatcher probing, op-name canonicalisation and the generated CUDA/MPS op tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from torch_fl.description import probe
from torch_fl.errors import DescriptionError

REPO = Path(__file__).resolve().parents[2]
GENERATOR = REPO / "scripts" / "gen_op_tables.py"
TABLES = REPO / "src" / "torch_fl" / "description" / "builtin" / "tables"


@pytest.fixture
def fresh_cache():
    probe.cache_clear()
    yield
    probe.cache_clear()


# Names --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "expected"), [
    ("aten::gelu", "aten::gelu.default"),
    ("aten::gelu.default", "aten::gelu.default"),
    ("aten::add.Tensor", "aten::add.Tensor"),
    ("aten::add.out", "aten::add.out"),
    ("gelu", "aten::gelu.default"),
    ("add.Tensor", "aten::add.Tensor"),
    ("aten.gelu.default", "aten::gelu.default"),
    ("aten.gelu", "aten::gelu.default"),
    ("aten.add.Tensor", "aten::add.Tensor"),
    ("  aten::__and__.Scalar ", "aten::__and__.Scalar"),
    ("prims::add", "prims::add.default"),
])
def test_canonical_op_name_strings(name, expected):
    assert probe.canonical_op_name(name) == expected


def test_canonical_op_name_accepts_op_overloads():
    assert probe.canonical_op_name(torch.ops.aten.gelu.default) == "aten::gelu.default"
    assert probe.canonical_op_name(torch.ops.aten.add.Tensor) == "aten::add.Tensor"


@pytest.mark.parametrize("bad", ["", "aten::", "aten::add.", "aten::add.Tensor.x", "a.b.c.d", "1gelu",
                                 "aten::gelu(Tensor self)"])
def test_canonical_op_name_rejects_malformed(bad):
    with pytest.raises(ValueError, match="not an op name"):
        probe.canonical_op_name(bad)


def test_canonical_op_name_rejects_packets_and_other_objects():
    # A packet names every overload at once, so there is no single canonical name for it.
    with pytest.raises(TypeError, match="overload"):
        probe.canonical_op_name(torch.ops.aten.gelu)
    with pytest.raises(TypeError):
        probe.canonical_op_name(42)


def test_dispatcher_op_name_drops_default_only():
    assert probe.dispatcher_op_name("aten::gelu.default") == "aten::gelu"
    assert probe.dispatcher_op_name("aten::add.Tensor") == "aten::add.Tensor"


# Dispatcher ---------------------------------------------------------------------------------------
def test_all_aten_ops_is_canonical_sorted_aten_only():
    ops = probe.all_aten_ops()
    assert ops == sorted(set(ops))
    assert all(op.startswith("aten::") and probe.canonical_op_name(op) == op for op in ops)
    assert {"aten::mm.default", "aten::add.Tensor", "aten::add.out"} <= set(ops)


def test_cpu_probe_has_cpu_and_composite_kernels(fresh_cache):
    cpu = probe.probe_native_ops("CPU")
    assert {"aten::mm.default", "aten::add.Tensor", "aten::add.out"} <= cpu
    assert "aten::linear.default" in cpu  # CompositeImplicitAutograd: runs on every backend


def test_cpu_probe_excludes_cuda_only_ops(fresh_cache):
    # native_functions.yaml gives these kernels for CUDA and nothing else.
    cpu = probe.probe_native_ops("CPU")
    assert "aten::_cudnn_rnn.default" not in cpu
    assert "aten::_fused_dropout.default" not in cpu
    assert "aten::_cudnn_rnn.default" in probe.all_aten_ops()  # the schema exists, only the kernel is absent


def test_probe_counts_composites_for_keys_this_build_lacks(fresh_cache):
    assert "aten::linear.default" in probe.probe_native_ops("CUDA")


def test_probe_is_memoised_per_key(fresh_cache):
    assert probe.probe_native_ops("CPU") is probe.probe_native_ops("CPU")
    first = probe.probe_native_ops("CPU")
    probe.cache_clear()
    assert probe.probe_native_ops("CPU") is not first


def test_probe_rejects_unknown_dispatch_key(fresh_cache):
    with pytest.raises(ValueError, match="unknown dispatch key 'NotAKey'"):
        probe.probe_native_ops("NotAKey")


# Dtypes -------------------------------------------------------------------------------------------
def test_probe_dtypes_cpu(fresh_cache):
    dtypes = probe.probe_dtypes("cpu")
    assert {"float32", "int64", "bool", "bfloat16"} <= set(dtypes)
    assert len(dtypes) == len(set(dtypes))


def test_probe_dtypes_returns_a_copy(fresh_cache):
    probe.probe_dtypes("cpu").clear()
    assert "float32" in probe.probe_dtypes("cpu")


@pytest.mark.parametrize("device", ["no_such_device", "cuda:99", ""])
def test_probe_dtypes_never_raises(fresh_cache, device):
    assert probe.probe_dtypes(device) == []


# Table files --------------------------------------------------------------------------------------
def test_read_op_table_header_and_ops(tmp_path):
    table = tmp_path / "t.txt"
    table.write_text("# generated-by: scripts/gen_op_tables.py\n# torch-version: 9.9.9\n# backend: CUDA\n"
                     "# ops: 2\n\naten::mm.default\naten::add.Tensor\n# trailing: not metadata\n",
                     encoding="utf-8")
    header, ops = probe.read_op_table(table)
    assert header == {"generated-by": "scripts/gen_op_tables.py", "torch-version": "9.9.9",
                      "backend": "CUDA", "ops": "2"}
    assert ops == {"aten::mm.default", "aten::add.Tensor"}


def test_read_op_table_rejects_non_canonical_lines(tmp_path):
    table = tmp_path / "t.txt"
    table.write_text("# backend: CUDA\naten::mm.default\naten::gelu\n", encoding="utf-8")
    with pytest.raises(DescriptionError, match=r"t\.txt:3: .*aten::gelu"):
        probe.read_op_table(table)


def test_read_op_table_missing_file(tmp_path):
    with pytest.raises(DescriptionError, match="cannot read op table"):
        probe.read_op_table(tmp_path / "absent.txt")


@pytest.mark.parametrize(("stem", "backend"), [("cuda", "CUDA"), ("mps", "MPS")])
def test_committed_table_headers(stem, backend):
    header, ops = probe.read_op_table(TABLES / f"{stem}.txt")
    assert header["generated-by"] == "scripts/gen_op_tables.py"
    assert header["source"] == "torchgen/packaged/ATen/native/native_functions.yaml"
    assert header["backend"] == backend
    assert int(header["ops"]) == len(ops)
    assert header["torch-version"]


def test_committed_tables_contents():
    cuda = probe.read_op_table(TABLES / "cuda.txt")[1]
    mps = probe.read_op_table(TABLES / "mps.txt")[1]
    common = {"aten::mm.default", "aten::add.Tensor", "aten::add.out", "aten::linear.default"}
    assert common <= cuda
    assert common <= mps
    assert "aten::_fft_c2c.default" in cuda
    assert {"aten::_cudnn_rnn.default", "aten::_cudnn_rnn.out"} <= cuda
    assert "aten::_cudnn_rnn.default" not in mps
    assert "aten::_cudnn_rnn.out" not in mps  # autogen'd out= follows the op it forwards to


def test_committed_tables_are_current():
    header = probe.read_op_table(TABLES / "cuda.txt")[0]
    if header["torch-version"] != torch.__version__:
        pytest.skip(f"tables were generated with torch {header['torch-version']}, "
                    f"this is {torch.__version__}")
    result = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr


# Generator rules ----------------------------------------------------------------------------------
RULES_YAML = """\
# comment at column 0
- func: explicit(Tensor self) -> Tensor
  dispatch:
    CPU, CUDA: explicit_kernel  # inline comment

- func: sparse_only(Tensor self) -> Tensor
  dispatch:
    SparseCUDA, SparseMPS: sparse_kernel
    QuantizedCUDA: q_kernel
    NestedTensorCUDA: nt_kernel

- func: implicit(Tensor self) -> Tensor
  variants: function, method

- func: no_kernel(Tensor self) -> Tensor
  dispatch: {}

- func: explicit_composite.Scalar(Tensor self, Scalar other) -> Tensor
  dispatch:
    CompositeExplicitAutograd: ec
  autogen: explicit_composite.Scalar_out

- func: uf.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)
  structured: True
  ufunc_inner_loop:
    Generic: uf (AllAndComplex)
  dispatch:
    SparseCPU: uf_sparse

- func: uf(Tensor self) -> Tensor
  structured_delegate: uf.out

- func: mps_out.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)
  structured: True
  precomputed:
  - dim -> int dim
  dispatch:
    MPS: mps_out_kernel

- func: mps_out(Tensor self) -> Tensor
  structured_delegate: mps_out.out

- func: cuda_only(Tensor self) -> Tensor
  dispatch:
    CUDA: cuda_only
  autogen: cuda_only.out
"""


@pytest.fixture
def rule_entries(gen, tmp_path):
    path = tmp_path / "native_functions.yaml"
    path.write_text(RULES_YAML, encoding="utf-8")
    return gen.parse_native_functions(path)


def _native(gen, entries, key):
    everything = {gen.canonical(e.name) for e in entries} | {
        gen.canonical(op) for e in entries for op in e.autogen}
    return gen.native_ops(entries, key, frozenset(everything))


def test_generator_rules_cuda(gen, rule_entries):
    assert _native(gen, rule_entries, "CUDA") == {
        "aten::explicit.default", "aten::implicit.default", "aten::explicit_composite.Scalar",
        "aten::explicit_composite.Scalar_out", "aten::uf.out", "aten::uf.default",
        "aten::cuda_only.default", "aten::cuda_only.out",
    }


def test_generator_rules_mps(gen, rule_entries):
    # ufunc kernels are generated for CPU and CUDA only; Sparse/Quantized/Nested keys are not MPS.
    assert _native(gen, rule_entries, "MPS") == {
        "aten::implicit.default", "aten::explicit_composite.Scalar",
        "aten::explicit_composite.Scalar_out", "aten::mps_out.out", "aten::mps_out.default",
    }


def test_generator_drops_unregistered_overloads(gen, rule_entries):
    registered = frozenset({"aten::explicit.default", "aten::cuda_only.default"})
    assert gen.native_ops(rule_entries, "CUDA", registered) == registered


def test_generator_rejects_unknown_layout(gen, tmp_path):
    path = tmp_path / "native_functions.yaml"
    path.write_text("- func: ok(Tensor self) -> Tensor\nsurprise: true\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"native_functions\.yaml:2: .*layout"):
        gen.parse_native_functions(path)


def test_generator_check_reports_drift(gen, tmp_path, capsys):
    for chip in gen.VENDORS:  # vendor tables come from vendor checkouts; --check only reads them
        (tmp_path / f"{chip}.txt").write_bytes((TABLES / f"{chip}.txt").read_bytes())
    assert gen.main(["--out-dir", str(tmp_path)]) == 0
    assert gen.main(["--out-dir", str(tmp_path), "--check"]) == 0
    table = tmp_path / "cuda.txt"
    table.write_text(table.read_text(encoding="utf-8").replace("aten::mm.default\n", ""),
                     encoding="utf-8")
    capsys.readouterr()
    assert gen.main(["--out-dir", str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert "cuda.txt" in err and "aten::mm.default" in err
    assert "mps.txt" not in err
    (tmp_path / "npu.txt").unlink()
    assert gen.main(["--out-dir", str(tmp_path), "--check"]) == 1
    assert "npu.txt: cannot read vendor op table" in capsys.readouterr().err


def test_generator_is_deterministic(gen):
    assert gen.generate() == gen.generate()
