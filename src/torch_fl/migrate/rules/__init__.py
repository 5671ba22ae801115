"""The migration rules: one module per family, each rule's text (the documentation), its detection
(``ast`` hooks run by the ``migrate/scan/`` engine) and its fix (libcst, run by ``migrate/fix_rewriter.py``)
together, on the shared base in ``rules/base.py``. This package assembles them and selects codes
(``--select FL1`` / ``ignore = ["FL203"]``).

Codes are stable: a code is never reused for a different check. ``docs/migrate-rules.md`` is generated
from the rule texts (``scripts/gen_rule_docs.py``).

Default selection: every "coupling" rule (code that breaks or misbehaves off CUDA); "performance" rules
(FL203) are opt-in, with ``--select FL203`` (or ``ALL``) or ``extend-select`` in the config.
"""

from __future__ import annotations

from collections.abc import Iterable

from ...errors import did_you_mean
from . import (  # noqa: F401  (register)
    amp,
    backends,
    configs,
    control,
    device,
    device_types,
    distributed,
    kernels,
    libraries,
    memory,
    runtime,
)
from .base import FAMILIES, HOOKS, RULE_LIST, Finding, FixSafety, Level, Rule
from .libraries import CUDA_ONLY_LIBRARIES, GPU_INTEROP_LIBRARIES

RULES: dict[str, Rule] = {rule.code: rule for rule in sorted(RULE_LIST, key=lambda r: r.code)}
_BY_NAME: dict[str, Rule] = {rule.name: rule for rule in RULES.values()}

__all__ = ["CUDA_ONLY_LIBRARIES", "FAMILIES", "GPU_INTEROP_LIBRARIES", "HOOKS", "RULES", "Finding", "FixSafety",
           "Level", "Rule", "by_name", "default_codes", "expand", "selected"]


def default_codes() -> frozenset[str]:
    """The codes on when nothing is selected: the coupling rules."""
    return frozenset(code for code, rule in RULES.items() if rule.category == "coupling")


def by_name(name: str) -> Rule:
    """The rule called `name` (kebab-case, e.g. "cuda-device-string")."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no rule named '{name}'.{did_you_mean(name, _BY_NAME)}") from None


def expand(selector: str) -> list[str]:
    """The codes a selector names: a code ("FL101"), a prefix ("FL1", "FL10", "FL") or "ALL".

    Raises ValueError for a selector that names no rule.
    """
    if selector == "ALL":
        return list(RULES)
    codes = [code for code in RULES if code.startswith(selector)]
    if not codes:
        raise ValueError(f"'{selector}' selects no rule (codes FL101 ... FL903, prefixes like FL1 or "
                         f"FL10, or ALL).{did_you_mean(selector, RULES)}")
    return codes


def _layer(enabled: set[str], select: list[str] | None, ignore: list[str],
           extend: list[str] | None = None) -> set[str]:
    # As in ruff: within one layer the most specific selector wins (select FL101 + ignore FL1 keeps
    # FL101); on equal specificity ignore wins. A layer with `select` starts from nothing.
    if select is not None:
        enabled = set()
    best: dict[str, tuple[int, bool]] = {}
    for selector, on in [(s, True) for s in [*(select or ()), *(extend or ())]] + [(s, False) for s in ignore]:
        rank = 0 if selector == "ALL" else len(selector)
        for code in expand(selector):
            previous = best.get(code)
            if previous is None or rank > previous[0] or (rank == previous[0] and not on):
                best[code] = (rank, on)
    for code, (_, on) in best.items():
        if on:
            enabled.add(code)
        else:
            enabled.discard(code)
    return enabled


def selected(*layers: tuple[Iterable[str] | None, ...]) -> frozenset[str]:
    """The enabled codes after applying (select, ignore[, extend_select]) layers in order, e.g. the
    pyproject.toml layer then the command line. The coupling rules are on before the first layer. A
    layer whose select is None keeps what earlier layers enabled, adds its extend-select and removes
    its ignores."""
    enabled = set(default_codes())
    for layer in layers:
        select, ignore, *rest = layer
        extend = rest[0] if rest else None
        enabled = _layer(enabled, None if select is None else list(select), list(ignore or ()),
                         None if extend is None else list(extend))
    return frozenset(enabled)
