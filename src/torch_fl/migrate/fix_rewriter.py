"""The libcst rewriter of `torchfl fix`: matches each finding to the libcst node it points at and applies
the rule's fix there (rules/*.py, registered with ``@fixes``), giving the fixes the helpers they call
(:class:`FixHelpers`: names in the module's spelling of torch and quotes, torch.fl calls, imports needed).

The class is built on first use (:func:`rewriter_class`) so that importing this module needs no libcst:
a file with nothing to fix never loads it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .precedence import keep_precedence
from .rules import HOOKS, Finding

if TYPE_CHECKING:
    import libcst as cst

__all__ = ["FixHelpers", "Spelling", "Target", "cst_bindings", "name_refs", "quote_style", "rewriter_class"]


@dataclass(frozen=True)
class Spelling:
    """How a module spells what a fix writes: the local name of torch (`import torch as th`), the other
    names bound to torch, whether torch_fl is imported, and the quote its strings use most."""

    names: dict[str, str]  # local name -> qualified name, every import (scope-blind, as the scanner's)
    torch_name: str
    torch_aliases: tuple[str, ...]
    has_torch_fl: bool
    quote: str

    @classmethod
    def of(cls, names: dict[str, str], has_torch_fl: bool, source: str) -> Spelling:
        """From a module's imports (`names` is completed in place: as the scanner does, a bare `torch`
        with no import is torch, as in snippets and exported notebooks)."""
        aliases = tuple(local for local, qual in names.items() if qual == "torch")
        names.setdefault("torch", "torch")
        torch_name = "torch" if "torch" in aliases else (aliases[0] if aliases else "torch")
        return cls(names, torch_name, aliases, has_torch_fl, quote_style(source))

    def imports_needed(self, old: str, new: str, modules: set[str]) -> tuple[bool, bool, list[str]] | None:
        """What a rewrite from `old` to `new` must import: (import torch, import torch_fl, other
        modules), or None when nothing. Fixes that name torch.fl need torch_fl imported (Lightning's
        accelerator="auto" does not)."""
        prefix = f"{self.torch_name}.fl."
        uses_fl = new.count(prefix) > old.count(prefix)
        if not ((uses_fl and (not self.torch_aliases or not self.has_torch_fl)) or modules):
            return None
        return uses_fl and not self.torch_aliases, uses_fl and not self.has_torch_fl, sorted(modules)



@dataclass
class Target:
    """A finding to fix, with its range in libcst coordinates (1-based lines, 0-based columns)."""

    finding: Finding
    start: tuple[int, int]
    end: tuple[int, int]
    # How tightly the place the finding sits in binds (see _needs): a replacement that binds less
    # loosely is parenthesised there.
    need: int = 1
    used: bool = False


def cst_bindings(module: cst.Module) -> tuple[dict[str, str], bool]:
    """Local name -> qualified name for every import in the module (scope-blind, as the scanner's),
    and whether torch_fl is imported."""
    import libcst as cst
    from libcst.helpers import get_full_name_for_node

    names: dict[str, str] = {}
    has_torch_fl = False

    class Collect(cst.CSTVisitor):
        def visit_Import(self, node: cst.Import) -> bool:
            nonlocal has_torch_fl
            for alias in node.names:
                full = get_full_name_for_node(alias.name) or ""
                has_torch_fl |= full.split(".")[0] == "torch_fl"
                if alias.asname is not None:
                    names[get_full_name_for_node(alias.asname.name) or ""] = full
                else:
                    head = full.split(".")[0]
                    names[head] = head
            return False

        def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
            nonlocal has_torch_fl
            if node.relative or node.module is None:
                return False
            module_name = get_full_name_for_node(node.module) or ""
            has_torch_fl |= module_name.split(".")[0] == "torch_fl"
            if isinstance(node.names, cst.ImportStar):
                return False
            for alias in node.names:
                names[alias.evaluated_alias or alias.evaluated_name] = f"{module_name}.{alias.evaluated_name}"
            return False

    module.visit(Collect())
    return names, has_torch_fl


def name_refs(node: cst.CSTNode) -> dict[str, int]:
    """How often each bare name is used outside import statements."""
    import libcst as cst

    counts: dict[str, int] = {}

    class Count(cst.CSTVisitor):
        def visit_Import(self, node: cst.Import) -> bool:
            return False

        def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
            return False

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            # Only the head of a dotted name is a reference; `x.attr` does not use a name `attr`.
            node.value.visit(self)
            return False

        def visit_Name(self, node: cst.Name) -> None:
            counts[node.value] = counts.get(node.value, 0) + 1

    node.visit(Count())
    return counts


def _fixes_by_node() -> dict[str, tuple[str, ...]]:
    """libcst node class name -> codes whose fix rewrites that kind of node (the rules' @fixes)."""
    by_node: dict[str, tuple[str, ...]] = {}
    for code, (node_types, _) in HOOKS.fixes.items():
        for node_type in node_types:
            by_node[node_type] = (*by_node.get(node_type, ()), code)
    return by_node


class _Matching:
    """The rewriter's half that matches findings to nodes and applies the rule's fix. A plain mixin
    (listed before libcst's CSTTransformer, whose own `on_leave` it replaces) so that this module imports
    without libcst; the attributes it reads are set by the Rewriter class `_make_rewriter` builds."""

    BY_NODE: dict[str, tuple[str, ...]]
    targets: list[Target]
    applied: list[Target]
    get_metadata: Callable[..., Any]  # libcst's MetadataDependent.get_metadata

    def _match(self, codes: Iterable[str], node: cst.CSTNode) -> Target | None:
        from libcst.metadata import PositionProvider

        pos = self.get_metadata(PositionProvider, node)
        start = (pos.start.line, pos.start.column)
        end = (pos.end.line, pos.end.column)
        best: tuple[tuple[int, ...], Target] | None = None
        for target in self.targets:
            if target.used or target.finding.code not in codes:
                continue
            if not (start <= target.start and target.end <= end):
                continue
            # The finding spanning most of the node is the node's own (the rest are inner nodes).
            key = (target.start[0] - start[0], target.start[1] - start[1] if target.start[0] == start[0]
                   else 0, end[0] - target.end[0], end[1] - target.end[1] if target.end[0] == end[0] else 0)
            if best is None or key < best[0]:
                best = (key, target)
        return None if best is None else best[1]

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:
        codes = self.BY_NODE.get(type(original).__name__)
        if not codes or not self.targets:
            return updated
        target = self._match(codes, original)
        if target is None:
            return updated
        replacement = HOOKS.fixes[target.finding.code][1](self, original, updated, target.finding)
        if replacement is None:  # a shape the rewrite does not handle: left for a human
            return updated
        replacement = keep_precedence(replacement, target.need)
        target.used = True
        self.applied.append(target)
        return replacement


class FixHelpers:
    """The rewriter's half that the rules' fixes call (rules/*.py get the rewriter as `rw`, typed
    rules.base.FixContext, which this implements): names in this module's spelling of torch and
    quotes, torch.fl calls, the imports the fixed code needs."""

    names: dict[str, str]
    torch_name: str
    quote: str
    imports: set[str]

    def need_import(self, module: str) -> None:
        """The fixed code names `module`: import it unless the file binds that name to it."""
        if self.names.get(module) != module:
            self.imports.add(module)

    def qual(self, node: cst.BaseExpression) -> str | None:
        import libcst as cst

        if isinstance(node, cst.Name):
            return self.names.get(node.value)
        if isinstance(node, cst.Attribute):
            head = self.qual(node.value)
            return f"{head}.{node.attr.value}" if head else None
        return None

    def fl(self, attr: str) -> cst.Attribute:
        import libcst as cst

        return cst.Attribute(cst.Attribute(cst.Name(self.torch_name), cst.Name("fl")), cst.Name(attr))

    def fl_call(self, attr: str, *args: cst.BaseExpression) -> cst.Call:
        import libcst as cst

        return cst.Call(self.fl(attr), [cst.Arg(a) for a in args])

    def string(self, text: str, like: cst.BaseExpression | None) -> cst.SimpleString:
        import libcst as cst

        quote = like.quote if isinstance(like, cst.SimpleString) and len(like.quote) == 1 else self.quote
        return cst.SimpleString(f"{quote}{text}{quote}")

    def device(self, index: int | None, like: cst.BaseExpression | None = None) -> cst.Call:
        """torch.fl.device() for "cuda"; torch.fl.device("accN") for "cuda:N" / .cuda(N)."""
        if index is None:
            return self.fl_call("device")
        return self.fl_call("device", self.string(f"acc{index}", like))

    def str_device(self, index: int, like: cst.BaseExpression) -> cst.Call:
        import libcst as cst

        return cst.Call(cst.Name("str"), [cst.Arg(self.device(index, like))])

    def expr(self, text: str) -> cst.BaseExpression:
        """A replacement computed by the scanner (``torch.fl.device("acc0")``), in this module's
        spelling of torch and quotes."""
        import libcst as cst

        text = re.sub(r"\btorch\.", f"{self.torch_name}.", text)
        if self.quote == "'" and "'" not in text:
            text = text.replace('"', "'")
        return cst.parse_expression(text)

    def commas(self, args: list[cst.Arg], call: cst.Call) -> list[cst.Arg]:
        return _commas(args, call)


def _make_rewriter() -> type:
    """Built on first use so that importing this module does not need libcst: the class joins the two
    halves above to libcst's transformer."""
    import libcst as cst
    from libcst.metadata import PositionProvider

    class Rewriter(_Matching, FixHelpers, cst.CSTTransformer):
        """Edits the nodes the findings point at, with each rule's fix (rules/*.py). The scanner reports
        each fixable finding on exactly one AST node (rules.Finding); the node here is the libcst node
        whose range contains it (libcst counts a node's parentheses, ast does not) and is the closest
        such node. A fix returns None for a shape it does not handle: the finding is left for a person
        (and an enclosing node may not take it: fixes check their node's shape)."""

        METADATA_DEPENDENCIES = (PositionProvider,)
        BY_NODE = _fixes_by_node()
        no_space = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                   whitespace_after=cst.SimpleWhitespace(""))

        def __init__(self, targets: list[Target], spelling: Spelling) -> None:
            super().__init__()
            self.targets = targets
            self.names = spelling.names
            self.torch_name = spelling.torch_name
            self.quote = spelling.quote
            self.applied: list[Target] = []
            self.imports: set[str] = set()  # modules a fix's code names (`contextlib`)

        # Imports name modules, they are not uses: their names are not walked.
        def visit_Import(self, node: cst.Import) -> bool:
            return False

        def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
            return False

    for node_type in Rewriter.BY_NODE:
        setattr(Rewriter, f"leave_{node_type}", Rewriter.on_leave)
    return Rewriter


def _commas(args: list[cst.Arg], call: cst.Call) -> list[cst.Arg]:
    """Commas between arguments: keep existing ones; an inserted argument gets ", ", or a line break
    where the call puts its first argument on a line of its own (one argument per line)."""
    import libcst as cst

    layout = call.whitespace_before_args
    after = layout if isinstance(layout, cst.ParenthesizedWhitespace) else cst.SimpleWhitespace(" ")
    out: list[cst.Arg] = []
    for i, arg in enumerate(args):
        last = i == len(args) - 1
        if not last and isinstance(arg.comma, cst.MaybeSentinel):
            arg = arg.with_changes(comma=cst.Comma(whitespace_after=after))
        elif last and not isinstance(arg.comma, cst.MaybeSentinel) and i > 0 and not _multiline(arg.comma):
            # `f(a, )` -> `f(a)`: a trailing comma only survives in a one-argument-per-line layout.
            arg = arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)
        out.append(arg)
    return out


def _multiline(comma: cst.Comma | cst.MaybeSentinel) -> bool:
    import libcst as cst

    return isinstance(comma, cst.Comma) and isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace)


_REWRITER: type | None = None


def rewriter_class() -> type:
    """The Rewriter class (built once: `_make_rewriter`); instances take (targets, spelling)."""
    global _REWRITER
    if _REWRITER is None:
        _REWRITER = _make_rewriter()
    return _REWRITER


def quote_style(source: str) -> str:
    return "'" if source.count("'") > source.count('"') else '"'

