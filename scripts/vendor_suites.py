#!/usr/bin/env python
"""The vendors' own test suites as the judge of the emulated chips.

Runs, unedited, the test files of a pinned commit of each vendor repository under emulation
(``FL_DEVICE=emu:npu`` for Ascend/pytorch and Ascend/op-plugin, ``emu:mlu`` for Cambricon/torch_mlu,
``emu:musa`` for MooreThreads/torch_musa), with only the vendor's test framework loaded beside the emulated
plugin, and sorts every test into one of:

- ``pass``;
- ``as_hardware``: fails (skips) as the hardware would, for a documented reason (multi-card, SoC- or
  CANN-gated, a skip the vendor wrote, an expected failure, a test in the list of tests the vendor's CI
  disables on the chip: Ascend/pytorch's ``test/unsupported_test_cases/.pytorch-disabled-tests.json``, which its
  framework reads from ``DISABLED_TESTS_FILE``, set as its test/README.md says; ``--all-tests`` runs them);
- ``missing_api``: a name of the vendor surface is missing (AttributeError / ImportError /
  ModuleNotFoundError / TypeError on a keyword, on torch_npu / torch.npu names), or a test skips because the
  emulated chip does not say which chip it is;
- ``wrong``: a value assertion failed (a wrong number);
- ``crash``: segfault or other signal, timeout, or ``INTERNAL ASSERT FAILED`` anywhere in the output;
- ``other``: any other exception (an expected vendor error not raised, an op the emulator refuses, ...).

Each test file runs in its own pytest process (``nice -n 10``, ``OMP_NUM_THREADS=1``, a timeout), so a
segfault or a hang is a result, not the end of the run. A small pytest plugin, written next to the run,
records every test's outcome as JSON lines, flushed as it goes (a crash keeps what ran before it).

The vendor code is never copied into this repository: the pinned commit is extracted with ``git archive``
from a local clone or mirror into a work directory (``--work-dir``). Get the clones with e.g.
``git clone --bare https://github.com/Ascend/pytorch MIRRORS/Ascend+pytorch`` and pass ``--mirrors MIRRORS``
(or ``TORCHFL_VENDOR_MIRRORS``), or name one checkout with ``--checkout Ascend/pytorch=PATH``.

How the vendor's framework is found beside the emulation: the emulated ``torch_npu`` is answered by a
meta-path finder (src/torch_fl/routing/emu/plugin.py) as a package whose ``__path__`` is empty. The plugin
of this script appends the extracted ``<checkout>/torch_npu`` directory to that ``__path__`` before the
test module is imported, so ``torch_npu.testing`` (and the few pure-Python helper modules it imports) load
from the vendor's tree, while every name the emulation answers keeps coming from torch-fl (its finder runs
first). Only the framework's files are extracted under ``torch_npu/``, so nothing else of the vendor's
package can be picked up by accident.

Usage:
    python scripts/vendor_suites.py --mirrors /work/.mirror --suite ascend --limit 40 --json out.json
    python scripts/vendor_suites.py --mirrors DIR --suite op-plugin              # every emulated fused op
    python scripts/vendor_suites.py --mirrors DIR --suite mlu --files test/torch_ops/test_abs.py
    python scripts/vendor_suites.py --mirrors DIR --suite all --limit 20 --list  # the selection only
    python scripts/vendor_suites.py --mirrors DIR --suite musa --at HEAD         # torch-fl's last commit
    python scripts/vendor_suites.py --report a.json b.json --markdown            # tables of saved runs

Figures and what they mean for torch-fl: docs/vendor-ops.md, "Vendor test suites as the judge".
"""

from __future__ import annotations

import argparse
import ast
import collections
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NPU_OPS = ROOT / "src" / "torch_fl" / "routing" / "emu" / "npu_ops.py"
MIRRORS_ENV = "TORCHFL_VENDOR_MIRRORS"
CATEGORIES = ("pass", "as_hardware", "missing_api", "wrong", "crash", "other", "environment")
# environment: the test cannot run in this harness whatever the emulator does (a library not installed here:
# torchair, onnxruntime, PyTorch's own test helpers; a file of the vendor's build tree); left out of the share
# The judge's goal (issue 36): this share of each suite passes or fails as the hardware would.
GOAL = 0.90


@dataclass(frozen=True)
class Suite:
    """One vendor test suite: where its tests are, which chip runs them, what its framework needs."""

    name: str
    repo: str  # owner/name on GitHub
    commit: str  # pinned: figures are only comparable on one commit
    device: str  # FL_DEVICE for its tests
    plugin: str  # the vendor's package, emulated by torch-fl
    tests: str  # directory of the test files in the repository
    # files of the vendor's test framework, under the plugin's package (found through its __path__), and
    # the repository that holds them (op-plugin's tests use torch_npu's framework)
    framework: tuple[str, ...] = ()
    framework_repo: str = ""
    deps: tuple[str, ...] = ()  # PyPI packages the framework imports (installed apart with --install-deps)
    doc: str = ""
    # the vendor's list of the tests its CI skips on the chip, in the tests' repository: its framework reads it
    # from DISABLED_TESTS_FILE (Ascend/pytorch test/README.md, "跳过失败用例": export it before running a file)
    disabled_tests: str = ""


# Pinned commits (newest of the default branch, or of the release branch nearest our torch, on 2026-12-04).
REPOS = {
    "Ascend/pytorch": "9e73e708ab9350d203475609f36f8a43f6a0c2ab",  # master, 2026-08-21
    "Ascend/op-plugin": "517f2e7d0f202f38b76310706cb977ca2388ad21",  # master, 2026-08-21
    "Cambricon/torch_mlu": "9e95f972d3bfda0a855f9500aec852664ceecb6a",  # r2.4_develop, 2025-02-18 (newest)
    "MooreThreads/torch_musa": "8b583b3f2fd0d9d3d9e74b9ec588a25d8bed1a30",  # main, 2026-01-19
}

# torch_npu.testing and the pure-Python helpers it imports at module level (path manager, error codes,
# warning filter); the generated _npu_testing_utils.py is rendered from the vendor's template (prepare_npu).
_NPU_FRAMEWORK = ("torch_npu/testing", "torch_npu/utils/_path_manager.py", "torch_npu/utils/_error_code.py",
                  "torch_npu/utils/utils.py", "torch_npu/_init/common/warning_utils.py",
                  "torchnpugen/templates/npu_testing_utils.py", "torchnpugen/codegen_ops_info.py")

SUITES: dict[str, Suite] = {s.name: s for s in (
    Suite("ascend", "Ascend/pytorch", REPOS["Ascend/pytorch"], "emu:npu", "torch_npu", "test",
          _NPU_FRAMEWORK, "Ascend/pytorch", doc="torch_npu's own tests (test/)",
          # (test/get_failed_ut_from_log.py: the versioned lists are for torch 2.10 and 2.11; others take this)
          disabled_tests="test/unsupported_test_cases/.pytorch-disabled-tests.json"),
    Suite("op-plugin", "Ascend/op-plugin", REPOS["Ascend/op-plugin"], "emu:npu", "torch_npu", "test",
          _NPU_FRAMEWORK, "Ascend/pytorch",
          doc="op-plugin's tests of the fused ops torch-fl emulates (routing/emu/npu_ops.py FUSED_OPS)"),
    Suite("mlu", "Cambricon/torch_mlu", REPOS["Cambricon/torch_mlu"], "emu:mlu", "torch_mlu", "test",
          deps=("pandas",), doc="torch_mlu's tests (test/; their framework is test/common_utils.py)"),
    Suite("musa", "MooreThreads/torch_musa", REPOS["MooreThreads/torch_musa"], "emu:musa", "torch_musa",
          "tests/unittest", ("torch_musa/testing",), "MooreThreads/torch_musa", deps=("cloudpickle",),
          doc="torch_musa's unit tests (tests/unittest; framework torch_musa.testing)"),
)}

# Whole files left out, with the reason: they need more than one chip, or build against the vendor's SDK.
EXCLUDED_DIRS = {"distributed": "multi-card (distributed)", "multiprocessing": "multi-process",
                 "cpp_extensions": "builds C++ against the vendor SDK",
                 "cpp_extension": "builds C++ against the vendor SDK", "cpp": "C++ tests"}
EXCLUDED_TEXT = (("init_process_group", "multi-card (init_process_group)"),
                 ("mp.spawn(", "multi-process (mp.spawn)"))

# op-plugin names a fused op's test after another name in a few cases
OP_TEST_ALIASES = {"fusion_attention": ("flash_attention",), "swiglu": ("swi_glu",)}


class JudgeError(Exception):
    """A problem the user must fix before anything runs (absent checkout, missing commit, ...)."""


# --------------------------------------------------------------------------------------------------------
# checkouts
# --------------------------------------------------------------------------------------------------------
def find_checkout(repo: str, mirrors: str | None, checkouts: dict[str, str]) -> Path:
    """The local git directory (bare mirror or work tree) holding `repo`, or a JudgeError saying how to get it."""
    if repo in checkouts:
        candidates = [Path(checkouts[repo])]
    elif mirrors:
        owner, name = repo.split("/")
        base = Path(mirrors)
        candidates = [base / f"{owner}+{name}" / "repo", base / f"{owner}+{name}", base / name,
                      base / f"{name}.git"]
    else:
        candidates = []
    for path in candidates:
        if _is_git_dir(path):
            return path
    looked = ", ".join(str(p) for p in candidates) or "nowhere (no --mirrors, no $" + MIRRORS_ENV + ")"
    raise JudgeError(
        f"no checkout of {repo} (looked in {looked}).\n"
        f"  Get one: git clone --bare https://github.com/{repo} MIRRORS/{repo.replace('/', '+')}\n"
        f"  then pass --mirrors MIRRORS (or set {MIRRORS_ENV}), or --checkout {repo}=PATH for an existing clone.\n"
        f"  The pinned commit {REPOS.get(repo, '?')} must be in it (git -C PATH fetch origin if not).")


def _is_git_dir(path: Path) -> bool:
    if not path.is_dir():
        return False
    done = subprocess.run(["git", "-C", str(path), "rev-parse", "--git-dir"], capture_output=True, text=True)
    return done.returncode == 0


def extract(git_dir: Path, repo: str, commit: str, paths: Iterable[str], work: Path) -> Path:
    """`paths` of `commit` in a fresh directory under `work` (kept between runs: keyed by commit and paths)."""
    paths = sorted(set(paths))
    key = hashlib.sha1("\n".join(paths).encode()).hexdigest()[:8]
    dest = work / f"{repo.replace('/', '+')}-{commit[:12]}-{key}"
    if (dest / ".complete").is_file():
        return dest
    if dest.exists():
        shutil.rmtree(dest)  # a half-extracted tree from an interrupted run
    known = subprocess.run(["git", "-C", str(git_dir), "cat-file", "-e", f"{commit}^{{commit}}"],
                           capture_output=True, text=True)
    if known.returncode != 0:
        raise JudgeError(f"{git_dir} has no commit {commit} of {repo}: run `git -C {git_dir} fetch origin` "
                         f"(or clone https://github.com/{repo} again)")
    dest.mkdir(parents=True)
    proc = subprocess.Popen(["git", "-C", str(git_dir), "archive", "--format=tar", commit, "--", *paths],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
        tar.extractall(dest, filter="data")  # (the data filter refuses links and paths out of dest)
    if proc.wait() != 0:
        raise JudgeError(f"git archive {commit} {' '.join(paths)} failed in {git_dir}: "
                         f"{proc.stderr.read().decode(errors='replace') if proc.stderr else ''}")
    (dest / ".complete").write_text(commit)
    return dest


def prepare_npu(framework_root: Path, skips_yaml: str) -> str:
    """torch_npu.testing imports a module its build generates, _npu_testing_utils.py: the vendor's template
    filled with the OpInfo tests the vendor knows fail on the NPU (op-plugin's
    test/test_v<torch>_ops/unsupported_ops_info.yaml), as DecorateInfo skips. Rendered here the way the
    vendor's generator (torchnpugen/codegen_ops_info.py, whose class table is read, not run: its module
    needs a full build tree) renders it. Returns a note when the list is not available ('' otherwise)."""
    import yaml  # (PyYAML: a torch dependency of the build, present wherever torchgen is)

    target = framework_root / "torch_npu" / "testing" / "_npu_testing_utils.py"
    template = (framework_root / "torchnpugen" / "templates" / "npu_testing_utils.py").read_text()
    generator = ast.parse((framework_root / "torchnpugen" / "codegen_ops_info.py").read_text())
    class2test: dict[str, list[str]] = {}
    for node in generator.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "class2test" for t in node.targets):
            class2test = ast.literal_eval(node.value)
    owner = {func: cls for cls, funcs in class2test.items() for func in funcs}
    summary = yaml.safe_load(skips_yaml) if skips_yaml else {}
    entries = []
    for op, funcs in (summary or {}).items():
        decorators = []
        for func, dtypes in (funcs or {}).items():
            if func not in owner:
                continue  # (the vendor's generator raises here; a test it does not know is not skipped)
            for dtype in dtypes or [None]:
                extra = f", dtypes=(torch.{dtype},)" if dtype else ""
                decorators.append(f"\nDecorateInfo(unittest.skip(\"npu test skipped!\"), '{owner[func]}', "
                                  f"'{func}'{extra})")
        entries.append(f"\n'{op}': [{', '.join(decorators)}]")
    target.write_text(template.replace("${skip_detail}", ", ".join(entries)))
    return "" if skips_yaml else "no OpInfo skip list (op-plugin checkout absent): OpInfo tests run whole"


# --------------------------------------------------------------------------------------------------------
# selection
# --------------------------------------------------------------------------------------------------------
def fused_ops(npu_ops: Path = NPU_OPS) -> list[str]:
    """The vendor fused ops torch-fl emulates: the keys of npu_ops.FUSED_OPS (read with ast: no torch import)."""
    tree = ast.parse(npu_ops.read_text())
    for node in ast.walk(tree):
        target = getattr(node, "target", None)
        if isinstance(node, ast.AnnAssign) and isinstance(target, ast.Name) and target.id == "FUSED_OPS":
            assert isinstance(node.value, ast.Dict)
            return [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
    raise JudgeError(f"FUSED_OPS not found in {npu_ops}")


def op_test_matches(path: str, text: str, ops: Iterable[str]) -> list[str]:
    """The fused ops whose own test `path` is: it calls the op, and its name is the op's (npu_rms_norm ->
    test_npu_rms_norm.py, test_npu_rms_norm_backward.py; not the quantized variants nor the many op tests
    that merely call npu_format_cast)."""
    stem = Path(path).stem.removeprefix("test_").removeprefix("npu_")
    stem = re.sub(r"_(backward|grad|out|v\d+)$", "", re.sub(r"_(backward|grad)$", "", stem))
    found = []
    for op in ops:
        base = re.sub(r"_(backward|grad)$", "", op.removeprefix("npu_"))
        names = (base, *OP_TEST_ALIASES.get(base, ()))
        called = re.search(rf"(torch_npu|ops\.npu)\.{re.escape(op)}\(", text)
        if called and stem in names:
            found.append(op)
    return found


def excluded_reason(rel: str, text: str) -> str:
    """Why a whole file is left out ('' when it runs): it needs several chips or the vendor's SDK."""
    for part in Path(rel).parts[:-1]:
        if part in EXCLUDED_DIRS:
            return EXCLUDED_DIRS[part]
    for needle, reason in EXCLUDED_TEXT:
        if needle in text:
            return reason
    return ""


def spread(files: list[str], tests: str = "") -> list[str]:
    """Round-robin over the top directories of the suite (npu/, nn/, profiler/, ...: not the leaf directories,
    which would over-sample a deep tree such as profiler/analysis/*), a stable pseudo-random order inside
    each, so that the first N files of the list are a sample spread over the whole suite."""
    groups: dict[str, list[str]] = collections.defaultdict(list)
    for rel in files:
        parts = Path(rel).relative_to(tests).parts if tests else Path(rel).parts
        groups[parts[0] if len(parts) > 1 else "."].append(rel)
    for items in groups.values():
        items.sort(key=lambda r: hashlib.sha1(r.encode()).hexdigest())
    order, queues = [], [groups[k] for k in sorted(groups)]
    while any(queues):
        for queue in queues:
            if queue:
                order.append(queue.pop(0))
    return order


def select(suite: Suite, root: Path, files: list[str] | None, limit: int | None,
           fl_src: Path | None = None) -> tuple[list[str], list[dict]]:
    """The test files to run (paths relative to the extracted repository) and those left out, with why."""
    tests_dir = root / suite.tests
    all_files = sorted(str(p.relative_to(root)) for p in tests_dir.rglob("test_*.py"))
    if files:
        chosen = []
        for pattern in files:
            hits = [f for f in all_files if f == pattern or Path(f).match(pattern)
                    or f == f"{suite.tests}/{pattern}"]
            if not hits:
                raise JudgeError(f"--files {pattern}: no test file of {suite.name} matches "
                                 f"(paths are relative to the repository, e.g. {all_files[0] if all_files else '?'})")
            chosen += [h for h in hits if h not in chosen]
        return chosen[:limit] if limit else chosen, []
    npu_ops = (fl_src / NPU_OPS.relative_to(ROOT / "src")) if fl_src else NPU_OPS
    ops = fused_ops(npu_ops) if suite.name == "op-plugin" else []
    chosen, excluded = [], []
    for rel in all_files:
        text = (root / rel).read_text(errors="replace")
        if ops and not op_test_matches(rel, text, ops):
            continue  # (op-plugin: only the tests of the fused ops torch-fl emulates)
        reason = excluded_reason(rel, text)
        if reason:
            excluded.append({"file": rel, "reason": reason})
        else:
            chosen.append(rel)
    chosen = spread(chosen, suite.tests)
    return (chosen[:limit] if limit else chosen), excluded


def static_test_count(text: str) -> int:
    """Tests a file defines, counted in its source (a lower bound where tests are generated): the weight of a
    file that stops before its tests report."""
    return max(1, len(re.findall(r"^\s*def test\w*\s*\(", text, re.M)))


# --------------------------------------------------------------------------------------------------------
# the pytest plugin of each run (written into the work directory, loaded with -p)
# --------------------------------------------------------------------------------------------------------
PLUGIN_NAME = "torchfl_vendor_judge"
PLUGIN_SOURCE = '''"""Written by torch-fl scripts/vendor_suites.py: records each test's outcome, lets the vendor's test
framework be found beside the emulated plugin package."""
import importlib
import importlib.util
import json
import os
import sys
import traceback

_OUT = open(os.environ["TORCHFL_JUDGE_OUT"], "a", encoding="utf-8")
_MARK = "INTERNAL ASSERT FAILED"


def _write(record):
    _OUT.write(json.dumps(record) + "\\n")
    _OUT.flush()  # a crash later in the file keeps this line


def _extend(package, directory):
    # the emulated plugin package has an empty __path__: the vendor's framework directory joins it, so its
    # submodules the emulation does not answer (torch_npu.testing) are found by the path finder, while the
    # names it answers keep coming from the emulation (its finder runs first)
    try:
        module = importlib.import_module(package)
    except Exception as exc:
        _write({"kind": "plugin", "exc_type": type(exc).__name__, "message": str(exc)[:2000],
                "text": traceback.format_exc()[-4000:]})
        return
    path = getattr(module, "__path__", None)
    if path is None:
        _write({"kind": "plugin", "exc_type": "AttributeError", "text": "",
                "message": f"module '{package}' has no attribute '__path__' (the emulation made it a module)"})
        return
    if directory not in path:
        path.append(directory)
    # a subpackage the emulation answers itself (torch_npu.utils, one day) gets the framework's files too
    for sub in sorted(os.listdir(directory)):
        inner = os.path.join(directory, sub)
        if os.path.isdir(inner) and sub.isidentifier():
            try:
                spec = importlib.util.find_spec(f"{package}.{sub}")
            except Exception:
                spec = None
            locations = list(getattr(spec, "submodule_search_locations", None) or [])
            if spec is not None and spec.loader is not None and inner not in locations \
                    and not (spec.origin or "").startswith(directory):
                _extend(f"{package}.{sub}", inner)


for _package, _dirs in json.loads(os.environ.get("TORCHFL_JUDGE_PATHS", "{}")).items():
    for _dir in _dirs:
        _extend(_package, _dir)
# the framework's own PyPI dependencies, installed apart: last on sys.path, so they never shadow the venv's
sys.path.extend(p for p in os.environ.get("TORCHFL_JUDGE_DEPS", "").split(os.pathsep) if p)


def _failure(report):
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    text = str(longrepr) if longrepr is not None else ""
    sections = "\\n".join(content for _, content in getattr(report, "sections", []))
    record = {"text": text[-4000:], "internal_assert": _MARK in text or _MARK in sections}
    chain = getattr(longrepr, "chain", None) or []
    if len(chain) > 1 and chain[0][1] is not None:  # the first exception of a chain: the cause
        record["cause"] = (chain[0][1].message or "")[:2000]
    if crash is not None:
        message = crash.message or ""
        exc_type, _, rest = message.partition(":")
        if " " in exc_type.strip() or not rest:
            exc_type, rest = "", message
        record.update(exc_type=exc_type.strip().rsplit(".", 1)[-1], message=rest.strip()[:2000],
                      crash_path=str(crash.path))
    elif isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, "Skipped: why")
        record.update(exc_type="Skipped", message=str(longrepr[2]).removeprefix("Skipped: ")[:2000])
    else:
        record.update(exc_type="", message=text.strip().splitlines()[-1][:2000] if text.strip() else "")
    return record


def pytest_runtest_logreport(report):
    outcome = report.outcome
    if hasattr(report, "wasxfail"):
        outcome = "xfailed" if outcome == "skipped" else "xpassed"
    record = {"kind": "test", "nodeid": report.nodeid, "when": report.when, "outcome": outcome,
              "duration": round(report.duration, 3)}
    if outcome in ("failed", "skipped", "xfailed"):
        record.update(_failure(report))
    else:
        sections = "\\n".join(content for _, content in getattr(report, "sections", []))
        if _MARK in sections:  # an assert printed by a test that still passed counts too
            record.update(internal_assert=True, text=sections[-4000:])
    _write(record)


def pytest_collectreport(report):
    if report.outcome == "failed":
        record = {"kind": "collect", "nodeid": report.nodeid, "outcome": "failed"}
        record.update(_failure(report))
        _write(record)


def pytest_collection_finish(session):
    # the vendor runs each file as `python test_x.py`: PyTorch's run_tests() then parses its command line,
    # which sets the JIT executor its JIT tests read (GRAPH_EXECUTOR); pytest never calls it
    common = sys.modules.get("torch.testing._internal.common_utils")
    if common is not None and getattr(common, "GRAPH_EXECUTOR", 0) is None:
        argv, sys.argv = sys.argv, sys.argv[:1]
        try:
            common.parse_cmd_line_args()
        finally:
            sys.argv = argv


def pytest_sessionfinish(session, exitstatus):
    _write({"kind": "session", "exitstatus": int(exitstatus)})
'''


# --------------------------------------------------------------------------------------------------------
# classification (pure functions of the recorded outcomes: tests/scripts/test_vendor_suites.py checks them)
# --------------------------------------------------------------------------------------------------------
VENDOR_PACKAGES = ("torch_npu", "torch_mlu", "torch_musa")
VENDOR_TOKEN = re.compile(r"torch_npu|torch_mlu|torch_musa|torch\.(npu|mlu|musa)\b|\b_?(npu|mlu|musa)\w*", re.I)
MISSING_TYPES = {"AttributeError", "ImportError", "ModuleNotFoundError"}
KEYWORD_ERROR = re.compile(r"unexpected keyword argument|positional argument|required (positional|keyword)"
                           r"|takes (no|\d+) (positional |keyword )?arguments?")
# (pytest.raises(match=...)'s "Regex pattern did not match": the error was raised, its text is not the vendor's:
# an error-text check, never a number)
NOT_RAISED = re.compile(r"not raised|Regex didn't match|Regex pattern did not match|does not match|warning not triggered|"
                        r"(was|were) not (raised|triggered)|did not raise", re.I)
# torch_npu's trans_contiguous tests profile a copy and assert that CANN's own copy kernels ran
# (torch_npu/testing/common_utils.py check_operators_in_prof: 'contiguous_d_AsStrided', 'aclnnInplaceCopy' among
# the profile's op names, "Error operators called!" otherwise): names of the chip's kernels, which an emulator
# running PyTorch's copy cannot have; the copied values are checked by the same tests' other assertions
KERNEL_NAMES = re.compile(r"Error operators called!")
# the test reads a file of the vendor's source or build tree, or builds C++ against the vendor's SDK
# (GRAPH_EXECUTOR: PyTorch's JIT tests set it in run_tests()'s argument parsing, which pytest does not run)
# (a test the vendor's framework runs again in a fresh interpreter, `python -m torch_musa.testing.common_utils`
# of spawn_isolated_test: the framework joins the plugin's __path__ in the test's own process only)
ENVIRONMENT = re.compile(r"^FileNotFoundError:|No such file or directory|Failed to build|cpp_extension|ninja"
                         r"|GRAPH_EXECUTOR must be set|No module named 'torch_(npu|mlu|musa)\.testing'", re.I)
# where a test's own value check raises: unittest's and torch's assert methods, the vendor's test case classes,
# the test file itself
ASSERTING = re.compile(r"unittest/case\.py$|testing/_comparison\.py$|testing/_internal/common_utils\.py$"
                       r"|/test_[^/]*\.py$|/(common_utils|testcase|base_test_tool)\.py$")
VALUE_CHECK = re.compile(r"expect\w*:.*result\w*:|^(result|shape|dtype) error", re.I)
MULTI_CARD = re.compile(r"multi|at least \d|\b[2-9]\d* ?(npu|mlu|musa|gpu|device|card)s?\b|device_count|"
                        r"world[_ ]size|lt_x_gpu|more than one", re.I)
# torch_npu.testing's skip of a test in the vendor's disabled-tests list (Suite.disabled_tests)
VENDOR_DISABLED = "this test is disabled now"
SOC_GATE = re.compile(r"current device is (?P<device>.*?)\.?$", re.I)
UNAVAILABLE = re.compile(r"(npu|mlu|musa)\w* (is )?not available|no (npu|mlu|musa)|requires? (an? )?(npu|mlu|musa)"
                         r"|not support(ed)? on (this|the) (device|soc|chip)|get_soc_version|soc version", re.I)
EMULATED_NAME = re.compile(r"emulated|torch-fl|^(npu|mlu|musa)\b|^$", re.I)


def normalize(message: str, width: int = 140) -> str:
    """The first line of a message with its numbers, addresses and tensor contents masked: the group key."""
    lines = [part.strip() for part in message.strip().splitlines() if part.strip()]
    line = lines[0] if lines else ""
    if line.endswith(":") and len(lines) > 1:  # ("backend='inductor' raised:" says nothing without its cause)
        line = f"{line} {lines[1]}"
    line = re.sub(r"0x[0-9a-fA-F]+", "0x…", line)
    line = re.sub(r"aten::[\w.]+", "aten::<op>", line)  # (one group per cause, not per op)
    line = re.sub(r"tensor\(\[.*", "tensor(…)", line)
    line = re.sub(r"(?<![\w.])\d+(\.\d+)?(e-?\d+)?(?!x…)", "N", line)
    return line[:width]


def classify(record: dict[str, Any]) -> tuple[str, str]:
    """(category, group) of one recorded outcome: a test, a collection error, or a file-level event
    ('signal' with rc, 'timeout', 'internal_assert' seen in the process output, 'plugin' error)."""
    kind = record.get("kind", "test")
    if kind == "signal":
        rc = int(record.get("rc", 0))
        try:
            name = signal.Signals(-rc if rc < 0 else rc - 128).name
        except ValueError:
            name = f"exit {rc}"
        return "crash", f"process killed by {name}"
    if kind == "timeout":
        return "crash", f"timeout after {record.get('seconds', '?')} s (hang or too slow)"
    if kind == "exit":
        return "other", f"pytest stopped with exit status {record.get('rc')} before reporting the file's tests"
    if record.get("internal_assert") or "INTERNAL ASSERT FAILED" in record.get("message", ""):
        line = record["internal_assert"] if isinstance(record.get("internal_assert"), str) else ""
        text = "\n".join((line, record.get("text", ""), record.get("message", "")))
        where = ASSERT_AT.search(text)
        if not where:
            return "crash", "PyTorch INTERNAL ASSERT FAILED"
        return "crash", f"PyTorch INTERNAL ASSERT FAILED: {where.group(1).strip()} ({Path(where.group(2)).name})"
    outcome = record.get("outcome", "failed")
    if outcome in ("passed", "xpassed"):
        return "pass", ""
    exc_type, message = _exception(record)
    if outcome == "xfailed":
        return "as_hardware", "expected failure (the vendor marks it xfail)"
    if outcome == "skipped":
        return _classify_skip(message)
    key = f"{exc_type}: {normalize(message)}" if exc_type else normalize(message)
    for pattern, reason in HOST_FAILURES:
        if pattern.search(record.get("nodeid", "")):
            return "environment", f"fails on the host's torch without torch-fl too: {reason}"
    for pattern, reason in EMULATION_LIMITS:
        if pattern.search(record.get("nodeid", "")):
            return "other", f"a limit of the emulation, not a value: {reason}"
    if exc_type in MISSING_TYPES:
        missing = re.search(r"No module named '([\w.]+)'|cannot import name '\w+' from '([\w.]+)'", message)
        module = next((g for g in missing.groups() if g), "") if missing else ""
        if module and module.split(".")[0] not in VENDOR_PACKAGES:
            return "environment", key  # a library the test needs is not installed here
        if module or VENDOR_TOKEN.search(message):
            return "missing_api", key
        return "other", key
    if exc_type == "TypeError" and KEYWORD_ERROR.search(message) and (
            VENDOR_TOKEN.search(message) or "torch_fl" in record.get("crash_path", "")):
        return "missing_api", key
    if exc_type != "AssertionError" and VALUE_CHECK.search(message):
        return "wrong", key  # the vendor's own value check, raised as another exception type
    if ENVIRONMENT.search(f"{exc_type}: {message}"):
        return "environment", key
    if exc_type == "AssertionError":
        if NOT_RAISED.search(message):
            return "other", f"expected vendor error/warning not raised: {key}"
        if KERNEL_NAMES.search(message):
            return "other", f"the chip's kernel names absent from the profile, not a value: {key}"
        where = record.get("crash_path", "")
        if where and not ASSERTING.search(where.replace(os.sep, "/")):
            # an assert inside library code (torch.cuda's 'not compiled with CUDA'), not the test's check
            return "other", f"{key} (raised in {Path(where).name})"
        return "wrong", key
    return "other", key


# Tests that touch no device and fail the same way under the installed torch with no torch-fl loaded (checked by
# running the vendor's file with plain pytest, TORCH_DEVICE_BACKEND_AUTOLOAD=0): their expectations were written for
# another PyTorch release, so they say nothing of the emulation. (node id pattern, reason)
HOST_FAILURES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"tests/unittest/profiler/test_memory_profiler\.py::TestMemoryProfilerE2E::test_categories_e2e_"
                r"(sequential|simple)_(module_)?fwd_bwd"),
     "torch_musa's copy of PyTorch's memory-profiler test expects the second detach of a gradient to be '???'; "
     "torch 2.13 labels it GRADIENT (CPU tensors only)"),
    (re.compile(r"test/storage/test_storage\.py::Storage::test_storage_exception$"),
     "its first check expects torch 2.4's 'Storage device not recognized: cuda' from torch.UntypedStorage(device="
     "'cuda'); torch 2.13's CPU build raises torch.cuda's AssertionError 'Torch not compiled with CUDA enabled' "
     "(its other six checks pass on the emulated chip)"),
)

# Files whose own work takes longer than the default timeout on one host core whatever the emulator does (measured
# with the same work on plain CPU tensors, no torch-fl): (suite, file) -> (seconds the judge gives it, why). A
# timeout is a crash; these would time out on the host alone, so their bound is their measured need.
SLOW_FILES: dict[tuple[str, str], tuple[float, str]] = {
    ("mlu", "test/optimizer/test_torch_fused_adam.py"): (
        1200.0, "test_network trains two 45M-parameter ModelLinear copies 180 steps (2 scalers x 3 option sets x 30) "
        "and compares every weight and gradient with assert_close each step: ~3.3 s a step on one core with plain "
        "CPU tensors (assert_close 2.1 s, two forward/backward 0.7 s, the two Adam steps 0.6 s), the emulated mlu "
        "the same (3.0 s); ~10 minutes for that test alone"),
    ("musa", "tests/unittest/graph/test_musa_graph.py"): (
        180.0, "41 SGD steps of a 42M-parameter MLP (batch 64; captured in a graph and replayed, then eagerly): 14.4 s "
        "of one core with plain CPU tensors, 12.5 s on the emulated musa, plus ~10 s of start-up; 27 s alone, 49 s "
        "and once over 60 s on the shared machine"),
}

# Tests whose check fails for what the emulated chip is (device tensors are instances of a Python subclass of
# torch.Tensor), not for a value it computes: node id pattern, reason. Counted as other, never as wrong numbers.
EMULATION_LIMITS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"test/torch/test_complex\.py::TestComplexTensor::test_complex_contiguous$"),
     "torch_mlu's test helper to_non_dense() converts only tensors whose type() is torch.Tensor (common_utils.py: "
     "'if not type(data) == torch.Tensor'), so it leaves the device tensor dense while the host one becomes "
     "non-dense, and the strides the test compares differ; the values are equal"),
)

# "<condition> INTERNAL ASSERT FAILED at "<file>":<line>": the condition and the file name the group
ASSERT_AT = re.compile(r"(?:callback: |^|\s)([^\s:][^:\n]*?) INTERNAL ASSERT FAILED at \"?([^\"\s:]+)", re.M)
WRAPPER = re.compile(r"^Error testing |Caused by sample input|^Comparing")
_RAISED = re.compile(r"^(?:E\s+)?([A-Za-z_][\w.]*(?:Error|Exception|Failed|Exit|Interrupt)):\s*(.*)$", re.M)


def _exception(record: dict[str, Any]) -> tuple[str, str]:
    """(exception type, message) of a failure; a collection error has no crash line, so its last 'E   X: msg'
    line says it."""
    exc_type, message = record.get("exc_type", ""), record.get("message", "")
    cause = record.get("cause", "")
    if cause and WRAPPER.search(message):
        # PyTorch's OpInfo tests wrap the failure ('Error testing addmm function variant'): group by its cause
        name, _, rest = cause.partition(":")
        if rest and " " not in name.strip():
            return name.strip().rsplit(".", 1)[-1], rest.strip()
    if exc_type:
        return exc_type, message
    found = _RAISED.findall(record.get("text", "") or message)
    if found:
        name, rest = found[-1]
        return name.rsplit(".", 1)[-1], rest
    return "", message


def _classify_skip(reason: str) -> tuple[str, str]:
    if reason.strip() == VENDOR_DISABLED:
        return "as_hardware", "disabled by the vendor's CI list (DISABLED_TESTS_FILE)"
    gate = SOC_GATE.search(reason.strip())
    if gate:
        device = gate.group("device").strip()
        if EMULATED_NAME.search(device):
            # on the chip it claims to be the test would run: the emulated chip does not say which SoC it is
            return "missing_api", f"SoC-gated skip: device name '{normalize(device, 40)}' is not a chip name"
        return "as_hardware", f"SoC/version-gated skip: {normalize(reason)}"
    if MULTI_CARD.search(reason):
        return "as_hardware", f"multi-card skip: {normalize(reason)}"
    if UNAVAILABLE.search(reason):
        return "missing_api", f"skip on availability/identity: {normalize(reason)}"
    return "as_hardware", f"vendor skip: {normalize(reason)}"


def merge_tests(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One outcome per test: its first report that is not a pass (setup error or skip, call failure, teardown
    error), else its pass; file-level records are kept as they are."""
    by_id: dict[str, dict[str, Any]] = {}
    others = []
    for rec in records:
        if rec.get("kind", "test") != "test":
            others.append(rec)
            continue
        old = by_id.get(rec["nodeid"])
        if old is None or (old.get("outcome") in ("passed", "xpassed") and rec.get("outcome") != "passed"):
            by_id[rec["nodeid"]] = rec
    return [*by_id.values(), *others]


def file_records(records: list[dict[str, Any]], rc: int | None, timed_out: bool, seconds: float, output: str,
                 static: int) -> list[dict[str, Any]]:
    """A file's outcomes with its file-level events added, each with a weight (tests it stands for): a file
    that crashes, times out or fails to import counts the tests it defines that never reported."""
    out = merge_tests(records)
    reported = sum(1 for r in out if r.get("kind", "test") == "test")
    finished = any(r.get("kind") == "session" for r in records)
    out = [r for r in out if r.get("kind") != "session"]
    unreported = max(1, static - reported)
    for rec in out:
        rec["weight"] = unreported if rec.get("kind") == "collect" else 1
    if timed_out:
        out.append({"kind": "timeout", "seconds": round(seconds), "weight": unreported})
    elif rc is not None and (rc < 0 or rc > 128):
        out.append({"kind": "signal", "rc": rc, "weight": unreported})
    elif not finished and rc not in (None, 0, 1, 5) and not any(r.get("kind") == "collect" for r in out):
        out.append({"kind": "exit", "rc": rc, "weight": unreported})
    marks = [line for line in output.splitlines() if "INTERNAL ASSERT FAILED" in line]
    for rec in out:  # (a flag from captured output: the process log names the assert)
        if rec.get("internal_assert") is True and marks:
            rec["internal_assert"] = marks[0][:500]
    if marks and not any(r.get("internal_assert") for r in out):
        where = re.search(r".*INTERNAL ASSERT FAILED.*", output)
        out.append({"kind": "test", "outcome": "failed", "nodeid": "(process output)", "internal_assert": True,
                    "message": where.group(0)[:500] if where else "", "text": "", "weight": 1})
    for rec in out:
        rec["category"], rec["group"] = classify(rec)
    return out


# --------------------------------------------------------------------------------------------------------
# running
# --------------------------------------------------------------------------------------------------------
@dataclass
class Setup:
    suite: Suite
    root: Path  # the extracted tests' repository
    paths: dict[str, list[str]]  # package -> framework directories to add to its __path__
    work: Path
    deps: Path | None
    vendor_disabled: bool = True  # the vendor's disabled-tests list applies, as on its CI (--all-tests: not)
    fl_src: Path | None = None  # torch-fl's src/ at the measured commit (--at), else the installed one
    files: list[str] = field(default_factory=list)
    excluded: list[dict] = field(default_factory=list)


def run_file(setup: Setup, rel: str, timeout: float, select: str | None = None) -> dict[str, Any]:
    """Run one test file in its own pytest process; its outcomes, classified. `select`: a pytest -k
    expression (some tests of a slow OpInfo file, measured in minutes rather than the whole file)."""
    suite, root = setup.suite, setup.root
    tag = hashlib.sha1(rel.encode()).hexdigest()[:10]
    out_path = setup.work / "results" / suite.name / f"{tag}.jsonl"
    log_path = out_path.with_suffix(".log")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.unlink(missing_ok=True)
    ini = setup.work / "pytest.ini"  # an empty ini of ours: no project's pytest settings apply
    ini.write_text("[pytest]\n")
    pythonpath = [str(setup.work / "plugin")] + ([str(setup.fl_src)] if setup.fl_src else [])
    env = {**os.environ, "FL_DEVICE": suite.device, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONFAULTHANDLER": "1", "TORCHFL_JUDGE_OUT": str(out_path),
           "TORCHFL_JUDGE_PATHS": json.dumps(setup.paths), "TORCHFL_JUDGE_DEPS": str(setup.deps or ""),
           "PYTHONPATH": os.pathsep.join(pythonpath + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    env.pop("DISABLED_TESTS_FILE", None)
    if suite.disabled_tests and setup.vendor_disabled:
        env["DISABLED_TESTS_FILE"] = str(root / suite.disabled_tests)
    cmd = ["nice", "-n", "10", sys.executable, "-m", "pytest", str(root / rel), "-p", "no:cacheprovider",
           "-p", PLUGIN_NAME, "-c", str(ini), "--rootdir", str(root), "-q", "--no-header", "-rN",
           "--tb=short", "-W", "ignore::DeprecationWarning"] + (["-k", select] if select else [])
    start = time.monotonic()
    timed_out = False
    with open(log_path, "w") as log:
        # cwd: the test's own directory, as its CI runs it (files read data beside themselves)
        proc = subprocess.Popen(cmd, cwd=(root / rel).parent, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)  # the whole group: pytest and what it started
            rc = proc.wait()
    seconds = time.monotonic() - start
    output = log_path.read_text(errors="replace")
    records = [json.loads(line) for line in out_path.read_text().splitlines() if line.strip()] \
        if out_path.exists() else []
    # (with -k the file's own count says nothing of how many were selected: a stop counts as one test)
    static = 1 if select else static_test_count((root / rel).read_text(errors="replace"))
    tests = file_records(records, rc, timed_out, seconds, output, static)
    res = {"file": rel, "rc": rc, "timed_out": timed_out, "seconds": round(seconds, 1), "log": str(log_path),
           "tests": tests}
    return {**res, "select": select} if select else res


def prepare(suite: Suite, args: argparse.Namespace, checkouts: dict[str, str]) -> Setup:
    """Extract the suite's tests and its framework; check the framework's dependencies."""
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    tests_git = find_checkout(suite.repo, args.mirrors, checkouts)
    paths = [suite.tests]
    if suite.framework_repo == suite.repo:
        paths += suite.framework
    root = extract(tests_git, suite.repo, suite.commit, paths, work)
    framework_root = root
    if suite.framework_repo and suite.framework_repo != suite.repo:
        fw_git = find_checkout(suite.framework_repo, args.mirrors, checkouts)
        framework_root = extract(fw_git, suite.framework_repo, REPOS[suite.framework_repo], suite.framework, work)
    if suite.plugin == "torch_npu":
        note = prepare_npu(framework_root, npu_skip_list(args.mirrors, checkouts, work))
        if note:
            print(f"vendor_suites: {suite.name}: {note}", file=sys.stderr)
    plugin_paths = {suite.plugin: [str(framework_root / suite.plugin)]} if suite.framework else {}
    (work / "plugin").mkdir(exist_ok=True)
    (work / "plugin" / f"{PLUGIN_NAME}.py").write_text(PLUGIN_SOURCE)
    deps = ensure_deps(suite, work, args.install_deps)
    return Setup(suite, root, plugin_paths, work, deps)


def npu_skip_list(mirrors: str | None, checkouts: dict[str, str], work: Path) -> str:
    """op-plugin's list of the OpInfo tests that fail on the NPU for this torch ('' without the checkout)."""
    from importlib.metadata import version

    major, minor = version("torch").split(".")[:2]
    path = f"test/test_v{major}r{minor}_ops/unsupported_ops_info.yaml"
    try:
        git_dir = find_checkout("Ascend/op-plugin", mirrors, checkouts)
    except JudgeError:
        return ""
    root = extract(git_dir, "Ascend/op-plugin", REPOS["Ascend/op-plugin"], [path], work)
    return (root / path).read_text()


def ensure_deps(suite: Suite, work: Path, install: bool) -> Path | None:
    """The framework's PyPI dependencies, in a directory of their own (the project's venv stays as it is)."""
    deps = work / f"deps-py{sys.version_info.major}{sys.version_info.minor}"
    probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 1)"
    env = {**os.environ, "PYTHONPATH": str(deps)}
    missing = [d for d in suite.deps
               if subprocess.run([sys.executable, "-c", probe, d], env=env).returncode != 0]
    if missing and not install:
        raise JudgeError(f"{suite.name}: the vendor's test framework imports {', '.join(missing)}, not installed: "
                         f"rerun with --install-deps (pip install --target {deps}), or install them yourself")
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(deps), *missing], check=True)
    return deps if deps.is_dir() else None


def judged(counts: dict[str, int]) -> float:
    """The share that passes or fails as the hardware would, of the tests this harness can run."""
    runnable = sum(counts.values()) - counts["environment"]
    return (counts["pass"] + counts["as_hardware"]) / runnable if runnable else 0.0


def tally(files: list[dict[str, Any]]) -> dict[str, int]:
    counts = dict.fromkeys(CATEGORIES, 0)
    for f in files:
        for t in f["tests"]:
            counts[t["category"]] += t.get("weight", 1)
    return counts


def groups(files: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Failures grouped by (category, exception and first line), largest first, with an example test."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for f in files:
        for t in f["tests"]:
            if t["category"] in ("pass", "as_hardware"):
                continue
            g = found.setdefault((t["category"], t["group"]), {"category": t["category"], "group": t["group"],
                                                               "tests": 0, "files": set(), "example": ""})
            g["tests"] += t.get("weight", 1)
            g["files"].add(f["file"])
            g["example"] = g["example"] or f"{t.get('nodeid') or f['file']}"
    out = sorted(found.values(), key=lambda g: (-g["tests"], g["group"]))
    for g in out:
        g["files"] = len(g["files"])
    return out


def print_table(results: dict[str, dict[str, Any]]) -> None:
    head = f"{'suite':<10} {'files':>5} {'tests':>6} " + " ".join(f"{c:>11}" for c in CATEGORIES) + f" {'judge ok':>8}"
    print(head)
    print("-" * len(head))
    for name, res in results.items():
        c = res["counts"]
        total = sum(c.values())
        ok = judged(c)
        print(f"{name:<10} {len(res['files']):>5} {total:>6} " + " ".join(f"{c[k]:>11}" for k in CATEGORIES)
              + f" {ok:>7.0%}")


def markdown(results: dict[str, dict[str, Any]], top: int) -> str:
    """The tables for docs/vendor-ops.md: one row per suite, then the largest failure groups of all suites."""
    rows = ["| suite | commit | chip | files | tests | " + " | ".join(CATEGORIES) + " | judge ok |",
            "|---" * (len(CATEGORIES) + 6) + "|"]
    for name, res in results.items():
        c = res["counts"]
        total = sum(c.values())
        ok = judged(c)
        rows.append(f"| {name} | {res['repo']}@{res['commit'][:12]} | {res['device']} | {len(res['files'])} | "
                    f"{total} | " + " | ".join(str(c[k]) for k in CATEGORIES) + f" | {ok:.0%} |")
    rows += ["", "| tests | files | suite | category | group (exception: first line) |", "|---|---|---|---|---|"]
    merged = sorted(((g, name) for name, res in results.items() for g in res["groups"]),
                    key=lambda item: (-item[0]["tests"], item[0]["group"]))
    for g, name in merged[:top]:
        group = g["group"].replace("|", "\\|")
        rows.append(f"| {g['tests']} | {g['files']} | {name} | {g['category']} | {group} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Suites:\n" + "\n".join(f"  {s.name:<10} {s.repo}@{s.commit[:12]} on "
                                                                    f"{s.device}: {s.doc}" for s in SUITES.values()))
    parser.add_argument("--suite", choices=[*SUITES, "all"], default="all", help="which suite (default: all)")
    parser.add_argument("--mirrors", default=os.environ.get(MIRRORS_ENV),
                        help=f"directory of the vendor clones (OWNER+NAME/repo, OWNER+NAME, NAME or NAME.git; "
                             f"default ${MIRRORS_ENV})")
    parser.add_argument("--checkout", action="append", default=[], metavar="OWNER/NAME=PATH",
                        help="a clone of one repository (bare or not), e.g. Ascend/pytorch=~/src/pytorch")
    parser.add_argument("--files", nargs="+", help="run these test files only (paths in the repository, globs)")
    parser.add_argument("--select", metavar="EXPR",
                        help="run only the tests of each file that match this pytest -k expression (e.g. "
                             "'complex64' of test_ops_jit.py); --report merges them into a full run by test")
    parser.add_argument("--all-tests", action="store_true",
                        help="run the tests the vendor's CI list disables on the chip too (ascend: "
                             "test/unsupported_test_cases/.pytorch-disabled-tests.json; by default they skip, "
                             "as on its CI, and count as failing as the hardware would)")
    parser.add_argument("--limit", type=int, help="at most N files per suite (a sample spread over its directories)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per test file (default 60)")
    parser.add_argument("--max-minutes", type=float, default=0.0,
                        help="start no new file after this many minutes of the whole run (0: no bound)")
    parser.add_argument("--work-dir", default=str(Path(tempfile.gettempdir()) / "torchfl-vendor-suites"),
                        help="where the pinned commits are extracted and the runs write (default: %(default)s)")
    parser.add_argument("--install-deps", action="store_true",
                        help="pip install the frameworks' dependencies (pandas, cloudpickle) into the work dir")
    parser.add_argument("--json", help="write every outcome and the tables to this file")
    parser.add_argument("--top", type=int, default=10, help="failure groups to print per suite (default 10)")
    parser.add_argument("--list", action="store_true", help="print the selected files and exit")
    parser.add_argument("--report", nargs="+", metavar="JSON",
                        help="run nothing: classify the outcomes of earlier --json files again and print their tables")
    parser.add_argument("--at", metavar="REV",
                        help="measure torch-fl at this commit (its src/ extracted and put first on PYTHONPATH), "
                             "not the working tree (which may hold others' unfinished edits)")
    parser.add_argument("--markdown", action="store_true", help="with --report: print the tables as Markdown")
    args = parser.parse_args(argv)
    if args.report:
        try:
            results = reclassify(args.report)
            if args.markdown:
                print(markdown(results, args.top))
                return 0
            report(results, args.top, args.json, 0.0)
        except JudgeError as exc:
            print(f"vendor_suites: {exc}", file=sys.stderr)
            return 2
        return 0

    checkouts = {}
    for item in args.checkout:
        repo, sep, path = item.partition("=")
        if not sep or repo not in REPOS:
            parser.error(f"--checkout {item}: expected OWNER/NAME=PATH with OWNER/NAME one of {', '.join(REPOS)}")
        checkouts[repo] = path
    names = list(SUITES) if args.suite == "all" else [args.suite]
    try:
        fl_src, fl_commit = torch_fl_at(args.at, Path(args.work_dir))
        setups = []
        for name in names:
            setup = prepare(SUITES[name], args, checkouts)
            setup.fl_src = fl_src
            setup.vendor_disabled = not args.all_tests
            setup.files, setup.excluded = select(setup.suite, setup.root, args.files, args.limit, fl_src)
            setups.append(setup)
    except JudgeError as exc:
        print(f"vendor_suites: {exc}", file=sys.stderr)
        return 2
    if args.list:
        for setup in setups:
            print(f"# {setup.suite.name}: {len(setup.files)} files ({len(setup.excluded)} left out)")
            print("\n".join(setup.files))
        return 0

    started = time.monotonic()
    results: dict[str, dict[str, Any]] = {}
    total_files = sum(len(s.files) for s in setups)
    done = 0
    for setup in setups:
        suite = setup.suite
        files, not_run = [], []
        for rel in setup.files:
            if args.max_minutes and time.monotonic() - started > args.max_minutes * 60:
                not_run.append(rel)
                continue
            done += 1
            slow = SLOW_FILES.get((suite.name, rel))
            res = run_file(setup, rel, max(args.timeout, slow[0]) if slow and not args.select else args.timeout,
                           args.select)
            files.append(res)
            c = tally([res])
            print(f"[{done:>3}/{total_files}] {suite.name:<9} {rel:<70} {res['seconds']:>5.1f}s "
                  + " ".join(f"{k}={v}" for k, v in c.items() if v), flush=True)
        results[suite.name] = {"repo": suite.repo, "commit": suite.commit, "device": suite.device,
                               "counts": tally(files), "files": files, "excluded": setup.excluded,
                               "not_run": not_run, "groups": groups(files),
                               "vendor_disabled": bool(suite.disabled_tests) and setup.vendor_disabled}

    for res in results.values():
        res["torch_fl_commit"] = fl_commit
    report(results, args.top, args.json, time.monotonic() - started)
    return 0


def torch_fl_at(rev: str | None, work: Path) -> tuple[Path | None, str]:
    """torch-fl's src/ at `rev`, extracted (None: the installed working tree), and the commit measured
    ('+dirty' when the working tree's src/ differs from HEAD: other work in progress is measured too)."""
    def git(*cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(ROOT), *cmd], capture_output=True, text=True)

    if rev is None:
        head = git("rev-parse", "HEAD").stdout.strip()
        return None, head + ("+dirty" if git("status", "--porcelain", "--", "src").stdout.strip() else "")
    found = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    if found.returncode != 0:
        raise JudgeError(f"--at {rev}: not a commit of {ROOT} ({found.stderr.strip()})")
    commit = found.stdout.strip()
    return extract(ROOT, "torch-fl", commit, ["src"], work / "torch-fl") / "src", commit


def reclassify(paths: list[str]) -> dict[str, dict[str, Any]]:
    """The suites of earlier --json files, every outcome classified again (by this version of the rules)."""
    results: dict[str, dict[str, Any]] = {}
    for path in paths:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise JudgeError(f"--report {path}: not a JSON file this script wrote ({exc})") from exc
        for name, res in data.get("suites", {}).items():
            res.setdefault("torch_fl_commit", data.get("torch_fl_commit", ""))
            if name in results:  # a later run of some files of a suite replaces their earlier outcomes
                res["files"] = merge_files(results[name]["files"], res["files"])
                res["excluded"] = results[name]["excluded"]
            for f in res["files"]:
                log = Path(f.get("log", ""))
                flagged = [t for t in f["tests"] if t.get("internal_assert") is True]
                if flagged and log.is_file():  # (older runs kept only a flag: the kept log names the assert)
                    marks = [ln for ln in log.read_text(errors="replace").splitlines() if "INTERNAL ASSERT" in ln]
                    for t in flagged:
                        t["internal_assert"] = marks[0][:500] if marks else True
                for t in f["tests"]:
                    t["category"], t["group"] = classify(t)
            res["counts"], res["groups"] = tally(res["files"]), groups(res["files"])
            results[name] = res
    return results


def merge_files(earlier: list[dict[str, Any]], later: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Files of two runs of a suite: a later run of a whole file replaces it; a later run of some of its
    tests (--select) replaces only those tests' outcomes (by node id), so a file too slow to finish in one
    run is measured in parts. A whole run's timeout goes with the first part (the parts say how far each got; a
    part that times out brings its own, which the next part keeps); a crash by a signal stays."""
    merged = {f["file"]: f for f in earlier}
    for f in later:
        before = merged.get(f["file"])
        if f.get("select") and before is not None:
            ids = {t.get("nodeid") for t in f["tests"] if t.get("nodeid")}
            whole = not before.get("select")
            kept = [t for t in before["tests"]
                    if t.get("nodeid") not in ids and not (whole and t.get("kind") == "timeout")]
            parts = " | ".join(filter(None, [before.get("select"), f["select"]]))
            merged[f["file"]] = {**before, "tests": kept + f["tests"], "select": parts}
        else:
            merged[f["file"]] = f
    return list(merged.values())


def report(results: dict[str, dict[str, Any]], top: int, json_path: str | None, seconds: float) -> None:
    """The table per suite, the top failure groups, and the JSON file."""
    print()
    print_table(results)
    for name, res in results.items():
        if res["not_run"]:
            print(f"\n{name}: {len(res['not_run'])} files not run (--max-minutes)")
        print(f"\n{name}: top failure groups (tests, files, category, group; example)")
        for g in res["groups"][:top]:
            print(f"  {g['tests']:>4} {g['files']:>3}  {g['category']:<11} {g['group']}\n{'':>22}e.g. {g['example']}")
    if json_path:
        fl_commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                                   text=True).stdout.strip()
        commits = {res.get("torch_fl_commit") for res in results.values()} - {None, ""}
        Path(json_path).write_text(json.dumps({
            "torch_fl_commit": ", ".join(sorted(commits)) or fl_commit, "minutes": round(seconds / 60, 1),
            "argv": sys.argv[1:], "goal": GOAL, "suites": results}, indent=1))
        print(f"\nwrote {json_path}")


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # (`--list | head` ends quietly, as other CLI tools do)
    sys.exit(main())
