"""FL8: third-party libraries that run only on NVIDIA GPUs: detection."""

from __future__ import annotations

import ast

from .base import RuleContext, on, on_call_name, on_keyword, rule, str_value, triggers
from .memory import GPU_INTEROP_LIBRARIES

# Third-party imports that only run on NVIDIA GPUs (FL801): module prefix -> (what it provides, the
# portable alternative). A prefix matches the module and its submodules ("apex" matches "apex.amp").
CUDA_ONLY_LIBRARIES: dict[str, tuple[str, str]] = {
    "apex": ("NVIDIA Apex: mixed precision, fused optimizers and fused layers",
             "`torch.autocast` / `torch.amp.GradScaler`, `torch.optim.AdamW(fused=True)` where the "
             "device supports it, `torch.nn.LayerNorm`"),
    "flash_attn": ("FlashAttention CUDA kernels",
                   "`torch.nn.functional.scaled_dot_product_attention` (each device picks its fused kernel)"),
    "xformers": ("memory-efficient attention CUDA kernels",
                 "`torch.nn.functional.scaled_dot_product_attention`"),
    "bitsandbytes": ("8-bit and 4-bit optimizers and quantization CUDA kernels",
                     "torchao / `torch.ao.quantization`, or the chip vendor's quantization library"),
    "nvidia.dali": ("GPU data loading and augmentation",
                    "`torch.utils.data.DataLoader` with torchvision transforms"),
    "pynvml": ("NVIDIA management library queries (memory, utilisation)",
               "`torch.fl.mem_get_info()`, `torch.fl.get_device_properties()`"),
    "deepspeed.ops": ("DeepSpeed fused CUDA ops (FusedAdam, transformer kernels)",
                      "`torch.optim.AdamW`, or DeepSpeed's accelerator-neutral `deepspeed.accelerator`"),
    "transformer_engine": ("NVIDIA Transformer Engine FP8 layers",
                           "`torch.nn` layers under `torch.fl.autocast()`"),
    "torch_tensorrt": ("TensorRT compilation", "`torch.compile` / `torch.export` with AOTInductor"),
    "tensorrt": ("TensorRT inference engines", "`torch.compile` / `torch.export` with AOTInductor"),
}

# Names of CUDA-only packages and providers of other frameworks, as strings in code. A CUDA check that
# picks one of them (`providers = ["CUDAExecutionProvider", ...] if torch.cuda.is_available() else
# [...]`, `pip install onnxruntime-gpu` when CUDA is there) is correct as it is: on another accelerator
# those packages would not run, so the scanner leaves such a check alone.
CUDA_ONLY_PACKAGES = ("CUDAExecutionProvider", "TensorrtExecutionProvider", "onnxruntime-gpu", "onnxruntime_gpu",
                      "tensorflow-gpu", "tensorflow[and-cuda]", "paddlepaddle-gpu", "paddle-gpu", "cupy-cuda",
                      "faiss-gpu", "jax[cuda")

__all__ = ["CUDA_ONLY_LIBRARIES", "CUDA_ONLY_PACKAGES", "GPU_INTEROP_LIBRARIES"]

triggers("nvml", "load_in_", "bitsandbytesconfig", "flash_attention", *{m.split(".")[0] for m in CUDA_ONLY_LIBRARIES})

rule(
        "FL801", "cuda-only-library",
        "`{module}` is CUDA-only ({provides})", "Use {alternative}", None,
        what="An import of a third-party library that runs only on NVIDIA GPUs: " + ", ".join(
            f"`{m}`" for m in CUDA_ONLY_LIBRARIES) + ".",
        why="The import fails on other machines, or succeeds and fails at the first kernel launch.",
        example="""
from apex.optimizers import FusedAdam
from flash_attn import flash_attn_func
""",
        use_instead="""
opt = torch.optim.AdamW(model.parameters(), fused=torch.fl.device_type() == "cuda")
out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
""",
        fix_notes="The table of libraries and alternatives is `CUDA_ONLY_LIBRARIES` in "
                  "`torch_fl/migrate/rules/libraries.py`. DeepSpeed's host optimizers (`DeepSpeedCPUAdam`, "
                  "`DeepSpeedCPULion`, `deepspeed.ops.adam.cpu_adam`) run on the CPU and are not reported.",
)


@on("import")
def cuda_only_import(det: RuleContext, module: str, where: ast.AST) -> bool:
    if module.startswith("deepspeed.ops") and (
            "cpu_" in module.rsplit(".", 1)[-1]
            or (type(where) is ast.ImportFrom and all("CPU" in alias.name for alias in where.names))):
        return True  # DeepSpeedCPUAdam / cpu_adam: DeepSpeed's optimizers that run on the host CPU
    for prefix, (provides, alternative) in CUDA_ONLY_LIBRARIES.items():
        if module == prefix or module.startswith(prefix + "."):
            det.report("FL801", where, module=prefix, provides=provides, alternative=alternative)
            return True
    return False


@on_keyword("load_in_8bit", "load_in_4bit")
def quantized_load(det: RuleContext, call: ast.Call, arg: str, value: ast.expr, func: str | None) -> None:
    """transformers' `from_pretrained(..., load_in_8bit=True)`: bitsandbytes, behind a keyword."""
    if (type(value) is ast.Constant and not value.value) or (func or "").endswith("BitsAndBytesConfig"):
        return  # off, or the config call (reported itself)
    provides, alternative = CUDA_ONLY_LIBRARIES["bitsandbytes"]
    det.report("FL801", value, module="bitsandbytes", provides=f"{provides}, loaded by `{arg}=`",
               alternative=alternative)


@on_call_name("BitsAndBytesConfig")
def quantization_config(det: RuleContext, node: ast.Call, name: str) -> None:
    provides, alternative = CUDA_ONLY_LIBRARIES["bitsandbytes"]
    det.report("FL801", node, module="bitsandbytes", provides=f"{provides}, configured by `{name}`",
               alternative=alternative)


_QUANTIZED_KEYS = ("load_in_8bit", "load_in_4bit")


@on("assign")
def quantized_kwargs(det: RuleContext, target: ast.expr, value: ast.expr) -> None:
    """`kwargs["load_in_8bit"] = True`, `kwargs["attn_implementation"] = "flash_attention_2"` (LLaVA's
    builder, passed on as **kwargs)."""
    key = str_value(target.slice) if type(target) is ast.Subscript else None
    if key in _QUANTIZED_KEYS and not (type(value) is ast.Constant and not value.value):
        quantized_load(det, ast.Call(), key, value, None)  # type: ignore[arg-type]
    elif key == "attn_implementation":
        flash_attention(det, ast.Call(), key, value, None)  # type: ignore[arg-type]


@on_keyword("attn_implementation")
def flash_attention(det: RuleContext, call: ast.Call, arg: str, value: ast.expr, func: str | None) -> None:
    """transformers' `attn_implementation="flash_attention_2"`: the flash_attn package."""
    if (str_value(value) or "").startswith("flash_attention"):
        provides, alternative = CUDA_ONLY_LIBRARIES["flash_attn"]
        det.report("FL801", value, module="flash_attn", provides=f"{provides}, loaded by `{arg}=`",
                   alternative=alternative)
