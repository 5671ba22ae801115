#!/usr/bin/env python
"""Run public vendor code, unmodified, on an emulated chip: the judge of the emulated plugin (issue 28).

Two kinds of samples, each run in a fresh process with ``FL_DEVICE=emu:CHIP`` (PyTorch names its PrivateUse1
slot once per process), none of them written here:

- ``--docs PATH``: a checkout of Ascend/op-plugin (a work tree or a bare git directory). Every ```python
  example of its API pages (docs/zh/custom_APIs/...) that calls an API the emulated torch_npu offers
  (``torch_npu.<op>`` of routing/emu/npu_ops.FUSED_OPS, ``torch_npu.optim``, ``torch_npu.npu.amp``) is run
  as it is printed there.
- ``--repo PATH --files GLOB``: files of a checkout, run as scripts with the checkout on PYTHONPATH (e.g.
  DeepLink-org/ditorch's ``op_tools/test/*.py``, its own checks of torch_npu code).

A sample passes when it exits 0; the table gives the last line of what a failing one printed.

Usage:
  vendor_samples.py --docs /path/to/op-plugin [--chip npu] [--json out.json]
  vendor_samples.py --repo /path/to/ditorch --files 'op_tools/test/*.py'
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS_ROOT = "docs/zh/custom_APIs/"
_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


@dataclass
class Result:
    sample: str
    ok: bool
    seconds: float
    last_line: str


class Checkout:
    """Files of a work tree or of a bare git directory (what the fetch tool brings)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.bare = not (path / ".git").exists() and (path / "HEAD").is_file()

    def files(self) -> list[str]:
        if not self.bare:
            return sorted(str(p.relative_to(self.path)) for p in self.path.rglob("*") if p.is_file())
        out = subprocess.run(["git", "--git-dir", str(self.path), "ls-tree", "-r", "--name-only", "HEAD"],
                             capture_output=True, text=True, check=True).stdout
        return out.splitlines()

    def read(self, name: str) -> str:
        if not self.bare:
            return (self.path / name).read_text(encoding="utf-8")
        return subprocess.run(["git", "--git-dir", str(self.path), "show", f"HEAD:{name}"],
                              capture_output=True, text=True, check=True).stdout

    def commit(self) -> str:
        git = ["git", "--git-dir", str(self.path)] if self.bare else ["git", "-C", str(self.path)]
        done = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
        return done.stdout.strip()[:12]


def offered_apis() -> list[str]:
    """The torch_npu names the emulated plugin offers, as the docs spell them."""
    sys.path.insert(0, str(REPO / "src"))
    from torch_fl.routing.emu import npu_ops, npu_optim

    return ([f"torch_npu.{name}" for name in npu_ops.FUSED_OPS]
            + [f"torch_npu.optim.{name}" for name in npu_optim.__all__] + ["torch_npu.npu.amp"])


def doc_samples(checkout: Checkout) -> list[tuple[str, str]]:
    """(page, code) of every python example on an API page of an offered API."""
    apis = offered_apis()
    samples = []
    for name in checkout.files():
        if not (name.startswith(DOCS_ROOT) and name.endswith(".md")):
            continue
        text = checkout.read(name)
        title = re.sub(r"^[（(]beta[）)]", "", text.split("\n", 1)[0].lstrip("# ").strip())
        title = re.split(r"[（(]", title)[0].strip()
        if title not in apis:
            continue
        for index, code in enumerate(_BLOCK.findall(text)):
            code = _as_script(code)
            if "import" in code:  # (prototypes are python blocks too: only runnable examples)
                samples.append((f"{name}#{index}", code))
    return samples


def _as_script(code: str) -> str:
    """A docs example as a script: un-indented (examples nested in list items), and a ``>>>`` session
    turned into its statements, and printed results after the code dropped."""
    code = textwrap.dedent(code)
    code = code.split("# 执行上述代码的输出")[0]  # ("the output of the code above is like": printed results follow)
    lines = code.splitlines()
    if not any(line.lstrip().startswith(">>>") for line in lines):
        return code
    kept = [line.lstrip()[4:] for line in lines if line.lstrip().startswith((">>> ", "... ", ">>>", "..."))]
    return "\n".join(kept) + "\n"


def run_one(label: str, argv: list[str], chip: str, pythonpath: str, cwd: str) -> Result:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    env["FL_DEVICE"] = f"emu:{chip}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH", "")) if p)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=600, check=False)
    lines = [line for line in (done.stderr or done.stdout).strip().splitlines() if line.strip()]
    return Result(label, done.returncode == 0, round(time.perf_counter() - start, 2),
                  "" if done.returncode == 0 else (lines[-1][:160] if lines else f"exit {done.returncode}"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--docs", type=Path, help="an Ascend/op-plugin checkout: run its API pages' examples")
    parser.add_argument("--repo", type=Path, help="a checkout whose --files are run as scripts")
    parser.add_argument("--files", default="", help="glob of --repo files to run ('op_tools/test/*.py')")
    parser.add_argument("--chip", default="npu", help="the emulated chip (default npu)")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args(argv)
    if not args.docs and not args.repo:
        parser.error("give --docs PATH and/or --repo PATH --files GLOB")
    if args.repo and not args.files:
        parser.error("--repo needs --files GLOB")
    results: list[Result] = []
    sources: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        jobs: list[tuple[str, list[str], str]] = []
        if args.docs:
            checkout = Checkout(args.docs)
            sources.append(f"{args.docs} @ {checkout.commit()}")
            for label, code in doc_samples(checkout):
                path = Path(scratch) / f"sample_{len(jobs)}.py"
                path.write_text(code, encoding="utf-8")
                jobs.append((label, [sys.executable, str(path)], ""))
        if args.repo:
            checkout = Checkout(args.repo)
            sources.append(f"{args.repo} @ {checkout.commit()}")
            if checkout.bare:
                parser.error("--repo needs a work tree (git clone the bare directory first)")
            for name in checkout.files():
                if fnmatch.fnmatch(name, args.files):
                    jobs.append((name, [sys.executable, str(args.repo / name)], str(args.repo)))
        for number, (label, command, pythonpath) in enumerate(jobs, 1):
            print(f"[{number}/{len(jobs)}] {label}", file=sys.stderr, flush=True)
            results.append(run_one(label, command, args.chip, pythonpath, scratch))
    passed = sum(r.ok for r in results)
    width = max((len(r.sample) for r in results), default=10)
    for r in results:
        print(f"{'ok  ' if r.ok else 'FAIL'}  {r.sample:<{width}}  {r.seconds:6.1f}s  {r.last_line}")
    print(f"\n{passed}/{len(results)} samples ran unmodified on emu:{args.chip} ({'; '.join(sources)})")
    if args.json:
        args.json.write_text(json.dumps({"chip": args.chip, "sources": sources, "passed": passed,
                                         "results": [asdict(r) for r in results]}, indent=1), encoding="utf-8")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
