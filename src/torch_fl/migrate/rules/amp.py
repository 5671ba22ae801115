"""FL3: automatic mixed precision (``torch.cuda.amp``, ``torch.autocast("cuda")``): detection and fix.

The fixes keep meaning on a CPU-only host: there ``torch.cuda.amp.autocast()``, ``torch.autocast("cuda")``
and ``torch.cuda.amp.GradScaler()`` disable themselves (CUDA is not available), while
``torch.autocast("cpu")`` and ``torch.amp.GradScaler("cpu")`` would be on. The scaler's rewrite passes
``enabled=torch.fl.is_accelerator()`` (and-ed with the call's own ``enabled``): off on the CPU as before,
on for CUDA as before, and on for every other accelerator.

An autocast region is scoped to its device type: ``torch.cuda.amp.autocast(enabled=False)`` turns off
CUDA autocast only, so inside an outer ``torch.autocast("cpu")`` the CPU still computes in bfloat16. Its
rewrite must not become ``torch.autocast("cpu", enabled=False)`` on the CPU, which would switch the
outer region off. So an autocast entered in a ``with`` (or built as a value) becomes
``torch.autocast(torch.fl.device_type(), ...) if torch.fl.is_accelerator() else
contextlib.nullcontext()``: the accelerator's autocast where there is one, nothing on the CPU, as
before. As a decorator (``@torch.cuda.amp.autocast()``) no such expression applies: that rewrite is
the gated one, and unsafe (inside an outer CPU autocast, the decorated function runs in float32 there).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from .base import (
    RuleContext,
    alternatives,
    fixes,
    on,
    on_call,
    on_call_name,
    on_keyword,
    rule,
    str_value,
    triggers,
)

if TYPE_CHECKING:
    import libcst as cst

    from .base import Finding, FixContext

# AMP entry points whose device type is "cuda" in CUDA-era code: name -> positional index or None.
AMP_DEVICE_TYPE = {
    "torch.autocast": 0, "torch.amp.autocast": 0, "torch.amp.autocast_mode.autocast": 0,
    "torch.amp.GradScaler": 0, "torch.amp.grad_scaler.GradScaler": 0,
    "torch.amp.custom_fwd": None, "torch.amp.custom_bwd": None,
    "torch.get_autocast_dtype": 0, "torch.is_autocast_available": 0, "torch.is_autocast_enabled": 0,
    "torch.amp.is_autocast_available": 0, "torch.set_autocast_dtype": 0,
}
# Calls that disable themselves on a CPU-only host when given "cuda": their fix gates `enabled`.
# name -> how many positional arguments come before `enabled`.
GATED = {"torch.autocast": 2, "torch.amp.autocast": 2, "torch.amp.autocast_mode.autocast": 2,
         "torch.amp.GradScaler": 5, "torch.amp.grad_scaler.GradScaler": 5}
CUDA_AMP = ("torch.cuda.amp.autocast", "torch.cuda.amp.autocast_mode.autocast", "torch.cuda.amp.GradScaler",
            "torch.cuda.amp.grad_scaler.GradScaler")
# torch.cuda.amp.autocast(enabled, dtype, cache_enabled): positional order differs from torch.autocast's
# (device_type, dtype, enabled, cache_enabled), so positionals become keywords.
_AUTOCAST_POSITIONAL = ("enabled", "dtype", "cache_enabled")
# The replacement tag of an autocast used as a decorator: the fix writes the gated form there.
DECORATOR = "decorator"
# torch.autocast entry points whose region is scoped (a `with` or a value, not a decorator).
SCOPED = ("torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast")
_SCALER_POSITIONAL = ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled")

triggers("cuda")

rule(
        "FL301", "cuda-amp-autocast",
        "`torch.cuda.amp.autocast` is deprecated and CUDA-only",
        "Replace with `torch.autocast(torch.fl.device_type(), ...)`", "safe",
        fix_notes="An autocast region is scoped to its device type: `torch.cuda.amp.autocast(enabled=False)` "
                  "switched CUDA autocast off, never an outer CPU one. So the call becomes "
                  "`torch.autocast(torch.fl.device_type(), ...) if torch.fl.is_accelerator() else "
                  "contextlib.nullcontext()`: the accelerator's region where there is one, nothing on a "
                  "CPU-only host (as before; `import contextlib` is added). `**kwargs` are passed on as they "
                  "are (`torch.autocast(torch.fl.device_type(), **kwargs)`: torch.cuda.amp.autocast's keywords "
                  "`enabled`, `dtype`, `cache_enabled` are torch.autocast's, and its float16 default is "
                  "torch.autocast's default for CUDA); `*args` get no fix (torch.autocast takes them in another "
                  "order). As a decorator "
                  "(`@torch.cuda.amp.autocast()`) it gets `enabled=torch.fl.is_accelerator()` instead, an "
                  "unsafe fix: inside an outer CPU autocast the decorated function then runs in float32 on "
                  "the CPU, and so does a call whose result is called (`torch.cuda.amp.autocast()(fn)`). "
                  "`partial(torch.cuda.amp.autocast, ...)` is reported without a fix, and so is the function "
                  "bound to a name and entered later (`region = torch.cuda.amp.autocast if amp else "
                  "nullcontext`; `with region():`): the name may hold `nullcontext` too. A region whose result "
                  "is used (`torch.autocast(\"cuda\").__enter__()`) keeps it: the conditional is parenthesised.",
        what="A `torch.cuda.amp.autocast(...)` call, including `autocast()` imported from "
             "`torch.cuda.amp`.",
        why="It enables autocast for CUDA only; on any other device the region silently runs in "
            "float32, and torch warns that it is deprecated.",
        example="""
from torch.cuda.amp import autocast
with autocast(dtype=torch.float16):
    out = model(x)
""",
        use_instead="""
with torch.autocast(torch.fl.device_type(), dtype=torch.float16):
    out = model(x)
# or, with the description's autocast dtype: with torch.fl.autocast():
""",
)

rule(
        "FL302", "cuda-grad-scaler",
        "`torch.cuda.amp.GradScaler` is deprecated and CUDA-only",
        "Replace with `torch.amp.GradScaler(torch.fl.device_type(), ...)`", "safe",
        fix_notes="The call also gets `enabled=torch.fl.is_accelerator()` (and-ed with its own `enabled`): "
                  "torch.cuda.amp.GradScaler disabled itself on a CPU-only host, and the rewrite still does. "
                  "With `*args` or `**kwargs` there is no fix (`enabled` may be in them).",
        what="A `torch.cuda.amp.GradScaler(...)` call.",
        why="The CUDA scaler keeps its state on CUDA; elsewhere it disables itself with a warning and "
            "float16 gradients underflow.",
        example="""
scaler = torch.cuda.amp.GradScaler()
""",
        use_instead="""
scaler = torch.amp.GradScaler(torch.fl.device_type())
""",
)

rule(
        "FL303", "autocast-cuda-device-type",
        "`{func}` with the hard-coded device type {text}", "Replace {text} with `torch.fl.device_type()`",
        "safe",
        fix_notes="With \"cuda\" these calls disabled themselves on a CPU-only host, and still do: a "
                  "`torch.autocast` region becomes `... if torch.fl.is_accelerator() else "
                  "contextlib.nullcontext()` (scoped as FL301 says), `torch.amp.GradScaler` gets "
                  "`enabled=torch.fl.is_accelerator()` (and-ed with its own). `device_type=\"cuda\"` in a "
                  "kernel registration (`torch.fl.register_kernel`, `torch.library.register_kernel`) names "
                  "CUDA on purpose and is not reported here (FL705 reports a torch.library op registered "
                  "for CUDA only).",
        what="`\"cuda\"` as the device type of `torch.autocast`, `torch.amp.autocast`, "
             "`torch.amp.GradScaler`, `torch.amp.custom_fwd/custom_bwd`, or any `device_type=` keyword.",
        why="Autocast for `\"cuda\"` does nothing for tensors on another device: the region silently "
            "runs in float32 there.",
        example="""
with torch.autocast("cuda", dtype=torch.bfloat16):
    out = model(x)
""",
        use_instead="""
with torch.autocast(torch.fl.device_type(), dtype=torch.bfloat16):
    out = model(x)
""",
)


@on_call(*CUDA_AMP)
def cuda_amp_call(det: RuleContext, node: ast.Call, qual: str) -> None:
    if qual.endswith("autocast"):
        # The decorator form gets the gated rewrite (unsafe); a region entered with `with`, the scoped one.
        safety: str | None = "unsafe" if det.decorating else "safe"
        note = ""
        if any(type(a) is ast.Starred for a in node.args):
            safety, note = None, "no fix: `*args` is in torch.cuda.amp.autocast's order (enabled, dtype), not torch.autocast's"
        elif det.decorating and any(kw.arg is None for kw in node.keywords):
            safety, note = None, "no fix: `enabled=torch.fl.is_accelerator()` cannot be and-ed into `**kwargs`"
        det.report("FL301", node, safety, replacement=DECORATOR if det.decorating else None, note=note)
    elif any(type(a) is ast.Starred for a in node.args) or any(kw.arg is None for kw in node.keywords):
        # GradScaler(*args) / (**kwargs): `enabled` may be in them, and cannot be and-ed with the CPU's off.
        det.report("FL302", node, None, note="no fix: `enabled=torch.fl.is_accelerator()` cannot be and-ed into "
                                             "`*args`/`**kwargs`; pass `torch.fl.device_type()` and the gate by hand")
    else:
        det.report("FL302", node, "safe")


@on_call_name("partial")
def amp_partial(det: RuleContext, node: ast.Call, name: str) -> None:
    """`partial(torch.cuda.amp.autocast, dtype=...)`: the CUDA autocast, called later."""
    if node.args and det.qualname(node.args[0]) in CUDA_AMP:
        qual = det.qualname(node.args[0])
        det.report("FL301" if qual.endswith("autocast") else "FL302", node.args[0])
        det.claim(node.args[0])


@on("assign")
def autocast_variable(det: RuleContext, target: ast.expr, value: ast.expr) -> None:
    """`precision_scope = autocast if opt.precision == "autocast" else nullcontext` (stable-diffusion):
    `precision_scope("cuda")` is `torch.autocast("cuda")`. Reported without a fix (the fixer rewrites
    calls it can name)."""
    if type(target) is not ast.Name:
        return
    for alt in alternatives(value):
        qual = det.qualname(alt) if type(alt) in (ast.Name, ast.Attribute) else None
        if qual in CUDA_AMP and qual.endswith("autocast"):  # type: ignore[union-attr]
            # `autocast = torch.cuda.amp.autocast if use_amp else nullcontext`, entered later as `autocast()`:
            # the name may hold nullcontext too, so its calls are not rewritten; the reference is reported.
            det.report("FL301", alt, None, note=f"no fix: bound to `{target.id}` and entered later; bind a function "
                                                f"returning `torch.autocast(torch.fl.device_type(), ...) if "
                                                f"torch.fl.is_accelerator() else contextlib.nullcontext()` instead")
            det.claim(alt)
            continue
        if qual in SCOPED:
            det.aliases[target.id] = qual
            det.state(__name__).setdefault("autocast_variables", set()).add(target.id)
            return


def _device_type_literals(det: RuleContext, call: ast.Call, value: ast.expr, func: str) -> None:
    literals = [alt for alt in alternatives(value) if str_value(alt) == "cuda"]
    if type(call.func) is ast.Name and call.func.id in det.state(__name__).get("autocast_variables", ()):
        for literal in literals:
            det.report("FL303", literal, None, func=call.func.id, text='"cuda"')
        det.done.add(id(value))
        return
    for literal in literals:
        if func in GATED and value is literal and len(literals) == 1:
            # The whole call is rewritten (device type and `enabled`), so the finding is the call.
            decorator = det.decorating and func in SCOPED
            det.report("FL303", call, "unsafe" if decorator else "safe", func=func, text='"cuda"',
                       replacement=DECORATOR if decorator else None)
            det.done.add(id(literal))
        else:
            det.report("FL303", literal, "safe" if func not in GATED else None, func=func, text='"cuda"')
    det.done.add(id(value))


@on_call(*AMP_DEVICE_TYPE)
def amp_device_type(det: RuleContext, node: ast.Call, qual: str) -> None:
    index = AMP_DEVICE_TYPE[qual]
    if index is not None and len(node.args) > index:
        _device_type_literals(det, node, node.args[index], qual)
        det.sink("device", node.args[index])
    for kw in node.keywords:
        if kw.arg in ("device_type", "device"):
            _device_type_literals(det, node, kw.value, qual)
            det.sink("device", kw.value)


# Calls where `device_type="cuda"` names the CUDA kernel on purpose: registering a kernel for CUDA.
_REGISTRATIONS = frozenset({"register_kernel", "impl", "register_fake", "register_autocast", "Library"})


@on_keyword("device_type")
def device_type_keyword(det: RuleContext, call: ast.Call, arg: str, value: ast.expr, func: str | None) -> None:
    if (func or "").startswith("torch.fl.") or (func or "").rsplit(".", 1)[-1] in _REGISTRATIONS:
        return  # torch.fl.register_kernel(..., device_type="cuda"): this kernel is for CUDA only
    _device_type_literals(det, call, value, func or "call")
    det.sink("device", value)


# Fixes --------------------------------------------------------------------------------------------
def _gate(rw: FixContext, args: list[cst.Arg], positional_before: int) -> list[cst.Arg] | None:
    """`enabled=torch.fl.is_accelerator()` added, or and-ed into an existing `enabled=`."""
    import libcst as cst

    if sum(1 for a in args if a.keyword is None) > positional_before or any(a.star for a in args):
        return None  # `enabled` passed positionally, or *args: left to a person
    out = []
    found = False
    for arg in args:
        if arg.keyword is not None and arg.keyword.value == "enabled":
            found = True
            value = arg.value
            if not isinstance(value, (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Comparison)):
                value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()]) \
                    if not value.lpar else value
            if isinstance(value, cst.Name) and value.value == "False":
                pass  # off everywhere already
            elif isinstance(value, cst.Name) and value.value == "True":
                arg = arg.with_changes(value=rw.fl_call("is_accelerator"))
            else:
                arg = arg.with_changes(value=cst.BooleanOperation(rw.fl_call("is_accelerator"), cst.And(), value))
        out.append(arg)
    if not found:
        out.append(cst.Arg(rw.fl_call("is_accelerator"), keyword=cst.Name("enabled"), equal=rw.no_space))
    return out


def _scoped(rw: FixContext, call: cst.Call) -> cst.IfExp:
    """`CALL if torch.fl.is_accelerator() else contextlib.nullcontext()`: the accelerator's autocast
    where there is one, and on a CPU-only host nothing (not a CPU autocast region that would switch an
    outer one off)."""
    import libcst as cst

    rw.need_import("contextlib")
    space = cst.SimpleWhitespace(" ")
    return cst.IfExp(test=rw.fl_call("is_accelerator"), body=call,
                     orelse=cst.Call(cst.Attribute(cst.Name("contextlib"), cst.Name("nullcontext"))),
                     whitespace_before_if=space, whitespace_after_if=space, whitespace_before_else=space,
                     whitespace_after_else=space)


def _as_torch_amp(rw: FixContext, original: cst.Call, updated: cst.Call, name: str, positional: tuple[str, ...],
                  attr: str, scoped: bool) -> cst.BaseExpression | None:
    """torch.cuda.amp's `name` call as torch's `attr` (torch.ATTR): `torch.fl.device_type()` first, then
    the arguments, the positional ones (in torch.cuda.amp's order, `positional`) passed by keyword; run
    only on an accelerator (`scoped`: the whole region, else an `enabled=` gate). None for another
    callee, *args, or more positional arguments than that order names."""
    import libcst as cst

    if not (rw.qual(original.func) or "").endswith(name):
        return None
    args = [cst.Arg(rw.fl_call("device_type"))]
    count = 0
    for arg in updated.args:
        if arg.star == "*":
            return None  # positional, in torch.cuda.amp's order (scan offers no fix)
        if arg.keyword is None and not arg.star:
            if count >= len(positional):
                return None
            arg = arg.with_changes(keyword=cst.Name(positional[count]), equal=rw.no_space)
            count += 1
        args.append(arg)
    func: cst.BaseExpression = cst.Name(rw.torch_name)
    for part in attr.split("."):
        func = cst.Attribute(func, cst.Name(part))
    if scoped:
        return _scoped(rw, updated.with_changes(func=func, args=rw.commas(args, updated)))
    gated = _gate(rw, args, 1)
    return None if gated is None else updated.with_changes(func=func, args=rw.commas(gated, updated))


@fixes("FL301", "Call")
def fix_cuda_autocast(rw: FixContext, original: cst.Call, updated: cst.Call,
                      finding: Finding) -> cst.BaseExpression | None:
    return _as_torch_amp(rw, original, updated, "autocast", _AUTOCAST_POSITIONAL, "autocast",
                         scoped=finding.replacement != DECORATOR)


@fixes("FL302", "Call")
def fix_cuda_grad_scaler(rw: FixContext, original: cst.Call, updated: cst.Call,
                         finding: Finding) -> cst.BaseExpression | None:
    return _as_torch_amp(rw, original, updated, "GradScaler", _SCALER_POSITIONAL, "amp.GradScaler", scoped=False)


@fixes("FL303", "SimpleString", "Call")
def fix_device_type(rw: FixContext, original: cst.SimpleString | cst.Call, updated: cst.SimpleString | cst.Call,
                    finding: Finding) -> cst.BaseExpression | None:
    import libcst as cst

    if isinstance(original, cst.SimpleString):
        return rw.fl_call("device_type") if original.evaluated_value == "cuda" else None
    qual = rw.qual(original.func)
    if qual not in GATED:
        return None
    args = []
    replaced = False
    for i, arg in enumerate(updated.args):
        is_device = (arg.keyword is None and i == 0) or (arg.keyword is not None
                                                         and arg.keyword.value in ("device_type", "device"))
        if is_device and isinstance(arg.value, cst.SimpleString) and arg.value.evaluated_value == "cuda":
            arg = arg.with_changes(value=rw.fl_call("device_type"))
            replaced = True
        args.append(arg)
    if not replaced:
        return None
    if qual in SCOPED and finding.replacement != DECORATOR:
        return _scoped(rw, updated.with_changes(args=rw.commas(args, updated)))
    gated = _gate(rw, args, GATED[qual])
    return None if gated is None else updated.with_changes(args=rw.commas(gated, updated))
