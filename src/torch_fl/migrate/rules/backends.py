"""FL4: CUDA backend flags (``torch.backends.cudnn.*``, ``torch.backends.cuda.*``): detection.

Not couplings: the same flags under a CUDA guard (``if torch.cuda.is_available():`` whose body is only
such tuning; the scanner's guard tracking), queries that are themselves CUDA checks
(``torch.backends.cudnn.is_available()``, ``version()``, ``is_built()``), and enum or class names such as
``torch.backends.cuda.SDPBackend`` used in comparisons (``expected is SDPBackend.FLASH_ATTENTION``).
"""

from __future__ import annotations

import ast

from ..cuda_api import backend_flag
from .base import RuleContext, on, on_call_name, rule, triggers

_QUERIES = frozenset({"is_available", "version", "is_built"})

triggers("cuda", "cudnn", "cublas")

rule(
        "FL401", "cudnn-flag",
        "`{attr}` is a cuDNN setting: it does nothing on other devices", "{remedy}", None,
        level="warning",
        what="A read or write of `torch.backends.cudnn.*` (`benchmark`, `deterministic`, `allow_tf32`, "
             "`enabled`, `flags(...)`). Not reported: the flags inside an `if` that checks for CUDA and holds "
             "only such tuning (a correct CUDA-only guard), inside CUDA-only tests, and queries "
             "(`is_available()`, `version()`).",
        why="On another device the flag is silently ignored: `deterministic = True` does not make an NPU "
            "run deterministic, and reading `benchmark` says nothing about it.",
        example="""
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.deterministic = True
""",
        use_instead="""
torch.use_deterministic_algorithms(True)        # every backend
if torch.fl.device_type() == "cuda":            # CUDA-only tuning, said so
    torch.backends.cudnn.benchmark = True
""",
        fix_notes="Whether a flag should become portable (`torch.use_deterministic_algorithms`) or "
                  "stay CUDA-only behind a guard is a decision for a person. A flag only read to be shown "
                  "(an argument of `print`, a logger call, `format`) is not reported.",
        runs_off_cuda=True,
)

rule(
        "FL402", "cuda-backend-flag",
        "`{attr}` is a CUDA backend setting: it does nothing on other devices", "{remedy}", None,
        level="warning",
        what="A read or write of `torch.backends.cuda.*`: `matmul.allow_tf32`, the scaled-dot-product "
             "attention kernel toggles (`enable_flash_sdp`, `sdp_kernel`, ...), `preferred_linalg_library`. Not reported: under a CUDA guard or in CUDA-only tests, and "
             "class or enum names (`SDPBackend.FLASH_ATTENTION` in a comparison).",
        why="These tune CUDA kernels only; the same intent on another device needs the portable switch "
            "or is simply absent.",
        example="""
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cuda.enable_flash_sdp(False)
""",
        use_instead="""
torch.set_float32_matmul_precision("high")
with torch.nn.attention.sdpa_kernel([SDPBackend.MATH]):
    out = attention(q, k, v)
""",
        runs_off_cuda=True,
)


# Calls that only show a value (print, logging, a string's format): a cuDNN flag read there is reported nowhere.
_SHOWN_BY = frozenset({"print", "debug", "info", "warning", "warn", "error", "log", "format", "write", "echo"})


@on_call_name(*_SHOWN_BY)
def shown_flags(det: RuleContext, node: ast.Call, name: str) -> None:
    """`logger.info(f"cudnn.benchmark={torch.backends.cudnn.benchmark}")`: a read for the log, not a setting."""
    shown = det.state(__name__).setdefault("shown", set())
    for arg in (*node.args, *(kw.value for kw in node.keywords)):
        shown.update(id(sub) for sub in ast.walk(arg) if type(sub) is ast.Attribute)


@on("attribute")
def backend_attribute(det: RuleContext, node: ast.Attribute, qual: str, called: bool) -> None:
    if id(node) in det.state(__name__).get("shown", ()):
        return
    parts = qual.split(".")
    if len(parts) < 3 or parts[1] != "backends" or parts[2] not in ("cudnn", "cuda"):
        return
    rest = parts[3:]
    if rest and rest[-1] in _QUERIES:
        return
    if any(part[:1].isupper() for part in rest):
        return  # SDPBackend.FLASH_ATTENTION, SDPAParams: names, not settings
    flag = backend_flag(qual)
    if flag is None:
        return
    det.report("FL401" if parts[2] == "cudnn" else "FL402", node, attr=qual, remedy=flag.remedy)
