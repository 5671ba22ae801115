#!/usr/bin/env python
"""The judge of `torchfl scan` / `torchfl fix` on repositories the rules were not built on (issue 30 item 6).

Usage:
    python scripts/realworld_judge.py sample N CHECKOUT...    N findings drawn with random.Random(30) across
                                                              the checkouts (the draw of realworld_fixspeed.py
                                                              sample), each with its source lines, to judge
    python scripts/realworld_judge.py recall CHECKOUT...      the grep truth (TRUTH below) and the lines of it
                                                              that no finding covers, sorted into the reasons
                                                              the scanner leaves them out; the rest to judge
    python scripts/realworld_judge.py functions MIRRORS       FUNCTIONS below, extracted from the mirrors, fixed
                                                              (safe) and run on the CPU before and after, and
                                                              fixed under FL_DEVICE=emu:npu and emu:mps

CHECKOUT is a work tree of a fetched repository (never committed here); MIRRORS is a folder of bare git
mirrors named owner+name/repo (the `fetch` layout: /work/.mirror). `functions` reads each function from the
mirror's HEAD with `git show`, writes it with the module's imports of the names it uses into a temporary
folder, applies the safe fixes of `torchfl fix` to a copy, runs both on the CPU host (CUDA_VISIBLE_DEVICES=""),
then the fixed copy under FL_DEVICE=emu:npu and emu:mps with tests/migrate/target_runner.py recording every
call into torch/cuda/. A function passes when the CPU output is the same before and after (or the original
stops with "Torch not compiled with CUDA enabled" and the fixed copy runs) and both emulated runs finish
with no CUDA call. Functions with unsafe or unfixable findings are run and shown, not judged. The results
are in docs/migrate-rules.md (fourth measurement).
"""

from __future__ import annotations

import ast
import json
import os
import random
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

# The grep truth of the recall measurement: what an engineer greps for when porting off CUDA. Matched on
# the code tokens of each line (comments and docstrings left out, as realworld_scan.py's --grep does):
# `.cuda(`, a "cuda" or "cuda:N" literal (not names that start with cuda: "cuda_rms_layernorm" providers,
# "cudagraph_pass"), f"cuda...", `torch.cuda.`, a "nccl" literal, NCCL_* variables and NCCL class names,
# `device_ids`.
TRUTH = re.compile(r"\.cuda\(|[\"']cuda(?::[^\"']*)?[\"']|f[\"']\s*cuda\b|torch\.cuda\.|[\"']nccl[\"']|\bNCCL_\w+|"
                   r"ProcessGroupNCCL|Backend\.NCCL|is_nccl_available|device_ids")


def sample(count: int, roots: list[str]) -> None:
    from torch_fl.migrate.scan import scan_paths

    found = []
    for root in roots:
        found += scan_paths([root]).findings
    for i, f in enumerate(sorted(random.Random(30).sample(found, min(count, len(found))), key=lambda f: f.sort_key)):
        lines = Path(f.path).read_text(errors="replace").splitlines()
        print(f"### {i} {f.path}:{f.line} {f.code} ({f.safety or '-'}) {f.message[:160]}")
        for n in range(max(1, f.line - 4), min(len(lines), f.line + 2) + 1):
            print(f"{'>' if n == f.line else ' '}{n:5} {lines[n - 1][:140]}")


def _uncovered(roots: list[str]) -> tuple[int, set[str]]:
    import realworld_scan

    from torch_fl.migrate.scan import scan_paths

    realworld_scan.GREP = TRUTH
    total, rows = 0, set()
    for root in roots:
        count, lines = realworld_scan.grep_uncovered(Path(root), scan_paths([root]).findings)
        total += count
        rows.update(lines)
    return total, rows


def recall(roots: list[str]) -> None:
    """Truth lines, those on a finding, and the rest sorted by why: inside a CUDA-only test (not reported by
    design, docs/migrate-rules.md *Categories*: found when that exemption is switched off), in a directory
    named build/ or dist/ (skipped as build output), or to judge by hand."""
    from torch_fl.migrate.scan import files, guards

    total, left = _uncovered(roots)
    saved = {name: getattr(guards.Guards, name) for name in
             ("cuda_only_test", "cuda_only_module", "skips_without_cuda", "cuda_only_case")}
    for name in saved:
        setattr(guards.Guards, name, lambda self, node: False)
    try:
        _, without_tests = _uncovered(roots)
    finally:
        for name, method in saved.items():
            setattr(guards.Guards, name, method)
    in_tests = left - without_tests
    skip_dirs = files.SKIP_DIRS
    files.SKIP_DIRS = skip_dirs - {"build", "dist"}
    try:
        _, with_build_dirs = _uncovered(roots)
    finally:
        files.SKIP_DIRS = skip_dirs
    in_build_dirs = (left - in_tests) - with_build_dirs
    rest = sorted(left - in_tests - in_build_dirs)
    print(f"truth lines: {total}; on a finding: {total - len(left)}; not on one: {len(left)}")
    print(f"  in CUDA-only tests (reported with that exemption off): {len(in_tests)}")
    print(f"  in a build/ or dist/ directory (reported when those are walked): {len(in_build_dirs)}")
    for line in sorted(in_build_dirs):
        print(f"    {line}")
    print(f"  to judge: {len(rest)}")
    for line in rest:
        print(f"    {line}")


# (mirror, path, names, calls): `names` are top-level functions or classes of that file (comma-separated,
# copied in this order with the module's imports of the names they use); each of `calls` is evaluated in
# the copy and printed (tensors as dtype, shape, values and device type). DEV is the device inputs are
# put on: the CPU on the host, torch.fl.device() in the emulated runs; `_with(cm, fn)` runs fn inside a
# context manager, `_grad(fn, x)` returns the gradient of fn at x.
FUNCTIONS = [
    # Every top-level function or class of the six trees whose findings all have a safe fix and that needs
    # nothing beyond the standard library, torch, numpy, psutil, transformers and accelerate (found by
    # walking the trees at 6cce420; numerical_tests_qwen3_5.py's run_hf, which downloads a model, left
    # out). Copies of one function in several examples are listed each. Since e578d1c the memory
    # statistics are unsafe fixes, so get_gpu_mem and bench are shown, not judged.
    ("open-mmlab+mmengine", "mmengine/device/utils.py", "is_cuda_available", ["is_cuda_available()"]),
    ("hpcaitech+ColossalAI", "examples/language/gpt/gemini/train_gpt_demo.py", "get_gpu_mem", ["get_gpu_mem()"]),
    ("hpcaitech+ColossalAI", "examples/language/gpt/experiments/auto_parallel/auto_parallel_with_gpt.py",
     "get_gpu_mem", ["get_gpu_mem()"]),
    ("hpcaitech+ColossalAI", "examples/community/roberta/pretraining/utils/exp_util.py", "get_gpu_mem",
     ["get_gpu_mem()"]),
    ("hpcaitech+ColossalAI", "examples/community/roberta/pretraining/utils/global_vars.py", "_Timer",
     ["(lambda t: (t.start(), t.stop(), t.elapsed() >= 0.0, t.started_)[2:])(_Timer('step'))"]),
    ("hpcaitech+ColossalAI", "examples/images/diffusion/ldm/modules/diffusionmodules/util.py", "CheckpointFunction",
     ["_grad(lambda x: CheckpointFunction.apply(lambda a: a * a, 1, x).sum(), torch.arange(3.0).to(DEV))"]),
    ("hpcaitech+ColossalAI", "examples/images/vit/vit_benchmark.py", "get_data_batch",
     ["[(t.shape, t.device.type) for t in get_data_batch(2, 10, height=4, width=4).values()]"]),
    *[("hpcaitech+ColossalAI", path, "get_data", ["[(t.shape, t.dtype, t.device.type) for t in get_data(2, 3, 10)]"])
      for path in ("examples/language/commons/utils.py",
                   "examples/language/gpt/experiments/auto_parallel/auto_parallel_with_gpt.py",
                   "examples/language/gpt/experiments/pipeline_parallel/train_gpt_pp.py",
                   "examples/language/gpt/gemini/commons/utils.py", "examples/language/opt/opt_benchmark.py")],
    *[("hpcaitech+ColossalAI", path, "move_to_cuda", ["move_to_cuda({'ids': torch.arange(3), 'mask': torch.ones(3)})"])
      for path in ("examples/tutorial/new_api/glue_bert/finetune.py",
                   "examples/language/gpt/hybridparallelism/finetune.py")],
    ("hpcaitech+ColossalAI", "examples/language/grok-1/utils.py", "inference",
     ["inference(_LM(), _Tokenizer(), 'a bb ccc', max_new_tokens=1)"]),
    ("hpcaitech+ColossalAI", "examples/language/palm/train.py", "TextSamplerDataset",
     ["(torch.manual_seed(0), TextSamplerDataset(torch.arange(20), 4)[0])[1]"]),
    ("hpcaitech+ColossalAI", "examples/tutorial/auto_parallel/bench_utils.py", "bench",
     ["bench(torch.fx.symbolic_trace(torch.nn.Linear(4, 2)), torch.nn.MSELoss(),"
      " lambda: ((torch.randn(3, 4).to(DEV),), torch.randn(3, 2).to(DEV)), num_steps=2)[0]"]),
    ("hpcaitech+ColossalAI", "examples/tutorial/opt/opt/run_clm.py", "get_time_stamp",
     ["type(get_time_stamp()).__name__"]),
    ("facebookresearch+dinov2", "dinov2/loss/koleo_loss.py", "KoLeoLoss",
     ["KoLeoLoss()(torch.randn(8, 4, generator=torch.Generator().manual_seed(0)).to(DEV))"]),
    ("huggingface+trl", "trl/experimental/utils.py", "empty_cache", ["empty_cache()"]),
    ("huggingface+trl", "trl/generation/vllm_generation.py", "empty_cache", ["empty_cache()"]),
    ("pytorch+torchtitan", "torchtitan/experiments/graph_trainer/inductor_passes.py", "_migrate_cpu_get_attrs_to_cuda",
     ["_migrated()"]),
    # Functions with unsafe or unfixable findings too: run the same way, shown, not judged (the safe fix
    # leaves their unsafe parts as written).
    ("open-mmlab+mmengine", "mmengine/device/utils.py", "get_max_cuda_memory", ["get_max_cuda_memory()"]),
    ("open-mmlab+mmengine", "mmengine/logging/logger.py", "_get_device_id", ["_get_device_id()"]),
    ("open-mmlab+mmengine", "tests/test_optim/test_optimizer/test_optimizer_wrapper.py", "bf16_supported",
     ["bf16_supported()"]),
    ("huggingface+peft", "method_comparison/text_generation_benchmark/utils.py", "get_memory_usage,init_accelerator",
     ["init_accelerator()", "get_memory_usage()[1:]"]),
    ("huggingface+peft", "examples/arrow_multitask/arrow_phi3_mini.py", "set_seed",
     ["(set_seed(0), torch.rand(2), random.random(), np.random.rand())[1:]"]),
    ("huggingface+peft", "tests/testing_utils.py", "temp_seed",
     ["_with(temp_seed(1), lambda: torch.rand(2))", "torch.manual_seed(2) and torch.rand(1)"]),
    ("huggingface+trl", "tests/testing_utils.py", "is_ampere_or_newer", ["is_ampere_or_newer()"]),
    ("pytorch+torchtitan", "torchtitan/tools/utils.py", "has_cuda_capability,has_rocm_capability",
     ["has_cuda_capability(8, 0)", "has_rocm_capability(9, 4)"]),
    ("pytorch+torchtitan", "torchtitan/overrides/helion_rope.py", "_cossin_eligible",
     ["_cossin_eligible(*(torch.zeros(s).to(DEV) for s in [(1, 2, 1, 4), (1, 2, 1, 4), (8, 8)]),"
      " torch.zeros(1, 2, dtype=torch.long).to(DEV))"]),
]

DRIVER = """

import os as _os

if _os.environ.get("JUDGE_EMULATED"):  # the emulated runs: inputs go to the emulated chip (imported so that
    __import__("torch_fl")                # torch fix does not take it for the import it adds)
    DEV = torch.fl.device()
else:
    DEV = torch.device("cpu")


def _show(value):
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), tuple(value.shape), [round(float(v), 5) for v in value.flatten()[:8]],
                value.device.type)
    if isinstance(value, (list, tuple)):
        return type(value)(_show(v) for v in value)
    if isinstance(value, dict):
        return {k: _show(v) for k, v in value.items()}
    if isinstance(value, float):
        return round(value, 5)
    if isinstance(value, (torch.device, torch.dtype, torch.Size)):
        return str(value)
    return value


def _with(cm, fn):
    with cm:
        return fn()


def _grad(fn, x):
    x = x.detach().requires_grad_(True)
    fn(x).backward()
    return x.grad


class _Tokenizer:  # stands in for a Hugging Face tokenizer: one id per word, its length
    def __call__(self, text, return_tensors=None):
        return type("Encoding", (), {"input_ids": torch.tensor([[len(w) for w in text.split()]])})()


class _LM:  # stands in for a model's generate(): every id plus one, on the inputs' device
    def generate(self, input_ids, attention_mask, **kwargs):
        return input_ids * attention_mask + 1


def _migrated():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.tensor([2.0]))

        def forward(self, x):
            return x * self.scale

    gm = torch.fx.symbolic_trace(Net())
    _migrate_cpu_get_attrs_to_cuda(gm)
    return gm.scale


if __name__ == "__main__":
    for _expr in CALLS:
        print(_expr, "->", repr(_show(eval(_expr))))
"""
IMPORTABLE = {"torch", "os", "sys", "time", "math", "random", "gc", "typing", "functools", "contextlib",
              "collections", "itertools", "dataclasses", "warnings", "logging", "copy", "inspect", "re", "json",
              "pathlib", "numpy", "psutil", "transformers", "accelerate", "packaging"}


def extract(mirrors: Path, repo: str, path: str, names: str) -> tuple[str, str]:
    """(commit, program text): the named definitions of `path` at the mirror's HEAD with the imports of the
    module (standard library, torch, numpy, psutil, transformers, accelerate) that bind names they use."""
    git = ["git", "--git-dir", str(mirrors / repo / "repo")]
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    source = subprocess.run([*git, "show", f"HEAD:{path}"], capture_output=True, text=True, check=True).stdout
    tree = ast.parse(source)
    lines = source.splitlines()
    wanted = names.split(",")
    found = {node.name: node for node in tree.body
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in wanted}
    missing = set(wanted) - set(found)
    if missing:
        raise LookupError(f"{repo}:{path}: no top-level {sorted(missing)}")
    parts = []
    for name in wanted:
        node = found[name]
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        parts.append("\n".join(lines[first - 1:node.end_lineno]))
    body = "\n\n\n".join(parts)
    used = {n.id for n in ast.walk(ast.parse(body)) if isinstance(n, ast.Name)} | {"torch"}
    imports = ["from __future__ import annotations"] if any(
        isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in tree.body) else []
    for node in tree.body:
        if isinstance(node, ast.Import):
            keep = [a for a in node.names if a.name.split(".")[0] in IMPORTABLE
                    and (a.asname or a.name.split(".")[0]) in used]
            imports += [f"import {a.name}" + (f" as {a.asname}" if a.asname else "") for a in keep]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module != "__future__" \
                and node.module.split(".")[0] in IMPORTABLE:
            keep = [a for a in node.names if (a.asname or a.name) in used]
            if keep:
                imports.append(f"from {node.module} import " + ", ".join(
                    a.name + (f" as {a.asname}" if a.asname else "") for a in keep))
    if "import torch" not in imports:
        imports.insert(len(imports) and imports[0].startswith("from __future__"), "import torch")
    header = f"# extracted from github.com/{repo.replace('+', '/')} {path} at {commit[:12]}: {names}\n"
    return commit, header + "\n".join(imports) + "\n\n\n" + body + "\n"


def _run(folder: Path, programs: list[str], device: str | None) -> dict[str, dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FL_", "JUDGE_"))}
    env["CUDA_VISIBLE_DEVICES"] = ""
    if device:
        env["FL_DEVICE"] = device
        env["JUDGE_EMULATED"] = "1"
    runner = ROOT / "tests" / "migrate" / "target_runner.py"
    proc = subprocess.run([sys.executable, str(runner), *programs], env=env, cwd=folder, capture_output=True,
                          text=True, timeout=600)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {r["path"]: r for r in results}


def functions(mirrors: str) -> int:
    """Extract, fix (safe), run; print a table and return 1 if any function fails the judge."""
    from torch_fl.migrate.fix import fix_paths
    from torch_fl.migrate.scan import scan_paths

    with tempfile.TemporaryDirectory(prefix="judge-") as tmp:
        original, fixed = Path(tmp) / "original", Path(tmp) / "fixed"
        original.mkdir()
        fixed.mkdir()
        programs = []
        for index, (repo, path, names, calls) in enumerate(FUNCTIONS):
            _, text = extract(Path(mirrors), repo, path, names)
            name = f"f{index:02d}_{repo.split('+')[1]}_{names.split(',')[0]}.py".replace("-", "_")
            text += f"\nCALLS = {calls!r}\n" + DRIVER
            (original / name).write_text(text)
            (fixed / name).write_text(text)
            programs.append(name)
        findings = Counter((Path(f.path).name, f.safety or "-") for f in scan_paths([original]).findings)
        report = fix_paths([fixed], unsafe=False)
        applied = {Path(f.path).name: len(f.applied) for f in report.files}
        unsafe_left = {Path(f.path).name: len(f.skipped_unsafe) for f in report.files}
        not_applied = {Path(f.path).name: f.not_applied for f in report.files}
        before, after = _run(original, programs, None), _run(fixed, programs, None)
        chips = {chip: _run(fixed, programs, chip) for chip in ("emu:npu", "emu:mps")}
        failed: list[str] = []
        untouched = 0
        for name in programs:
            counts = {s: findings[name, s] for s in ("safe", "unsafe", "-") if findings[name, s]}
            b, a = before[name], after[name]
            same = b["stdout"] == a["stdout"] and b["status"] == a["status"]
            row = [f"{name}: findings {counts}, safe fixes applied {applied.get(name, 0)}, "
                   f"unsafe left {unsafe_left.get(name, 0)}"
                   + (f", safe but not applied {not_applied[name]}" if not_applied.get(name) else ""),
                   f"  cpu original: {b['status']}; fixed: {a['status']}; same output: {same}"]
            ok = same or (b["status"].startswith(("AssertionError: Torch not compiled with CUDA",
                                                   "RuntimeError: Torch not compiled with CUDA"))
                          and a["status"] == "ok")
            for chip, runs in chips.items():
                r = runs[name]
                ok = ok and r["status"] == "ok" and not r["cuda_calls"]
                row.append(f"  {chip}: {r['status']}; CUDA calls {r['cuda_calls']}; "
                           f"{r['stdout'].strip().splitlines()[-1][:150] if r['stdout'].strip() else ''}")
            row.append(f"  cpu output: {b['stdout'].strip()[:300]}")
            if not same:
                row.append(f"  cpu output after the fix: {a['stdout'].strip()[:300]}")
            if counts.get("unsafe") or counts.get("-"):
                untouched += 1
                row[0] += "  (unsafe or unfixable findings too: not judged)"
            elif not applied.get(name):
                failed.append(name)
                row[0] += "  <== FAILS THE JUDGE (its safe fixes were not applied)"
            elif not ok:
                failed.append(name)
                row[0] += "  <== FAILS THE JUDGE"
            print("\n".join(row))
        judged = len(programs) - untouched
        print(f"{judged - len(failed)} of {judged} functions with a safe fix pass (same CPU output, or a "
              "CUDA-only original that the fix makes run on the CPU; runs with no CUDA call on emu:npu and "
              f"emu:mps); {untouched} more shown, not judged; failing: {', '.join(failed) or 'none'}")
        return 1 if failed else 0


def main() -> int:
    if len(sys.argv) < 3 or sys.argv[1] not in ("sample", "recall", "functions"):
        sys.exit(__doc__)
    if sys.argv[1] == "sample":
        sample(int(sys.argv[2]), sys.argv[3:])
    elif sys.argv[1] == "recall":
        recall(sys.argv[2:])
    else:
        return functions(sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
