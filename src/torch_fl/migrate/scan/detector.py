"""The detector: the one pass over a module's AST that the rules hook into, assembled from its mixins
(dispatch, scopes, guards, data flow), and :func:`scan_text`, which turns a module's text into findings."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

from ..deep import call_deep
from ..rules import HOOKS, Finding
from .dispatch import Dispatch
from .flow import Flow, ModuleFacts
from .guards import Guards
from .results import from_raw
from .scopes import DEFAULT_ALIASES, Scopes, own_package


class Detector(Scopes, Guards, Flow):
    """One pass over a module's AST. Rule hooks (rules/*.py) record raw findings through
    :meth:`report`; noqa and selection come afterwards."""

    def __init__(self) -> None:
        self.aliases = dict(DEFAULT_ALIASES)
        self.raw = []
        self.stmt_line = 1
        self.loop = 0
        self.scope = 0
        self.in_class = False
        self.quiet = 0  # > 0 inside a CUDA-only test or guard: findings there are intended
        self.periodic = 0  # > 0 inside `if step % N == 0:` (a sync there happens every N steps, on purpose)
        self.decorating = 0
        self.done = set()  # nodes a rule already reported (one finding per site)
        self.fixes_allowed = True
        self.availability_calls = 0  # torch.cuda.is_available() / device_count() calls seen
        self.sources = []
        self.sinks = {}
        self.edges = {}  # `b = a`: a's value reaches b
        self.locals = {}  # function id -> names it binds
        self.string_keys = set()  # keys used as strings ("cuda" in device, f"{device}", device.split(":"))
        self.opaque_keys = set()  # keys handed to a callee that is not torch's (it may use them as strings)
        self.functions = {}  # module-level defs
        self.constructors = {}  # module-level class name -> its __init__
        # Across modules: `from M import NAME as local` at module level, and module-level sources that
        # reach no sink here (another module may import them).
        self.imported = {}
        self.exports = {}
        self.strings = {}
        self.check_keys = {}
        self.dropped = set()
        # integer ordinals bound to names: (name, line, checks of its `... if flag else`, named/valued as one)
        self.ordinal_binds: list[tuple[str, int, list[int], bool]] = []
        self.asserted: set[int] = set()  # raw findings inside an `assert` (its comparisons must hold)
        self.local_calls = []
        self.project_calls = []
        self.guards: list[tuple[list[int], Any, Any]] = []  # (test findings, start mark, end mark)
        self.picked_words: list[tuple[list[int], tuple[str, int, str | None]]] = []  # ("gpu" if check else ...)
        self.cuda_literals: list[tuple[ast.Constant, int]] = []  # "cuda" strings met (not quiet), statement line
        self.literal_findings: dict[int, tuple[str, int, str | None]] = {}  # guarded literal -> what a guard counts
        self.table_keys: dict[Any, int] = {}  # keys that index a table (TABLE[device]) -> first line
        self.key_literals: set[int] = set()  # ids of literals used as table keys (cfg["cuda"], {"cuda": ...})
        self.skip_keys: set[Any] = set()  # flags holding a CUDA check that a test skip reads
        self.import_fallback = 0  # > 0 inside `try:` whose handler catches ImportError (the import is optional)
        self._rule_state: dict[str, dict[str, Any]] = {}  # rule module -> what it keeps about this file

    def state(self, owner: str) -> dict[str, Any]:
        """The per-file state of the rule module `owner` (its __name__): rule state lives with the rule,
        in its own dict, not in the engine's attributes."""
        found = self._rule_state.get(owner)
        if found is None:
            found = self._rule_state[owner] = {}
        return found


def _all_subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_subclasses(sub)


_D = Detector
_HANDLERS: dict[type, Any] = {cls: _D.statement for cls in _all_subclasses(ast.stmt)}
_HANDLERS.update({cls: _D.leaf for cls in (ast.Name, ast.Pass, ast.Break, ast.Continue)})
_HANDLERS.update({
    ast.Module: _D.visit_Module, ast.Import: _D.visit_Import, ast.ImportFrom: _D.visit_ImportFrom,
    ast.FunctionDef: _D.visit_FunctionDef, ast.AsyncFunctionDef: _D.visit_FunctionDef,
    ast.Lambda: _D.visit_Lambda, ast.ClassDef: _D.visit_ClassDef,
    ast.For: _D.visit_For, ast.AsyncFor: _D.visit_For, ast.While: _D.visit_While,
    ast.ListComp: _D.visit_comprehension, ast.SetComp: _D.visit_comprehension,
    ast.GeneratorExp: _D.visit_comprehension, ast.DictComp: _D.visit_comprehension,
    ast.Assign: _D.visit_Assign, ast.AnnAssign: _D.visit_AnnAssign, ast.AugAssign: _D.visit_AugAssign,
    ast.Dict: _D.visit_Dict, ast.If: _D.visit_If, ast.IfExp: _D.visit_IfExp,
    ast.Compare: _D.visit_Compare, ast.BinOp: _D.visit_BinOp, ast.Subscript: _D.visit_Subscript,
    ast.Attribute: _D.visit_Attribute, ast.Call: _D.visit_Call, ast.Assert: _D.visit_Assert,
    ast.Try: _D.visit_Try, **({ast.TryStar: _D.visit_Try} if hasattr(ast, "TryStar") else {}),
    ast.BoolOp: _D.visit_BoolOp, ast.JoinedStr: _D.visit_JoinedStr, ast.Constant: _D.visit_Constant,
    **({ast.Match: _D.visit_Match} if hasattr(ast, "Match") else {}),
})
Dispatch.HANDLERS = _HANDLERS


def parse(text: str, path: str) -> ast.Module:
    try:
        return ast.parse(text, filename=path)
    except SyntaxError:
        raise
    except (ValueError, MemoryError, RecursionError) as exc:  # null bytes, absurd nesting
        raise SyntaxError(str(exc), (path, 1, 1, None)) from None


def has_trigger(text: str) -> bool:
    """Whether any rule can fire on `text` (the words and patterns the rule modules declare)."""
    lowered = text.lower()
    return any(word in lowered for word in HOOKS.trigger_words) or any(
        pattern.search(text) is not None for pattern in HOOKS.trigger_patterns)


def _walk(tree: ast.Module, package: str | None = None) -> Detector:
    detector = Detector()
    detector.package = package
    detector.visit(tree)
    detector.flows()
    detector.settle_guards()
    detector.emit("settled")  # every other finding is in: what no rule took so far
    return detector


def scan_text(text: str, path: str, codes: frozenset[str], unsafe_fixes: bool,
              facts: dict[str, ModuleFacts] | None = None, tree: ast.Module | None = None) -> list[Finding]:
    """Findings of one module. `tree`: its ``ast`` when the caller parsed it already (`torchfl fix`
    reuses it for the rewrite); the walk does not change it."""
    tree = parse(text, path) if tree is None else tree
    if not has_trigger(text):
        return []
    try:
        # Valid Python nested deeper than the default recursion limit allows our walk (a 500-arm
        # `x if c else ...` chain) is walked again on a deep stack (migrate/deep.py).
        detector = call_deep(_walk, tree, own_package(path))
    except RecursionError:
        raise SyntaxError("too deeply nested for the scanner", (path, 1, 1, None)) from None
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if facts is not None:
        imports = detector.imported_sinks()
        if detector.exports or imports:
            facts[path] = ModuleFacts(detector.exports, imports, lines, codes, unsafe_fixes)
    raw = [r for i, r in enumerate(detector.raw) if i not in detector.dropped] if detector.dropped else detector.raw
    if not raw:
        return []
    return from_raw(raw, path, lines, codes, unsafe_fixes)


def scan_other(path: str, suffix: str, codes: frozenset[str], unsafe_fixes: bool) -> list[Finding]:
    """A file that is not Python (a `.cu` source): the rules' file hooks for its suffix."""
    detector = Detector()
    lines = [""]
    for hook in HOOKS.files.get(suffix, ()):
        lines = hook(detector, path) or lines  # a hook that read the file returns its lines (noqa, columns)
    return from_raw(detector.raw, path, lines, codes, unsafe_fixes)
