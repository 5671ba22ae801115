"""The shared base of the rule modules: :class:`Rule` (a code with its documentation), :class:`Finding`,
and the hook registry through which each rule module plugs its detection (``ast``, run by the scanner's
one pass in the ``migrate/scan/`` package) and its fix (libcst, run by ``migrate/fix_rewriter.py`` on the
files it rewrites) in next to its text, the way TorchFix and ruff lay rules out.

A rule module (``rules/device.py``, ``rules/runtime.py``, ...) defines its rules with :func:`rule` and
registers functions with the decorators below. Detection hooks get the scanner's detector (``det``:
``report``, ``qualname``, ``sink``, ``source``, loop depth, ...) and the node; fix hooks get the rewriter
(``rw``: ``fl``, ``fl_call``, ``device``, ...), the original and updated libcst nodes and the finding.

Stdlib only: ``torchfl scan`` runs without torch and without libcst (and without dataclasses, whose
import of inspect is a visible part of a linter's start-up: NamedTuples instead).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

from ..cuda_api import CUDA_DEVICE, NCCL

if TYPE_CHECKING:  # fixes run only where libcst is installed; the scan never imports it
    import libcst as cst

FixSafety = Literal["safe", "unsafe"] | None
Level = Literal["error", "warning"]
# "coupling": the code breaks or misbehaves off CUDA (on by default). "performance": it runs everywhere
# but may be slow (opt-in with --select).
Category = Literal["coupling", "performance"]

FAMILIES = {
    "FL1": "device strings and placement",
    "FL2": "CUDA runtime calls",
    "FL3": "automatic mixed precision",
    "FL4": "backend flags",
    "FL5": "distributed",
    "FL6": "raw memory",
    "FL7": "kernels and extensions",
    "FL8": "third-party libraries",
    "FL9": "control flow",
}


class Rule(NamedTuple):
    """One check. ``message_template`` and ``fix_title`` are ``str.format`` templates whose fields the
    scanner fills per finding (the literal, the attribute, the module...).

    ``fix`` is the best fix any finding of this rule can get; a finding carries its own ``safety``
    because some rules fix only some shapes (FL201 fixes ``is_available()`` but not
    ``current_stream()``). ``level`` is "error" where the code breaks or silently falls back on another
    device, "warning" where it still runs but is slow, a no-op or fragile there. ``category`` says
    whether the rule is on by default ("coupling") or opt-in ("performance").
    """

    code: str
    name: str
    family: str
    message_template: str
    fix_title: str
    fix: FixSafety
    what: str
    why: str
    example: str
    use_instead: str
    level: Level = "error"
    fix_notes: str = ""
    category: Category = "coupling"
    # Whether a finding claims its node: a node one rule reported is not reported again by another
    # (one finding per site). The data-flow rules do not claim: their literal may be another rule's site.
    claims_site: bool = True
    # Whether code this rule reports still runs (does no harm) on another accelerator when left as it
    # is: a flag write, a hint, a comparison. A guard around such code may be rewritten alone; a guard
    # around code that is not (a CUDA-only call without a fix) is rewritten with its body or not at all.
    runs_off_cuda: bool = False
    # What a finding of this rule is to a CUDA check it meets (issue 37): "comparison" (`x == "cuda"`: in
    # the check's own test the two are one question, fixed together), "ordinal" (an integer ordinal held
    # in a name: one the check picks, used with no fix, holds the check back).
    pairs_as: str = ""
    # Whether the fix rewrites the call and keeps its arguments (`torch.cuda.set_device(x)` becomes
    # `torch.fl.set_device(x)`): a CUDA call in those arguments with a weaker fix makes this one as weak, or
    # the safe fix leaves half the expression on CUDA (`set_device(rank % torch.cuda.device_count())`).
    keeps_arguments: bool = False

    @property
    def summary(self) -> str:
        """The first sentence of `what`, for one-line listings (SARIF shortDescription)."""
        return self.what.split(". ")[0].rstrip(".") + "."

    @property
    def anchor(self) -> str:
        """Fragment of this rule's section in docs/migrate-rules.md."""
        return self.code.lower()

    def fix_safety_text(self) -> str:
        """The docs' "Fix safety" paragraph."""
        if self.fix is None:
            text = "No automatic fix: the right replacement depends on what the code means to do."
        elif self.fix == "safe":
            text = ("Safe fix (`torchfl fix`): the rewrite keeps behaviour on the host the code already "
                    "ran on (CUDA or the CPU) and works on other accelerators.")
        else:
            text = ("Unsafe fix (`torchfl fix --unsafe-fixes`): the rewrite can change behaviour, "
                    "so review it.")
        return f"{text} {self.fix_notes}".strip()


class Finding(NamedTuple):
    """One problem at one place, as ``torchfl scan`` reports it and ``torchfl fix`` consumes it.

    Positions are 1-based lines and 1-based columns counted in characters (Unicode code points, not
    UTF-8 bytes); ``end_col`` is exclusive, as in ruff and SARIF. The range is exactly the source of
    the AST node the finding is about, and for a fixable finding it is the node the fix rewrites:

    * FL101: the string literal, or the whole ``torch.device("cuda"[, N])`` call;
    * FL102, FL201, FL202, FL301, FL302: the call; FL104: the literal (``set_default_device``);
    * FL105, FL303, FL501: the string literal to replace;
    * FL901: the ``"cuda" if torch.cuda.is_available() else "cpu"`` expression;
    * FL902: the comparison (or the ``.startswith("cuda")`` call).

    (A libcst ``PositionProvider`` range has the same lines and 0-based columns: ``col - 1``.)
    ``safety`` is the fix this finding can get ("safe", "unsafe" or None); ``fixable`` says whether
    that fix is allowed at the level the caller asked for (safe only, unless unsafe fixes are on).
    ``replacement`` is the expression the fix writes where the rule computed it at scan time (not part
    of the JSON output).
    """

    code: str
    name: str
    path: str
    line: int
    col: int
    end_line: int
    end_col: int
    message: str
    fix_title: str | None
    fixable: bool
    safety: FixSafety = None
    replacement: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON object (`torchfl scan --format json`). `fixable` there says whether the finding has an
        automatic fix at all, whatever level this scan ran at, as in SARIF and the text report's
        markers; `safety` says which, and `fix_command` what applies it."""
        data = self._asdict()
        del data["replacement"]
        data["fixable"] = self.safety is not None
        data["fix_command"] = self.fix_command
        return data

    @property
    def fix_command(self) -> str | None:
        """The command that applies this finding's fix: "torchfl fix", "torchfl fix --unsafe-fixes", None."""
        return None if self.safety is None else "torchfl fix" if self.safety == "safe" else "torchfl fix --unsafe-fixes"

    @property
    def marker(self) -> str:
        """The text report's mark: "[*]" fixed by `torchfl fix` at the level asked for, "[u]" an unsafe fix
        (`--unsafe-fixes`) not asked for, "" no automatic fix."""
        return "[*]" if self.fixable else "[u]" if self.safety == "unsafe" else ""

    @property
    def sort_key(self) -> tuple[str, int, int, str]:
        return (self.path, self.line, self.col, self.code)


Pos = tuple[int, int, int, int]  # lineno, col_offset (UTF-8 bytes), end_lineno, end_col_offset


class Raw(NamedTuple):
    """A detector's record of one finding, before selection, ``# noqa`` and the rule's text
    (scan/results.py's ``from_raw`` makes the :class:`Finding`). Settled at the end of the file: a guard's test or a
    device choice may get another safety, note or replacement (rewritten with ``_replace``)."""

    code: str
    """The rule's code (a key of ``RULES``)."""
    where: Pos
    """Where: lineno, col_offset (UTF-8 bytes), end_lineno, end_col_offset, as ast reports them."""
    stmt_line: int
    """First line of the statement it is in (a ``# noqa`` there silences it too)."""
    safety: FixSafety
    """The fix's safety: "safe", "unsafe", or None (no automatic fix)."""
    fields: dict[str, Any]
    """The message fields of the rule's templates (and "note": why this fix differs from the rule's)."""
    replacement: str | None
    """The fix's replacement text, or None."""



# What a rule's hook may read and call ------------------------------------------------------------
class RuleContext(Protocol):
    """The scanner as a rule's hook sees it (the engine's Detector implements it; rules name this, not the
    engine's classes). Read-mostly: a hook reports findings, claims sites, and adds to the data-flow
    facts below; the counters say where in the file the walk is."""

    # where the walk is
    stmt_line: int               # line of the statement being walked
    loop: int                    # > 0 inside a for/while body
    periodic: int                # > 0 inside `if step % N == 0:` (a sync there is on purpose)
    quiet: int                   # > 0 inside a CUDA-only test or guard: findings there are intended
    decorating: int              # > 0 while walking a decorator (applied to the function, not entered)
    import_fallback: int         # > 0 inside `try:` whose handler catches ImportError
    in_class: bool               # directly in a class body
    aliases: dict[str, str]      # local name -> qualified name (import torch.cuda as tc)
    done: set[int]               # ids of nodes a rule already reported (one finding per site)
    raw: list[Raw]               # findings so far, settled at the end of the file
    # data-flow facts of the file
    string_keys: set[Any]        # keys used as strings ("cuda" in device, f"{device}", device.split(":"))
    opaque_keys: set[Any]        # keys handed to a callee that is not torch's
    table_keys: dict[Any, int]   # keys that index a table (TABLE[device]) -> first line
    sinks: dict[tuple[str, Any], int]

    def report(self, code: str, where: Any, safety: FixSafety = None, *, replacement: str | None = None,
               **fields: Any) -> None: ...
    def claim(self, node: ast.AST) -> None: ...
    def qualname(self, node: ast.AST) -> str | None: ...
    def key(self, target: ast.AST) -> tuple[Any, ...] | None: ...
    def sink(self, kind: str, node: ast.expr) -> None: ...
    def source(self, key: tuple[Any, ...] | None, value: ast.expr | None, target: str) -> None: ...
    def string_values(self, node: ast.AST) -> list[str]: ...
    def state(self, owner: str) -> dict[str, Any]:
        """A rule module's own per-file state (pass its __name__): what it remembers between hooks."""


class FixContext(Protocol):
    """The rewriter as a rule's fix sees it (``rw``; migrate/fix_rewriter.py's FixHelpers implements it):
    the module's spelling of torch and quotes, and builders of the nodes fixes write."""

    names: dict[str, str]        # local name -> qualified name, every import of the module
    torch_name: str              # the module's name for torch (`import torch as th`: "th")
    quote: str                   # the quote its strings use most
    no_space: cst.AssignEqual    # `=` of a keyword argument, without spaces

    def need_import(self, module: str) -> None:
        """The fixed code names `module`: import it unless the file binds that name to it."""
    def qual(self, node: cst.BaseExpression) -> str | None:
        """The qualified name of a name or attribute chain (torch.cuda.amp.autocast), else None."""
    def fl(self, attr: str) -> cst.Attribute:
        """torch.fl.ATTR in the module's spelling."""
    def fl_call(self, attr: str, *args: cst.BaseExpression) -> cst.Call:
        """torch.fl.ATTR(ARGS)."""
    def string(self, text: str, like: cst.BaseExpression | None) -> cst.SimpleString:
        """A string literal, quoted as `like` (or as the module)."""
    def device(self, index: int | None, like: cst.BaseExpression | None = None) -> cst.Call:
        """torch.fl.device() for "cuda"; torch.fl.device("accN") for "cuda:N"."""
    def str_device(self, index: int, like: cst.BaseExpression) -> cst.Call:
        """str(torch.fl.device("accN"))."""
    def expr(self, text: str) -> cst.BaseExpression:
        """A replacement the scan computed, in the module's spelling."""
    def commas(self, args: list[cst.Arg], call: cst.Call) -> list[cst.Arg]:
        """Commas between arguments in the call's layout."""


# Rules and hooks -----------------------------------------------------------------------------------
RULE_LIST: list[Rule] = []
Hook = Callable[..., Any]
# fix(rw, original, updated, finding) -> the new node, or None for a shape the fix does not handle. The
# two nodes are of the types the fix registered for (each fix annotates its own: cst.Call, ...), so the
# alias can only say "a libcst node" there.
FixHook = Callable[[FixContext, Any, Any, Finding], "cst.BaseExpression | None"]


class Hooks:
    """What the engines dispatch to. Detection: keyed by what the scanner meets; fixes: by code."""

    def __init__(self) -> None:
        self.calls: dict[str, list[Hook]] = {}  # qualified callee -> hooks
        self.call_prefixes: list[tuple[str, Hook]] = []  # "torch.cuda." -> hook
        self.methods: dict[str, list[Hook]] = {}  # x.NAME(...) -> hooks
        self.keywords: dict[str, list[Hook]] = {}  # f(NAME=...) -> hooks
        self.call_names: dict[str, list[Hook]] = {}  # NAME(...) or x.NAME(...), any receiver
        self.members: dict[str, list[Hook]] = {}  # x.NAME read anywhere
        self.events: dict[str, list[Hook]] = {}  # "import", "compare", "if", ...
        self.fixes: dict[str, tuple[tuple[str, ...], FixHook]] = {}  # code -> (node types, fn)
        # Words (lower case) a file must contain for any rule to apply; a file with none is parsed (to
        # report syntax errors) but not walked. Plain substring tests: a case-insensitive regex of the
        # same words took as long as ast.parse. Patterns (regexes) for what a word cannot say.
        self.trigger_words: set[str] = set()
        self.trigger_patterns: list[Any] = []
        self.files: dict[str, list[Hook]] = {}  # file suffix (".cu") -> hook(path) for files not parsed


HOOKS = Hooks()


def rule(code: str, name: str, message: str, fix_title: str, fix: FixSafety, *, what: str, why: str,
         example: str, use_instead: str, level: Level = "error", fix_notes: str = "",
         category: Category = "coupling", claims_site: bool = True, runs_off_cuda: bool = False,
         pairs_as: str = "", keeps_arguments: bool = False) -> Rule:
    """Define (and register) a rule. Its module registers the detection and fix hooks next to it."""
    made = Rule(code, name, FAMILIES[code[:3]], message, fix_title, fix, what, why, example.strip("\n"),
                use_instead.strip("\n"), level, fix_notes, category, claims_site, runs_off_cuda, pairs_as,
                keeps_arguments)
    RULE_LIST.append(made)
    return made


def _register(table: dict[str, list[Hook]], keys: tuple[str, ...]) -> Callable[[Hook], Hook]:
    """A decorator adding its function to `table` under each of `keys` (the hooks run in that order)."""
    def register(fn: Hook) -> Hook:
        for key in keys:
            table.setdefault(key, []).append(fn)
        return fn
    return register


def on_call(*qualnames: str) -> Callable[[Hook], Hook]:
    """hook(det, call, qual) for calls of these qualified names (``torch.device``)."""
    return _register(HOOKS.calls, qualnames)


def on_call_prefix(prefix: str) -> Callable[[Hook], Hook]:
    """hook(det, call, qual) for calls whose qualified name starts with `prefix` and that no
    :func:`on_call` hook claims."""
    def register(fn: Hook) -> Hook:
        HOOKS.call_prefixes.append((prefix, fn))
        return fn
    return register


def on_method(*names: str) -> Callable[[Hook], Hook]:
    """hook(det, call, name) for ``<any>.NAME(...)`` calls."""
    return _register(HOOKS.methods, names)


def on_keyword(*names: str) -> Callable[[Hook], Hook]:
    """hook(det, call, keyword_name, value, callee) for ``f(NAME=value)``."""
    return _register(HOOKS.keywords, names)


def on_call_name(*names: str) -> Callable[[Hook], Hook]:
    """hook(det, call, name) for calls whose callee's last name is one of `names` (`dist.x(...)`, `x(...)`)."""
    return _register(HOOKS.call_names, names)


def on_member(*names: str) -> Callable[[Hook], Hook]:
    """hook(det, attribute) for every `<any>.NAME` (`x.is_cuda`)."""
    return _register(HOOKS.members, names)


def on(event: str) -> Callable[[Hook], Hook]:
    """hook(det, node, ...) for a scanner event: "import" (module, node), "function" (def node),
    "attribute" (node, qual), "compare" (node), "subscript" (node), "binop" (node), "augassign" (node),
    "assign" (target, value), "flow" (kind, key, literal, index, target, sink_line)."""
    return _register(HOOKS.events, (event,))


def triggers(*words: str, pattern: str | None = None) -> None:
    """Declare the words (any case) without which a rule module's hooks cannot fire: a file containing
    none of every module's words is not walked. `pattern`: a regex, for a trigger a word cannot say."""
    HOOKS.trigger_words.update(word.lower() for word in words)
    if pattern is not None:
        import re

        HOOKS.trigger_patterns.append(re.compile(pattern))


def on_file(*suffixes: str) -> Callable[[Hook], Hook]:
    """hook(det, path) for files with these suffixes, which are not Python and not parsed (`.cu`,
    `.yaml`): the hook reports positions it computes ((1, 0, 1, 0) for a whole file) and returns the
    file's lines when it read them (for `# noqa` and character columns), else None."""
    return _register(HOOKS.files, suffixes)


def fixes(code: str, *node_types: str) -> Callable[[FixHook], FixHook]:
    """fix(rw, original, updated, finding) -> new node or None (shape not handled), for findings of
    `code` on libcst nodes of these class names ("SimpleString", "Call", "Comparison", "IfExp")."""
    def register(fn: FixHook) -> FixHook:
        HOOKS.fixes[code] = (node_types, fn)
        return fn
    return register


# AST helpers shared by rule modules ---------------------------------------------------------------
def str_value(node: ast.AST | None) -> str | None:
    if type(node) is ast.Constant and type(node.value) is str:
        return node.value
    return None


def _names_accelerator(node: ast.AST) -> bool:
    """`torch.accelerator...` in `node`, or `hasattr(torch, "accelerator")`."""
    for sub in ast.walk(node):
        if type(sub) is ast.Attribute and sub.attr == "accelerator":
            return True
        if type(sub) is ast.Call and type(sub.func) is ast.Name and sub.func.id == "hasattr" \
                and len(sub.args) == 2 and str_value(sub.args[1]) == "accelerator":
            return True
    return False


def accelerator_fallback(node: ast.AST) -> bool:
    """`torch.accelerator.current_accelerator().type if hasattr(torch, "accelerator") else "cuda"` (or
    `if torch.accelerator.is_available()`): multi-vendor code on the accelerator API, whose `else` arm is
    only the fallback of a torch without `torch.accelerator` (before 2.6). Left alone, like the other
    multi-vendor forms (peft, 20 sites in the fourth measurement)."""
    return type(node) is ast.IfExp and _names_accelerator(node.test) and _names_accelerator(node.body)


def alternatives(node: ast.expr) -> Iterator[ast.expr]:
    """The expressions `node` may evaluate to: both arms of `a if c else b`, each operand of `or`. The
    fallback arm of an accelerator-API choice (:func:`accelerator_fallback`) is not one of them."""
    if type(node) is ast.IfExp:
        yield from alternatives(node.body)
        if not accelerator_fallback(node):
            yield from alternatives(node.orelse)
    elif type(node) is ast.BoolOp:
        for value in node.values:
            yield from alternatives(value)
    else:
        yield node
        # The default of a lookup: getattr(args, "device", "cuda"), os.environ.get("DEV", "cuda"),
        # cfg.get("device", "cuda"), os.getenv("DEV", "cuda").
        if type(node) is ast.Call and not node.keywords:
            name = terminal_name(node.func)
            if name == "getattr" and len(node.args) == 3:
                yield from alternatives(node.args[2])
            elif name in ("get", "getenv", "pop", "setdefault") and len(node.args) == 2:
                yield from alternatives(node.args[1])


def cuda_strings(node: ast.expr) -> Iterator[tuple[ast.expr, str | None]]:
    """The CUDA device strings `node` may be, as (node, index): index is "N" for "cuda:N", None for
    "cuda", and "?" for computed strings (f"cuda:{rank}", "cuda:%d" % rank, "cuda:{}".format(r))."""
    for alt in alternatives(node):
        text = str_value(alt)
        if text is not None:
            match = CUDA_DEVICE.fullmatch(text)
            if match:
                yield alt, match.group(1)
            continue
        head: ast.AST | None = None
        if type(alt) is ast.JoinedStr and alt.values and all(type(v) is ast.Constant for v in alt.values):
            if CUDA_DEVICE.fullmatch("".join(str(v.value) for v in alt.values)):  # type: ignore[attr-defined]
                yield alt, "?"  # f"cuda": a literal in f-string clothes (no fix: the fixer rewrites plain strings)
            continue
        if type(alt) is ast.JoinedStr and alt.values:
            head = alt.values[0]
        elif type(alt) is ast.BinOp and type(alt.op) in (ast.Add, ast.Mod):
            head = alt.left
        elif (type(alt) is ast.Call and type(alt.func) is ast.Attribute and alt.func.attr == "format"):
            head = alt.func.value
        if (str_value(head) or "").startswith("cuda:"):
            yield alt, "?"


def nccl_strings(node: ast.expr) -> Iterator[ast.expr]:
    for alt in alternatives(node):
        if str_value(alt) == NCCL:
            yield alt


def is_cuda_literal(node: ast.AST) -> bool:
    text = str_value(node)
    return text is not None and CUDA_DEVICE.fullmatch(text) is not None


def cuda_or_nccl(value: ast.expr) -> bool:
    return any(True for _ in cuda_strings(value)) or any(True for _ in nccl_strings(value))


def source_text(node: ast.expr) -> str:
    text = str_value(node)
    return f'"{text}"' if text is not None else ast.unparse(node)


def terminal_name(node: ast.AST) -> str | None:
    if type(node) is ast.Name:
        return node.id
    if type(node) is ast.Attribute:
        return node.attr
    return None


# Builtins that hand back (an element of) their argument: `next(iter(devices)).type` is a device's type.
_PASS_THROUGH = frozenset({"str", "next", "iter", "min", "max", "sorted", "list", "tuple", "set"})


def deviceish(node: ast.expr) -> bool:
    """Whether `node` looks like a device or device type: x.device.type, device, self.device_type,
    args.dev, str(device), a call that makes or returns one (`torch.device(d).type`,
    `get_accelerator().get_current_device()`), `next(iter(local_devices)).type`."""
    if type(node) is ast.Call:
        if type(node.func) is ast.Name and node.func.id in _PASS_THROUGH:
            return bool(node.args) and deviceish(node.args[0])
        # torch.fl's own answer (`torch.fl.device_type() == "cuda"`) asks about the resolved device on purpose.
        return "device" in (terminal_name(node.func) or "").lower() and \
            not ast.unparse(node.func).startswith(("torch.fl.", "torch_fl."))
    name = terminal_name(node)
    if name is None:
        return False
    lowered = name.lower()
    if lowered == "type" and type(node) is ast.Attribute:
        return deviceish(node.value)  # x.device.type, dev.type
    return "device" in lowered or lowered in ("dev", "accelerator")


# Methods of tensors and modules whose device argument may be a torch.device (the callee is torch's).
TORCH_DEVICE_METHODS = frozenset({
    "to", "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor", "pin_memory", "set_default_device",
    "zeros", "ones", "empty", "full", "rand", "randn", "randint", "arange", "linspace", "tensor", "as_tensor",
    "eye", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "from_numpy",
    "load", "to_empty", "register_buffer", "Generator", "device", "autocast",
})


def torch_callee(det: RuleContext, call: ast.Call) -> bool:
    """Whether `call` is torch's (torch.zeros, torch.nn.Linear, torch.load, a tensor's `.to`): its device
    argument may be a torch.device. Any other callee (the project's own function, a library's) may use
    the value as a string (`device.split(":")`, `device == "cuda"`), so a string must stay a string."""
    qual = det.qualname(call.func)
    if qual is not None:
        return qual.startswith("torch.")
    return type(call.func) is ast.Attribute and call.func.attr in TORCH_DEVICE_METHODS


def string_replacement(index: str | None) -> str:
    """What a CUDA device string becomes where it must stay a string: ``"cuda"`` ->
    ``torch.fl.device_type()`` ("cuda" on CUDA, "cpu" on the CPU, "npu" on Ascend), ``"cuda:N"`` ->
    ``str(torch.fl.device("accN"))``."""
    if index is None:
        return "torch.fl.device_type()"
    return 'str(torch.fl.device(f"acc{...}"))' if index == "?" else f'str(torch.fl.device("acc{index}"))'


# Device types of accelerators other than CUDA: a table or dispatch naming one of them next to "cuda" is
# multi-vendor code, written for each on purpose (torchtune's `device.type in ["cuda", "npu", "xpu", "hpu"]`).
OTHER_VENDORS = frozenset({"npu", "xpu", "hpu", "mps", "mlu", "musa", "xla", "ipu", "gcu", "sdaa", "mtia",
                           "maia", "dcu", "privateuseone"})


def names_vendors(texts: Any) -> bool:
    """Whether device-type strings `texts` name CUDA and at least one other accelerator."""
    found = {t for t in texts if isinstance(t, str)}
    return "cuda" in found and bool(found & OTHER_VENDORS)


def is_int(node: ast.AST | None) -> bool:
    return type(node) is ast.Constant and type(node.value) is int and not isinstance(node.value, bool)
