"""FL9: control flow that decides on CUDA (device choice by ``torch.cuda.is_available()``, comparisons
with ``"cuda"``, ``x.is_cuda``): detection and fix.

Meaning first: in CUDA-era code ``"cuda"`` means "an accelerator". The fixes say so, so that a CPU run
keeps its CPU behaviour: ``"cuda" if torch.cuda.is_available() else "cpu"`` becomes ``torch.fl.device()``
(``cpu`` on a CPU-only host, the accelerator elsewhere) and ``device_type == "cuda"`` becomes
``torch.fl.is_accelerator(device_type)`` (False for "cpu", True for "cuda", "npu", "mps", ...).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ..cuda_api import CUDA_DEVICE, NCCL
from .base import (
    RuleContext,
    accelerator_fallback,
    deviceish,
    fixes,
    is_cuda_literal,
    is_int,
    names_vendors,
    on,
    on_member,
    on_method,
    rule,
    source_text,
    str_value,
    triggers,
)

if TYPE_CHECKING:
    import libcst as cst

    from .base import Finding, FixContext

_AVAILABLE = "torch.cuda.is_available"
_COUNT = "torch.cuda.device_count"

triggers("cuda", "nccl")

rule(
        "FL901", "cuda-availability-branch",
        "Device chosen by `torch.cuda.is_available()`: every non-CUDA accelerator gets the CPU",
        "Replace with `{replacement_text}`", "safe", level="warning",
        what="The device-choice idiom `\"cuda\" if torch.cuda.is_available() else \"cpu\"` (also negated, "
             "with `\"cuda:N\"`, with `torch.cuda.device_count() > 0`, and the backend form "
             "`\"nccl\" if torch.cuda.is_available() else \"gloo\"`). Not reported inside the fallback arm of "
             "an accelerator-API choice (`torch.accelerator.current_accelerator().type if hasattr(torch, "
             "\"accelerator\") else \"cuda\" if torch.cuda.is_available() else \"cpu\"`): multi-vendor code.",
        why="The `else` arm is the CPU, so an NPU or MLU machine silently trains on the CPU: the 3x "
            "slowdown that takes days to find.",
        example="""
device = "cuda" if torch.cuda.is_available() else "cpu"
backend = "nccl" if torch.cuda.is_available() else "gloo"
""",
        use_instead="""
device = torch.fl.device()          # acc0 on any accelerator, the CPU when there is none
backend = torch.fl.dist_backend()
""",
        fix_notes="Safe: on a CUDA host the result is the CUDA device, on a CPU-only host the CPU, as before. "
                  "It becomes a device only where every use takes one (passed straight to torch); bound to a "
                  "name the module also uses as a string (compares, formats into an f-string, calls a string "
                  "method on, concatenates) or hands to a callee that is not torch's, it becomes "
                  "`torch.fl.device_type()`, the string \"cuda\" or \"cpu\" as before; a value that indexes "
                  "a table (`{\"cuda\": 64, \"cpu\": 8}[device]`) makes the fix unsafe (no \"npu\" entry). "
                  "A plain `if torch.cuda.is_available():` is FL201 (it becomes `torch.fl.is_accelerator()`).",
)

rule(
        "FL902", "device-type-comparison",
        "CUDA-only device check `{text}`", "Use `{replacement_text}` (True on any accelerator, False on the CPU)",
        "unsafe", level="warning",
        what="A check whether a device is CUDA: `x.device.type == \"cuda\"`, `device_type != \"cuda\"`, "
             "`\"cuda\" in str(device)`, `str(device).startswith(\"cuda\")`, `x.is_cuda`. Multi-vendor code "
             "is not reported: a device-type table naming another accelerator (`device.type in [\"cuda\", "
             "\"npu\", \"xpu\"]`, `{\"cuda\": ..., \"mps\": ...}`), an if/elif or match dispatching on the "
             "device type with a branch for another accelerator (its CUDA branch included), "
             "`getattr(torch, device.type)` and the `torch.accelerator` API.",
        why="Code behind the check is the accelerator path; every other accelerator takes the fallback "
            "path, usually one written for the CPU.",
        example="""
if x.device.type == "cuda":
    y = fused_op(x)
if device_type == "cuda":
    x = x.pin_memory().to(device, non_blocking=True)
""",
        use_instead="""
if torch.fl.is_accelerator(x.device.type):   # an accelerator, whatever it is; False on the CPU
    y = fused_op(x)
if torch.fl.is_accelerator(device_type):
    x = x.pin_memory().to(device, non_blocking=True)
""",
        fix_notes="The comparison becomes `torch.fl.is_accelerator(<the device>)` (`!=` / `not in`: "
                  "`not torch.fl.is_accelerator(...)`), so a CPU run keeps the CPU branch. Unsafe because on "
                  "a non-CUDA accelerator (MPS included) the accelerator branch now runs, and it may hold "
                  "CUDA-only code (then fix that too). Comparisons with `\"cuda:N\"` and membership in a tuple "
                  "of device types are reported without a fix. In one test with a CUDA check "
                  "(`args.device == \"cuda\" and not torch.cuda.is_available()`) the two are one question: "
                  "the check's fix is only as safe as the comparison's; asserted (`assert str(x.device) == "
                  "\"cuda:0\"`) under a check, the comparison holds the check back like CUDA-only code.",
        runs_off_cuda=True, pairs_as="comparison",
)

rule(
        "FL903", "cuda-error-text",
        "CUDA's error text matched: `{text}`",
        "Match the error the same way on every accelerator (its type, e.g. `torch.OutOfMemoryError`, or "
        "the words other backends use too, such as \"out of memory\")", None, level="warning",
        what="An error recognised by CUDA's words in its text, in an exception handler: `\"cuda\" in "
             "str(e).lower()`, `\"CUDA out of memory\" in str(err)` (a trainer that retries with a smaller "
             "batch when CUDA runs out of memory).",
        why="Other accelerators word their errors differently (`NPU out of memory`, `MPS backend out of "
            "memory`): the test never matches there, and the error it was written for goes unhandled.",
        example="""
try:
    loss = step(batch)
except RuntimeError as e:
    if "cuda" in str(e).lower() and "out of memory" in str(e).lower():
        batch_size //= 2
""",
        use_instead="""
try:
    loss = step(batch)
except torch.OutOfMemoryError:
    batch_size //= 2
""",
        runs_off_cuda=True,
)


def _asks_availability(det: RuleContext, test: ast.expr) -> bool:
    """torch.cuda.is_available(), torch.cuda.device_count(), device_count() > 0 / >= 1."""
    if type(test) is ast.Call:
        return det.qualname(test.func) in (_AVAILABLE, _COUNT) and not test.args
    if type(test) is ast.Compare and len(test.ops) == 1 and type(test.left) is ast.Call \
            and det.qualname(test.left.func) == _COUNT and is_int(test.comparators[0]):
        bound = test.comparators[0].value  # type: ignore[attr-defined]
        return (type(test.ops[0]) is ast.Gt and bound == 0) or (type(test.ops[0]) is ast.GtE and bound == 1)
    return False


def device_choice(det: RuleContext, node: ast.expr) -> str | None:
    """The torch.fl expression for `"cuda" if torch.cuda.is_available() else "cpu"` (and its negated,
    "cuda:N" and `"nccl" ... "gloo"` forms), or None when `node` is not such a choice."""
    if type(node) is not ast.IfExp:
        return None
    test, chosen, fallback = node.test, node.body, node.orelse
    if type(test) is ast.UnaryOp and type(test.op) is ast.Not:
        test, chosen, fallback = test.operand, fallback, chosen
    if not _asks_availability(det, test):
        return None
    picked, other = str_value(chosen), str_value(fallback)
    if picked == NCCL and other == "gloo":
        return "torch.fl.dist_backend()"
    match = CUDA_DEVICE.fullmatch(picked or "")
    if match is None or other != "cpu":
        return None
    return "torch.fl.device()" if match.group(1) is None else f'torch.fl.device("acc{match.group(1)}")'


@on("ifexp")
def accelerator_api_choice(det: RuleContext, node: ast.IfExp) -> None:
    """`torch.accelerator.current_accelerator().type if hasattr(torch, "accelerator") else "cuda"`: the
    `else` arm (its "cuda", a nested `"cuda" if torch.cuda.is_available() else "cpu"`) is the fallback of
    an older torch, not a CUDA coupling: nothing in it is reported."""
    if accelerator_fallback(node):
        det.claim(node.orelse)


def choice_is_device(det: RuleContext, value: ast.expr) -> None:
    """A device choice (FL901) that goes straight into a torch device argument (rules/device.py tells):
    its fix may give a device, where elsewhere it must stay a string (keep_strings_strings)."""
    det.state(__name__).setdefault("device_values", set()).add(id(value))


@on("ifexp")
def device_choice_expression(det: RuleContext, node: ast.IfExp) -> None:
    replacement = device_choice(det, node)
    if replacement is None:
        return
    before = len(det.raw)
    det.report("FL901", node, "safe", replacement=replacement, replacement_text=replacement, node_id=id(node))
    det.claim(node)
    if len(det.raw) > before:
        det.state(__name__).setdefault("choices", []).append(before)  # raw findings, settled at the end


@on("assign")
def device_choice_variable(det: RuleContext, target: ast.expr, value: ast.expr) -> None:
    if type(value) is ast.IfExp and device_choice(det, value) is not None:
        det.state(__name__).setdefault("choice_keys", {})[id(value)] = det.key(target)  # id(choice) -> key


@on("finish")
def keep_strings_strings(det: RuleContext) -> None:
    """The choice was a string ("cuda" or "cpu"); it becomes a device only where every use takes one.
    Bound to a name that the code also uses as a string (compares, formats into an f-string, calls a
    string method on, indexes a table with, concatenates) or hands to a callee that is not torch's
    (which may do any of that), or used in place anywhere but a torch device argument, it stays a
    string: `torch.fl.device_type()` is "cuda" on CUDA and "cpu" on the CPU, as the literals were."""
    state = det.state(__name__)
    choice_keys = state.get("choice_keys", {})
    for index in state.get("choices", ()):
        raw = det.raw[index]
        safety, fields, replacement = raw.safety, raw.fields, raw.replacement
        node_id = fields.pop("node_id", None)
        if replacement is None or "dist_backend" in replacement:
            continue
        key = choice_keys.get(node_id)
        if key is None:
            if node_id in state.get("device_values", ()):
                continue  # `x.to("cuda" if ... else "cpu")`, `torch.device(...)`: torch takes a device
        elif key not in det.string_keys and key not in det.opaque_keys:
            continue
        replacement = ("torch.fl.device_type()" if replacement == "torch.fl.device()"
                       else f"str({replacement})")
        fields["replacement_text"] = replacement
        line = det.table_keys.get(key) if key is not None else None
        if line is not None and safety == "safe":
            # {"cuda": ..., "cpu": ...}[device]: the table may have no entry for "npu".
            safety = "unsafe"
            fields["note"] = (f"unsafe: the value indexes a table (line {line}) that may have no entry for "
                              f"other accelerators")
        det.raw[index] = raw._replace(safety=safety, fields=fields, replacement=replacement)


def _report_check(det: RuleContext, node: ast.AST, other: ast.expr | None, literal: ast.expr | None,
                  negate: bool) -> None:
    """FL902 on a CUDA check; fixable (unsafe) when it tests for the device type "cuda" exactly."""
    text = ast.unparse(node)
    if other is not None and (literal is None or str_value(literal) == "cuda"):
        replacement = f"{'not ' if negate else ''}torch.fl.is_accelerator({ast.unparse(other)})"
        det.report("FL902", node, "unsafe", text=text, replacement_text=replacement, replacement=replacement)
    else:
        det.report("FL902", node, text=text, replacement_text="torch.fl.is_accelerator(...)")
    if literal is not None:
        det.done.add(id(literal))


@on("compare")
def device_comparison(det: RuleContext, node: ast.Compare) -> None:
    operands = [node.left, *node.comparators]
    if len(node.ops) != 1:
        for op, left, right in zip(node.ops, operands, operands[1:], strict=False):
            if type(op) in (ast.Eq, ast.NotEq) and any(is_cuda_literal(x) and deviceish(y)
                                                       for x, y in ((left, right), (right, left))):
                _report_check(det, node, None, None, False)
                return
        return
    op, left, right = type(node.ops[0]), node.left, node.comparators[0]
    if op in (ast.Eq, ast.NotEq, ast.Is, ast.IsNot):
        for literal, other in ((left, right), (right, left)):
            if is_cuda_literal(literal) and deviceish(other):
                _report_check(det, node, other, literal, op in (ast.NotEq, ast.IsNot))
                return
        for literal, other in ((left, right), (right, left)):
            # `target == "cuda"` (FastChat's RWKV wrapper): a name not called device is still compared
            # with the CUDA device type; reported without a fix (what it holds is not known).
            if str_value(literal) == "cuda" and type(other) is ast.Name:
                _report_check(det, node, None, literal, False)
                return
    elif op in (ast.In, ast.NotIn):
        if is_cuda_literal(left) and deviceish(right):
            _report_check(det, node, right, left, op is ast.NotIn)
        elif type(right) in (ast.Tuple, ast.List, ast.Set) and deviceish(left) \
                and any(is_cuda_literal(e) for e in right.elts) \
                and not names_vendors(str_value(e) for e in right.elts):  # type: ignore[attr-defined]
            # `device.type in ("cuda", "cpu")` asks for CUDA; `in ["cuda", "npu", "xpu"]` is multi-vendor.
            _report_check(det, node, None, None, False)


# Names an `except ... as NAME` handler usually gives the error (the rule reads the comparison alone).
_ERROR_NAMES = frozenset({"e", "err", "error", "exc", "ex", "exception", "oom", "ex_"})
_TEXT_METHODS = frozenset({"lower", "upper", "casefold", "strip"})


def _error_text(node: ast.expr) -> bool:
    """`str(e)`, `repr(err)`, `str(e).lower()`: the text of a caught error."""
    while type(node) is ast.Call and type(node.func) is ast.Attribute and node.func.attr in _TEXT_METHODS \
            and not node.args:
        node = node.func.value
    if type(node) is not ast.Call or type(node.func) is not ast.Name or node.func.id not in ("str", "repr") \
            or len(node.args) != 1 or type(node.args[0]) is not ast.Name:
        return False
    name = node.args[0].id.lower()  # type: ignore[attr-defined]
    return name in _ERROR_NAMES or name.endswith(("error", "exception", "exc", "err"))


@on("compare")
def cuda_error_text(det: RuleContext, node: ast.Compare) -> None:
    if len(node.ops) != 1 or type(node.ops[0]) not in (ast.In, ast.NotIn):
        return
    words = str_value(node.left)
    if words is not None and "cuda" in words.lower() and _error_text(node.comparators[0]):
        det.report("FL903", node, text=ast.unparse(node))
        det.done.add(id(node.left))


@on_method("startswith")
def device_prefix(det: RuleContext, node: ast.Call, attr: str) -> None:
    receiver = node.func.value  # type: ignore[attr-defined]
    prefix = str_value(node.args[0]) if node.args else None
    if prefix and prefix.startswith("cuda") and deviceish(receiver):
        # startswith("cuda:") asks for one device, not "an accelerator": reported without a fix.
        _report_check(det, node, receiver if prefix == "cuda" else None, node.args[0] if prefix == "cuda" else None,
                      False)


@on_member("is_cuda")
def is_cuda_attribute(det: RuleContext, node: ast.Attribute) -> None:
    """`x.is_cuda`: "is x on the accelerator?"."""
    if type(node.ctx) is ast.Load and id(node) not in det.done:
        receiver = source_text(node.value)
        replacement = f"torch.fl.is_accelerator({receiver}.device)"
        det.report("FL902", node, "unsafe", text=ast.unparse(node), replacement_text=replacement,
                   replacement=replacement)


# Fixes --------------------------------------------------------------------------------------------
@fixes("FL901", "IfExp")
def fix_device_choice(rw: FixContext, original: cst.IfExp, updated: cst.IfExp,
                      finding: Finding) -> cst.BaseExpression | None:
    return None if finding.replacement is None else rw.expr(finding.replacement)


@fixes("FL902", "Comparison", "Call", "Attribute")
def fix_device_check(rw: FixContext, original: cst.Comparison | cst.Call | cst.Attribute, updated: cst.Comparison | cst.Call | cst.Attribute,
                     finding: Finding) -> cst.BaseExpression | None:
    import libcst as cst

    if finding.replacement is None:
        return None
    negate = finding.replacement.startswith("not ")
    if isinstance(updated, cst.Attribute):
        if updated.attr.value != "is_cuda":
            return None
        subject: cst.BaseExpression = cst.Attribute(updated.value, cst.Name("device"))
    elif isinstance(updated, cst.Call):
        if not isinstance(updated.func, cst.Attribute) or updated.func.attr.value != "startswith":
            return None
        subject = updated.func.value
    else:
        if len(updated.comparisons) != 1:
            return None
        left, right = updated.left, updated.comparisons[0].comparator
        subject = left if isinstance(right, cst.SimpleString) and not isinstance(left, cst.SimpleString) else right
        if isinstance(updated.comparisons[0].operator, (cst.In, cst.NotIn)):
            subject = right
    call = rw.fl_call("is_accelerator", subject.with_changes(lpar=[], rpar=[]) if hasattr(subject, "lpar") else subject)
    if not negate:
        return call
    return cst.UnaryOperation(cst.Not(), call)
