"""Which entries of LD_LIBRARY_PATH / PYTHONPATH / LD_PRELOAD break a plugin's import (`torchfl doctor
--bisect-env`): the plugin is loaded in a child process (plugin_load.load) with subsets of each variable until the
smallest set of entries whose removal makes it load is found."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from .plugin_load import DEFAULT_TIMEOUT, LoadResult, load

# Environment bisect -------------------------------------------------------------------------------
BISECT_VARIABLES = ("LD_LIBRARY_PATH", "PYTHONPATH", "LD_PRELOAD")
_MAX_RUNS = 64


@dataclass
class BisectResult:
    """Which LD_LIBRARY_PATH / PYTHONPATH / LD_PRELOAD entries break ``import MODULE``, and a minimal
    value of each variable with which it works."""

    module: str
    baseline: LoadResult
    culprits: list[dict[str, str]] = field(default_factory=list)  # variable, entry, effect
    minimal: dict[str, str] = field(default_factory=dict)  # variable -> the smallest value that works
    runs: int = 1
    verdict: str = ""

    def json(self) -> dict[str, Any]:
        return {"module": self.module, "baseline": self.baseline.json(), "culprits": self.culprits,
                "minimal": self.minimal, "runs": self.runs, "verdict": self.verdict}

    def lines(self) -> list[str]:
        out = [self.baseline.summary(), self.verdict]
        for culprit in self.culprits:
            out.append(f"culprit: {culprit['variable']} entry {culprit['entry']}: {culprit['effect']}")
        for variable, value in self.minimal.items():
            out.append(f"minimal working value: {variable}={value!r}")
            out.append(f"  fix: export {variable}={_quote(value)}" if value else f"  fix: unset {variable}")
        return out


def _quote(value: str) -> str:
    import shlex

    return shlex.quote(value)


def bisect_env(module: str, *, env: dict[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT,
               variables: tuple[str, ...] = BISECT_VARIABLES) -> BisectResult:
    """Find the environment entries that break ``import module`` by importing it in children with entries
    removed: first each entry alone (the culprits: removing one makes the import work), then, from the
    first working environment, every entry that is not needed (the minimal working value). Libraries
    the loader took from another file once an entry was gone are named (a shadowed library). An import
    that works but loads two copies of a runtime library (two libgomp) counts as broken: the culprit is the
    entry that brings in the second copy.

    Example::

        >>> result = bisect_env("json")
        >>> result.verdict
        'the import works with this environment: nothing to bisect'
    """
    env = dict(os.environ if env is None else env)
    baseline = load(module, env=env, timeout=timeout)
    result = BisectResult(module, baseline)
    if _good(baseline):
        result.verdict = "the import works with this environment: nothing to bisect"
        return result
    entries = {var: [e for e in env.get(var, "").split(os.pathsep if var != "LD_PRELOAD" else " ") if e]
               for var in variables}
    working: tuple[str, list[str], LoadResult] | None = None
    for var, values in entries.items():
        for i, entry in enumerate(values):
            if result.runs >= _MAX_RUNS:
                break
            trial = _with(env, var, values[:i] + values[i + 1:])
            outcome = load(module, env=trial, timeout=timeout, abi=False)
            result.runs += 1
            if _good(outcome):
                result.culprits.append({"variable": var, "entry": entry,
                                        "effect": _effect(baseline, outcome, entry)})
                if working is None:
                    working = (var, values[:i] + values[i + 1:], outcome)
    if working is None:
        for var, values in entries.items():  # no single entry: does the import work without the variable?
            if values and result.runs < _MAX_RUNS:
                outcome = load(module, env=_with(env, var, []), timeout=timeout, abi=False)
                result.runs += 1
                if _good(outcome):
                    working = (var, [], outcome)
                    result.culprits.append({"variable": var, "entry": "(several entries together)",
                                            "effect": f"the import works with {var} unset"})
                    break
    if working is None:
        result.verdict = (f"no {', '.join(v for v in variables)} entry breaks the import: it fails without "
                          f"each of them too. The cause is elsewhere (the installed plugin, torch or runtime).")
        return result
    var, kept, _ = working
    for entry in list(kept):  # drop every entry the import does not need
        if result.runs >= _MAX_RUNS:
            break
        trial = [e for e in kept if e != entry]
        outcome = load(module, env=_with(env, var, trial), timeout=timeout, abi=False)
        result.runs += 1
        if _good(outcome):
            kept = trial
    result.minimal[var] = (os.pathsep if var != "LD_PRELOAD" else " ").join(kept)
    names = ", ".join(f"{c['variable']} entry {c['entry']}" for c in result.culprits)
    if baseline.ok:
        result.verdict = (f"the import loads two copies of a runtime library because of {names}; without it, one "
                          f"({result.runs} imports tried)")
    else:
        result.verdict = f"the import fails because of {names}; without it, it works ({result.runs} imports tried)"
    return result


def _good(result: LoadResult) -> bool:
    return result.ok and not result.duplicates


def _with(env: dict[str, str], var: str, values: list[str]) -> dict[str, str]:
    trial = dict(env)
    if values:
        trial[var] = (os.pathsep if var != "LD_PRELOAD" else " ").join(values)
    else:
        trial.pop(var, None)
    return trial


def _effect(broken: LoadResult, working: LoadResult, entry: str) -> str:
    """What removing `entry` changed: the libraries the loader took from another file, else the failure."""
    moved = [f"{lib} came from {path}, and without it from {working.resolved[lib]}"
             for lib, path in broken.resolved.items()
             if lib in working.resolved and working.resolved[lib] != path and path.startswith(entry.rstrip("/") + "/")]
    if moved:
        return "it shadows a library: " + "; ".join(moved)
    if broken.ok and broken.duplicates:
        extra = [p for paths in broken.duplicates.values() for p in paths if p not in working.loaded
                 and os.path.realpath(p) not in map(os.path.realpath, working.loaded)]
        return (f"it brings in a second copy of a runtime library ({', '.join(extra) or broken.caution()}); "
                f"without it, one copy is loaded")
    return f"with it the import fails ({broken.summary()}); without it, it works"
