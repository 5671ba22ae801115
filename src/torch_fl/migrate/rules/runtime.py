"""FL2: CUDA runtime calls (``torch.cuda.*``, synchronisation): detection and fix of each rule. What
each ``torch.cuda`` name becomes is the table in ``migrate/cuda_api.py``."""

from __future__ import annotations

import ast
from typing import Any

from ..cuda_api import CUDA_TENSOR_TYPES, DEFAULT_REMEDY, lookup
from .base import fixes, on, on_call, on_call_prefix, on_method, rule, triggers

SYNCS = ("torch.cuda.synchronize", "torch.fl.synchronize", "torch.accelerator.synchronize")
# Handled by other rules: amp (FL301/FL302), synchronize (FL202), typed tensors (FL103).
_ELSEWHERE = ("amp.autocast", "amp.GradScaler", "synchronize")

triggers("cuda", "synchroni", pattern=r"item\s*\(")  # .item() in a loop syncs (FL203)

rule(
        "FL201", "cuda-runtime-call",
        "`{call}` is CUDA-only", "{remedy}", "safe",
        what="A `torch.cuda.*` runtime call or reference, or `torch.version.cuda`: `is_available`, `device_count`, `set_device`, "
             "`current_device`, `empty_cache`, memory statistics, `manual_seed[_all]`, "
             "`get_device_name`, `get_device_properties`, `Stream`, `Event`, `stream`, "
             "`current_stream`, and any other `torch.cuda` function.",
        why="`torch.cuda` answers for CUDA only: on another accelerator `is_available()` is False and "
            "the program silently runs on the CPU, or the call raises.",
        example="""
n = torch.cuda.device_count()
torch.cuda.manual_seed_all(0)
print(torch.cuda.max_memory_allocated())
""",
        use_instead="""
n = torch.fl.device_count()
torch.fl.manual_seed(0)
print(torch.fl.max_memory_allocated())
""",
        fix_notes="What each call becomes, and whether that is safe, is the table in "
                  "`torch_fl/migrate/cuda_api.py`. Safe: `is_available` (becomes `torch.fl.is_accelerator()`, "
                  "False on a CPU-only host as before), set_device, current_device, synchronize, empty_cache, "
                  "memory statistics, Stream, Event, stream. Unsafe: `device_count` (1 on a CPU-only host, "
                  "where torch.cuda says 0), `manual_seed[_all]` (torch.fl seeds the CPU generator too), "
                  "`memory_reserved`, `get_device_name(x)` (becomes `torch.fl.get_device_properties(x).name`). "
                  "References without a call (`partial(torch.cuda.stream, s)`) get the same replacement; "
                  "`torch.version.cuda` and other calls have no fix.",
)

rule(
        "FL202", "cuda-synchronize",
        "`torch.cuda.synchronize()` waits for CUDA only", "Replace with `torch.fl.synchronize()`", "safe",
        what="A `torch.cuda.synchronize(...)` call.",
        why="On another device it raises, or (if guarded) waits for nothing, so timings measure only "
            "the time to queue work.",
        example="""
torch.cuda.synchronize()
elapsed = time.perf_counter() - start
""",
        use_instead="""
torch.fl.synchronize()
elapsed = time.perf_counter() - start
""",
)

rule(
        "FL203", "synchronize-in-loop",
        "`{call}` inside a loop waits for the device on every iteration",
        "Move it out of the loop, or read values every N steps", None, level="warning", category="performance",
        what="`torch.cuda.synchronize()`, `torch.fl.synchronize()` or `.item()` (not on a tensor already moved with `.cpu()`, nor under a periodic `if step % N == 0:`) inside the body of a "
             "`for`/`while` loop, a `while` condition, or a comprehension.",
        why="Each call is a hidden host-device synchronisation: the host stops queueing work until the "
            "device is idle. On asynchronous devices that costs throughput every step; on chips with "
            "synchronous submission it can serialise the whole step, and with collectives it is a "
            "classic cause of a hang at step N.",
        example="""
for batch in loader:
    loss = step(batch)
    total += loss.item()
""",
        use_instead="""
for i, batch in enumerate(loader):
    loss = step(batch)
    total += loss.detach()          # stays on the device
    if i % 100 == 0:
        print(total.item())         # one sync every 100 steps
""",
        fix_notes="Whether a sync is needed is a design decision; a warning, not an error.",
        runs_off_cuda=True,
)


def _report_api(det: Any, node: ast.AST, qual: str, called: bool) -> None:
    entry = lookup(qual)
    rest = qual[len("torch.cuda."):] if qual.startswith("torch.cuda.") else qual
    if rest.split(".")[0] in CUDA_TENSOR_TYPES:
        return  # FL103, reported on the attribute
    if entry is not None and entry.short in _ELSEWHERE:
        return
    name = f"{qual}()" if called else qual
    if entry is None:
        det.report("FL201", node, call=name, remedy=DEFAULT_REMEDY)
        return
    safety = entry.safety if entry.replacement else None
    if not called and entry.kind not in ("function", "class"):
        safety = None
    remedy = entry.remedy if called or entry.replacement is None else f"Replace with `{entry.replacement}`"
    det.report("FL201", node, safety, call=name, remedy=remedy, replacement=entry.replacement)


def _claim_arguments(det: Any, node: ast.Call) -> None:
    # torch.cuda.set_device(0), synchronize(device=0): the ordinal is CUDA's by definition, part of
    # this finding (one finding per site).
    for value in (*node.args, *(kw.value for kw in node.keywords)):
        det.done.add(id(value))


@on_call_prefix("torch.cuda.")
def cuda_call(det: Any, node: ast.Call, qual: str) -> None:
    _report_api(det, node, qual, True)
    _claim_arguments(det, node)


@on("attribute")
def cuda_reference(det: Any, node: ast.Attribute, qual: str, called: bool) -> None:
    """`torch.cuda.X` used without a call (`partial(torch.cuda.stream, s)`, `S = torch.cuda.Stream`), and
    `torch.version.cuda`."""
    if called:
        return
    if qual == "torch.version.cuda":
        entry = lookup(qual)
        det.report("FL201", node, call=qual, remedy=entry.remedy if entry else DEFAULT_REMEDY)
        return
    if qual.startswith("torch.cuda.") and type(node.ctx) is ast.Load:
        _report_api(det, node, qual, False)


@on_call(*SYNCS)
def sync_call(det: Any, node: ast.Call, qual: str) -> None:
    if qual == "torch.cuda.synchronize":
        det.report("FL202", node, "safe")
        _claim_arguments(det, node)
    if det.loop and not det.periodic:
        det.report("FL203", node.func, call=f"{qual}()")


def _on_host(node: ast.AST) -> bool:
    """`x.cpu().item()`, `x.detach().cpu().numpy()`: the value is already on the host."""
    while type(node) is ast.Call and type(node.func) is ast.Attribute:
        if node.func.attr in ("cpu", "numpy", "tolist"):
            return True
        node = node.func.value
    return False


@on_method("item")
def item_call(det: Any, node: ast.Call, attr: str) -> None:
    if det.loop and not det.periodic and not node.args and not node.keywords \
            and not _on_host(node.func.value):  # type: ignore[attr-defined]
        det.report("FL203", node, call=".item()")


# Fixes --------------------------------------------------------------------------------------------
@fixes("FL201", "Call", "Attribute")
def fix_runtime_call(rw: Any, original: Any, updated: Any, finding: Any) -> Any:
    import libcst as cst

    replacement = finding.replacement
    if replacement is None:
        return None
    if isinstance(original, cst.Attribute):
        qual = rw.qual(original)
        if qual is None or not qual.startswith("torch.cuda."):
            return None
        return rw.expr(replacement)
    qual = rw.qual(original.func)
    if qual is None or not qual.startswith("torch.cuda."):
        return None
    entry = lookup(qual)
    if entry is None:
        return None
    if entry.short == "get_device_name":  # get_device_name(x) -> get_device_properties(x).name
        return cst.Attribute(updated.with_changes(func=rw.expr(replacement)), cst.Name("name"))
    return updated.with_changes(func=rw.expr(replacement))


@fixes("FL202", "Call")
def fix_synchronize(rw: Any, original: Any, updated: Any, finding: Any) -> Any:
    if rw.qual(original.func) != "torch.cuda.synchronize":
        return None
    return updated.with_changes(func=rw.fl("synchronize"))
