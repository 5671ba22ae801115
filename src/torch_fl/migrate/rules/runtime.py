"""FL2: CUDA runtime calls (``torch.cuda.*``, synchronisation): detection and fix of each rule. What
each ``torch.cuda`` name becomes is the table in ``migrate/cuda_api.py``."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ..cuda_api import CUDA_DEVICE, CUDA_TENSOR_TYPES, DEFAULT_REMEDY, lookup
from .base import (
    RuleContext,
    fixes,
    is_int,
    on,
    on_call,
    on_call_name,
    on_call_prefix,
    on_method,
    rule,
    str_value,
    terminal_name,
    triggers,
)

if TYPE_CHECKING:
    import libcst as cst

    from .base import Finding, FixContext

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
             "`current_stream`, and any other `torch.cuda` function. Not reported: a chain of availability "
             "checks over vendors (`if torch.cuda.is_available(): ... elif torch.npu.is_available(): ...`, or "
             "consecutive `if is_torch_xpu_available(): return \"xpu\"`), multi-vendor code whose CUDA arm "
             "is right as it is.",
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
                  "mem_get_info, reset_peak_memory_stats, Stream, Event, stream. Unsafe: `device_count` (1 on a "
                  "CPU-only host, where torch.cuda says 0), `manual_seed[_all]` (torch.fl seeds the CPU generator "
                  "too), `memory_allocated`/`max_memory_allocated` (0 on a CPU-only host from torch.cuda, the "
                  "process's resident set from torch.fl, docs/runtime.md: a logged figure changes there), "
                  "`memory_reserved`, `get_device_name(x)` (becomes `torch.fl.get_device_properties(x).name`). "
                  "`set_device`, `synchronize` and the memory statistics take an ordinal (an int N is accN): "
                  "a CUDA device spelled out (`torch.device(\"cuda\", i)`, `f\"cuda:{i}\"`, `\"cuda:1\"`) "
                  "becomes its ordinal (`torch.fl.set_device(i)`), and a variable that may hold a CUDA "
                  "device makes the fix unsafe. A check assigned to a test's skip flag (`cuda_available = "
                  "torch.cuda.is_available()` read by `skipIf`/`skipif`/`pytest.skip`) is left alone: CUDA-only "
                  "tests keep skipping on other accelerators. "
                  "References without a call (`partial(torch.cuda.stream, s)`) get the same replacement; "
                  "`torch.version.cuda` and other calls have no fix. `torch.cuda.current_device()` passed as a "
                  "device (`device=`, `.to(...)`, `torch.device(...)`) becomes `torch.fl.device()`: the ordinal "
                  "0 names no device on a CPU-only host; elsewhere it becomes `torch.fl.current_device()`. A call "
                  "whose arguments hold another torch.cuda call with a weaker fix takes that fix "
                  "(`torch.cuda.set_device(rank % torch.cuda.device_count())` is unsafe, as `device_count` is).",
        keeps_arguments=True,
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
        keeps_arguments=True,
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


rule(
        "FL204", "cuda-module-lookup",
        "`{call}` looks up the CUDA module by name",
        "Use the torch.fl facade for what the code calls on it (or `torch.get_device_module(torch.fl.device())`)",
        None,
        what="`getattr(torch, \"cuda\")` (with or without a default): `torch.cuda` reached through a string, "
             "which the `torch.cuda.*` rules (FL201) cannot see. Not reported: `getattr(torch, device.type)`, "
             "the device's own module (multi-vendor code).",
        why="Whatever the code calls on the module (`is_available()`, `synchronize()`, `Stream`) is CUDA's, "
            "so on another accelerator it answers False or fails, as `torch.cuda.*` does.",
        example="""
device_module = getattr(torch, "cuda")
device_module.synchronize()
""",
        use_instead="""
device_module = torch.get_device_module(torch.fl.device())
device_module.synchronize()        # or torch.fl.synchronize()
""",
        fix_notes="No automatic fix: `getattr(torch, torch.fl.device_type())` is `torch.cpu` on the CPU, "
                  "where `is_available()` is True and most of `torch.cuda` is missing, so the rewrite depends "
                  "on what the code calls on the module.",
)


def _report_api(det: RuleContext, node: ast.AST, qual: str, called: bool) -> None:
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
    note = ""
    replacement = entry.replacement
    if called and safety is not None and entry.takes_device:
        safety, note = _with_device_argument(det, node, safety)  # type: ignore[arg-type]
    if called and entry.short == "current_device" and id(node) in det.state(__name__).get("device_slots", ()):
        # torch.ones(n, device=torch.cuda.current_device()): the ordinal used as a device. The CPU host
        # has no device 0 ("Cannot access accelerator device when none is available"): the device itself.
        replacement = "torch.fl.device"
        remedy = "Replace with `torch.fl.device()` (the ordinal is used as a device)"
    det.report("FL201", node, safety, call=name, remedy=remedy, replacement=replacement, note=note)


@on("call")
def device_slots(det: RuleContext, node: ast.Call, callee: str | None) -> None:
    """Arguments that are a device: `device=`, `.to(x)`'s first, `torch.device(x)`'s first (a
    `torch.cuda.current_device()` there is rewritten to the device, not the ordinal)."""
    slots = None
    for kw in node.keywords:
        if kw.arg == "device" and type(kw.value) is ast.Call:
            slots = det.state(__name__).setdefault("device_slots", set())
            slots.add(id(kw.value))
    if node.args and type(node.args[0]) is ast.Call and (
            (type(node.func) is ast.Attribute and node.func.attr == "to") or callee == "torch.device"):
        det.state(__name__).setdefault("device_slots", set()).add(id(node.args[0]))


# Names that hold an integer device ordinal (rules/device.py ORDINAL_NAMES, plus `gpu`, `device_id`
# and `rank`, which a set_device/synchronize argument is when it is not a device).
_ORDINALS = frozenset({"rank", "local_rank", "gpu_id", "gpu_idx", "gpu_index", "local_gpu", "ddp_local_rank",
                       "gpu", "device_id", "device_idx", "device_index", "index", "idx", "i", "rank_id"})


def device_argument(node: ast.Call) -> ast.expr | None:
    """The device argument of a torch.cuda call that takes one (set_device, synchronize, memory_allocated)."""
    if node.args:
        return node.args[0]
    return next((kw.value for kw in node.keywords if kw.arg == "device"), None)


def cuda_device_form(det: RuleContext, value: ast.expr) -> bool:
    """A CUDA device spelled out, which the fix turns into the ordinal torch.fl takes (an int N means
    accN, cuda:N on a CUDA machine): "cuda", "cuda:N", f"cuda:{i}", torch.device("cuda"[, i]),
    torch.device("cuda:N"), torch.device(f"cuda:{i}"), torch.device(type="cuda", index=i)."""
    text = str_value(value)
    if text is not None:
        return CUDA_DEVICE.fullmatch(text) is not None
    if type(value) is ast.JoinedStr:
        parts = value.values
        return (len(parts) == 2 and str_value(parts[0]) == "cuda:" and type(parts[1]) is ast.FormattedValue
                and parts[1].conversion == -1 and parts[1].format_spec is None)
    if type(value) is ast.Call and det.qualname(value.func) == "torch.device":
        args = {("type", "index")[min(i, 1)]: a for i, a in enumerate(value.args) if type(a) is not ast.Starred}
        if len(args) != len(value.args):
            return False
        args.update({kw.arg: kw.value for kw in value.keywords if kw.arg in ("type", "index")})
        if len(args) != len(value.args) + len(value.keywords) or "type" not in args:
            return False
        kind = args["type"]
        if "index" in args:
            return str_value(kind) == "cuda"
        return cuda_device_form(det, kind) and type(kind) is not ast.Call
    return False


def _ordinal_like(node: ast.expr) -> bool:
    """An expression that holds an integer device index: 0, local_rank, args.gpu, int(os.environ[...]),
    dev.index, rank % n."""
    if is_int(node):
        return True
    if type(node) is ast.Attribute and node.attr == "index":
        return True
    if terminal_name(node) in _ORDINALS:
        return True
    if type(node) is ast.Call and type(node.func) is ast.Name and node.func.id == "int":
        return True
    if type(node) is ast.BinOp and type(node.op) in (ast.Mod, ast.Add, ast.Sub, ast.FloorDiv):
        return _ordinal_like(node.left) or _ordinal_like(node.right)
    return False


def _with_device_argument(det: RuleContext, node: ast.Call, safety: str) -> tuple[str | None, str]:
    """The safety of rewriting `torch.cuda.set_device(x)` (synchronize, memory statistics) to torch.fl
    with its argument: an ordinal is accN; a spelled-out CUDA device becomes its ordinal (the fix);
    a device of a tensor (`x.device`) or of torch.fl is this machine's. Any other value may be a CUDA
    device (`dev = torch.device("cuda", i)`), which torch.fl cannot use off CUDA: unsafe, with why."""
    value = device_argument(node)
    if value is None or _ordinal_like(value) or cuda_device_form(det, value):
        return safety, ""
    if type(value) is ast.Attribute and value.attr == "device":
        return safety, ""  # x.device: where the tensor is, on any machine
    qual = det.qualname(value.func) if type(value) is ast.Call else None
    if qual is not None and qual.startswith("torch.fl."):
        return safety, ""
    return "unsafe", (f"unsafe: `{ast.unparse(value)}` may be a CUDA device (torch.device(\"cuda\", i)), which "
                      f"torch.fl cannot use off CUDA; pass its index or a torch.fl device")


def _claim_arguments(det: RuleContext, node: ast.Call) -> None:
    # torch.cuda.set_device(0), synchronize(device=0): the ordinal is CUDA's by definition, part of
    # this finding (one finding per site).
    for value in (*node.args, *(kw.value for kw in node.keywords)):
        det.done.add(id(value))


@on_call_prefix("torch.cuda.")
def cuda_call(det: RuleContext, node: ast.Call, qual: str) -> None:
    _report_api(det, node, qual, True)
    _claim_arguments(det, node)


@on("attribute")
def cuda_reference(det: RuleContext, node: ast.Attribute, qual: str, called: bool) -> None:
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


@on_call_name("getattr")
def cuda_module_lookup(det: RuleContext, node: ast.Call, name: str) -> None:
    if type(node.func) is ast.Name and len(node.args) >= 2 and det.qualname(node.args[0]) == "torch" and str_value(node.args[1]) == "cuda":
        rest = ", ..." if len(node.args) > 2 else ""
        det.report("FL204", node, call=f'getattr({ast.unparse(node.args[0])}, "cuda"{rest})')
        det.claim(node)  # its "cuda" is this finding's, not a device string (FL101)


@on_call(*SYNCS)
def sync_call(det: RuleContext, node: ast.Call, qual: str) -> None:
    if qual == "torch.cuda.synchronize":
        safety, note = _with_device_argument(det, node, "safe")
        det.report("FL202", node, safety, note=note)
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
def item_call(det: RuleContext, node: ast.Call, attr: str) -> None:
    if det.loop and not det.periodic and not node.args and not node.keywords \
            and not _on_host(node.func.value):  # type: ignore[attr-defined]
        det.report("FL203", node, call=".item()")


# Fixes --------------------------------------------------------------------------------------------
@fixes("FL201", "Call", "Attribute")
def fix_runtime_call(rw: FixContext, original: cst.Call | cst.Attribute, updated: cst.Call | cst.Attribute,
                     finding: Finding) -> cst.BaseExpression | None:
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
    call = updated.with_changes(func=rw.expr(replacement))
    return _ordinal_argument(rw, call) if entry.takes_device else call


@fixes("FL202", "Call")
def fix_synchronize(rw: FixContext, original: cst.Call, updated: cst.Call,
                    finding: Finding) -> cst.BaseExpression | None:
    if rw.qual(original.func) != "torch.cuda.synchronize":
        return None
    return _ordinal_argument(rw, updated.with_changes(func=rw.fl("synchronize")))


def _ordinal_argument(rw: FixContext, call: cst.Call) -> cst.Call:
    """torch.fl.set_device(torch.device("cuda", i)) -> torch.fl.set_device(i): a CUDA device spelled out
    (see cuda_device_form) becomes the ordinal torch.fl takes, "cuda" / torch.device("cuda") no
    argument (the current device). Other arguments are kept."""

    for position, arg in enumerate(call.args):
        if (arg.keyword is None and position == 0) or (arg.keyword is not None and arg.keyword.value == "device"):
            break
    else:
        return call
    found = _cst_ordinal(rw, arg.value)
    if found is None:
        return call
    _, ordinal = found
    args = list(call.args)
    if ordinal is None:
        del args[position]
        if args:
            args = rw.commas(args, call)
    else:
        args[position] = arg.with_changes(value=ordinal)
    return call.with_changes(args=args)


def _cst_ordinal(rw: FixContext, value: cst.BaseExpression) -> tuple[bool, cst.BaseExpression | None] | None:
    """(True, the ordinal expression or None for "the current device") for a spelled-out CUDA device,
    else None."""
    import libcst as cst

    if isinstance(value, cst.SimpleString):
        match = CUDA_DEVICE.fullmatch(str(value.evaluated_value))
        if match is None:
            return None
        return True, None if match.group(1) is None else cst.Integer(match.group(1))
    if isinstance(value, cst.FormattedString):
        parts = value.parts
        if (len(parts) == 2 and isinstance(parts[0], cst.FormattedStringText) and parts[0].value == "cuda:"
                and isinstance(parts[1], cst.FormattedStringExpression) and parts[1].conversion is None
                and parts[1].format_spec is None):
            return True, parts[1].expression
        return None
    if isinstance(value, cst.Call) and rw.qual(value.func) == "torch.device":
        kinds: dict[str, cst.BaseExpression] = {}
        for i, arg in enumerate(value.args):
            if arg.star:
                return None
            kinds[arg.keyword.value if arg.keyword is not None else ("type", "index")[min(i, 1)]] = arg.value
        kind = kinds.get("type")
        if kind is None or set(kinds) - {"type", "index"}:
            return None
        if "index" in kinds:
            if not isinstance(kind, cst.SimpleString) or kind.evaluated_value != "cuda":
                return None
            return True, kinds["index"].with_changes(lpar=[], rpar=[]) if hasattr(kinds["index"], "lpar") \
                else kinds["index"]
        if isinstance(kind, cst.Call):
            return None
        return _cst_ordinal(rw, kind)
    return None
