"""FL5: distributed (``"nccl"``, ``NCCL_*`` and ``CUDA_VISIBLE_DEVICES`` in code): detection and fix."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ..cuda_api import NCCL
from .base import (
    RuleContext,
    alternatives,
    fixes,
    nccl_strings,
    on,
    on_call,
    on_call_name,
    on_keyword,
    rule,
    str_value,
    terminal_name,
    triggers,
)
from .control import device_choice

if TYPE_CHECKING:
    import libcst as cst

    from .base import Finding, FixContext

BACKEND_KWARGS = ("backend", "process_group_backend", "dist_backend")
# Collective backends of one vendor's chips (Ascend, Cambricon, Intel, Moore Threads): hard-coded, the code
# runs on that vendor only.
VENDOR_BACKENDS = ("hccl", "cncl", "xccl", "mccl")
# Functions that take "nccl" positionally, by their last name (works for dist.x and bare x):
# name -> index of the backend argument.
BACKEND_POSITIONS = {"init_process_group": 0, "new_group": 2, "init_distributed": 0}
_ENV_WRITERS = {"os.environ.setdefault": "set", "os.environ.pop": "removed", "os.putenv": "set",
                "os.unsetenv": "removed"}
_ENV_READERS = {"os.environ.get": "read", "os.getenv": "read"}

triggers("nccl", "cuda", "rank", *VENDOR_BACKENDS)

rule(
        "FL501", "nccl-backend",
        "Hard-coded `{backend}` process-group backend{detail}", "Replace with `torch.fl.dist_backend()`",
        "safe",
        what="`\"nccl\"` passed as the backend of `init_process_group` / `new_group`, or as a "
             "`backend=`, `process_group_backend=` or `dist_backend=` keyword; also `\"nccl\"` bound to "
             "a variable that is then passed as the backend.",
        why="NCCL exists only for NVIDIA GPUs; Ascend uses hccl, Cambricon cncl, Intel xccl, the CPU "
            "gloo. The description of each device names its collective backend.",
        example="""
dist.init_process_group("nccl")
backend = "nccl" if torch.cuda.is_available() else "gloo"
dist.init_process_group(backend=backend)
""",
        use_instead="""
dist.init_process_group(torch.fl.dist_backend())
# or torch.fl.distributed.init_process_group(), which also runs a preflight check
""",
        fix_notes="A literal passed directly is a safe fix; a literal reaching the call through a "
                  "variable gets an unsafe fix, because the variable may also be compared with \"nccl\". A "
                  "vendor's own backend passed directly (`\"hccl\"`, `\"cncl\"`, `\"xccl\"`, `\"mccl\"`: code "
                  "written for one vendor's chips) is reported and fixed the same way: on that vendor's host "
                  "`torch.fl.dist_backend()` names it, elsewhere the backend of the device there.",
        claims_site=False,
)

rule(
        "FL502", "nccl-env",
        "NCCL environment variable `{var}` {action} in code",
        "Set it in the launch environment (or leave it to the collective backend)", None, level="warning",
        what="Setting or removing an `NCCL_*` environment variable from Python: `os.environ[...] = `, "
             "`os.environ.setdefault`, `os.environ.update`, `os.environ.pop`, `del os.environ[...]`, "
             "`os.putenv`.",
        why="NCCL tuning does nothing on other collective backends (hccl, cncl, xccl, gloo), and setting "
            "it inside the program hides a deployment decision in code.",
        example="""
os.environ["NCCL_P2P_DISABLE"] = "1"
os.environ.setdefault("NCCL_DEBUG", "INFO")
""",
        use_instead="""
# In the launcher or job spec, for the clusters that use NCCL:
#   NCCL_P2P_DISABLE=1 torchrun --nproc-per-node 8 train.py
""",
        runs_off_cuda=True,
)

rule(
        "FL503", "cuda-visible-devices",
        "`{var}` {action} in code",
        "Use the device description's `visible_devices_env`, or map devices with `FL_DEVICE_MAP`", None,
        level="warning",
        what="Reading or setting `CUDA_VISIBLE_DEVICES` from Python, or setting another CUDA runtime "
             "variable (`CUDA_LAUNCH_BLOCKING`, `PYTORCH_CUDA_ALLOC_CONF`, a library's `RWKV_CUDA_ON`), also "
             "in a child process's environment (`subprocess.run(..., env={**os.environ, "
             "\"CUDA_VISIBLE_DEVICES\": \"0\"})`, or a key set on a copy named `env`).",
        why="Each runtime has its own variable (`ASCEND_RT_VISIBLE_DEVICES`, `MLU_VISIBLE_DEVICES`, "
            "`ZE_AFFINITY_MASK`, ...); code that sets the CUDA one pins nothing on other chips, and code "
            "that reads it computes a wrong device list there.",
        example="""
os.environ["CUDA_VISIBLE_DEVICES"] = str(local_rank)
""",
        use_instead="""
# Let the launcher pin devices, or choose the device symbolically:
device = torch.fl.device(f"acc{local_rank}")
# FL_DEVICE_MAP="acc0=cuda:1" maps virtual devices without touching the runtime's variable;
# torch.fl.description().visible_devices_env names the variable of the current chip.
""",
        runs_off_cuda=True,
)


def check_backend(det: RuleContext, value: ast.expr) -> None:
    if type(value) is ast.IfExp and device_choice(det, value) is not None:
        return  # `"nccl" if torch.cuda.is_available() else "gloo"`: one finding, on the whole choice
    for literal in nccl_strings(value):
        det.report("FL501", literal, "safe", backend=NCCL, detail="")
    for alt in alternatives(value):
        if str_value(alt) in VENDOR_BACKENDS:  # init_process_group("hccl"): one vendor's code
            det.report("FL501", alt, "safe", backend=str_value(alt), detail=" (a vendor's own collectives)")
    det.sink("backend", value)


@on_call_name(*BACKEND_POSITIONS)
def backend_position(det: RuleContext, node: ast.Call, name: str) -> None:
    index = BACKEND_POSITIONS.get(name)
    if index is not None and len(node.args) > index:
        check_backend(det, node.args[index])


@on_keyword(*BACKEND_KWARGS)
def backend_keyword(det: RuleContext, call: ast.Call, arg: str, value: ast.expr, func: str | None) -> None:
    check_backend(det, value)


@on_call("torch.distributed.is_nccl_available")
def nccl_available(det: RuleContext, node: ast.Call, qual: str) -> None:
    det.report("FL501", node, backend=NCCL, detail=" asked for (`is_nccl_available()`): ask `torch.fl.dist_backend()` instead")


@on("compare")
def backend_comparison(det: RuleContext, node: ast.Compare) -> None:
    """`dist.get_backend() == "nccl"`, `args.dist_backend == "nccl"`: asks whether collectives run on NVIDIA
    GPUs."""
    operands = (node.left, *node.comparators)
    if not any(str_value(o) == NCCL for o in operands):
        return
    for operand in operands:
        # A subscript is named by its key: `meta["dist_backend"] == "nccl"` (a saved run's metadata).
        named = str_value(operand.slice) if type(operand) is ast.Subscript else terminal_name(operand)
        if (type(operand) is ast.Call and terminal_name(operand.func) == "get_backend") \
                or "backend" in (named or "").lower():
            literal = next(o for o in operands if str_value(o) == NCCL)
            det.report("FL501", literal, backend=NCCL, detail=" compared in code: ask `torch.fl.is_accelerator()` for device "
                       "collectives, or compare with `torch.fl.dist_backend()`")
            return


@on("flow")
def backend_flow(det: RuleContext, kind: str, literal: ast.expr, index: str | None, target: str, sink_line: int | str) -> None:
    if kind == "backend":
        # sink_line: a line here, or "file:line" in the module that imports the name.
        where = f"line {sink_line}" if isinstance(sink_line, int) else f"used in {sink_line}"
        det.report("FL501", literal, "unsafe", backend=NCCL, detail=f" (via `{target}`, {where})")


def check_env(det: RuleContext, key: str, where: ast.AST, action: str) -> None:
    if key.startswith("NCCL_") and action != "read":
        det.report("FL502", where, var=key, action=action)
    elif key == "CUDA_VISIBLE_DEVICES" or (action != "read" and "CUDA" in key.upper().split("_")):
        # CUDA_VISIBLE_DEVICES, CUDA_LAUNCH_BLOCKING, PYTORCH_CUDA_ALLOC_CONF, a library's RWKV_CUDA_ON.
        det.report("FL503", where, var=key, action=action)


@on_keyword("env")
def subprocess_env(det: RuleContext, call: ast.Call, arg: str, value: ast.expr, func: str | None) -> None:
    """`subprocess.run(..., env={**os.environ, "CUDA_VISIBLE_DEVICES": "0"})`: the child's environment."""
    if type(value) is ast.Dict:
        for key in value.keys:
            text = str_value(key) if key is not None else None
            if text is not None:
                check_env(det, text, key, "set")  # type: ignore[arg-type]


@on("subscript")
def environ_subscript(det: RuleContext, node: ast.Subscript) -> None:
    if type(node.ctx) is ast.Store and det.qualname(node.value) != "os.environ" \
            and "env" in (terminal_name(node.value) or "").lower().split("_"):
        # env = dict(os.environ); env["CUDA_VISIBLE_DEVICES"] = "3"; subprocess.Popen(..., env=env)
        for key in det.string_values(node.slice):
            check_env(det, key, node, "set")
        return
    if det.qualname(node.value) == "os.environ":
        ctx = type(node.ctx)
        action = "read" if ctx is ast.Load else "set" if ctx is ast.Store else "removed"
        for key in det.string_values(node.slice):  # a literal, or a variable bound to literals
            check_env(det, key, node, action)


@on_call(*_ENV_WRITERS, *_ENV_READERS, "os.environ.update")
def environ_call(det: RuleContext, node: ast.Call, qual: str) -> None:
    action = _ENV_WRITERS.get(qual) or _ENV_READERS.get(qual)
    if qual == "os.environ.update":
        for arg in node.args:
            if type(arg) is ast.Dict:
                for key in arg.keys:
                    if str_value(key) is not None:
                        check_env(det, str_value(key), key, "set")  # type: ignore[arg-type]
        for kw in node.keywords:
            if kw.arg:
                check_env(det, kw.arg, kw.value, "set")
    elif action and node.args:
        for key in det.string_values(node.args[0]):
            check_env(det, key, node, action)


@fixes("FL501", "SimpleString")
def fix_nccl(rw: FixContext, original: cst.SimpleString, updated: cst.SimpleString,
             finding: Finding) -> cst.BaseExpression | None:
    return rw.fl_call("dist_backend") if original.evaluated_value in (NCCL, *VENDOR_BACKENDS) else None
