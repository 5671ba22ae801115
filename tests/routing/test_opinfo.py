"""OpInfo cross-check of the translate and fallback routes on a representative subset.

The full op_db run is `scripts/opinfo_routes.py` (docs/opinfo.md); this runs the same functions on
about 30 OpInfos chosen to cover in-place and out= variants, views, multi-output ops, a decomposition
that returns NotImplemented, a random op, and every documented failure class.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

import torch_fl
from torch_fl import _env

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "opinfo_routes.py"

SUBSET = [
    # elementwise and reductions, with in-place and out= variants
    "add", "clamp", "where", "nn.functional.gelu", "addmm", "cumsum", "logsumexp", "softmax",
    # in-place and indexing
    "index_put", "index_add", "addbmm",
    # views, including tensor-list views
    "t", "transpose", "narrow", "diagonal", "split", "unbind", "take",
    # multi-output
    "max.reduction_with_dim", "topk", "sort", "var_mean", "std_mean", "native_layer_norm",
    "native_batch_norm",
    # decompositions that return NotImplemented, or recurse
    "nn.functional.adaptive_max_pool2d", "fft.fftshift",
    # out= tensor lists; random ops whose decomposition draws like the kernel (bernoulli) or not (cauchy)
    "unbind_copy", "bernoulli", "cauchy",
]


def _load_script():
    spec = importlib.util.spec_from_file_location("opinfo_routes", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def harness():
    return _load_script()


@pytest.fixture(scope="module")
def op_db(harness):
    return harness.load_op_db()


@pytest.fixture(scope="module")
def results(harness, op_db, tmp_path_factory):
    # Module scope runs before the per-test isolation of conftest.py: isolate the same way here.
    with pytest.MonkeyPatch.context() as mp:
        for var in _env.ALL:
            mp.delenv(var.name, raising=False)
        mp.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("home") / ".config"))
        mp.chdir(tmp_path_factory.mktemp("project"))
        torch_fl.reset()
        try:
            # fallback_all: also the ops without a decomposition (max.dim, topk, sort) go through
            # cpu_fallback, so its multi-output and out= handling is covered.
            found = harness.run(harness.select_ops(op_db, SUBSET),
                                harness.Settings(samples=3, fallback_all=True))
        finally:
            torch_fl.reset()
        assert "FL_ROUTE" not in os.environ  # the harness restores what it forces
    return {r.name: r for r in found}


def _failures(result, mode: str) -> str:
    return "\n".join(f"  {s.variant} sample {s.index}: {s.reason}" for s in result.failures(mode))


def _subset_names(harness, op_db) -> list[str]:
    return [harness.opinfo_name(op) for op in harness.select_ops(op_db, SUBSET)]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["translate", "fallback"])
def test_subset_passes_or_fails_as_documented(harness, op_db, results, mode):
    unexpected = {name: _failures(r, mode) for name, r in results.items() if r.status(mode) == "fail"}
    assert not unexpected, "\n".join(f"{name}:\n{why}" for name, why in unexpected.items())
    assert set(results) == set(_subset_names(harness, op_db))
    assert all(r.examined for r in results.values()), [r.name for r in results.values() if not r.examined]


@pytest.mark.slow
def test_subset_covers_what_it_claims(results):
    passed = [(r.name, s) for r in results.values() for s in r.samples if s.status == "pass"]
    variants = {s.variant for _, s in passed}
    assert variants == {"function", "inplace", "out"}
    # A decomposition is really exercised: every op with one is tested under translate.
    for name in ("add", "addmm", "var_mean", "native_layer_norm", "t", "split", "unbind", "index_put"):
        assert results[name].decomposed and results[name].status("translate") == "pass", name
    # Ops without a decomposition go through cpu_fallback only (multi-output, out= with two outputs).
    for name in ("max.reduction_with_dim", "topk", "sort"):
        assert not results[name].decomposed and results[name].status("fallback") == "pass", name
    assert any(o.startswith("aten::max.dim") for o in results["max.reduction_with_dim"].forced["fallback"])
    assert results["nn.functional.adaptive_max_pool2d"].status("translate") == "known"
    # Random ops compare under one seed; cauchy's decomposition draws differently: skipped, not failed.
    assert results["bernoulli"].status("translate") == "pass"
    assert results["cauchy"].status("translate") == "skip"
    assert all(s.reason.startswith("random") for s in results["cauchy"].samples if s.mode == "translate")


@pytest.mark.slow
def test_known_failures_in_the_subset_still_fail(harness, results):
    """A fixed bug must leave the known-failure list (like a strict xfail)."""
    stale = [f"{mode} {name}" for (mode, name) in harness.KNOWN_FAILURES
             if name in results and results[name].tested(mode) and results[name].status(mode) != "known"]
    assert not stale, f"no longer failing, remove from KNOWN_FAILURES: {stale}"


def test_every_known_failure_is_documented(harness):
    docs = (ROOT / "docs" / "opinfo.md").read_text(encoding="utf-8")
    missing = [name for (_, name) in harness.KNOWN_FAILURES if f"`{name}`" not in docs]
    assert not missing, f"add to docs/opinfo.md: {missing}"


def test_a_wrong_kernel_is_reported(harness, op_db, tmp_path):
    """The harness can fail: a wrong aten::mm kernel, reached through addmm's decomposition."""
    handle = torch.fl.register_kernel("aten::mm.default", lambda a, b: torch.ops.aten.mm.default(a, b) + 1)
    try:
        chip = harness.write_chip(tmp_path)
        result = harness.check_op(harness.select_ops(op_db, ["addmm"])[0], chip,
                                  harness.Settings(samples=1, variants=("function",)))
    finally:
        handle.remove()
    assert result.status("translate") == "fail"
    assert harness.VALUES_DIFFER in result.failures("translate")[0].reason
    assert result.status("fallback") == "pass"  # the forced fallback runs the CPU's own addmm


def test_compare_rules(harness):
    x = torch.tensor([1.0, float("nan")])
    assert harness.compare(x, x.clone(), 1.3e-6, 1e-5) is None  # NaNs compare equal
    assert harness.VALUES_DIFFER in harness.compare(x, x + 1, 1.3e-6, 1e-5)
    assert "expected 2 values" in harness.compare((x, x), (x,), 0, 0)
    assert "torch.float64" in harness.compare(x, x.double(), 0, 0)


def test_cpu_fallback_check_compares_arguments_afterwards(harness):
    """The direct cpu_fallback check compares every argument after the call, not only the output."""
    x, one = torch.zeros(3), torch.ones(3)

    def call(other_afterwards):
        return harness.RecordedCall(torch.ops.aten.add_.Tensor, "aten::add_.Tensor", before=((x, one), {}),
                                    after=((one, other_afterwards), {}), output=one,
                                    rng=torch.get_rng_state())

    assert harness.check_fallback_call(call(one), 1.3e-6, 1e-5) is None
    reason = harness.check_fallback_call(call(one * 5), 1.3e-6, 1e-5)  # as if the kernel wrote `other`
    assert reason is not None and "argument 'other' afterwards" in reason


def test_exact_clone_keeps_geometry_aliasing_and_conjugation(harness):
    base = torch.randn(4, 6)
    view = base[1:, ::2]
    z = torch.randn(3, dtype=torch.complex64).conj()
    cbase, cview, cz = harness.exact_clone((base, view, z))
    assert cview.stride() == view.stride() and cview.storage_offset() == view.storage_offset()
    assert cview.untyped_storage().data_ptr() == cbase.untyped_storage().data_ptr()
    assert cbase.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
    assert cz.is_conj() and torch.equal(cz.resolve_conj(), z.resolve_conj())
