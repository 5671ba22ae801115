#!/usr/bin/env python
"""Real code as truth: run `torchfl scan` and `torchfl fix` over local checkouts of public repositories
and report findings per rule, what the fixer did, and whether fixed training scripts still train on the
CPU.

Never commits or modifies the checkouts: fixes are applied to temporary copies.

Usage:
    python scripts/realworld_scan.py CHECKOUT... [--json OUT] [--samples N] [--train]

    --samples N   print N findings per repository (seeded, reproducible) with their source line, for
                  judging precision by hand (the judged samples are listed in docs/migrate-rules.md)
    --train       run the training recipes below on the original and the fixed copies, CPU only
                  (CUDA_VISIBLE_DEVICES=""), and compare the printed losses
    --grep        for recall: print the grep lines (GREP below; comments and docstrings left out) that no
                  finding covers (on the line, or on the innermost statement containing it), to judge

Recipes (--train) are known entry points with a tiny configuration and random data, chosen by the
checkout's files: nanoGPT's train.py (random uint16 tokens in data/fake). Add one to RECIPES for another
repository.

Fetch the repositories with git (e.g. `git clone https://github.com/karpathy/nanoGPT /tmp/src/nanoGPT`).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


@dataclass(frozen=True)
class Recipe:
    """How to train a repository's script briefly on the CPU: `applies(checkout)` says whether it fits,
    `prepare(copy)` writes data, `argv` runs it, `losses` is the regex of a printed loss line."""

    name: str
    applies: Callable[[Path], bool]
    prepare: Callable[[Path], None]
    argv: list[str]
    losses: str


def _nanogpt_data(copy: Path) -> None:
    import pickle

    data = copy / "data" / "fake"
    data.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    for split, size in (("train", 20000), ("val", 5000)):
        values = [rng.randrange(65) for _ in range(size)]
        (data / f"{split}.bin").write_bytes(b"".join(v.to_bytes(2, "little") for v in values))
    with (data / "meta.pkl").open("wb") as handle:
        pickle.dump({"vocab_size": 65}, handle)


RECIPES = [
    Recipe("nanoGPT train.py", lambda c: (c / "train.py").is_file() and (c / "configurator.py").is_file(),
           _nanogpt_data,
           ["train.py", "--dataset=fake", "--compile=False", "--eval_iters=1", "--log_interval=1",
            "--block_size=16", "--batch_size=2", "--n_layer=1", "--n_head=2", "--n_embd=16", "--max_iters=3",
            "--eval_interval=1000", "--always_save_checkpoint=False", "--dtype=float32"],
           r"^iter \d+: loss [0-9.]+"),
]


def scan(checkout: Path, select: list[str] | None = None) -> dict:
    from torch_fl.migrate.scan import scan_paths

    start = time.perf_counter()
    result = scan_paths([checkout], select)
    return {"files": result.files, "lines": result.lines, "seconds": round(time.perf_counter() - start, 3),
            "per_rule": dict(Counter(f.code for f in result.findings).most_common()),
            "findings": result.findings, "errors": len(result.errors)}


def fix_copy(checkout: Path, into: Path, unsafe: bool) -> dict:
    from torch_fl.migrate.fix import fix_paths

    shutil.copytree(checkout, into, symlinks=True)
    for path in into.rglob("*"):  # the checkout may be read-only; the copy is ours
        if path.is_file() and not path.is_symlink():
            path.chmod(0o644)
    report = fix_paths([into], unsafe=unsafe)
    broken = []
    for entry in report.changed_files:
        try:
            ast.parse(entry.path.read_text(encoding="utf-8"))
        except SyntaxError as exc:
            broken.append(f"{entry.path}: {exc}")
    return {"applied": report.applied, "files_changed": len(report.changed_files),
            "errors": [f"{e.path}: {e.error}" for e in report.errors], "unparsable_after_fix": broken}


def train(copy: Path, recipe: Recipe, extra: list[str] = ()) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    env["CUDA_VISIBLE_DEVICES"] = ""
    proc = subprocess.run([sys.executable, *recipe.argv, *extra], cwd=copy, env=env, capture_output=True,
                          text=True, timeout=600)
    losses = [re.sub(r",.*", "", line) for line in proc.stdout.splitlines() if re.match(recipe.losses, line)]
    return {"returncode": proc.returncode, "losses": losses, "stderr_tail": proc.stderr[-600:]}


def samples(findings: list, count: int, seed: int = 11) -> list[str]:
    chosen = [f for f in findings if f.code != "FL702"]
    if len(chosen) > count:
        chosen = sorted(random.Random(seed).sample(chosen, count), key=lambda f: (f.path, f.line))
    out = []
    for f in chosen:
        try:
            line = Path(f.path).read_text(encoding="utf-8").splitlines()[f.line - 1].strip()
        except (OSError, IndexError, UnicodeDecodeError):
            line = "?"
        out.append(f"{f.path}:{f.line} {f.code} | {line[:110]}")
    return out


# What might be a CUDA coupling, for the recall measurement: each hit is judged by hand.
GREP = re.compile(r"cuda|nccl|cudnn|\.to\(\s*\d|device\s*=\s*\d|device_ids|device_map\s*=\s*\{|load_in_\d|"
                  r"bitsandbytes|flash_attn|xformers|apex|triton|data_ptr", re.IGNORECASE)


def grep_uncovered(checkout: Path, findings: list) -> tuple[int, list[str]]:
    """(grep lines in code, those that no finding covers, as "path:line | source")."""
    import io
    import tokenize

    covered: dict[str, set[int]] = {}
    for f in findings:
        covered.setdefault(f.path, set()).update(range(f.line, f.end_line + 1))
    total, rows = 0, []
    for path in sorted(checkout.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(text)
            tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
        except (SyntaxError, tokenize.TokenError):
            continue
        docstrings: set[int] = set()
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body \
                    and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                docstrings.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
        statements = [(n.lineno, n.end_lineno or n.lineno) for n in ast.walk(tree) if isinstance(n, ast.stmt)]
        code: dict[int, list[str]] = {}
        for tok in tokens:
            if tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
                code.setdefault(tok.start[0], []).append(tok.string)
        hits = covered.get(str(path), set())
        for number, parts in sorted(code.items()):
            if number in docstrings or not GREP.search(" ".join(parts)):
                continue
            total += 1
            inner = min((s for s in statements if s[0] <= number <= s[1]), key=lambda s: s[1] - s[0],
                        default=(number, number))
            if number not in hits and not hits.intersection(range(inner[0], inner[1] + 1)):
                rows.append(f"{path}:{number} | {text.splitlines()[number - 1].strip()[:120]}")
    return total, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs="+", type=Path)
    parser.add_argument("--json", type=Path, help="write the full report here")
    parser.add_argument("--samples", type=int, default=0, help="findings per repository to print for judging")
    parser.add_argument("--train", action="store_true", help="run the training recipes (CPU only)")
    parser.add_argument("--grep", action="store_true", help="print grep lines no finding covers (recall)")
    args = parser.parse_args()
    report: dict = {}
    for checkout in args.checkouts:
        name = checkout.resolve().name
        default, everything = scan(checkout), scan(checkout, ["ALL"])
        entry = {key: default[key] for key in ("files", "lines", "seconds", "per_rule", "errors")}
        entry["findings_default"] = sum(default["per_rule"].values())
        entry["findings_all_rules"] = sum(everything["per_rule"].values())
        print(f"== {name}: {entry['files']} files, {entry['lines']} lines, {entry['seconds']} s; "
              f"{entry['findings_default']} findings (default rules), {entry['findings_all_rules']} with ALL")
        for code, count in default["per_rule"].items():
            print(f"   {count:>5}  {code}")
        if args.grep:
            total, uncovered = grep_uncovered(checkout, default["findings"])
            entry["grep"] = {"lines": total, "uncovered": uncovered}
            print(f"   grep: {total} lines, {total - len(uncovered)} on a finding; to judge:")
            print("\n".join(f"   {line}" for line in uncovered))
        if args.samples:
            entry["samples"] = samples(default["findings"], args.samples)
            print("\n".join(f"   {line}" for line in entry["samples"]))
        with tempfile.TemporaryDirectory(prefix="realworld-") as tmp:
            for mode in ("safe", "unsafe"):
                entry[f"fix_{mode}"] = fix_copy(checkout, Path(tmp) / mode, unsafe=mode == "unsafe")
                fixed = entry[f"fix_{mode}"]
                print(f"   fix ({mode}): {fixed['applied']} fixes in {fixed['files_changed']} files, "
                      f"{len(fixed['errors'])} skipped, {len(fixed['unparsable_after_fix'])} unparsable after")
            if args.train:
                for recipe in (r for r in RECIPES if r.applies(checkout)):
                    runs = {}
                    for mode, folder in (("original", Path(tmp) / "original"), ("safe", Path(tmp) / "safe"),
                                         ("unsafe", Path(tmp) / "unsafe")):
                        if mode == "original":
                            shutil.copytree(checkout, folder, symlinks=True)
                        recipe.prepare(folder)
                        runs[mode] = train(folder, recipe, ["--device=cpu"])
                    runs["unsafe, no --device"] = train(Path(tmp) / "unsafe", recipe)
                    entry.setdefault("train", {})[recipe.name] = runs
                    for mode, run in runs.items():
                        same = run["losses"] == runs["original"]["losses"]
                        print(f"   train {recipe.name} [{mode}]: rc {run['returncode']}, {len(run['losses'])} "
                              f"loss lines{', same as original' if same and mode != 'original' else ''}")
        report[name] = entry
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
