"""The vendors' per-release compatibility facts (torch, Python, runtime, glibc of each plugin release), and the
check of an installed set against them, with the pip command that fixes a mismatch.

The facts are generated files, one per chip, in torch_fl/description/compat/ (scripts/gen_compat.py, which
names its sources: torch_npu's wheels on PyPI and Ascend/pytorch's COMPATIBILITY table, Cambricon/torch_mlu's
release branches, MooreThreads/torch_musa's release tags). Each release records the value of every source and,
where they disagree, which one won and why (`decisions`).

Example::

    >>> from torch_fl.analysis.compat import check
    >>> result = check("torch_npu", "2.5.1.post1", torch="2.6.0", python="3.11")
    >>> result.ok
    False
    >>> result.fixes[0]
    "pip install 'torch-npu==2.6.0.post5'"
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .._versions import satisfies

FACTS_DIR = Path(__file__).resolve().parents[1] / "description" / "compat"
_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


@functools.cache
def _files() -> dict[str, dict[str, Any]]:
    """chip -> its generated facts file (parsed), with its path."""
    found = {}
    for path in sorted(FACTS_DIR.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        data["path"] = str(path)
        found[data["chip"]] = data
    return found


def all_facts() -> dict[str, dict[str, Any]]:
    """plugin module name -> the facts of its releases (the vendor plugins' files)."""
    return {data["plugin"]: data for data in _files().values() if data.get("plugin")}


def facts_of_chip(chip: str) -> dict[str, Any] | None:
    """The plugin facts of a chip ('npu'), or None."""
    data = _files().get(chip)
    return data if data and data.get("plugin") else None


def build_facts(chip: str) -> dict[str, Any] | None:
    """The facts of torch's own builds for a runtime ('cuda', 'rocm', 'xpu'), or None."""
    data = _files().get(chip)
    return data if data and data.get("kind") == "torch-build" else None


def facts(plugin: str) -> dict[str, Any] | None:
    """The facts of plugin module `plugin` (torch_npu), or None when torch-fl has none."""
    return all_facts().get(plugin.split(".")[0]) if plugin else None


def releases(plugin: str, version: str) -> list[dict[str, Any]]:
    """The fact rows of `plugin` release `version` (several for torch_musa 2.0.0: one per torch line)."""
    data = facts(plugin)
    if data is None:
        return []
    wanted = _normal(version)
    return [r for r in data["releases"] if _normal(r["plugin"]) == wanted]


def _normal(version: str) -> str:
    return version.strip().lower().lstrip("v")


@dataclass
class CompatResult:
    """The installed set against the facts of the installed plugin release."""

    plugin: str
    plugin_version: str
    torch: str
    python: str
    runtime: str = ""
    known: bool = False  # the facts list this release
    facts_path: str = ""
    expected: dict[str, Any] = field(default_factory=dict)  # torch, python, runtime, platforms of the release
    mismatches: list[str] = field(default_factory=list)  # what differs, each a sentence
    cautions: list[str] = field(default_factory=list)  # what the facts cannot confirm
    fixes: list[str] = field(default_factory=list)  # exact commands, best first
    decisions: list[str] = field(default_factory=list)  # where the vendor's sources disagreed
    why: str = ""  # why the mismatch matters ('' : the plugin's reason)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}

    def problem(self) -> str:
        """What differs, why it matters, and the commands that fix it ('' when nothing differs)."""
        if self.ok:
            return ""
        why = self.why or ("a vendor plugin is compiled against one torch release and built for a set of Pythons; "
                           "another one crashes or fails at import")
        return (f"{'; '.join(self.mismatches)}. Why: {why} (the facts: {self.facts_path}). Fix: "
                f"{' or: '.join(f'`{f}`' for f in self.fixes) or 'install a matching set'}.")


def check(plugin: str, plugin_version: str, *, torch: str, python: str, runtime: str = "") -> CompatResult:
    """Compare an installed set (plugin release, torch, Python major.minor, runtime) with the facts."""
    result = CompatResult(plugin, plugin_version, torch, python, runtime)
    data = facts(plugin)
    if data is None or not plugin_version:
        return result
    result.facts_path = data["path"]
    rows = releases(plugin, plugin_version)
    if not rows:
        newest = max((r["plugin"] for r in data["releases"]), key=_key, default="")
        result.cautions.append(f"{plugin} {plugin_version} is not in torch-fl's release facts ({data['path']}, "
                               f"newest {newest}): its torch and Python needs are unchecked")
        return result
    result.known = True
    result.expected = {"torch": " or ".join(r["torch"] for r in rows if r["torch"]),
                       "python": sorted({p for r in rows for p in r["python"]}, key=_key),
                       "runtime": " or ".join(sorted({r["runtime"] for r in rows if r["runtime"]})),
                       "runtime_name": data["runtime_name"],
                       "platforms": sorted({p for r in rows for p in r.get("platforms", [])})}
    result.decisions = [d for r in rows for d in r["decisions"]]
    torch_ok = any(not r["torch"] or satisfies(torch, r["torch"]) for r in rows)
    python_ok = not result.expected["python"] or python in result.expected["python"]
    if not torch_ok:
        result.mismatches.append(f"{plugin} {plugin_version} needs torch {result.expected['torch']}, and torch "
                                 f"{torch} is installed")
    if not python_ok:
        result.mismatches.append(f"{plugin} {plugin_version} has wheels for Python "
                                 f"{', '.join(result.expected['python'])}, and this is Python {python}")
    want_runtime = result.expected["runtime"]
    if runtime and want_runtime and not any(_same_runtime(runtime, r["runtime"]) for r in rows):
        result.cautions.append(f"{plugin} {plugin_version} was released for {data['runtime_name']} {want_runtime}, "
                               f"and {data['runtime_name']} {runtime} is installed")
    elif not want_runtime:
        result.cautions.append(f"the vendor's sources name no {data['runtime_name']} version for {plugin} "
                               f"{plugin_version}: its runtime is unchecked")
    if result.mismatches:
        result.fixes = fixes(data, torch=torch, python=python, installed=rows)
    return result


def _same_runtime(have: str, want: str) -> bool:
    """'8.0.RC3' is '8.0.rc3'; an installed '9.1.0.1' (a patch of 9.1.0) is 9.1.0."""
    return not want or _normal(have).startswith(_normal(want))


def _key(version: str) -> tuple[int, ...]:
    """Release order: 2.1.0.post8 < 2.1.0.post10; 3.9 < 3.10; 1.22.2+torch2.4.0 by its numbers."""
    return tuple(int(n) for n in re.findall(r"\d+", version))


def fixes(data: dict[str, Any], *, torch: str, python: str, installed: list[dict[str, Any]]) -> list[str]:
    """Exact commands that make the set consistent: the newest plugin release for this torch and Python
    (keeps torch), then the torch the installed plugin release pins (keeps the plugin)."""
    out = []
    fitting = [r for r in data["releases"] if r["torch"] and satisfies(torch, r["torch"])
               and (not r["python"] or python in r["python"])]
    if fitting:
        best = max(fitting, key=lambda r: _key(r["plugin"]))
        out.append(f"pip install {_plugin_req(data, best['plugin'])}")
    else:  # no release for this torch and Python: move both to the newest release made for this Python
        same_python = [r for r in data["releases"] if r["torch"] and python in r["python"]]
        if same_python:
            best = max(same_python, key=lambda r: _key(r["plugin"]))
            out.append(_pair_command(best, data))
    for row in installed:
        if not row["torch"] or (satisfies(torch, row["torch"]) and (not row["python"] or python in row["python"])):
            continue
        if not row["python"] or python in row["python"]:
            out.append(_torch_command(row["torch"], data, row["plugin"]))
        else:  # this Python cannot have the release: a fresh environment with one it has wheels for
            out.append(f"python{row['python'][-1]} -m venv env && env/bin/{_pair_command(row, data)}")
    return list(dict.fromkeys(_tidy(c) for c in out))


def _pair_command(row: dict[str, Any], data: dict[str, Any]) -> str:
    """pip install of a plugin release together with the torch it pins."""
    version = row["torch"].lstrip("=").replace(".*", "")
    index = f" --index-url {_CPU_INDEX} --extra-index-url https://pypi.org/simple" if version.endswith("+cpu") else ""
    return f"pip install 'torch=={version}' {_plugin_req(data, row['plugin'])}{index}"


def _plugin_req(data: dict[str, Any], version: str) -> str:
    return f"'{data['distribution']}=={version}'"


def _torch_command(spec: str, data: dict[str, Any], plugin_version: str) -> str:
    version = spec.lstrip("=").replace(".*", "")
    index = f" --index-url {_CPU_INDEX}" if version.endswith("+cpu") else ""
    return f"pip install 'torch=={version}'{index}  # the torch {data['distribution']} {plugin_version} pins"


def _tidy(command: str) -> str:
    command = command.strip()
    return command if command.startswith(("pip ", "python")) else f"pip install {command}"


def installed_check(plugin: str, plugin_version: str, runtime: str = "") -> dict[str, Any] | None:
    """doctor's release check, JSON-ready: the installed plugin release against its facts, with the vendor
    toolkit found on disk when torch reports no runtime. None when the plugin has no facts (doctor then
    checks torch's own CUDA / ROCm / XPU build: build_compat.py, which imports this module) or is not
    installed."""
    import sys

    from . import installed

    data = facts(plugin)
    if data is None:
        return None
    if not plugin_version:
        return None
    import torch

    found = installed.chip_toolkit(data) if not runtime else None
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    result = check(plugin, plugin_version, torch=torch.__version__, python=python,
                   runtime=runtime or (found.version if found else ""))
    recipe = data.get("installed")
    if not runtime and found is None and recipe and result.known:
        where = [f"${v}" for v in recipe["env"]] + recipe["roots"]
        result.cautions.append(f"no {recipe['name']} installation was found (looked in {', '.join(where)} for "
                               f"{', '.join(recipe['files'])}), so whether {recipe['name']} "
                               f"{result.expected['runtime'] or '?'} ({plugin} {plugin_version} was released for it) "
                               f"is installed is unchecked; set {recipe['env'][0]} to its install root (the vendor's "
                               f"set_env.sh does)")
    return {**result.json(), "problem": result.problem(), "toolkit": found.json() if found else None}
