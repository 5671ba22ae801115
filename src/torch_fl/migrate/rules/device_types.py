"""FL103: the legacy CUDA tensor types (``torch.cuda.HalfTensor``, ...) and their names as strings, where
dtype + device say the same on every accelerator: detection and fix. Family FL1 (rules/device.py has the
others); its hooks register right after device.py's (rules/__init__.py imports the modules in name order),
before runtime.py's attribute hook, which would otherwise report ``torch.cuda.HalfTensor`` as a
``torch.cuda`` call."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ..cuda_api import CUDA_TENSOR_TYPES
from .base import RuleContext, fixes, on, on_method, rule, str_value

if TYPE_CHECKING:
    import libcst as cst

    from .base import Finding, FixContext


rule(
        "FL103", "cuda-tensor-type",
        "`{attr}` is a CUDA-only tensor type", "{remedy}", "safe",
        what="The legacy typed-tensor classes `torch.cuda.FloatTensor`, `HalfTensor`, `LongTensor`, ... "
             "used as constructors, in `isinstance`, or in `.type(...)`; and their names as strings in a "
             "comparison (`x.type() == \"torch.cuda.HalfTensor\"`, `t in (\"torch.cuda.FloatTensor\", ...)`).",
        why="These classes exist only for CUDA; they are also deprecated in favour of dtype + device. A "
            "tensor on another accelerator has another type name (`torch.npu.HalfTensor`), so the comparison "
            "is False there.",
        example="""
x = torch.cuda.FloatTensor(4, 4)
y = x.type(torch.cuda.HalfTensor)
if x.type() == "torch.cuda.HalfTensor":
    ...
""",
        use_instead="""
x = torch.empty(4, 4, dtype=torch.float32, device=torch.fl.device())
y = x.to(torch.float16)
if x.dtype == torch.float16 and torch.fl.is_accelerator(x.device):
    ...
""",
        fix_notes="Only `X.type() == \"torch.cuda.<T>Tensor\"` (and `!=`), with X a name or attribute, is "
                  "fixed: to `(X.dtype == torch.<dtype> and torch.fl.is_accelerator(X.device))`, the same "
                  "answer on CUDA and the CPU (False for a CPU tensor) and True for the tensor on another "
                  "accelerator. A constructor call takes sizes or data depending on its arguments, so its "
                  "rewrite is left to a person, and so are the other uses of the classes and names.",
)


# Detection ----------------------------------------------------------------------------------------
@on("attribute")
def tensor_type_attribute(det: RuleContext, node: ast.Attribute, qual: str, called: bool) -> None:
    parts = qual.split(".")
    if parts[1] == "cuda" and len(parts) > 2 and parts[2] in CUDA_TENSOR_TYPES:
        det.report("FL103", node, attr=".".join(parts[:3]), remedy=_typed_remedy(CUDA_TENSOR_TYPES[parts[2]]))
        det.claim(node)


@on_method("type")
def type_method(det: RuleContext, node: ast.Call, attr: str) -> None:
    text = str_value(node.args[0]) if node.args else None
    if text and text.startswith("torch.cuda.") and text[len("torch.cuda."):] in CUDA_TENSOR_TYPES:
        det.report("FL103", node.args[0], attr=text, remedy=_typed_remedy(CUDA_TENSOR_TYPES[text[len("torch.cuda."):]]))


def _typed_remedy(dtype: str) -> str:
    return f"Use a `torch.{dtype}` tensor with `device=torch.fl.device()`"


def _cuda_type_name(node: ast.AST) -> str | None:
    """The dtype of a legacy CUDA type name string ("torch.cuda.HalfTensor" -> "float16"), else None."""
    text = str_value(node) or ""
    return CUDA_TENSOR_TYPES.get(text[len("torch.cuda."):]) if text.startswith("torch.cuda.") else None


def _pure(node: ast.expr) -> bool:
    """An expression that may be evaluated twice: a name, attributes, constant subscripts of one."""
    while type(node) in (ast.Attribute, ast.Subscript):
        if type(node) is ast.Subscript and type(node.slice) is not ast.Constant:  # type: ignore[attr-defined]
            return False
        node = node.value  # type: ignore[attr-defined]
    return type(node) is ast.Name


@on("compare")
def type_string_comparison(det: RuleContext, node: ast.Compare) -> None:
    """`x.type() == "torch.cuda.HalfTensor"`: asks "a half tensor on the accelerator?" with a CUDA-only
    name. The plain form is fixed to the question itself, the same answer on CUDA and the CPU:
    `(x.dtype == torch.float16 and torch.fl.is_accelerator(x.device))`; other forms (`in (...)`, a
    name compared with the string) are reported without a fix."""
    names = []
    for operand in (node.left, *node.comparators):
        items = operand.elts if type(operand) in (ast.Tuple, ast.List, ast.Set) else [operand]  # type: ignore[attr-defined]
        names += [item for item in items if _cuda_type_name(item) is not None]
    if not names:
        return
    literal = names[0]
    dtype = _cuda_type_name(literal)
    text = str_value(literal)
    left = node.left
    if (len(node.ops) == 1 and type(node.ops[0]) in (ast.Eq, ast.NotEq) and node.comparators[0] is literal
            and type(left) is ast.Call and type(left.func) is ast.Attribute and left.func.attr == "type"
            and not left.args and not left.keywords and _pure(left.func.value)):
        receiver = ast.unparse(left.func.value)
        question = f"{receiver}.dtype == torch.{dtype} and torch.fl.is_accelerator({receiver}.device)"
        replacement = f"({question})" if type(node.ops[0]) is ast.Eq else f"not ({question})"
        det.report("FL103", node, "safe", attr=text, replacement=replacement,
                   remedy=f"Replace with `{replacement}`")
        det.claim(node)
        return
    for name in names:
        det.report("FL103", name, attr=str_value(name), remedy=f"Compare `x.dtype` with `torch.{_cuda_type_name(name)}` "
                   "and ask `torch.fl.is_accelerator(x.device)`")


# Fixes --------------------------------------------------------------------------------------------
@fixes("FL103", "Comparison")
def fix_type_string(rw: FixContext, original: cst.Comparison, updated: cst.Comparison,
                    finding: Finding) -> cst.BaseExpression | None:
    return None if finding.replacement is None else rw.expr(finding.replacement)
