"""torch_npu's Python functions take the arguments of the vendor's schemas: the names (``self`` is ``input`` in
PyTorch's Python bindings, so ``torch_npu.fast_gelu(input=x)``), which ones are keyword-only, and the defaults.

npu_ops.OPS holds each schema as written in Ascend/op-plugin op_plugin/config/op_plugin_functions.yaml and
Ascend/pytorch torch_npu/csrc/aten/npu_native_functions.yaml (checked equal to both at op-plugin 517f2e7d and
pytorch 9e73e708a: docs/vendor-ops.md, "Identity and API surface"); this file checks the functions against them."""

from __future__ import annotations

import inspect

import pytest
import torch

from torch_fl.routing.emu import npu_composed, npu_ops

SCHEMAS = {op.name: torch._C.parse_schema(op.schema) for op in npu_ops.OPS}
# the Python function -> the overload whose binding it is
OVERLOADED = {"npu_apply_adam_w", "npu_format_cast", "npu_format_cast_"}
BOUND = {name: name for name in npu_ops.FUSED_OPS if name in SCHEMAS and name not in OVERLOADED}
BOUND["_npu_dropout_gen_mask"] = "_npu_dropout_gen_mask.Tensor"  # (the vendor's only overload of it)


def _python_name(name: str) -> str:
    return "input" if name == "self" else name  # (torchgen's Python signatures rename self)


FUNCTIONS = {**{name: (SCHEMAS[op], npu_ops.FUSED_OPS[name]) for name, op in BOUND.items()},
             **{name: (torch._C.parse_schema(text), npu_composed.COMPOSED_OPS[name])
                for name, text in npu_composed.SCHEMAS.items()}}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_the_python_function_takes_the_vendors_arguments(name):
    schema, function = FUNCTIONS[name]
    params = inspect.signature(function).parameters
    expected = [_python_name(a.name) for a in schema.arguments]
    assert list(params)[:len(expected)] == expected
    for arg in schema.arguments:
        param = params[_python_name(arg.name)]
        assert (param.kind is inspect.Parameter.KEYWORD_ONLY) is arg.kwarg_only, arg.name
        if arg.has_default_value():
            assert param.default is not inspect.Parameter.empty, arg.name
            default = arg.default_value
            assert param.default == (default if not isinstance(default, float) else pytest.approx(default)), arg.name
        else:
            assert param.default is inspect.Parameter.empty, arg.name


def test_every_vendor_function_the_emulation_offers_is_checked_or_named_here():
    # the out= and overloaded bindings: npu_apply_adam_w is npu_apply_adam_w.out (out=(var, m, v)); the format
    # casts bind several overloads (acl_format / dst / src), their keyword tests are below
    assert set(npu_ops.FUSED_OPS) - set(BOUND) == OVERLOADED


def test_keywords_vendor_code_passes():
    x = torch.randn(2, 4, 3, 8)
    gamma = torch.ones(8)
    torch.testing.assert_close(npu_ops.npu_rms_norm(input=x, gamma=gamma, epsilon=1e-6)[0],
                               npu_ops.npu_rms_norm(x, gamma)[0])
    torch.testing.assert_close(npu_ops.fast_gelu(input=x), npu_ops.npu_fast_gelu(x))
    torch.testing.assert_close(npu_ops.npu_swiglu(input=x, dim=-1), npu_ops.npu_swiglu(x))
    out = npu_ops.npu_fusion_attention(x, x, x, head_num=4, input_layout="BNSD", dropout_mask=None, seed=0, offset=0)
    torch.testing.assert_close(out[0], npu_ops.npu_fusion_attention(x, x, x, 4, "BNSD")[0])
    cast = npu_ops.npu_format_cast(x, dst=npu_ops.npu_format_cast(x, 29))
    assert npu_ops.get_npu_format(cast) == npu_ops.Format.FRACTAL_NZ
    assert npu_ops.get_npu_format(npu_ops.npu_format_cast_(x.clone(), acl_format=2)) == npu_ops.Format.ND
    with pytest.raises(TypeError, match=r"takes the target format once"):
        npu_ops.npu_format_cast(x, 2, dst=x)
    with pytest.raises(TypeError):
        npu_ops.npu_gelu(x, "tanh")  # approximate is keyword-only, as in the vendor's schema


def test_seed_and_offset_make_dropout_reproducible_and_come_back():
    x = torch.randn(1, 2, 16, 8)
    a = npu_ops.npu_fusion_attention(x, x, x, 2, "BNSD", keep_prob=0.5, seed=1234, offset=16)
    b = npu_ops.npu_fusion_attention(x, x, x, 2, "BNSD", keep_prob=0.5, seed=1234, offset=16)
    torch.testing.assert_close(a[0], b[0])
    assert (a[4], a[5]) == (1234, 16) and a[6] == 2 * 16 * 16


def test_what_the_emulation_cannot_honour_is_refused_not_ignored():
    x = torch.randn(1, 2, 4, 8)
    with pytest.raises(NotImplementedError, match=r"sink .* is not emulated"):
        npu_ops.npu_fusion_attention(x, x, x, 2, "BNSD", sink=torch.zeros(2))
    # a dropout_mask is the bit-packed mask _npu_dropout_gen_mask returns (test_npu_ops_dropout.py): a mask too
    # short for the attention is refused
    with pytest.raises(RuntimeError, match=r"dropout_mask holds 64 elements, the attention needs 128"):
        npu_ops.npu_fusion_attention(torch.randn(1, 2, 8, 8), torch.randn(1, 2, 8, 8), torch.randn(1, 2, 8, 8), 2,
                                     "BNSD", keep_prob=0.5, dropout_mask=torch.ones(8, dtype=torch.uint8))
    # without dropout the mask has nothing to do, as on the chip
    npu_ops.npu_fusion_attention(x, x, x, 2, "BNSD", dropout_mask=torch.ones(8, dtype=torch.uint8))


def test_refused_inputs_are_runtime_errors_as_the_vendors_kernels_raise():
    x = torch.randn(2, 4, 3, 8)
    with pytest.raises(RuntimeError, match=r"npu_rotary_mul: r1 of shape \(3,\) does not broadcast"):
        npu_ops.npu_rotary_mul(x, torch.ones(3), torch.ones(3))
    with pytest.raises(RuntimeError, match=r"head_num=3 does not divide|head_num=3, but query has 4 heads"):
        npu_ops.npu_fusion_attention(x, x, x, 3, "BNSD")
    # still a ValueError too, for code written against torch-fl
    with pytest.raises(ValueError, match="must be even"):
        npu_ops.npu_swiglu(torch.randn(3, 5))


def test_the_aten_composed_ops_compute_what_the_vendors_tests_compare_them_with():
    # (Ascend/pytorch test/custom_ops/test_npu_max.py, test_npu_one_hot.py,
    # test_npu_softmax_cross_entropy_with_logits.py, test_npu_slice.py, in our words)
    x = torch.randn(2, 3, 4)
    values, indices = npu_composed.npu_max(x, 2)
    expected = torch.max(x, 2)
    assert torch.equal(values, expected.values) and indices.dtype == torch.int32
    assert torch.equal(indices, expected.indices.int())
    hot = npu_composed.npu_one_hot(torch.tensor([[1, 3], [2, 0]]), -1, 5, 7, -1)
    assert hot.shape == (2, 2, 5) and hot[0, 1].tolist() == [-1, -1, -1, 7, -1]
    assert npu_composed.npu_one_hot(torch.tensor([3]), -1, 2).tolist() == [[0.0, 0.0]]  # cut to depth
    logits, labels = torch.randn(4, 10), torch.rand(4, 10)
    torch.testing.assert_close(npu_composed.npu_softmax_cross_entropy_with_logits(logits, labels),
                               torch.sum(-labels * torch.log(torch.softmax(logits, 1)), 1))
    assert torch.equal(npu_composed.npu_slice(x, [0, 1, 2], [2, 2, 2]), x[:, 1:3, 2:4])
    with pytest.raises(RuntimeError, match="must name each of the input's 3 dimensions"):
        npu_composed.npu_slice(x, [0], [1])
    with pytest.raises(NotImplementedError, match="can_refresh=True"):
        npu_composed.npu_reshape(x, [6, 4], can_refresh=True)
    assert npu_composed.get_storage_size(x[:1]) == 24
