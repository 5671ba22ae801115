"""Settling guards (part of the guards mixin, ``guards.py``): the walk records each guard as its test's
findings and two marks around the code it covers; once every finding is in, each test's fix gets the
weakest safety of what it guards, since rewriting a check alone would run CUDA-only code elsewhere."""

from __future__ import annotations

import ast

from ..cuda_api import CUDA_DEVICE
from ..rules import RULES
from ..rules import device as device_rules
from .dispatch import Dispatch

# A point of the walk: (raw findings, data-flow sources, module-function calls, calls into the project's
# other modules, "cuda" literals, integer ordinals bound to names) so far.
Mark = tuple[int, int, int, int, int, int]
# What a guard covers that has a fix safety of its own: (what, line, safety), safety None for no fix.
Candidate = tuple[str, int, str | None]


def _inside(inner: tuple[int, ...], outer: tuple[int, ...]) -> bool:
    """Whether the span `inner` (line, column, end line, end column) lies within `outer`."""
    return (inner[0], inner[1]) >= (outer[0], outer[1]) and (inner[2], inner[3]) <= (outer[2], outer[3])


def _ordinal_blocker(name: str, line: int, unfixed: dict[str, int]) -> str:
    if name in unfixed:
        return f"the ordinal `{name}` used as a device on line {unfixed[name]} with no fix, line {line}"
    return f"the device ordinal `{name}` (0 is cuda:0 wherever it goes), line {line}"


def weakest_fix(candidates: list[Candidate]) -> tuple[str | None, str]:
    """The weakest safety among a guard's candidates ("safe", "unsafe", None for no fix) and the first
    candidate that made it so ("FL201, line 17"): the first without a fix decides at once."""
    weakest: str | None = "safe"
    blocker = ""
    for what, line, safety in candidates:
        if safety is None:
            return None, f"{what}, line {line}"
        if safety == "unsafe" and weakest == "safe":
            weakest, blocker = "unsafe", f"{what}, line {line}"
    return weakest, blocker


class GuardSettling(Dispatch):
    """Marks of the walk, and settling the guards recorded between them."""

    def mark(self) -> Mark:
        """Where the walk is: how many raw findings, data-flow sources, module-function calls and calls into
        the project's other modules so far. Two marks delimit the code a guard covers."""
        return (len(self.raw), len(self.sources), len(self.local_calls),  # type: ignore[attr-defined]
                len(self.project_calls), len(self.cuda_literals), len(self.ordinal_binds))  # type: ignore[attr-defined]

    def visit_Constant(self, node: ast.Constant) -> None:
        if not self.quiet and type(node.value) is str and CUDA_DEVICE.fullmatch(node.value):
            self.cuda_literals.append((node, self.stmt_line))

    def settle_guards(self) -> None:
        """Settle every guard recorded during the walk, innermost first, once the data-flow findings
        (which come at the end) are in. Checks held by a test's skip flag are dropped first."""
        for key in self.skip_keys:
            self.dropped.update(self.check_keys.get(key, ()))
        self.settle_arguments()  # first: a guard around the call takes the call's own safety
        for test, start, end in self.guards:
            if test and all(i in self.dropped for i in test):
                continue  # the guard is a skip flag's: left as it is, and so is what it guards
            self.settle_guard(test, start, end)
        for test, candidate in self.picked_words:  # type: ignore[attr-defined]
            test = [i for i in test if i not in self.dropped]
            if test:
                self.weaken_test(test, candidate[2], f"{candidate[0]}, line {candidate[1]}")
        unfixed = self.unfixed_ordinals()
        for name, line, checks, like in self.ordinal_binds:  # `index = 0 if cuda_available else -1`
            checks = [i for i in checks if i not in self.dropped]
            if checks and (like or name in unfixed):
                self.weaken_test(checks, None, _ordinal_blocker(name, line, unfixed))

    def settle_arguments(self) -> None:
        """A call whose fix keeps its arguments (`torch.cuda.set_device(x)` -> `torch.fl.set_device(x)`) is
        fixed only as safely as a CUDA call inside them: `set_device(rank % torch.cuda.device_count())`
        rewritten alone would divide by torch.cuda's 0 devices on an NPU."""
        kept = [(i, raw) for i, raw in enumerate(self.raw)
                if i not in self.dropped and RULES[raw.code].keeps_arguments]
        for i, outer in kept:
            if outer.safety != "safe":
                continue
            inner = [(raw.code, raw.where[0], raw.safety) for j, raw in kept
                     if j != i and _inside(raw.where, outer.where)]
            weakest, blocker = weakest_fix(inner)
            if weakest == "safe":
                continue
            note = (f"unsafe: its arguments hold a call whose fix is unsafe ({blocker}); --unsafe-fixes rewrites "
                    f"both" if weakest else f"not fixed: its arguments hold a call with no fix ({blocker})")
            self.raw[i] = outer._replace(safety=weakest, fields={**outer.fields, "note": note},
                                         replacement=outer.replacement if weakest else None)

    def unfixed_ordinals(self) -> dict[str, int]:
        """Names used as a device ordinal with no fix (`device=gpu_index`) -> the first such line."""
        found: dict[str, int] = {}
        for i, raw in enumerate(self.raw):
            if RULES[raw.code].pairs_as == "ordinal" and raw.safety is None and i not in self.dropped:
                found.setdefault(str(raw.fields.get("text", "")), raw.where[0])
        return found

    def guarded_literals(self, start: Mark, end: Mark) -> list[Candidate]:
        """A "cuda" literal that only a CUDA check reaches (`["cpu"] + (["cuda"] if
        torch.cuda.is_available() else [])`, detectron2) is part of the guarded code: rewriting the check
        alone would hand "cuda" to an NPU. The "guarded_literal" hooks (rules/device.py) report it with
        the fix that keeps it consistent and return (code, line, safety). A literal used as a table key
        (`cfg["cuda"]`) has no fix: the table has no "npu" entry. Returns the guard's candidates (what,
        line, safety)."""
        found: list[Candidate] = []
        for node, stmt_line in self.cuda_literals[start[4]:end[4]]:
            known = self.literal_findings.get(id(node))
            if known is not None:
                found.append(known)
                continue
            if id(node) in self.done:
                continue  # another finding's (`.to("cuda")`, `x.device.type == "cuda"`): counted as that
            if id(node) in self.key_literals:
                known = (f'the table key "{node.value}"', node.lineno, None)
            else:
                outer, self.stmt_line = self.stmt_line, stmt_line
                known = self.emit("guarded_literal", node) or (f'the device string "{node.value}"', node.lineno, None)
                self.stmt_line = outer
            self.literal_findings[id(node)] = known
            found.append(known)
        return found

    def settle_guard(self, test: list[int], start: Mark, end: Mark) -> None:
        """A guard's test is fixed only together with the code it guards. Rewriting the test alone opens
        the guard on every accelerator; code under it that does not run there (a CUDA-only call with no
        fix, a "cuda" string no fix rewrites) would then run where the original took the other branch.
        So the test's fixes get the weakest safety of the guarded findings (code that runs off CUDA, a
        flag write, does not count): all safe, safe; some unsafe, unsafe (fixed together under
        --unsafe-fixes); some with no fix, no fix, with the reason in the message."""
        weakest, blocker = weakest_fix(self.paired_candidates(test) + self.guarded_candidates(start, end))
        if weakest != "safe":
            self.weaken_test(test, weakest, blocker)

    def paired_candidates(self, test: list[int]) -> list[Candidate]:
        """A CUDA comparison in the check's own test (`args.device == "cuda" and not
        torch.cuda.is_available()`): the test means "CUDA asked for and not there"; rewriting the check
        alone makes it "CUDA asked for and an accelerator there", which keeps "cuda" on an NPU. The
        comparison's fix (unsafe, or none) is the check's too."""
        # The test's own findings come first and in a run (check_findings); those after it are the checks
        # of a flag the test reads (`if "cuda" in device_name:` after `device_name = "cuda" if ...`), which
        # that comparison does not pair with: the flag's fix makes the string "npu" there, not "cuda".
        own = test[:next((k for k in range(1, len(test)) if test[k] != test[k - 1] + 1), len(test))]
        pairs = [self.raw[i] for i in own if RULES[self.raw[i].code].pairs_as == "comparison"]
        if not pairs or len(pairs) == len(own):
            return []
        return [(raw.code, raw.where[0], raw.safety) for raw in pairs]

    def runs_here(self, index: int) -> bool:
        """Whether the raw finding `index` counts for a guard: code that runs off CUDA does not, unless it
        is asserted (a comparison with "cuda" runs anywhere, and fails there)."""
        return not RULES[self.raw[index].code].runs_off_cuda or index in self.asserted  # type: ignore[attr-defined]

    def guarded_candidates(self, start: Mark, end: Mark) -> list[Candidate]:
        """What the guard between the marks covers, in the order that picks the blocker a message names:
        its findings, its "cuda" literals, the project's functions and the module's functions it calls,
        and the data-flow sources bound under it."""
        literals = self.guarded_literals(start, end)  # first: its hooks may report findings
        foreign = self.state(device_rules.__name__).get(device_rules.FOREIGN, ())  # type: ignore[attr-defined]
        candidates = [(self.raw[i].code, self.raw[i].where[0], self.raw[i].safety) if self.raw[i].where not in foreign
                      else (f"{self.raw[i].code}: a device string handed to a callee that is not torch's, which "
                            f"decides what another accelerator's name means", self.raw[i].where[0],
                            None if self.raw[i].safety is None else "unsafe")
                      for i in range(start[0], end[0]) if i not in self.dropped and self.runs_here(i)]
        candidates += literals
        # A function of another module of the project (`from . import dist_util`; `dist_util.dev()`) runs
        # under it too, and this pass cannot see its body: the fix is not known to be safe.
        for line, text in self.project_calls[start[3]:end[3]]:  # type: ignore[attr-defined]
            candidates.append((f"{text}(), defined in another module of this project and not followed here",
                               line, "unsafe"))
        unfixed = self.unfixed_ordinals() if end[5] > start[5] else {}
        candidates += [(_ordinal_blocker(name, line, unfixed).rsplit(", line", 1)[0], line, None)
                       for name, line, _, like in self.ordinal_binds[start[5]:end[5]]  # type: ignore[attr-defined]
                       if like or name in unfixed]
        candidates += self.called_candidates(start, end)
        candidates += self.source_candidates(start, end)
        return candidates

    def called_candidates(self, start: Mark, end: Mark) -> list[Candidate]:
        """A module function called under the guard runs under it too (`if torch.cuda.is_available():
        print(gpu_name())`): its findings count (one level; methods not followed)."""
        called = {name for _, name in self.local_calls[start[2]:end[2]]}
        found: list[Candidate] = []
        for name in called:
            function = self.functions[name]
            first, last = function.lineno, function.end_lineno or function.lineno
            found += [(raw.code, raw.where[0], raw.safety) for i, raw in enumerate(self.raw)
                      if i not in self.dropped and first <= raw.where[0] <= last and self.runs_here(i)]
            # `def default_device(): return "cuda"` called under the check: no fix of this pass rewrites
            # that string for the guard (the function may be called from elsewhere), so it stays "cuda".
            found += [(f'the device string "{node.value}" in {name}()', node.lineno, None)
                      for node, _ in self.cuda_literals if first <= node.lineno <= last and id(node) not in self.done]
        return found

    def source_candidates(self, start: Mark, end: Mark) -> list[Candidate]:
        """Data-flow sources bound under the guard: a literal a finding rewrites counts as that finding;
        one bound here and used as a string has no fix."""
        by_pos = {raw.where: raw for i, raw in enumerate(self.raw) if i not in self.dropped}
        found: list[Candidate] = []
        for kind, _key, literal, _index, _line, _target in (self.sources[i] for i in range(start[1], end[1])):  # type: ignore[attr-defined]
            raw = by_pos.get((literal.lineno, literal.col_offset, literal.end_lineno, literal.end_col_offset))
            if raw is None:  # bound here and used as a string: no fix rewrites it
                found.append((f'the {kind} string "{literal.value}"', literal.lineno, None))  # type: ignore[attr-defined]
            elif not RULES[raw.code].runs_off_cuda:
                found.append((raw.code, literal.lineno, raw.safety))
        return found

    def weaken_test(self, test: list[int], weakest: str | None, blocker: str) -> None:
        """Give the test's findings the guarded code's weakest safety (no fix, or unsafe), with why."""
        if weakest is None:
            note = (f"not fixed: it guards CUDA-only code that has no automatic fix ({blocker}); rewritten "
                    f"alone, the check would run that code on other accelerators, where the original took "
                    f"the other branch: port the guarded code, then the check")
        else:
            note = f"unsafe: it guards code whose fix is unsafe ({blocker}); --unsafe-fixes rewrites both"
        for index in test:
            raw = self.raw[index]
            if raw.safety is None or (raw.safety == "unsafe" and weakest == "unsafe"):
                continue
            self.raw[index] = raw._replace(safety=weakest, fields={**raw.fields, "note": note},
                                           replacement=raw.replacement if weakest else None)
