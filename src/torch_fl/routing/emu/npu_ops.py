"""The vendor's fused ops of an emulated Ascend chip (``torch_npu.npu_*``), computed by reference math.

Code written for Ascend calls torch_npu's fused kernels directly. Under ``FL_DEVICE=emu:npu`` there is no
torch_npu, so this module defines the ones public code calls most as custom ops in the vendor's namespace
(``torch.ops.npu.npu_rms_norm``), with the vendor's schemas (argument names, order, defaults, returned
tuples, taken from Ascend/op-plugin ``op_plugin/config/op_plugin_functions.yaml`` and Ascend/pytorch
``torch_npu/csrc/aten/npu_native_functions.yaml``), and computes each one in plain aten ops following the
vendor's documentation (Ascend/op-plugin ``docs/zh/custom_APIs/torch_npu/*.md``):

- a ``CompositeExplicitAutograd`` kernel (any device: on plain CPU tensors it is the reference math);
- a fake (meta) kernel (``torch.library.register_fake``), so FakeTensor tracing, ``torch.compile`` and
  coverage see the op itself, as on the chip;
- the vendor's own backward ops (``npu_fusion_attention_grad``, ``npu_rms_norm_backward``,
  ``npu_rotary_mul_backward``, ``npu_swiglu_backward``, ...) as ops too, with explicit formulas, wired as
  the forward op's autograd (``torch.library.register_autograd``), so a backward pass records the same
  op pair as on the chip;
- on the emulated device, a handler in the EmuTensor's dispatch table (``tensor.SPECIAL``) that runs the
  reference math on the device tensors themselves: every aten op it uses is checked against the chip's
  route table, and the call is counted under route ``kernel`` (``kernel_route``).

Nothing is registered at import: ``register()`` (idempotent) defines the ops, and refuses when the real
torch_npu is importable (its ops own the ``npu`` namespace then). ``attach(module)`` puts the Python
functions (``FUSED_OPS``) and ``Format`` on an emulated ``torch_npu`` module.

Which ops, by calls in public code (``git grep`` of ``.NAME(`` in *.py of each snapshot, 2026):

==============================  =====================================================================
op                              evidence (repo:path)
==============================  =====================================================================
npu_fusion_attention            MindSpeed 32 calls (mindspeed/core/context_parallel/dot_product_attention.py,
                                ring_context_parallel/ring_context_parallel.py); huggingface/transformers
                                src/transformers/integrations/npu_flash_attention.py (BSND, TND, sparse_mode
                                2/3 with the 2048x2048 triu mask); microsoft/DeepSpeed op_builder/npu/inference.py;
                                vllm-project/vllm-ascend vllm_ascend/attention/attention_v1.py (TND);
                                Ascend/ModelZoo-PyTorch PyTorch/built-in/diffusion/.../attention_processor.py
npu_fusion_attention_grad       MindSpeed 10 calls (ring_context_parallel.py: SBH/TND with softmax_max/sum)
npu_rms_norm                    vllm-ascend 20 (vllm_ascend/_310p/ops/fla/l2norm.py); MindSpeed
                                mindspeed/core/fusions/fused_rms_norm.py; hiyouga/LLaMA-Factory
                                src/llamafactory/v1/plugins/model_plugins/kernels/ops/rms_norm/npu_rms_norm.py;
                                volcengine/verl verl/models/transformers/npu_patch.py
npu_add_rms_norm                vllm-ascend 8 (tests/ut/test_batch_invariant.py); MindSpeed 2
npu_rotary_mul                  vllm-ascend 7 (vllm_ascend/ops/qwen2_decoder.py); LLaMA-Factory 4
                                (.../kernels/ops/rope/npu_rope.py); verl npu_patch.py; DeepSpeed
                                op_builder/npu/inference.py
npu_swiglu                      vllm-ascend 11; LLaMA-Factory 3 (.../kernels/ops/mlp/npu_swiglu.py); verl
                                npu_patch.py; MindSpeed mindspeed/core/fusions/fused_bias_swiglu.py
npu_scaled_masked_softmax       ModelZoo 9 (PyTorch/built-in/foundation/ChatGLM-6B/model/modeling_chatglm.py);
                                MindSpeed 5 (mindspeed/core/fusions/fused_softmax.py, fixed_triu_mask=True)
npu_confusion_transpose         ModelZoo 54 (PyTorch/built-in/cv/classification/SimMIM_for_PyTorch/models/
                                swin_transformer.py, DINO_ID3436_for_PyTorch/vision_transformer.py)
fast_gelu / npu_fast_gelu       ModelZoo 20 (same two files); vllm-ascend vllm_ascend/ops/activation.py
npu_gelu                        documented (approximate='none'|'tanh'); rare in public code
npu_apply_adam_w (out=)         DeepSpeed op_builder/npu/fused_adam.py; MindSpeed
                                mindspeed/core/memory/compress/compress_optimizer.py
npu_format_cast, get_npu_format ModelZoo 201 (Arcface_for_PyTorch/backbones/iresnet.py, partial_fc.py);
                                vllm-ascend 74 + 3 (vllm_ascend/model_loader/netloader/executor/elastic_load.py)
==============================  =====================================================================

Left out: npu_grouped_matmul and the MoE token permutes (LLaMA-Factory, MindSpeed, verl call them, but
their grouping semantics deserve their own item), the quantized matmuls and inference-only attention of
vllm-ascend, and ``npu_dropout_with_add_softmax`` (3 calls, deprecated by the vendor).

Where the emulation differs from the chip (also in docs/vendor-ops.md): dropout masks come from torch's
CPU generator seeded with the returned ``seed``, not the chip's Philox stream; ``npu_format_cast`` changes
no memory layout (a copy; the format is remembered on the tensor for ``get_npu_format``); for ``TND``,
``softmax_max``/``softmax_sum`` are always token-major ``(T, N, 8)``; ``sparse_mode`` 5..8 (prefix and
varlen split) and ``pse`` with ``TND`` raise ``NotImplementedError``.
"""

from __future__ import annotations

import importlib.machinery
import inspect
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch

from ..._names import RouteKind
from . import npu_attention, npu_fused
from .npu_common import KERNEL_SOURCE, NAMESPACE, Format, FusedOp, ints

OPS: tuple[FusedOp, ...] = (*npu_attention.OPS, *npu_fused.OPS)


# canonical op name ('npu::npu_rms_norm.default') -> its reference kernel
KERNELS: dict[str, Callable[..., Any]] = {}
for _op in OPS:
    _base, _, _overload = _op.name.partition(".")
    KERNELS[f"{NAMESPACE}::{_base}.{_overload or 'default'}"] = _op.kernel


def kernel_route(op: str) -> Any:
    """The route of the vendor's fused op `op` ('npu::npu_rms_norm' or 'npu::npu_rms_norm.default') on an
    emulated chip: ``Route('kernel', KERNEL_SOURCE, reference)``; None for any other op."""
    from ..table import Route

    name = op if "." in op.split("::", 1)[-1] else f"{op}.default"
    kernel = KERNELS.get(name)
    return Route(RouteKind.KERNEL, KERNEL_SOURCE, kernel) if kernel is not None else None


# --- registration -------------------------------------------------------------------------------------------
_lock = threading.Lock()
_library: Any = None


def vendor_present() -> bool:
    """Whether the real torch_npu is loaded or installed (its ops own the ``npu`` namespace then). The
    emulated package (plugin.py: marked ``__torch_fl_emulation__``, found by torch-fl's own finder) is not."""
    loaded = sys.modules.get("torch_npu")
    if loaded is not None and not hasattr(loaded, "__torch_fl_emulation__"):
        return True
    return importlib.machinery.PathFinder.find_spec("torch_npu") is not None


def registered() -> bool:
    return _library is not None


def register() -> None:
    """Define the ops in ``torch.ops.npu`` (once per process; later calls return at once). Raises when the
    real torch_npu is present: its own kernels are the ones to call there."""
    global _library
    if _library is not None:
        return
    with _lock:
        if _library is not None:
            return
        if vendor_present():
            raise RuntimeError("torch-fl: the real torch_npu is installed; its fused ops are the chip's own "
                               "(torch_npu.npu_fusion_attention, ...) and torch-fl does not define emulated ones "
                               "next to them")
        lib = torch.library.Library(NAMESPACE, "FRAGMENT")
        for op in OPS:
            lib.define(op.schema)
            qualified = f"{NAMESPACE}::{op.name.split('.', 1)[0]}"
            lib.impl(op.name, op.kernel, "CompositeExplicitAutograd")
            if op.fake is not None:
                torch.library.register_fake(f"{NAMESPACE}::{op.name}", op.fake, lib=lib)
            if op.backward is not None:
                torch.library.register_autograd(qualified, op.backward, setup_context=op.setup, lib=lib)
        _library = lib
        _register_emulated()


def _register_emulated() -> None:
    """On the emulated device: each op runs its reference math on the device tensors (every aten op it
    uses is checked by the chip's route table), counted as the vendor's kernel."""
    from . import tensor

    for op in OPS:
        base, _, overload = op.name.partition(".")
        tensor.SPECIAL[getattr(getattr(torch.ops.npu, base), overload or "default")] = _emulated(op.kernel)


def _emulated(kernel: Callable[..., Any]) -> Callable[[Any, tuple, dict], Any]:
    def run(func: Any, args: tuple, kwargs: dict) -> Any:
        from ..._opnames import canonical_op_name
        from ..router import first_dtype
        from .slot import state

        router = state.router
        if router is None:  # an unchecked emulated device
            return kernel(*args, **kwargs)
        name = canonical_op_name(func)
        dtype = first_dtype(args, kwargs)
        route = state.table.route(name, dtype)
        if route.kind is RouteKind.UNSUPPORTED:  # (a dtype the chip does not have)
            raise router.error(name, args, kwargs, route)
        if route.kind is not RouteKind.KERNEL:  # the table says 'native: not an aten operator': the vendor's kernel
            route = kernel_route(name)
        return router.call(name, func, route, dtype, args, kwargs, native=None)
    return run


# --- the vendor's Python functions (torch_npu.<name>) --------------------------------------------------------
# Each binding of an op is made from the op's schema in OPS, the one statement of the vendor's signature: the
# same parameters, keyword-only ones and defaults (``self`` is ``input``, as in PyTorch's Python bindings), each
# argument converted to the type the schema names before the call, as torch_npu's bindings accept numbers and
# sequences there (a numpy int for head_num, a tuple for perm).
_CONVERT: dict[str, Callable[[Any], Any]] = {"int": int, "float": float, "bool": bool, "List[int]": ints,
                                             "Optional[List[int]]": ints}
# the v3 ops' tensors of sequence lengths, seeds and offsets, which vendor code also gives as a list or a number
_LENGTH_TENSORS = frozenset({"actual_seq_qlen", "actual_seq_kvlen", "seed", "offset"})


def _lengths(values: Any) -> torch.Tensor | None:
    """A tensor argument of the v3 ops given as a tensor, a sequence or a number: an int64 tensor."""
    if values is None or isinstance(values, torch.Tensor):
        return values
    return torch.tensor(values if isinstance(values, (list, tuple)) else [values], dtype=torch.long)


def _converter(arg: Any) -> Callable[[Any], Any] | None:
    kind = str(arg.type)
    if kind == "Optional[Tensor]" and arg.name in _LENGTH_TENSORS:
        return _lengths
    return _CONVERT.get(kind)


def _binding(qualified: str, doc: str = "") -> Callable[..., Any]:
    """torch_npu.<name>, the Python function of op `qualified` ('npu_rms_norm', '_npu_dropout_gen_mask.Tensor'):
    registers the ops, converts the arguments and calls ``torch.ops.npu.<qualified>``."""
    schema = torch._C.parse_schema(next(op.schema for op in OPS if op.name == qualified))
    empty, keyword, positional = (inspect.Parameter.empty, inspect.Parameter.KEYWORD_ONLY,
                                  inspect.Parameter.POSITIONAL_OR_KEYWORD)
    signature = inspect.Signature([
        inspect.Parameter("input" if a.name == "self" else a.name, keyword if a.kwarg_only else positional,
                          default=a.default_value if a.has_default_value() else empty)
        for a in schema.arguments])
    convert = {("input" if a.name == "self" else a.name): c for a in schema.arguments
               if (c := _converter(a)) is not None}
    base, _, overload = qualified.partition(".")

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        for name, value in bound.arguments.items():
            if name in convert:
                bound.arguments[name] = convert[name](value)
        register()
        return getattr(getattr(torch.ops.npu, base), overload or "default")(*bound.args, **bound.kwargs)

    call.__name__ = call.__qualname__ = base
    call.__doc__ = doc or None
    call.__signature__ = signature  # type: ignore[attr-defined]
    return call


npu_fusion_attention = _binding("npu_fusion_attention", """\
    Dropout(Softmax(Mask(scale * (pse + query @ key^T), atten_mask)), keep_prob) @ value.

    atten_mask: True/1 = masked out (SS, 11SS, B1SS, BNSS); sparse_mode 0 takes it as given (with the
    pre/next token band), 1 as given, 2/3 are causal from the top-left/bottom-right corner and 4 a band
    (pre_tockens before, next_tockens after the diagonal from the bottom-right), their mask being the
    compressed 2048x2048 triu; without atten_mask every query sees every key.
    seed/offset: 0 draws a seed; others seed the dropout mask (the backward regenerates it from them).
    sink and a dropout_mask with dropout are refused (not emulated).
    Returns (attention_out, softmax_max, softmax_sum, softmax_out, seed, offset, numels).""")
npu_fusion_attention_grad = _binding("npu_fusion_attention_grad",
                                     "The backward of npu_fusion_attention: (dq, dk, dv, dpse, dsink).")
npu_fusion_attention_v3 = _binding("npu_fusion_attention_v3", """\
    npu_fusion_attention with the cumulative sequence lengths as tensors, returning (attention_out,
    softmax_max, softmax_sum, softmax_out, seed, offset), seed and offset as 1-element int64 tensors on the
    device (its backward, npu_fusion_attention_grad_v3, takes them so).""")
npu_fusion_attention_grad_v3 = _binding("npu_fusion_attention_grad_v3", "The backward of npu_fusion_attention_v3: "
                                        "(dq, dk, dv, dpse, dsink); seed and offset are tensors.")
_npu_dropout_gen_mask = _binding("_npu_dropout_gen_mask.Tensor", """\
    The bit-packed keep mask (uint8, LSB first, 1 = kept, padded to 128 elements) of a dropout with drop
    probability p over prod(size) elements, drawn at (seed, offset) on input's device: the mask the fused ops
    draw from the same (seed, offset) (npu_dropout.py).""")
npu_rms_norm = _binding("npu_rms_norm", "(x * rsqrt(mean(x^2 over gamma's dims) + epsilon) * gamma, rstd); rstd is "
                                        "float32, keepdim.")
npu_add_rms_norm = _binding("npu_add_rms_norm", "(rms_norm(x1 + x2), rstd, x1 + x2).")
npu_rotary_mul = _binding("npu_rotary_mul", """\
    input * r1 + rotate(input) * r2: rotate_half (cat(-x2, x1)), 'interleave' pairs, or input @ rotate.
    r1/r2 (cos/sin) broadcast to the input (BSND: 1S1D; BNSD: 11SD; SBND: S11D; TND: T1D).""")
npu_swiglu = _binding("npu_swiglu", "a, b = input.chunk(2, dim): silu(a) * b.")
npu_scaled_masked_softmax = _binding("npu_scaled_masked_softmax", """\
    softmax(x * scale, masked_fill(mask, -10000)) over the last axis (mask True = masked out);
    fixed_triu_mask=True masks the upper triangle instead of the mask given.""")
npu_confusion_transpose = _binding("npu_confusion_transpose", "transpose_first: input.permute(perm).reshape(shape); "
                                                              "else input.reshape(shape).permute(perm).")
npu_gelu = _binding("npu_gelu")
npu_fast_gelu = _binding("npu_fast_gelu", "input / (1 + exp(-1.702 * input)).")
fast_gelu = _binding("fast_gelu", "torch_npu.fast_gelu: npu_fast_gelu's older name.")


def npu_apply_adam_w(beta1_power: float, beta2_power: float, lr: float, weight_decay: float, beta1: float,
                     beta2: float, epsilon: float, grad: torch.Tensor, max_grad_norm: torch.Tensor | None = None,
                     amsgrad: bool | None = False, maximize: bool | None = False, *,
                     out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None) -> tuple:
    """One AdamW step of (var, m, v) = out, in place; returns out. beta1_power/beta2_power: beta**(step-1)."""
    if out is None or len(out) != 3:
        raise TypeError("npu_apply_adam_w updates var, m and v in place: pass them as out=(var, m, v) (as "
                        "DeepSpeed's NPU FusedAdam does)")
    register()
    var, m, v = out
    return torch.ops.npu.npu_apply_adam_w.out(float(beta1_power), float(beta2_power), float(lr),
                                              float(weight_decay), float(beta1), float(beta2), float(epsilon),
                                              grad, max_grad_norm, amsgrad, maximize, var=var, m=m, v=v)


def _format_id(acl_format: Any) -> int:
    if isinstance(acl_format, torch.Tensor):
        return get_npu_format(acl_format)
    return int(acl_format)


def _format_argument(op: str, acl_format: Any, other: Any, other_name: str) -> Any:
    """The format given positionally or under either of the vendor's overloads' names (acl_format: an int;
    dst / src: a tensor whose format to take)."""
    if (acl_format is None) == (other is None):
        raise TypeError(f"{op}() takes the target format once: as acl_format (an int or torch_npu.Format) or as "
                        f"{other_name} (a tensor whose format to take)")
    return acl_format if acl_format is not None else other


def _cast_target(input: torch.Tensor, target: int) -> int:
    """The format a cast of `input` to `target` gives: a tensor in NC1HWC0 cast to ND comes back in NCHW, its base
    format (torch_npu transposes 5HD data back to the 4-D layout it came from; op-plugin test_format_cast.py)."""
    found = getattr(input, "_npu_format", None)
    if found == Format.NC1HWC0 and target == Format.ND:
        return int(Format.NCHW)
    return target


def npu_format_cast(input: torch.Tensor, acl_format: Any = None, *, dst: torch.Tensor | None = None,
                    customize_dtype: int | None = None, input_dtype: int | None = None) -> torch.Tensor:
    """A copy of `input` in storage format `acl_format` (int, torch_npu.Format, or a tensor whose format to
    take: the vendor's dst overload). The emulated chip has one layout: the data is unchanged, and
    get_npu_format reports the format."""
    register()
    target = _cast_target(input, _format_id(_format_argument("npu_format_cast", acl_format, dst, "dst")))
    out = torch.ops.npu.npu_format_cast(input, target, customize_dtype=customize_dtype, input_dtype=input_dtype)
    out._npu_format = target
    return out


def npu_format_cast_(input: torch.Tensor, src: Any = None, *, acl_format: Any = None,
                     customize_dtype: int | None = None, input_dtype: int | None = None) -> torch.Tensor:
    """In place: `input` itself, now reporting format `src` (int, torch_npu.Format or a tensor)."""
    register()
    target = _cast_target(input, _format_id(_format_argument("npu_format_cast_", src, acl_format, "acl_format")))
    npu_fused._format_cast(input, target)  # (the same check of the format id)
    input._npu_format = target
    return input


def get_npu_format(input: torch.Tensor) -> Format:
    """The tensor's storage format: the one a format cast gave it, else torch_npu's base format (NCHW for
    4-d, NCDHW for 5-d, ND otherwise)."""
    register()
    found = getattr(input, "_npu_format", None)
    return Format(found if found is not None else torch.ops.npu.get_npu_format(input))


# What an emulated torch_npu module carries: torch_npu.<name> = FUSED_OPS[name]
# Submodules of the emulated torch_npu beyond its top level: name under torch_npu -> the module that is it
# (plugin.py imports one when it is imported): the vendor's fused optimizers, as its docs import them.
PLUGIN_SUBMODULES = {"optim": "torch_fl.routing.emu.npu_optim",
                     "optim.npu_fused_optim_base": "torch_fl.routing.emu.npu_optim",
                     "npu.utils": "torch_fl.routing.emu.npu_utils",
                     "utils._step": "torch_fl.routing.emu.npu_step",
                     "onnx": "torch_fl.routing.emu.npu_onnx",
                     "profiler": "torch_fl.routing.emu.npu_profiler"}
# (imported when code imports them, not with the package: torch.onnx is heavy, and only export needs it)
LAZY_SUBMODULES = frozenset({"onnx", "profiler"})


def device_module_calls() -> dict[str, Any]:
    """The names torch_npu.npu (which is torch.npu) re-exports from torch_npu.npu.utils (its __all__): the plugin
    puts them on the device module when it is imported, as importing the real plugin does."""
    from . import npu_utils

    exported = ("StreamContext", "check_uce_in_memory", "clear_npu_overflow_flag", "current_blas_handle",
                "finalize_dump", "get_npu_overflow_flag", "get_sync_debug_mode", "init_dump", "ipc_collect",
                "obfuscation_calculate", "obfuscation_finalize", "obfuscation_initialize", "set_dump",
                "set_op_timeout_ms", "set_sync_debug_mode", "stress_detect")
    from .npu_runtime import npurt

    return {**{name: getattr(npu_utils, name) for name in exported}, "npurt": npurt}


def native_calls() -> dict[str, Any]:
    """The bindings of torch_npu._C beyond the device calls every plugin has (plugin.py), that the vendor's tests
    and Python code call: the SoC number, the inf/nan mode, the CANN version and the properties type."""
    from . import identity, memory, npu_runtime, npu_utils

    return {"_npu_npuCachingAllocator_set_allocator_settings": memory.set_allocator_settings,
            "_npurt": npu_runtime.native_module(),
            "_npu_get_soc_version": npu_utils.get_soc_version, "_npu_is_support_inf_nan": npu_utils.is_support_inf_nan,
            "_get_cann_version": npu_utils.get_cann_version, "_is_gte_cann_version": npu_utils._is_gte_cann_version,
            "_NPUDeviceProperties": identity.DeviceProperties}

FUSED_OPS: dict[str, Callable[..., Any]] = {
    "npu_fusion_attention": npu_fusion_attention,
    "npu_fusion_attention_grad": npu_fusion_attention_grad,
    "npu_fusion_attention_v3": npu_fusion_attention_v3,
    "npu_fusion_attention_grad_v3": npu_fusion_attention_grad_v3,
    "_npu_dropout_gen_mask": _npu_dropout_gen_mask,
    "npu_rms_norm": npu_rms_norm,
    "npu_add_rms_norm": npu_add_rms_norm,
    "npu_rotary_mul": npu_rotary_mul,
    "npu_swiglu": npu_swiglu,
    "npu_scaled_masked_softmax": npu_scaled_masked_softmax,
    "npu_confusion_transpose": npu_confusion_transpose,
    "npu_gelu": npu_gelu,
    "npu_fast_gelu": npu_fast_gelu,
    "fast_gelu": fast_gelu,
    "npu_apply_adam_w": npu_apply_adam_w,
    "npu_format_cast": npu_format_cast,
    "npu_format_cast_": npu_format_cast_,
    "get_npu_format": get_npu_format,
}

# The Tensor methods torch_npu adds (x.npu_format_cast(2), x.npu_confusion_transpose(...)), for an
# attacher that chooses to add them
TENSOR_METHODS: dict[str, Callable[..., Any]] = {
    "npu_format_cast": npu_format_cast,
    "npu_format_cast_": npu_format_cast_,
    "npu_confusion_transpose": npu_confusion_transpose,
}


def attach(module: Any) -> Any:
    """Register the ops and put FUSED_OPS, the aten-composed ops (npu_composed.py) and Format on `module` (an
    emulated ``torch_npu``); returns it."""
    from .npu_composed import COMPOSED_OPS

    register()
    for name, fn in {**COMPOSED_OPS, **FUSED_OPS}.items():
        setattr(module, name, fn)
    module.Format = Format
    import os

    if os.environ.get("PERF_DUMP_CONFIG") or os.environ.get("NPU_ASD_CONFIG"):
        from .npu_step import add_perf_dump_patch

        add_perf_dump_patch()  # (the vendor's import reads them: step time logs, the silent check's settings)
    return module

