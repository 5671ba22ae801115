"""scripts/vendor_suites.py: the classifier of the vendors' test outcomes and its errors, on synthetic records
(no network, no vendor checkout, no test run)."""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "scripts" / "vendor_suites.py"
_spec = importlib.util.spec_from_file_location("vendor_suites", SCRIPT)
vs = importlib.util.module_from_spec(_spec)
sys.modules["vendor_suites"] = vs  # (dataclasses resolve their module by name)
_spec.loader.exec_module(vs)


def _failed(exc_type: str, message: str, **extra) -> dict:
    return {"kind": "test", "nodeid": "t.py::T::test_x", "outcome": "failed", "exc_type": exc_type,
            "message": message, "text": "", **extra}


def _skipped(reason: str) -> dict:
    return {"kind": "test", "nodeid": "t.py::T::test_x", "outcome": "skipped", "exc_type": "Skipped",
            "message": reason}


def test_a_signal_exit_is_a_crash_named_by_its_signal():
    assert vs.classify({"kind": "signal", "rc": -signal.SIGSEGV}) == ("crash", "process killed by SIGSEGV")
    assert vs.classify({"kind": "signal", "rc": 128 + signal.SIGABRT}) == ("crash", "process killed by SIGABRT")
    assert vs.classify({"kind": "timeout", "seconds": 60})[0] == "crash"


def test_internal_assert_anywhere_is_a_crash_even_in_a_passing_test():
    text = 'RuntimeError: func != nullptr INTERNAL ASSERT FAILED at "/pytorch/torch/csrc/utils/python_dispatch.cpp":123'
    category, group = vs.classify(_failed("RuntimeError", text.split(": ", 1)[1], text=text, internal_assert=True))
    assert (category, group) == ("crash", "PyTorch INTERNAL ASSERT FAILED: func != nullptr (python_dispatch.cpp)")
    passed = {"kind": "test", "nodeid": "t.py::test_y", "outcome": "passed", "internal_assert": True, "text": ""}
    assert vs.classify(passed)[0] == "crash"


def test_file_level_events_become_weighted_records():
    # a segfault after one passing test: the tests the file defines that never reported count as crashed
    done = [{"kind": "test", "nodeid": "a::test_1", "when": "call", "outcome": "passed"}]
    out = vs.file_records(done, rc=-11, timed_out=False, seconds=3.0, output="Fatal Python error", static=5)
    assert [(r["category"], r["weight"]) for r in out] == [("pass", 1), ("crash", 4)]
    # the assert text only in the process output (printed by C++ outside any test) is found too
    out = vs.file_records(done, rc=0, timed_out=False, seconds=1.0, static=1,
                          output="x\nterminate: INTERNAL ASSERT FAILED at engine.cpp\n")
    assert [r["category"] for r in out] == ["pass", "crash"]
    out = vs.file_records([], rc=None, timed_out=True, seconds=60.0, output="", static=3)
    assert [(r["category"], r["weight"]) for r in out] == [("crash", 3)]


def test_missing_vendor_names_are_missing_api():
    cases = [
        ("AttributeError", "module 'torch.npu' has no attribute 'get_soc_version'"),
        ("AttributeError", "module 'torch_npu' has no attribute 'npu_fusion_attention_v2'"),
        ("ModuleNotFoundError", "No module named 'torch_npu._C'"),
        ("ImportError", "cannot import name '_get_musa_arch' from 'torch_musa.core._utils'"),
        ("TypeError", "fast_gelu() got an unexpected keyword argument 'input'"),
    ]
    for exc_type, message in cases:
        record = _failed(exc_type, message, crash_path="/x/src/torch_fl/routing/emu/npu_ops.py")
        assert vs.classify(record) == ("missing_api", f"{exc_type}: {vs.normalize(message)}"), message


def test_a_library_missing_from_the_environment_is_not_the_vendor_surface():
    assert vs.classify(_failed("ModuleNotFoundError", "No module named 'torchvision'")) == \
        ("environment", "ModuleNotFoundError: No module named 'torchvision'")
    assert vs.classify(_failed("FileNotFoundError", "[Errno 2] No such file: 'x/torch_npu/_inductor/a.py'"))[0] == \
        "environment"
    # the share leaves out what this harness cannot run
    counts = dict.fromkeys(vs.CATEGORIES, 0) | {"pass": 6, "as_hardware": 3, "other": 1, "environment": 90}
    assert vs.judged(counts) == 0.9
    # a TypeError on a keyword of a non-vendor function, raised outside torch-fl, is not missing API either
    assert vs.classify(_failed("TypeError", "f() got an unexpected keyword argument 'x'",
                               crash_path="/usr/lib/python3/foo.py"))[0] == "other"


def test_value_assertions_are_wrong_numbers_and_unraised_errors_are_not():
    assert vs.classify(_failed("AssertionError", "Tensor-likes are not close!\n\nMismatched elements: 3 / 8"))[0] == \
        "wrong"
    # the vendor's own value checks raise RuntimeError (op-plugin test_format_cast.py)
    assert vs.classify(_failed("RuntimeError", "expectValue: 29,  resultValue: 2"))[0] == "wrong"
    # an assert raised inside library code is not the test's value check
    assert vs.classify(_failed("AssertionError", "Torch not compiled with CUDA enabled",
                               crash_path="/v/lib/python3.11/site-packages/torch/cuda/__init__.py"))[0] == "other"
    assert vs.classify(_failed("AssertionError", "tensor(0.0740) not less than or equal to 0.03",
                               crash_path="/usr/lib/python3.11/unittest/case.py"))[0] == "wrong"
    category, group = vs.classify(_failed("AssertionError", "RuntimeError not raised"))
    assert category == "other" and "not raised" in group
    # torch_npu's check_operators_in_prof: CANN's copy kernel names absent from the profile, not a value
    category, group = vs.classify(_failed("AssertionError", "1 not less than or equal to 1e-05 : Error operators "
                                          "called!", crash_path="/usr/lib/python3.11/unittest/case.py"))
    assert category == "other" and "kernel names" in group
    assert vs.classify(_failed("RuntimeError", "aten::foo is not supported on the emulated npu")) == \
        ("other", "RuntimeError: aten::<op> is not supported on the emulated npu")


def test_skips_fail_as_the_hardware_would_unless_the_chip_hides_its_name():
    assert vs.classify(_skipped("Only run on ['Ascend910B'], current device is Ascend910P."))[0] == "as_hardware"
    category, group = vs.classify(_skipped("Only run on ['Ascend910B'], current device is npu (emula."))
    assert category == "missing_api" and "SoC-gated" in group
    assert vs.classify(_skipped("requires at least 2 NPUs"))[0] == "as_hardware"
    assert vs.classify(_skipped("npu test skipped!")) == ("as_hardware", "vendor skip: npu test skipped!")
    assert vs.classify({"kind": "test", "outcome": "xfailed", "message": ""})[0] == "as_hardware"


def test_groups_mask_numbers_and_keep_the_cause_of_a_colon_line():
    assert vs.normalize("shape [3, 4] != [3, 5] at 0x7f00aa") == "shape [N, N] != [N, N] at 0x…"
    assert vs.normalize("backend='inductor' raised:\nRuntimeError: no") == "backend='inductor' raised: RuntimeError: no"


def test_a_wrapped_opinfo_failure_is_grouped_by_its_cause():
    record = _failed("Exception", "Error testing addmm function variant",
                     cause="torch_fl.errors.UnsupportedOperatorError: aten::addmm.default is not supported: complex64")
    assert vs.classify(record) == ("other", "UnsupportedOperatorError: aten::<op> is not supported: complex64")


def test_one_outcome_per_test_the_first_that_is_not_a_pass():
    records = [{"kind": "test", "nodeid": "a", "when": "call", "outcome": "passed"},
               {"kind": "test", "nodeid": "a", "when": "teardown", "outcome": "failed", "exc_type": "RuntimeError",
                "message": "boom"},
               {"kind": "test", "nodeid": "b", "when": "setup", "outcome": "skipped", "message": "x"}]
    merged = {r["nodeid"]: r["outcome"] for r in vs.merge_tests(records)}
    assert merged == {"a": "failed", "b": "skipped"}


def test_op_plugin_files_are_the_tests_of_the_emulated_fused_ops():
    ops = vs.fused_ops()
    assert "npu_rms_norm" in ops and "npu_fusion_attention" in ops
    call = "torch_npu.npu_rms_norm(x, g)"
    assert vs.op_test_matches("test/test_custom_ops/test_npu_rms_norm_backward.py", call, ops) == ["npu_rms_norm"]
    assert not vs.op_test_matches("test/test_custom_ops/test_npu_rms_norm_quant.py", call, ops)
    assert vs.op_test_matches("test/x/test_npu_flash_attention_grad.py",
                              "torch_npu.npu_fusion_attention_grad(q)", ops) == ["npu_fusion_attention_grad"]
    assert vs.excluded_reason("test/distributed/test_x.py", "") == "multi-card (distributed)"
    assert vs.spread(["a/1.py", "a/2.py", "b/1.py"])[:2] in (["a/1.py", "b/1.py"], ["a/2.py", "b/1.py"])


def test_an_absent_checkout_says_how_to_get_it(tmp_path):
    with pytest.raises(vs.JudgeError, match=r"(?s)no checkout of Ascend/pytorch.*git clone --bare "
                                            r"https://github.com/Ascend/pytorch"):
        vs.find_checkout("Ascend/pytorch", str(tmp_path), {})
    done = subprocess.run([sys.executable, str(SCRIPT), "--suite", "mlu", "--mirrors", str(tmp_path),
                           "--work-dir", str(tmp_path / "work"), "--list"], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 2, done.stderr
    assert "no checkout of Cambricon/torch_mlu" in done.stderr and "--checkout" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_collection_error_is_read_from_its_last_raised_line():
    text = ("ImportError while importing test module 't.py'.\nt.py:3: in <module>\n    from torch_musa import testing\n"
            "E   ModuleNotFoundError: No module named 'torch_musa.core'")
    record = {"kind": "collect", "outcome": "failed", "exc_type": "", "message": text.splitlines()[-1], "text": text}
    assert vs.classify(record) == ("missing_api", "ModuleNotFoundError: No module named 'torch_musa.core'")


def test_a_selected_part_of_a_file_replaces_only_its_own_tests(tmp_path):
    # a slow OpInfo file measured in parts (--select): the later part's outcomes replace those tests only
    def test(name, outcome):
        return {"kind": "test", "nodeid": f"t.py::T::{name}", "outcome": outcome}

    full = {"file": "t.py", "tests": [test("a_float32", "passed"), test("a_complex64", "failed"),
                                      {"kind": "timeout", "seconds": 60, "weight": 5}]}
    part = {"file": "t.py", "select": "complex64", "tests": [test("a_complex64", "passed"),
                                                             test("b_complex64", "passed")]}
    merged = vs.merge_files([full], [part])
    # (the whole run's timeout goes: the part says how far it got)
    assert [(t.get("nodeid"), t.get("outcome")) for t in merged[0]["tests"]] == [
        ("t.py::T::a_float32", "passed"), ("t.py::T::a_complex64", "passed"), ("t.py::T::b_complex64", "passed")]
    crashed = {**full, "tests": [*full["tests"][:2], {"kind": "signal", "rc": -11, "weight": 5}]}
    assert {"kind": "signal", "rc": -11, "weight": 5} in vs.merge_files([crashed], [part])[0]["tests"]
    # a second part keeps the first part's timeout (the tests it did not reach are still unrun)
    first = {**part, "tests": [*part["tests"], {"kind": "timeout", "seconds": 600, "weight": 1}]}
    second = {"file": "t.py", "select": "not complex64", "tests": [test("a_float32", "failed")]}
    kinds = [t.get("kind", "test") for t in vs.merge_files(vs.merge_files([full], [first]), [second])[0]["tests"]]
    assert kinds.count("timeout") == 1 and len(kinds) == 4
    # a whole-file run replaces the file; a part with nothing before it is the file's record
    assert vs.merge_files([full], [{**full, "tests": []}])[0]["tests"] == []
    assert vs.merge_files([], [part]) == [part]
    # through --report: two saved runs, the second a part
    for name, files in (("full.json", [full]), ("part.json", [part])):
        (tmp_path / name).write_text(json.dumps({"suites": {"ascend": {
            "repo": "Ascend/pytorch", "commit": "x", "device": "emu:npu", "files": files, "excluded": [],
            "not_run": []}}}))
    counts = vs.reclassify([str(tmp_path / "full.json"), str(tmp_path / "part.json")])["ascend"]["counts"]
    assert (counts["pass"], counts["crash"], counts["other"]) == (3, 0, 0)



def test_a_test_the_vendors_ci_disables_fails_as_the_hardware_would():
    # torch_npu.testing skips the tests of DISABLED_TESTS_FILE with this reason (its check_if_enable)
    assert vs.classify(_skipped("this test is disabled now")) == (
        "as_hardware", "disabled by the vendor's CI list (DISABLED_TESTS_FILE)")
    assert vs.SUITES["ascend"].disabled_tests == "test/unsupported_test_cases/.pytorch-disabled-tests.json"
    assert not vs.SUITES["mlu"].disabled_tests and not vs.SUITES["musa"].disabled_tests  # (they ship none)


def test_a_test_that_fails_on_the_bare_host_torch_is_environment():
    # torch_musa's memory-profiler category tests use CPU tensors only and fail identically under torch 2.13 with
    # no torch-fl loaded: their expected text is another PyTorch release's
    node = ("tests/unittest/profiler/test_memory_profiler.py::TestMemoryProfilerE2E::"
            "test_categories_e2e_simple_module_fwd_bwd_step")
    record = {**_failed("AssertionError", "'a' != 'b'"), "nodeid": node}
    category, group = vs.classify(record)
    assert category == "environment" and group.startswith("fails on the host's torch without torch-fl too")
    # the file's other tests are judged as any
    other = {**record, "nodeid": node.replace("test_categories_e2e_simple_module_fwd_bwd_step", "test_config_check")}
    assert vs.classify(other)[0] == "wrong"
