"""FL7: kernels and extensions (CUDA extensions, ``.cu`` sources, Triton kernels): detection."""

from __future__ import annotations

import ast

from .base import RuleContext, alternatives, on, on_call, on_call_name, on_file, rule, str_value, triggers

CUDA_SUFFIXES = (".cu", ".cuh")
_TRITON = ("triton.jit", "triton.autotune")

triggers("cuda", "triton", "nvrtc", pattern=r"\.cuh?['\"]")  # "kernel.cu" in a sources list

rule(
        "FL701", "cuda-extension",
        "`{call}` builds a CUDA extension", "Provide a portable implementation (torch ops, a kernel "
        "registered per device with torch.library) and build the CUDA one only for CUDA", None,
        what="`torch.utils.cpp_extension.CUDAExtension(...)`, `load(...)` with `.cu` sources or CUDA "
             "flags, and `load_inline(..., cuda_sources=...)`.",
        why="The extension compiles with nvcc and its kernels exist only for CUDA; on another device the "
            "import fails or the op has no kernel.",
        example="""
ext = load(name="fused", sources=["fused.cpp", "fused_kernel.cu"])
""",
        use_instead="""
# A reference implementation in torch ops, registered as the op's default; the CUDA build
# registers a faster kernel for CUDA only (torch.library.custom_op + register_kernel).
""",
)

rule(
        "FL702", "cuda-source-file",
        "CUDA source file", "Give its kernels a portable implementation (torch ops or Triton)", None,
        what="A `.cu` or `.cuh` file in the scanned tree (reported at line 1, column 1).",
        why="CUDA C++ compiles for NVIDIA GPUs only (HIP can translate some of it for AMD); every other "
            "chip needs another implementation.",
        example="""
csrc/fused_kernel.cu
""",
        use_instead="""
# Keep the .cu kernel for CUDA, and register a portable version of the same op for every other
# device (see FL701).
""",
)

rule(
        "FL703", "triton-kernel",
        "Triton kernel `{func}` runs only where the target device has a Triton backend",
        "Register a fallback implementation for devices without Triton", None, level="warning",
        what="A function decorated with `@triton.jit` or `@triton.autotune`.",
        why="Triton compiles for NVIDIA, AMD and Intel GPUs and a few vendor backends, not for every "
            "chip; the kernel needs a fallback (torch ops) where there is no Triton backend.",
        example="""
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    ...
""",
        use_instead="""
# Route the op to the Triton kernel only where Triton runs; other devices keep their own route:
torch.fl.register_kernel("aten::gelu", triton_gelu, device_type="cuda")
""",
        runs_off_cuda=True,
)


rule(
        "FL704", "cuda-extension-import",
        "`{module}` is a built CUDA extension", "Import it where CUDA is present and give its ops a portable "
        "fallback (torch ops) elsewhere", None,
        what="An import of a compiled CUDA extension module, named by the `_cuda` suffix of one of its parts "
             "(`import scaled_masked_softmax_cuda`, `from fused_layer_norm_cuda import ...`, "
             "`importlib.import_module(\"fused_layer_norm_cuda\")`, `__import__(\"x_cuda\")`). Not reported: "
             "torch's own modules, the names a from-import takes (`from utils import move_to_cuda` is a "
             "function), and imports in a `try:` whose `except` catches ImportError (the code has a way "
             "without it).",
        why="The module is a shared library built with nvcc (Megatron's fused kernels, Apex, Mamba); it does "
            "not exist where CUDA is not installed, so the import fails before any device is chosen.",
        example="""
import scaled_masked_softmax_cuda
fused_layer_norm_cuda = importlib.import_module("fused_layer_norm_cuda")
""",
        use_instead="""
try:
    import scaled_masked_softmax_cuda
except ImportError:   # not built here: the torch-ops path below runs
    scaled_masked_softmax_cuda = None
""",
        fix_notes="The fallback is the kernel's reference implementation, which only the code's author "
                  "can write. A project module that happens to end in `_cuda` (a `.py` file) is reported "
                  "too: mark it `# noqa: FL704`.",
)


rule(
        "FL705", "cuda-only-op-registration",
        "`{call}` registers the op's kernel for CUDA only",
        "Register it for the accelerator's device type (`torch.fl.device_type()`), for every device "
        "(a torch-ops implementation, `device_types=None`), or add the vendor's", None,
        what="A custom op or kernel registered with torch.library for the CUDA device type only: "
             "`@torch.library.custom_op(..., device_types=\"cuda\")` (or a list of CUDA entries only), "
             "`torch.library.register_kernel(op, \"cuda\", ...)`, `torch.library.impl(op, \"cuda\")` and "
             "`torch.library.impl(lib, name, \"CUDA\")`, and a `Library`'s `lib.impl(name, fn, \"CUDA\")`. "
             "Not reported: `torch.fl.register_kernel(..., device_type=\"cuda\")` (a route for CUDA beside "
             "the op's own kernels, FL703) and registrations naming another device type too.",
        why="The op then has a kernel on CUDA and none elsewhere: on an NPU, MLU or XPU tensor the call "
            "fails with \"could not run ... with arguments from the 'PrivateUse1' backend\" (torchtitan "
            "registers 19 ops so: DeepEP dispatch, fused MLA, SwiGLU, Helion RoPE).",
        example="""
@torch.library.custom_op("mylib::rope", mutates_args=(), device_types="cuda")
def rope(x: torch.Tensor) -> torch.Tensor:
    return rope_triton(x)
""",
        use_instead="""
@torch.library.custom_op("mylib::rope", mutates_args=())   # the torch-ops reference, every device
def rope(x: torch.Tensor) -> torch.Tensor:
    return rope_reference(x)

@rope.register_kernel("cuda")                                # the fast kernel where it runs
def _(x):
    return rope_triton(x)
""",
        fix_notes="No automatic fix: what the op does on another device (a torch-ops reference, the "
                  "vendor's kernel) is the author's choice. A CUDA kernel registered beside a default "
                  "implementation of the same op (the `use_instead` form) is portable: mark it "
                  "`# noqa: FL705`.",
)

_REGISTRATIONS = ("torch.library.custom_op", "torch.library.register_kernel", "torch.library.impl")


def _cuda_only(value: ast.expr | None) -> bool:
    """"cuda"/"CUDA", or a list/tuple of those only (one of the values the expression may be)."""
    if value is None:
        return False
    if type(value) in (ast.List, ast.Tuple, ast.Set):
        elts = value.elts  # type: ignore[attr-defined]
        return bool(elts) and all((str_value(e) or "").lower() == "cuda" for e in elts)
    return any((str_value(alt) or "").lower() == "cuda" for alt in alternatives(value))


def _device_types(node: ast.Call, name: str) -> ast.expr | None:
    """The device-type argument of a torch.library registration."""
    keywords = {kw.arg: kw.value for kw in node.keywords if kw.arg}
    if name == "custom_op":  # custom_op(name, fn=None, /, *, mutates_args, device_types=None, schema=None)
        return keywords.get("device_types")
    if name == "register_kernel":  # register_kernel(op, device_types, func=None, /, *, lib=None)
        return keywords.get("device_types", node.args[1] if len(node.args) > 1 else None)
    # impl(qualname, types, func=None, *, lib=None), or the older impl(lib, name, dispatch_key="")
    found = keywords.get("types", keywords.get("dispatch_key"))
    if found is not None:
        return found
    return next((a for a in node.args[1:3] if _cuda_only(a)), None)


@on_call(*_REGISTRATIONS)
def cuda_only_registration(det: RuleContext, node: ast.Call, qual: str) -> None:
    name = qual.rsplit(".", 1)[1]
    value = _device_types(node, name)
    if _cuda_only(value):
        det.report("FL705", value, call=f"torch.library.{name}(...)")
        det.claim(value)  # type: ignore[arg-type]


@on_call_name("impl")
def library_impl(det: RuleContext, node: ast.Call, name: str) -> None:
    """`lib.impl("bmm", fn, "CUDA")` on a `torch.library.Library` (the dispatch key names the device)."""
    if type(node.func) is not ast.Attribute or det.qualname(node.func) in _REGISTRATIONS:
        return
    keywords = {kw.arg: kw.value for kw in node.keywords if kw.arg}
    value = keywords.get("dispatch_key", node.args[2] if len(node.args) > 2 else None)
    if value is not None and str_value(value) == "CUDA":
        det.report("FL705", value, call=f"{ast.unparse(node.func)}(...)")
        det.claim(value)


def _extension(module: str) -> bool:
    """Whether a module name is a built CUDA extension's: a part ends in `_cuda`, and it is not torch's."""
    parts = module.split(".")
    return parts[0] not in ("torch", "torch_fl") and any(part.endswith("_cuda") for part in parts)


@on("import")
def extension_import(det: RuleContext, module: str, where: ast.AST) -> bool:
    """`import x_cuda`, `from x_cuda import f`. Not the names a from-import takes (`from utils import
    move_to_cuda` is a function)."""
    if type(where) is ast.alias and where.name != module:
        return False
    if det.import_fallback or not _extension(module):
        return False
    det.report("FL704", where, module=module)
    return True


@on_call_name("import_module", "__import__")
def extension_import_call(det: RuleContext, node: ast.Call, name: str) -> None:
    module = str_value(node.args[0]) if node.args else None
    if module is not None and not det.import_fallback and _extension(module):
        det.report("FL704", node, module=module)


@on_file(*CUDA_SUFFIXES)
def cuda_source_file(det: RuleContext, path: str) -> None:
    det.report("FL702", (1, 0, 1, 0))


def _cuda_sources(node: ast.Call, keywords: dict[str | None, ast.expr]) -> bool:
    sources = keywords.get("sources", node.args[1] if len(node.args) > 1 else None)
    files = sources.elts if type(sources) in (ast.List, ast.Tuple) else [sources]  # type: ignore[union-attr]
    return any((str_value(f) or "").endswith(CUDA_SUFFIXES) for f in files)


@on_call_name("load")
def extension_by_name(det: RuleContext, node: ast.Call, name: str) -> None:
    """`load(name=..., sources=[..., "x.cu"])` whatever `load` is bound to (a snippet without the import,
    `cpp_extension.load` through a name the scanner cannot resolve): the .cu source says what it is."""
    keywords = {kw.arg: kw.value for kw in node.keywords if kw.arg}
    if "sources" in keywords and _cuda_sources(node, keywords):
        det.report("FL701", node, call="load(...)")


@on_call(*(f"torch.utils.cpp_extension.{name}" for name in ("CUDAExtension", "load", "load_inline")))
def extension(det: RuleContext, node: ast.Call, qual: str) -> None:
    name = qual.rsplit(".", 1)[1]
    keywords = {kw.arg: kw.value for kw in node.keywords if kw.arg}
    if name == "CUDAExtension":
        cuda = True
    elif name == "load":
        cuda = (_cuda_sources(node, keywords)
                or "extra_cuda_cflags" in keywords
                or (type(keywords.get("with_cuda")) is ast.Constant and keywords["with_cuda"].value is True))  # type: ignore[union-attr]
    else:  # load_inline(name, cpp_sources, cuda_sources=None, ...)
        cuda_sources = keywords.get("cuda_sources", node.args[2] if len(node.args) > 2 else None)
        cuda = cuda_sources is not None and not (type(cuda_sources) is ast.Constant and cuda_sources.value is None)
    if cuda:
        det.report("FL701", node, call=qual.replace("torch.utils.cpp_extension.", "") + "(...)")


@on("function")
def triton_kernel(det: RuleContext, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    for decorator in node.decorator_list:
        target = decorator.func if type(decorator) is ast.Call else decorator
        # `triton` unbound (a snippet without the import) is still Triton.
        if det.qualname(target) in _TRITON or ("triton" not in det.aliases and ast.unparse(target) in _TRITON):
            det.report("FL703", decorator, func=node.name)
            return
