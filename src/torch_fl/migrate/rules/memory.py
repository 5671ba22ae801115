"""FL6: raw memory (``.data_ptr()``, pointer arithmetic, GPU interop libraries): detection.

Not flagged: ``data_ptr()`` used as an identity (a dict key, a set member, compared with another one)
and ``data_ptr()`` of a tensor already moved to the host (``x.cpu().data_ptr()``).
"""

from __future__ import annotations

import ast
import re

from .base import RuleContext, on, on_call, on_method, rule, str_value, triggers

GPU_INTEROP_LIBRARIES: dict[str, str] = {
    "cupy": "CuPy arrays in CUDA memory",
    "pycuda": "the PyCUDA driver API",
    "numba.cuda": "Numba CUDA kernels",
    "cuda": "NVIDIA cuda-python bindings",
}
_CUDA_LIBRARY_FILE = re.compile(r"cud(?:a|art|nn)|cublas|cufft|curand|cusparse|cusolver|nvrtc|nccl|nvml",
                                re.IGNORECASE)
# Container methods that use a pointer as an identity: seen.add(x.data_ptr()), cache.get(x.data_ptr()).
_IDENTITY_METHODS = frozenset({"add", "get", "setdefault", "pop", "discard", "remove", "index", "count"})

# Storage methods of CUDA's inter-process sharing (torch.multiprocessing's CUDA reductions call them).
CUDA_IPC_METHODS = ("_share_cuda_", "_new_shared_cuda", "_release_ipc_counter_cuda")

triggers("data_ptr", "storage_offset", *{m.split(".")[0] for m in GPU_INTEROP_LIBRARIES})

rule(
        "FL601", "data-ptr",
        "`.data_ptr()` exposes a raw device address",
        "Keep raw addresses inside device-aware code (DLPack, torch ops, registered kernels)", None,
        level="warning",
        what="A `.data_ptr()` call (including `.untyped_storage().data_ptr()`). Not reported: identity uses "
             "(a dict key, a set member, `a.data_ptr() == b.data_ptr()`) and tensors already on the host "
             "(`x.cpu().data_ptr()`).",
        why="The number is an address in the device's memory space. Comparing two of them works "
            "everywhere, but handing one to a library or doing arithmetic on it assumes CUDA's unified "
            "virtual addressing; on other devices the address may be a handle or not host-visible.",
        example="""
lib.scale_inplace(x.data_ptr(), x.numel())
""",
        use_instead="""
lib.scale_inplace(torch.utils.dlpack.to_dlpack(x))   # carries device, dtype, shape and strides
# Identity checks (a.data_ptr() == b.data_ptr()) are portable: mark them `# noqa: FL601`.
""",
        runs_off_cuda=True,
)

rule(
        "FL602", "pointer-arithmetic",
        "Arithmetic on a device address ({how})",
        "Use tensor views (`narrow`, `view`, `as_strided`) or DLPack instead of raw pointers", None,
        what="Arithmetic on a `.data_ptr()` result or a storage offset (`x.data_ptr() + k`, a variable "
             "holding one), or a device address handed to `ctypes` (`ctypes.c_void_p(x.data_ptr())`).",
        why="Offsetting or dereferencing a device address only works where the address is a flat "
            "virtual address the caller may use, which is CUDA's model and not every chip's.",
        example="""
ptr = x.data_ptr() + x.element_size() * 16
lib.launch(ctypes.c_void_p(x.data_ptr()))
""",
        use_instead="""
view = x.view(-1)[16:]
lib.launch(torch.utils.dlpack.to_dlpack(x))
""",
)

rule(
        "FL603", "gpu-interop",
        "GPU interop through {what} (CUDA only)",
        "Exchange tensors through DLPack (`torch.from_dlpack`) with a library that supports the device",
        None,
        what="Imports of CUDA interop libraries (`cupy`, `pycuda`, `numba.cuda`, NVIDIA's `cuda` "
             "bindings) and `ctypes` loading a CUDA library (`ctypes.CDLL(\"libcudart.so\")`).",
        why="These share memory and kernels with tensors through CUDA's runtime; nothing of it exists on "
            "other accelerators.",
        example="""
import cupy as cp
arr = cp.from_dlpack(torch.utils.dlpack.to_dlpack(x))
""",
        use_instead="""
arr = torch.from_dlpack(x)   # or numpy on the host; or a Triton kernel (FL703) where supported
""",
)


rule(
        "FL604", "cuda-ipc",
        "`{call}` shares memory through CUDA IPC",
        "Share tensors through `torch.multiprocessing` (a Queue or Pipe), which uses the device's own sharing",
        None,
        what="The private storage methods of CUDA inter-process sharing: `storage._share_cuda_()`, "
             "`UntypedStorage._new_shared_cuda(...)`, `storage._release_ipc_counter_cuda(...)`.",
        why="They exchange cudaIpc memory handles, which exist only for CUDA memory; on another device "
            "the storage has no such method or the handle means nothing to the other process.",
        example="""
handle = tensor.untyped_storage()._share_cuda_()
""",
        use_instead="""
queue = torch.multiprocessing.Queue()
queue.put(tensor)   # torch.multiprocessing picks the sharing the tensor's device supports
""",
        fix_notes="The handle is a protocol with another process (often a serving engine's own); what "
                  "replaces it is a design choice, not a rewrite.",
)


@on_method(*CUDA_IPC_METHODS)
def cuda_ipc(det: RuleContext, node: ast.Call, attr: str) -> None:
    det.report("FL604", node, call=f".{attr}(...)")


def _is_ptr_call(node: ast.AST) -> bool:
    return type(node) is ast.Call and type(node.func) is ast.Attribute and node.func.attr == "data_ptr"


def _identity(det: RuleContext, node: ast.AST) -> None:
    if _is_ptr_call(node):
        det.done.add(id(node))


@on_method("data_ptr")
def data_ptr(det: RuleContext, node: ast.Call, attr: str) -> None:
    if node.args or id(node) in det.done:
        return
    receiver = node.func.value  # type: ignore[attr-defined]
    while type(receiver) is ast.Call and type(receiver.func) is ast.Attribute:
        if receiver.func.attr in ("cpu", "numpy"):
            return  # host memory
        receiver = receiver.func.value
    det.report("FL601", node)


@on("subscript")
def pointer_key(det: RuleContext, node: ast.Subscript) -> None:
    _identity(det, node.slice)


@on("dict")
def pointer_dict_key(det: RuleContext, node: ast.Dict) -> None:
    for key in node.keys:
        if key is not None:
            _identity(det, key)


@on("dictcomp")
def pointer_comprehension_key(det: RuleContext, node: ast.DictComp) -> None:
    _identity(det, node.key)


@on("compare")
def pointer_comparison(det: RuleContext, node: ast.Compare) -> None:
    for operand in (node.left, *node.comparators):
        _identity(det, operand)


@on_method(*_IDENTITY_METHODS)
def pointer_in_container(det: RuleContext, node: ast.Call, attr: str) -> None:
    if node.args:
        _identity(det, node.args[0])


def _pointers(det: RuleContext) -> set[str]:
    """Names this file binds to a data_ptr() value (or pointer arithmetic): FL602's own fact."""
    return det.state(__name__).setdefault("pointers", set())


def _is_pointer(det: RuleContext, node: ast.AST) -> bool:
    return (type(node) is ast.Call and type(node.func) is ast.Attribute
            and node.func.attr in ("data_ptr", "storage_offset")) or (
        type(node) is ast.Name and node.id in _pointers(det))


def _is_pointer_math(det: RuleContext, node: ast.AST) -> bool:
    return (type(node) is ast.BinOp and type(node.op) in (ast.Add, ast.Sub)
            and (_is_pointer(det, node.left) or _is_pointer(det, node.right)))


@on("assign")
def pointer_variable(det: RuleContext, target: ast.expr, value: ast.expr) -> None:
    if type(target) is ast.Name and (_is_pointer(det, value) or _is_pointer_math(det, value)):
        _pointers(det).add(target.id)


@on("binop")
def pointer_arithmetic(det: RuleContext, node: ast.BinOp) -> None:
    if type(node.op) in (ast.Add, ast.Sub) and (_is_pointer(det, node.left) or _is_pointer(det, node.right)):
        det.report("FL602", node, how=f"used in arithmetic (`{'+' if type(node.op) is ast.Add else '-'}`)")
        _identity(det, node.left)  # the data_ptr() is part of this finding (one finding per site)
        _identity(det, node.right)


@on("augassign")
def pointer_offset(det: RuleContext, node: ast.AugAssign) -> None:
    if type(node.target) is ast.Name and node.target.id in _pointers(det) and type(node.op) in (ast.Add, ast.Sub):
        det.report("FL602", node, how="offset in place")


@on_call("ctypes.c_void_p", "ctypes.cast", "ctypes.c_uint64", "ctypes.c_size_t", "ctypes.CDLL", "ctypes.PyDLL",
         "ctypes.cdll.LoadLibrary")
def ctypes_call(det: RuleContext, node: ast.Call, qual: str) -> None:
    if qual in ("ctypes.c_void_p", "ctypes.cast", "ctypes.c_uint64", "ctypes.c_size_t"):
        if any(_is_pointer(det, arg) or _is_pointer_math(det, arg) for arg in node.args):
            det.report("FL602", node, how=f"handed to `{qual}`")
            for arg in node.args:
                det.claim(arg)
    elif node.args:
        text = str_value(node.args[0])
        if text and _CUDA_LIBRARY_FILE.search(text):
            det.report("FL603", node, what=f'`{qual}("{text}")`')


@on("import")
def interop_import(det: RuleContext, module: str, where: ast.AST) -> bool:
    for prefix, what in GPU_INTEROP_LIBRARIES.items():
        if module == prefix or module.startswith(prefix + "."):
            det.report("FL603", where, what=f"`{prefix}` ({what})")
            return True
    return False
