"""FL1: device strings and placement (``"cuda"``, ``.cuda()``, typed CUDA tensors, default device, device
variables, integer ordinals): detection and fix of each rule."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from ..cuda_api import CUDA_DEVICE, device_replacement
from .base import (
    RuleContext,
    alternatives,
    cuda_or_nccl,
    cuda_strings,
    fixes,
    is_int,
    on,
    on_call,
    on_keyword,
    on_method,
    rule,
    source_text,
    str_value,
    string_replacement,
    terminal_name,
    torch_callee,
    triggers,
)
from .control import choice_is_device, device_choice

if TYPE_CHECKING:
    import libcst as cst

    from .base import Finding, FixContext

# Keywords whose value is a device.
DEVICE_KWARGS = ("device", "map_location", "device_map")
# Names that hold an integer device ordinal when they reach a device argument (`x.to(local_rank)`).
# Not `gpu` or `device_id`: those hold device strings as often as integers.
ORDINAL_NAMES = frozenset({"rank", "local_rank", "gpu_id", "gpu_idx", "gpu_index", "local_gpu", "ddp_local_rank"})

triggers("cuda", "device", "rank", "gpu")  # words without which these rules cannot fire

rule(
        "FL101", "cuda-device-string",
        "Hard-coded CUDA device {text} used as a device", "Replace with `{replacement}`", "safe",
        what="A `\"cuda\"` or `\"cuda:N\"` string used as a device (or Lightning's `Trainer(accelerator=\"cuda\")`, "
             "`Fabric(accelerator=\"gpu\")`, which become `\"auto\"`): `torch.device(\"cuda\")`, a "
             "`device=`/`map_location=`/`device_map=` keyword of any call, or the first argument of "
             "`.to(...)`. f-strings such as `f\"cuda:{rank}\"` are reported too. Not reported: the fallback arm "
             "of an accelerator-API choice, `torch.accelerator.current_accelerator().type if hasattr(torch, "
             "\"accelerator\") else \"cuda\"` (or `if torch.accelerator.is_available()`): multi-vendor code, "
             "whose \"cuda\" is only for a torch without `torch.accelerator` (before 2.6); nothing in that arm "
             "is reported (FL105, FL901 neither).",
        why="The code then runs only on NVIDIA (and ROCm) builds; on an Ascend, Cambricon, Intel or Apple "
            "device it fails with \"Torch not compiled with CUDA enabled\", or someone edits every string "
            "by hand.",
        example="""
model = Net().to("cuda")
x = torch.zeros(8, device="cuda:1")
dev = torch.device("cuda")
""",
        use_instead="""
model = Net().to(torch.fl.device())
x = torch.zeros(8, device=torch.fl.device("acc1"))
dev = torch.fl.device()
""",
        fix_notes="`\"cuda\"` becomes `torch.fl.device()` and `\"cuda:N\"` / `torch.device(\"cuda\", N)` "
                  "becomes `torch.fl.device(\"accN\")`: on a CUDA machine accN is cuda:N unless "
                  "FL_DEVICE_MAP says otherwise. Where the value may be used as a string it stays one: a "
                  "literal that is only one of the values an argument may be (`args.device or \"cuda\"`, "
                  "`getattr(args, \"device\", \"cuda\")`), or the `device=` of a callee that is not torch's "
                  "(which may `split` or compare it), becomes `torch.fl.device_type()` (\"cuda\" on CUDA, as "
                  "before); so does a `\"cuda\"` that only a CUDA check reaches (`[\"cpu\"] + ([\"cuda\"] if "
                  "torch.cuda.is_available() else [])`), fixed with the check (as a table key it blocks the "
                  "check's fix). f-strings and other computed strings are not fixed. "
                  "`torch.device(\"cuda:N\")` with N > 0 is an unsafe fix: `torch.fl.device(\"accN\")` "
                  "raises on a host with fewer devices, where the original only built an object.",
)

rule(
        "FL102", "cuda-method",
        "`{call}` moves to a CUDA device only", "Replace with `.to({replacement})`", "safe",
        what="A `.cuda()` or `.cuda(N)` call on a tensor or module.",
        why="`.cuda()` exists on every tensor and module but fails on any backend other than CUDA.",
        example="""
model = Net().cuda()
x = batch.cuda(1, non_blocking=True)
""",
        use_instead="""
model = Net().to(torch.fl.device())
x = batch.to(torch.fl.device("acc1"), non_blocking=True)
""",
        fix_notes="Only calls with no device or an integer literal device are fixed; `.cuda(rank)` with "
                  "a variable is reported without a fix.",
)

rule(
        "FL104", "cuda-default-device",
        "`{call}` makes CUDA the default device", "Use `torch.set_default_device(torch.fl.device())`",
        "safe",
        what="`torch.set_default_device(\"cuda\")` or `torch.set_default_tensor_type(torch.cuda.*)`.",
        why="Every factory call afterwards allocates on CUDA, so the whole program is CUDA-bound by one "
            "line that is easy to miss.",
        example="""
torch.set_default_device("cuda")
torch.set_default_tensor_type(torch.cuda.FloatTensor)
""",
        use_instead="""
torch.set_default_device(torch.fl.device())
torch.set_default_dtype(torch.float32); torch.set_default_device(torch.fl.device())
""",
        fix_notes="Only `set_default_device` with a string literal is fixed; `set_default_tensor_type` "
                  "mixes dtype and device and is reported without a fix.",
)

rule(
        "FL105", "cuda-device-variable",
        "CUDA device {text} in `{target}` reaches a device argument (line {sink_line})",
        "Replace with `{replacement}`", "unsafe",
        what="A `\"cuda\"` string bound to a variable, attribute, config-dict key, dataclass field, "
             "argparse default or parameter default that later reaches a device argument in the same "
             "module (`.to(device)`, `device=cfg.device`, `torch.device(args.device)`), or the default of a "
             "click option named like a device; also a name holding "
             "the device handed to a function of another module of the project (`from .loop import fit`; "
             "`fit(net, device)`: used there as a device), and a string (an f-string too) handed to a "
             "function or a class of this module whose parameter reaches a device argument "
             "(`Worker(f\"cuda:{rank}\")` with `torch.device(place)` in `__init__`).",
        why="It is FL101 one step removed: the string is the hard-coded device, the call site only "
            "passes it along.",
        example="""
device = "cuda" if torch.cuda.is_available() else "cpu"
model.to(device)
parser.add_argument("--device", default="cuda")
""",
        use_instead="""
device = torch.fl.device()
model.to(device)
parser.add_argument("--device", default=str(torch.fl.device()))
""",
        fix_notes="The literal at the assignment becomes `torch.fl.device_type()` (`\"cuda:N\"`: "
                  "`str(torch.fl.device(\"accN\"))`). Unsafe because the variable may be used as a "
                  "string elsewhere (compared with \"cuda\", logged, saved in a config). The tracking is "
                  "by name within one module: a function's locals, module globals (not in a function "
                  "that binds the same name), attribute or key names of any object, and copies "
                  "(`self.device = device`, where `device` is a parameter defaulting to \"cuda\").",
        claims_site=False,
)

rule(
        "FL106", "device-ordinal",
        "Integer device ordinal `{text}` used as a device (it means `cuda:{text}`)", "{remedy}", "safe",
        what="An integer where a device goes: `x.to(0)`, `device=0`, `torch.device(0)`, a rank-like name "
             "(`x.to(local_rank)`, `.to(args.gpu)`), and the entries of `device_ids=[...]` / "
             "`output_device=` (DistributedDataParallel, DataParallel), also set as a key of the "
             "arguments passed on (`kwargs[\"device_ids\"] = [local_rank]`, `{\"device_ids\": [...]}`).",
        why="torch reads a bare integer as a CUDA device index, so the code asks for CUDA on every machine; "
            "DDP with `device_ids` on a CPU module fails.",
        example="""
x = x.to(0)
model = DDP(model, device_ids=[local_rank])
""",
        use_instead="""
x = x.to(torch.fl.device("acc0"))
model = DDP(model, device_ids=[torch.fl.current_device()] if torch.fl.is_accelerator() else None)
""",
        fix_notes="Integer literals become `torch.fl.device(\"accN\")`; names and `device_ids` entries are "
                  "reported without a fix (the right form depends on whether the module is on the CPU). A "
                  "name a CUDA check sets (`gpu_index = 0 if cuda_available else -1`, or `gpu_index = 0` under "
                  "`if cuda_available:`) and used as a device with no fix holds the check back: rewritten "
                  "alone, the check would hand ordinal 0 (cuda:0) to an NPU host.",
        pairs_as="ordinal",
)


# The rule state key of device literals handed to a callee that is not torch's (their positions).
FOREIGN = "foreign_devices"


# Detection ----------------------------------------------------------------------------------------
def report_device_strings(det: RuleContext, value: ast.expr, *, as_string: bool = False) -> None:
    """FL101 for each "cuda"/"cuda:N" the value may be; FL106 for integer ordinals.

    The fix keeps the value's type where it must (issue 30): a literal that is the whole argument of
    a torch callee becomes a device (`torch.fl.device()`); one that is only one of the values the
    argument may be (`args.device or "cuda"`, `getattr(args, "device", "cuda")`, an arm of `a if c
    else "cuda"`), or the argument of a callee that is not torch's (`as_string`: it may split or
    compare it), becomes the string `torch.fl.device_type()`, "cuda" on CUDA exactly as before."""
    if device_choice(det, value) is not None:
        if not as_string:
            choice_is_device(det, value)  # the choice goes straight into torch: a device is fine
        return  # `"cuda" if torch.cuda.is_available() else "cpu"`: FL901, on the whole expression
    if type(value) is ast.Dict:
        # map_location={"cuda:1": "cuda:0"}: keys say where storages were saved (a fact about the
        # file); the values say where they go.
        for item in value.values:
            report_device_strings(det, item, as_string=as_string)
        return
    for literal, index in cuda_strings(value):
        if id(literal) in det.done:
            continue
        if as_string or literal is not value:
            # A string stays a string; "cuda:N" (N > 0) as str(torch.fl.device("accN")) raises on a host
            # with fewer devices, where the literal was only a name (maybe never used: a default).
            safety = None if index == "?" else "safe" if index in (None, "0") else "unsafe"
            det.report("FL101", literal, safety, text=source_text(literal), replacement=string_replacement(index),
                       note="kept a string: the value may be used as one" if safety != "unsafe" else
                       "kept a string: the value may be used as one; unsafe: the device string names a "
                       "device that may not exist here, and str(torch.fl.device(...)) raises at once")
            continue
        det.report("FL101", literal, None if index == "?" else "safe", text=source_text(literal),
                   replacement=device_replacement(index))
    report_ordinals(det, value)


def report_ordinals(det: RuleContext, value: ast.expr, *, any_name: bool = False) -> None:
    """FL106: an integer (or a rank-like name) where a device goes means cuda:N."""
    for alt in alternatives(value):
        if id(alt) in det.done:
            continue
        if is_int(alt):
            det.report("FL106", alt, "safe", text=str(alt.value),  # type: ignore[attr-defined]
                       remedy=f'Replace with `torch.fl.device("acc{alt.value}")`',  # type: ignore[attr-defined]
                       replacement=f'torch.fl.device("acc{alt.value}")')  # type: ignore[attr-defined]
        elif (any_name and type(alt) in (ast.Name, ast.Attribute, ast.Subscript)) \
                or terminal_name(alt) in ORDINAL_NAMES or _rank_number(alt):
            text = ast.unparse(alt)
            det.report("FL106", alt, None, text=text,
                       remedy=f"Use `torch.fl.device({text})` (the ordinal names accN)")


def _rank_number(node: ast.expr) -> bool:
    """`int(os.environ["LOCAL_RANK"])`, `int(os.environ.get("LOCAL_RANK") or 0)`: a rank read as a
    number is a CUDA ordinal where a device goes."""
    if not (type(node) is ast.Call and type(node.func) is ast.Name and node.func.id == "int" and node.args):
        return False
    return any("rank" in (str_value(sub) or terminal_name(sub) or "").lower() for sub in ast.walk(node.args[0]))


@on_keyword("device_id")
def fsdp_device_id(det: RuleContext, call: ast.Call, arg: str, value: ast.expr, func: str | None) -> None:
    """FSDP(model, device_id=0 / local_rank): a CUDA ordinal (FSDP moves the module to that GPU)."""
    if is_int(value) or terminal_name(value) in ORDINAL_NAMES or _rank_number(value):
        text = ast.unparse(value)
        det.report("FL106", value, None, text=text,
                   remedy="Use `device_id=torch.fl.device(...)` where the module goes to an accelerator, "
                          "none on the CPU")


@on_keyword(*DEVICE_KWARGS)
def device_keyword(det: RuleContext, call: ast.Call, arg: str, value: ast.expr, func: str | None) -> None:
    if arg == "map_location" and type(value) is ast.Lambda:
        return  # the lambda's body (storage.cuda(...)) is scanned on its own
    if (func or "").startswith("torch.fl."):
        for literal, index in cuda_strings(value):
            det.report("FL101", literal, None if index == "?" else "safe", text=source_text(literal),
                       replacement=device_replacement(index))
        return  # an integer is a virtual device there (torch.fl.synchronize(0) is acc0)
    foreign = not torch_callee(det, call)
    if foreign:
        # DeviceProcessorStep(device="cuda"): a callee that is not torch's decides what the name means (its
        # own "cuda" in str(device) tests, its own table); under a CUDA check that makes the check's fix
        # unsafe (guards_settle), since on an NPU the callee now gets "npu" where the original skipped it.
        det.state(__name__).setdefault(FOREIGN, set()).update(
            (literal.lineno, literal.col_offset, literal.end_lineno, literal.end_col_offset)
            for literal, _ in cuda_strings(value))
    report_device_strings(det, value, as_string=foreign)
    det.sink("device", value)


@on_keyword("accelerator")
def lightning_accelerator(det: RuleContext, call: ast.Call, arg: str, value: ast.expr, func: str | None) -> None:
    """Lightning / Fabric `accelerator="cuda"` (or "gpu": CUDA or MPS only); "auto" picks what is there."""
    if (func or "").rsplit(".", 1)[-1] not in ("Trainer", "Fabric"):
        return
    det.sink("device", value)
    for literal in alternatives(value):
        if str_value(literal) in ("cuda", "gpu"):
            det.report("FL101", literal, "safe", text=source_text(literal), replacement='"auto"')


def _names_a_device(name: str | None) -> bool:
    """A call that returns a device by its name: device(), current_device(), dev(), get_device()."""
    lowered = (name or "").lower()
    return "dev" in lowered and "count" not in lowered and "rank" not in lowered


# Calls whose string arguments are not devices, though "cuda" may be one of them.
_NOT_DEVICE_CALLS = frozenset({
    "getattr", "hasattr", "setattr", "delattr", "print", "startswith", "endswith", "replace", "split", "rsplit",
    "join", "format", "get", "pop", "setdefault", "getenv", "putenv", "index", "count", "find", "rfind", "append",
    "add", "extend", "insert", "remove", "discard", "info", "debug", "warning", "warn", "error", "critical",
    "exception", "log", "write", "isinstance", "str", "repr", "open", "import_module", "__import__",
    "find_spec", "strip", "lstrip", "rstrip", "encode", "decode", "match", "search", "fullmatch", "sub",
    "compile", "add_argument", "choice", "Literal", "register", "skip", "skipif", "skipIf", "skipUnless",
    "param", "parametrize", "mark", "version", "parse", "check_output", "run", "call", "Popen", "system",
    "register_kernel", "impl", "register_fake", "register_autocast", "Library", "define",  # kernels for CUDA
    "Field",  # pydantic's field default: a config default (FL107) when the field's name says device
})
# A library's device spec naming CUDA with a precision (RWKV's strategy "cuda fp16", "cuda:0 fp16i8 -> cpu fp32").
_DEVICE_SPEC = re.compile(r"cuda(:\d+)?\s+(fp16|fp32|bf16|fp16i8|i8)\b")


@on("call")
def cuda_argument(det: RuleContext, node: ast.Call, callee: str | None) -> None:
    """`generate_stream(model, tokenizer, params, "cuda")`: a CUDA device string handed to a function
    whose parameters the scanner cannot see (defined in another module); and library device specs
    (`RWKV(..., strategy="cuda fp16")`). Reported without a fix: what the callee does with it is not
    known. Calls that take strings for other reasons (logging, string methods, getattr) are left alone."""
    name = (callee or "").rsplit(".", 1)[-1]
    if not name or name in _NOT_DEVICE_CALLS or name.startswith(("assert", "log")) \
            or (type(node.func) is ast.Attribute and type(node.func.value) in (ast.Constant, ast.JoinedStr)):
        return
    for value in (*node.args, *(kw.value for kw in node.keywords)):
        if id(value) in det.done:
            continue
        text = str_value(value)
        if text is None:
            continue
        if (value in node.args and CUDA_DEVICE.fullmatch(text)) or _DEVICE_SPEC.match(text):
            index = CUDA_DEVICE.fullmatch(text.split()[0]).group(1)  # type: ignore[union-attr]
            det.report("FL101", value, None, text=source_text(value), replacement=device_replacement(index))


@on("guarded_literal")
def guarded_device_string(det: RuleContext, literal: ast.Constant) -> tuple[str, int, str | None]:
    """A "cuda" literal only a CUDA check reaches (scan/guards.py): it becomes `torch.fl.device_type()`,
    a string still, "cuda" on CUDA where the check passed (the CPU never gets here; an NPU, whose check
    now passes, gets "npu"). Safe; "cuda:N" with N > 0 unsafe (str(torch.fl.device("accN")) raises on a
    host with fewer devices)."""
    index = CUDA_DEVICE.fullmatch(literal.value).group(1)  # type: ignore[union-attr]
    safety = "safe" if index in (None, "0") else "unsafe"
    det.report("FL101", literal, safety, text=source_text(literal), replacement=string_replacement(index),
               note="under a CUDA check: fixed with it, and kept a string")
    return ("FL101", literal.lineno, safety)


@on("assign")
def device_map_variable(det: RuleContext, target: ast.expr, value: ast.expr) -> None:
    """`device_map = {"": local_rank}` (passed on as `device_map=device_map`): its values are CUDA
    ordinals, as they would be written in the call (alpaca-lora, qlora)."""
    if terminal_name(target) == "device_map":
        for alt in alternatives(value):  # `{"": local_rank} if ddp else None`
            if type(alt) is ast.Dict:
                for item in alt.values:
                    report_ordinals(det, item)


_DEVICE_ID_KEYS = ("device_ids", "output_device")


@on_keyword(*_DEVICE_ID_KEYS)
def device_ids_keyword(det: RuleContext, call: ast.Call, arg: str, value: ast.expr, func: str | None) -> None:
    """DDP(model, device_ids=[rank]): each entry is a CUDA ordinal (None for a CPU module)."""
    report_device_ids(det, arg, value)


@on("assign")
def device_ids_entry(det: RuleContext, target: ast.expr, value: ast.expr) -> None:
    """`kwargs["device_ids"] = [local_rank]`, passed on as `DDP(model, **kwargs)`: the same ordinals."""
    key = str_value(target.slice) if type(target) is ast.Subscript else None
    if key in _DEVICE_ID_KEYS:
        report_device_ids(det, key, value)  # type: ignore[arg-type]


@on("dict")
def device_ids_dict(det: RuleContext, node: ast.Dict) -> None:
    """`ddp_kwargs = {"device_ids": [local_rank]}`."""
    for key, value in zip(node.keys, node.values, strict=True):
        if str_value(key) in _DEVICE_ID_KEYS:
            report_device_ids(det, str_value(key), value)  # type: ignore[arg-type]


def report_device_ids(det: RuleContext, arg: str, value: ast.expr) -> None:
    """FL106 for each entry of a `device_ids` / `output_device` value that is a CUDA ordinal."""
    elts: list[ast.expr] = []
    for alt in alternatives(value):
        elts.extend(alt.elts if type(alt) in (ast.List, ast.Tuple) else [alt])  # type: ignore[attr-defined]
    for elt in elts:
        if type(elt) is ast.Constant and elt.value is None:
            continue
        if (type(elt) is ast.Call and _names_a_device(terminal_name(elt.func))) \
                or (type(elt) is ast.Attribute and elt.attr == "index"):
            continue  # torch.device(...), torch.fl.device(...), dist_util.dev(), dev.index: a device, not an ordinal
        if id(elt) in det.done:
            continue
        text = ast.unparse(elt)
        det.report("FL106", elt, None, text=text,
                   remedy=f"Use `{arg}=[torch.fl.current_device()] if torch.fl.is_accelerator() else None` "
                          "(a CPU module takes None)")
        det.done.add(id(elt))


@on_method("to")
def to_call(det: RuleContext, node: ast.Call, attr: str) -> None:
    if node.args and id(node.args[0]) not in det.done:
        report_device_strings(det, node.args[0])
        det.sink("device", node.args[0])


@on_call("torch.device")
def torch_device(det: RuleContext, node: ast.Call, qual: str) -> None:
    """torch.device("cuda"), torch.device("cuda", 0), torch.device(type="cuda"), torch.device(0)."""
    value = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "type"), None)
    if value is None:
        return
    det.sink("device", value)
    if device_choice(det, value) is not None:
        choice_is_device(det, value)
        return  # FL901 rewrites the choice; torch.device(torch.fl.device()) is fine
    det.done.add(id(value))
    if is_int(value) and len(node.args) == 1 and not node.keywords:
        det.report("FL106", node, _object_safety(str(value.value)), text=str(value.value),  # type: ignore[attr-defined]
                   remedy=f'Replace with `torch.fl.device("acc{value.value}")`',  # type: ignore[attr-defined]
                   replacement=f'torch.fl.device("acc{value.value}")')  # type: ignore[attr-defined]
        return
    text = str_value(value)
    match = CUDA_DEVICE.fullmatch(text) if text is not None else None
    if match is None:
        det.done.discard(id(value))
        report_device_strings(det, value)
        if not (type(value) is ast.Call and (det.qualname(value.func) or "").startswith("torch.cuda.")):
            det.done.add(id(value))  # torch.device(torch.cuda.current_device()): FL201's, on the call
        return
    index = match.group(1)
    rest = node.args[1:] + [k.value for k in node.keywords if k.arg != "type"]
    if index is None and rest:
        number = rest[0].value if type(rest[0]) is ast.Constant else None
        index = str(number) if type(number) is int and len(rest) == 1 else "?"
    det.report("FL101", node, _object_safety(index), text=source_text(value),
               replacement=device_replacement(index))


def _object_safety(index: str | None) -> str | None:
    """A `torch.device("cuda:N")` object. acc0 exists on every host, so "cuda" and "cuda:0" are safe;
    `torch.fl.device("acc1")` raises on a host with one device, where `torch.device("cuda:1")` only
    built an object (the failure came at first use, if ever): unsafe."""
    if index == "?":
        return None
    return "safe" if index is None or index == "0" else "unsafe"


@on_call("torch.set_default_device", "torch.set_default_tensor_type")
def default_device(det: RuleContext, node: ast.Call, qual: str) -> None:
    if not node.args:
        return
    value = node.args[0]
    det.sink("device", value)
    call = f"{qual}({source_text(value)})"
    if qual == "torch.set_default_device":
        for literal, index in cuda_strings(value):
            det.report("FL104", literal, None if index == "?" else "safe", call=call,
                       replacement=device_replacement(index))
    elif (det.qualname(value) or str_value(value) or "").startswith("torch.cuda."):
        det.report("FL104", node, call=call)
        det.claim(value)


@on_method("cuda")
def cuda_method(det: RuleContext, node: ast.Call, attr: str) -> None:
    arguments = [*node.args, *node.keywords]
    device = node.args[0] if node.args else next((kw.value for kw in node.keywords if kw.arg == "device"), None)
    others = [kw.arg for kw in node.keywords if kw.arg != "device"]
    if device is None:
        index: str | None = None
    elif is_int(device):
        index = str(device.value)  # type: ignore[attr-defined]
    else:
        index = "?"
    if device is not None:
        det.done.add(id(device))  # the ordinal is part of this finding (one finding per site)
    safe = index != "?" and all(arg in ("non_blocking", "memory_format") for arg in others)
    call = ".cuda(" + ", ".join(ast.unparse(a) for a in arguments) + ")"
    det.report("FL102", node, "safe" if safe else None, call=call, replacement=device_replacement(index))


@on_method("add_argument")
def argparse_default(det: RuleContext, node: ast.Call, attr: str) -> None:
    """parser.add_argument("--device", default="cuda"): a source for `args.device`."""
    default = next((kw.value for kw in node.keywords if kw.arg == "default"), None)
    if default is None or not cuda_or_nccl(default):
        return
    dest = next((str_value(kw.value) for kw in node.keywords if kw.arg == "dest"), None)
    if dest is None:
        options = [str_value(a) for a in node.args if str_value(a)]
        longs = [o for o in options if o.startswith("--")]  # type: ignore[union-attr]
        dest = (longs or options or [None])[0]
    if dest:
        dest = dest.lstrip("-").replace("-", "_")
        det.source(("member", dest), default, f"args.{dest}")
        if "device" in dest.lower() and any(True for _ in cuda_strings(default)):
            # `--device` says what it is: the parsed value goes to a device, here or in the module that
            # receives `args` (timm's train.py hands args to timm.utils.distributed).
            key = ("device", ("member", dest))
            det.sinks[key] = min(det.sinks.get(key, node.lineno), node.lineno)


@on_method("option")
def click_default(det: RuleContext, node: ast.Call, attr: str) -> None:
    """@click.option("-d", "--device", default="cuda:0"): the option's value is the decorated function's
    `device` parameter, the device it runs on (argparse's `--device` default is the same coupling)."""
    default = next((kw.value for kw in node.keywords if kw.arg == "default"), None)
    options = [str_value(a) or "" for a in node.args]
    if default is None or not any("device" in o.lower() for o in options):
        return
    target = next((o for o in options if o.startswith("--")), options[0] if options else "option")
    for literal, index in cuda_strings(default):
        if index == "?" or id(literal) in det.done:
            continue
        replacement = "torch.fl.device_type()" if index is None else f'str(torch.fl.device("acc{index}"))'
        det.report("FL105", literal, "unsafe", text=source_text(literal), target=target, sink_line=node.lineno,
                   replacement=replacement)
        det.done.add(id(literal))


@on("flow")
def device_flow(det: RuleContext, kind: str, literal: ast.expr, index: str | None, target: str,
                sink_line: int | str) -> None:
    if kind != "device":
        return
    replacement = ("torch.fl.device_type()" if index is None else
                   'str(torch.fl.device(f"acc{...}"))' if index == "?" else
                   f'str(torch.fl.device("acc{index}"))')
    det.report("FL105", literal, None if index == "?" else "unsafe", text=source_text(literal),
               target=target, sink_line=sink_line, replacement=replacement)


# Fixes --------------------------------------------------------------------------------------------
@fixes("FL101", "SimpleString", "Call")
def fix_device_string(rw: FixContext, original: cst.SimpleString | cst.Call, updated: cst.SimpleString | cst.Call,
                      finding: Finding) -> cst.BaseExpression | None:
    import libcst as cst

    if isinstance(original, cst.SimpleString):
        if finding.replacement == '"auto"':  # Lightning's accelerator="cuda"
            return rw.string("auto", original)
        match = CUDA_DEVICE.fullmatch(str(original.evaluated_value))
        if match is None:
            return None
        if finding.replacement is not None and finding.replacement.startswith(("torch.fl.device_type(", "str(")):
            return rw.expr(finding.replacement)  # the value stays a string (report_device_strings)
        return rw.device(_ordinal(match), original)
    if rw.qual(original.func) != "torch.device":
        return None
    # torch.device("cuda") / ("cuda:N") / ("cuda", N) / (type="cuda", index=N).
    kinds: dict[str, cst.BaseExpression] = {}
    for i, arg in enumerate(original.args):
        if arg.star:
            return None
        key = arg.keyword.value if arg.keyword is not None else ("type", "index")[min(i, 1)]
        kinds[key] = arg.value
    literal = kinds.get("type")
    if not isinstance(literal, cst.SimpleString):
        return None
    match = CUDA_DEVICE.fullmatch(str(literal.evaluated_value))
    if match is None:
        return None
    index = kinds.get("index")
    if index is None:
        return rw.device(_ordinal(match), literal)
    if match.group(1) is not None or not isinstance(index, cst.Integer):
        return None
    return rw.device(int(index.evaluated_value), literal)


@fixes("FL104", "SimpleString")
def fix_default_device(rw: FixContext, original: cst.SimpleString, updated: cst.SimpleString,
                       finding: Finding) -> cst.BaseExpression | None:
    match = CUDA_DEVICE.fullmatch(str(original.evaluated_value))
    return None if match is None else rw.device(_ordinal(match), original)


@fixes("FL105", "SimpleString")
def fix_device_variable(rw: FixContext, original: cst.SimpleString, updated: cst.SimpleString,
                        finding: Finding) -> cst.BaseExpression | None:
    # The literal names a device type ("cuda") or one device ("cuda:1"); the replacement is a string of
    # the same kind, so string comparisons and f-strings keep working.
    match = CUDA_DEVICE.fullmatch(str(original.evaluated_value))
    if match is None:
        return None
    index = _ordinal(match)
    return rw.fl_call("device_type") if index is None else rw.str_device(index, original)


def _ordinal(match: re.Match[str]) -> int | None:
    """The N of a "cuda:N" matched by CUDA_DEVICE, None for "cuda"."""
    return None if match.group(1) is None else int(match.group(1))


@fixes("FL106", "Integer", "Call")
def fix_ordinal(rw: FixContext, original: cst.Integer | cst.Call, updated: cst.Integer | cst.Call,
                finding: Finding) -> cst.BaseExpression | None:
    import libcst as cst

    if isinstance(original, cst.Call) and rw.qual(original.func) != "torch.device":
        return None
    if finding.replacement is None:
        return None
    return rw.expr(finding.replacement)


@fixes("FL102", "Call")
def fix_cuda_method(rw: FixContext, original: cst.Call, updated: cst.Call,
                    finding: Finding) -> cst.BaseExpression | None:
    # .cuda(device=None, non_blocking=False, memory_format=...) -> .to(device, ...).
    import libcst as cst

    call = updated
    if not isinstance(call.func, cst.Attribute) or call.func.attr.value != "cuda":
        return None
    device: cst.Arg | None = None
    rest: list[cst.Arg] = []
    positional = 0
    for arg in call.args:
        if arg.star:
            return None
        if arg.keyword is None:
            if positional == 0:
                device = arg
            elif positional == 1:
                rest.append(arg.with_changes(keyword=cst.Name("non_blocking"), equal=rw.no_space))
            else:
                return None
            positional += 1
        elif arg.keyword.value == "device":
            device = arg
        else:
            rest.append(arg)
    value = None if device is None else device.value
    if value is None or (isinstance(value, cst.Name) and value.value == "None"):
        new_device = rw.device(None)
    elif isinstance(value, cst.Integer):
        new_device = rw.device(int(value.evaluated_value))
    else:
        return None  # the scanner gives .cuda(expr) no fix: expr may be a rank, a device, ...
    # The device goes first, as .to() takes it; it keeps its own comma and layout.
    first = cst.Arg(new_device) if device is None else device.with_changes(
        value=new_device, keyword=None, equal=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(func=call.func.with_changes(attr=cst.Name("to")), args=rw.commas([first, *rest], call))
