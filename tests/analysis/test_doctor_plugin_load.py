"""The plugin import in a child process (analysis/plugin_load.py), `torchfl doctor` around it, and
`torchfl doctor --bisect-env`: fake plugins compiled here with gcc; every case ends in a message that
says what happened, why and the fix, never a crash or a hang of the caller."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_plugins import FakePlugins, build, needs_gcc  # beside this file

from machine_factor import scaled  # tests/machine_factor.py
from torch_fl.analysis import plugin_load
from torch_fl.analysis.plugin_bisect import bisect_env
from torch_fl.analysis.plugin_load import abi_mismatches, extension_tag, load

pytestmark = needs_gcc


@pytest.fixture(scope="module")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> FakePlugins:
    return build(tmp_path_factory.mktemp("fake_plugins"))


def test_a_healthy_plugin_loads(fakes: FakePlugins) -> None:
    result = load("fp_ok", env=fakes.env(), abi=True)
    assert result.ok and result.status == "ok" and result.problem() == ""
    assert result.abi["plugin"]["abi_tags"] == [sys.implementation.cache_tag]


@pytest.mark.parametrize("name, sig", [("fp_segv", "SIGSEGV"), ("fp_abort", "SIGABRT")])
def test_a_crash_is_reported_with_the_signal_and_the_extension(fakes: FakePlugins, name: str, sig: str) -> None:
    result = load(name, env=fakes.env())
    assert result.status == "signal" and result.signal == sig
    assert result.extension.endswith(f"{name}/_C{__import__('sysconfig').get_config_var('EXT_SUFFIX')}")
    text = result.problem()
    assert f"crashed the process with {sig}" in text and result.extension in text
    assert "Why:" in text and "Fix:" in text and "torchfl doctor --bisect-env" in text
    assert "Python ABI host cpython-" in text  # the ABI facts
    assert any("Fatal Python error" in line for line in result.traceback)


def test_a_crash_at_interpreter_exit_is_told_apart(fakes: FakePlugins) -> None:
    result = load("fp_atexit", env=fakes.env())
    assert result.status == "signal" and result.signal == "SIGSEGV"
    assert "the import itself finished; the process died afterwards, at interpreter exit" in result.problem()


def test_a_library_missing_from_the_search_path_is_named(fakes: FakePlugins) -> None:
    result = load("fp_dep", env=fakes.env())
    assert result.status == "exception" and result.library == "libdep.so"
    text = result.problem()
    assert "the loader could not find libdep.so" in text and "LD_LIBRARY_PATH is unset" in text
    assert "export LD_LIBRARY_PATH=" in text


def test_a_plugin_that_torch_autoloads_says_so(fakes: FakePlugins, tmp_path: Path) -> None:
    # its own folder: with the entry point on sys.path, `import torch` in other tests would import it
    site = tmp_path / "site"
    (site / "fp_auto").mkdir(parents=True)
    (site / "fp_auto" / "__init__.py").write_text("from fp_dep import _C\n")
    (site / "fp_auto-1.0.dist-info").mkdir()
    (site / "fp_auto-1.0.dist-info" / "entry_points.txt").write_text("[torch.backends]\nfp_auto = fp_auto:_load\n")
    result = load("fp_auto", env=fakes.env(extra_path=[site]))
    assert result.autoload and result.library == "libdep.so"
    assert "every `import torch` in this environment imports it" in result.problem()
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0 torchfl doctor" in result.problem()
    assert not load("fp_dep", env=fakes.env()).autoload


def test_the_library_found_through_ld_library_path_loads(fakes: FakePlugins) -> None:
    result = load("fp_dep", env=fakes.env(ld=[fakes.lib]))
    assert result.ok
    assert result.resolved["libdep.so"] == str(fakes.lib / "libdep.so")


def test_a_shadowing_copy_is_named_with_the_folder_it_came_from(fakes: FakePlugins) -> None:
    result = load("fp_dep", env=fakes.env(ld=[fakes.shadow, fakes.lib]))
    assert result.status == "exception" and result.symbol == "dep_value"
    text = result.problem()
    assert f"the loader took libdep.so from {fakes.shadow / 'libdep.so'}" in text
    assert "shadows the right one" in text


def test_a_pytorch_symbol_of_another_release_says_so(fakes: FakePlugins) -> None:
    result = load("fp_cxx", env=fakes.env())
    assert result.symbol == "_ZN3c1019fake_removed_symbolEv"
    assert "It is a PyTorch C++ symbol: the plugin was compiled against another torch release" in result.problem()


def test_an_extension_built_for_another_python_is_explained(fakes: FakePlugins) -> None:
    result = load("fp_oldabi", env=fakes.env())
    assert result.status == "exception"
    other = f"Python {sys.version_info.major}.{sys.version_info.minor - 1}"
    text = result.problem()
    assert f"built for {other}" in text and "--force-reinstall" in text
    assert result.abi["plugin"]["abi_tags"] == [f"cpython-{sys.version_info.major}{sys.version_info.minor - 1}"]


def test_a_hang_is_stopped_and_says_where_it_was(fakes: FakePlugins) -> None:
    result = load("fp_hang", env=fakes.env(), timeout=2)
    # stopped at its 2 s limit (it waited that out), not at the parent's limit + grace or later
    assert result.status == "timeout" and 2 <= result.seconds < 2 + scaled(10)
    assert "fp_hang/__init__.py\", line 2" in result.problem()


def test_a_native_hang_holding_the_gil_is_stopped(fakes: FakePlugins) -> None:
    result = load("fp_spin", env=fakes.env(), timeout=2)
    # stopped at its 2 s limit (it waited that out), not at the parent's limit + grace or later
    assert result.status == "timeout" and 2 <= result.seconds < 2 + scaled(10)
    assert "did not finish in 2 s" in result.problem()


def test_two_copies_of_a_runtime_library_are_a_caution(fakes: FakePlugins) -> None:
    result = load("fp_twogomp", env=fakes.env())
    assert result.ok and result.abi == {}  # no ABI scan for an import that works
    assert sorted(Path(p).name for p in result.duplicates["libgomp"]) == ["libgomp-fl1.so", "libgomp.so.9"]
    assert "loaded two copies of one runtime library (libgomp:" in result.caution()
    assert load("fp_ok", env=fakes.env()).caution() == ""


def test_an_interpreter_that_does_not_start_is_a_result(tmp_path: Path) -> None:
    result = load("json", python=str(tmp_path / "no-python"))
    assert result.status == "exception" and "could not start" in result.problem()


def test_loader_messages_for_symbol_versions() -> None:
    result = plugin_load.LoadResult("torch_npu", "exception", error_type="ImportError", error_message=(
        "/usr/lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.32' not found (required by "
        "/site/torch_npu/lib/libtorch_npu.so)"))
    plugin_load._loader_message(result, {})
    assert (result.symbol, result.required_by) == ("GLIBCXX_3.4.32", "/site/torch_npu/lib/libtorch_npu.so")
    assert result.library == "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"
    assert "libstdcxx-ng" in result.problem()


def test_abi_facts_compare_needed_and_provided_versions() -> None:
    abi = {"host": {"python": "3.11", "abi_tag": "cpython-311", "glibc": "2.17", "glibcxx": "3.4.19",
                    "libstdcxx": "/usr/lib64/libstdc++.so.6", "duplicates": {"libgomp": ["/a/libgomp.so.1",
                                                                                         "/b/libgomp.so.1"]}},
           "plugin": {"abi_tags": ["cpython-310"], "glibc": "2.28", "glibcxx": "3.4.21"}}
    found = " | ".join(abi_mismatches(abi))
    assert "built for Python 3.10" in found and "glibc 2.28, and this system's is 2.17" in found
    assert "libstdc++ (GLIBCXX) 3.4.21" in found and "two copies of libgomp" in found
    assert extension_tag("_C.cpython-310-x86_64-linux-gnu.so") == "cpython-310"
    assert extension_tag("_C.abi3.so") == "abi3" and extension_tag("libfoo.so") == ""


def test_bisect_names_the_shadowing_entry_and_the_minimal_value(fakes: FakePlugins, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = bisect_env("fp_dep", env=fakes.env(ld=[empty, fakes.shadow, fakes.lib]), timeout=scaled(30),
                        variables=("LD_LIBRARY_PATH",))
    assert [c["entry"] for c in result.culprits] == [str(fakes.shadow)]
    assert f"libdep.so came from {fakes.shadow / 'libdep.so'}, and without it from {fakes.lib / 'libdep.so'}" \
        in result.culprits[0]["effect"]
    assert result.minimal == {"LD_LIBRARY_PATH": str(fakes.lib)}
    assert f"  fix: export LD_LIBRARY_PATH={fakes.lib}" in result.lines()


def test_bisect_finds_a_pythonpath_entry_that_shadows_a_package(fakes: FakePlugins, tmp_path: Path) -> None:
    stale = tmp_path / "stale"
    (stale / "fp_ok").mkdir(parents=True)
    (stale / "fp_ok" / "__init__.py").write_text("raise ImportError('a stale copy of fp_ok')\n")
    result = bisect_env("fp_ok", env=fakes.env(extra_path=[stale]), timeout=scaled(30), variables=("PYTHONPATH",))
    assert [c["entry"] for c in result.culprits] == [str(stale)]
    assert result.minimal == {"PYTHONPATH": str(fakes.root)}


def test_bisect_finds_the_preload_that_brings_a_second_libgomp(fakes: FakePlugins) -> None:
    env = fakes.env(preload=[fakes.second_gomp])
    assert load("fp_gomp", env=env).duplicates and not load("fp_gomp", env=fakes.env()).duplicates
    result = bisect_env("fp_gomp", env=env, timeout=scaled(30))
    assert [(c["variable"], c["entry"]) for c in result.culprits] == [("LD_PRELOAD", str(fakes.second_gomp))]
    assert f"it brings in a second copy of a runtime library ({fakes.second_gomp})" in result.culprits[0]["effect"]
    assert result.minimal == {"LD_PRELOAD": ""} and "  fix: unset LD_PRELOAD" in result.lines()
    assert result.verdict.startswith("the import loads two copies of a runtime library because of LD_PRELOAD entry")


def test_bisect_when_the_environment_is_not_the_cause(fakes: FakePlugins) -> None:
    result = bisect_env("fp_segv", env=fakes.env(ld=[fakes.lib]), timeout=scaled(30))
    assert not result.culprits and "The cause is elsewhere" in result.verdict


# doctor -------------------------------------------------------------------------------------------
_TOML = """\
schema = 1
name = "fakeplug"
vendor = "Example"
device_type = "fakeplug"
dispatch_key = "PrivateUse1"
plugin = "{plugin}"
"""


def _doctor(fakes: FakePlugins, tmp_path: Path, plugin: str, *argv: str, ld: list[Path] | None = None,
            ) -> tuple[int, dict, str]:
    desc = tmp_path / "fakeplug.toml"
    desc.write_text(_TOML.format(plugin=plugin))
    env = fakes.env(ld=ld)
    env.update(FL_DESCRIPTION=str(desc), FL_BACKEND="fakeplug")
    out = tmp_path / "doctor.json"
    proc = subprocess.run([sys.executable, "-c", "from torch_fl.cli import main; raise SystemExit(main())", "doctor", "--json", str(out), *argv],
                          env=env, capture_output=True, text=True, timeout=300)
    return proc.returncode, json.loads(out.read_text()), proc.stdout


@pytest.mark.parametrize("plugin, expected", [
    ("fp_segv", "crashed the process with SIGSEGV"),
    ("fp_dep", "the loader could not find libdep.so"),
    ("fp_oldabi", "built for Python"),
])
def test_doctor_survives_and_explains(fakes: FakePlugins, tmp_path: Path, plugin: str, expected: str) -> None:
    code, data, text = _doctor(fakes, tmp_path, plugin)
    assert code == 1 and not data["healthy"]
    assert expected in data["problems"][0]
    assert data["plugin_load"][0]["module"] == plugin and data["plugin_load"][0]["status"] != "ok"
    assert "Plugin import (child process)" in text and "ABI:" in text


def test_doctor_bisect_env(fakes: FakePlugins, tmp_path: Path) -> None:
    code, data, text = _doctor(fakes, tmp_path, "fp_dep", "--bisect-env", ld=[fakes.shadow, fakes.lib])
    assert code == 1
    assert data["bisect"]["culprits"][0]["entry"] == str(fakes.shadow)
    assert any(f"export LD_LIBRARY_PATH={fakes.lib}" in p for p in data["problems"])
    assert "Environment bisect" in text


def test_doctor_with_a_plugin_that_loads_goes_on_in_process(fakes: FakePlugins, tmp_path: Path) -> None:
    _, data, _ = _doctor(fakes, tmp_path, "fp_ok")
    assert data["plugin_load"][0]["status"] == "ok"
    assert not any("child process" in p for p in data["problems"])


def test_doctor_warns_about_two_copies_of_libgomp(fakes: FakePlugins, tmp_path: Path) -> None:
    _, data, text = _doctor(fakes, tmp_path, "fp_twogomp")
    assert "Warnings" in text
    assert data["plugin_load"][0]["status"] == "ok"
    assert any("two copies of one runtime library" in w for w in data["warnings"])
    assert os.environ.get("FL_BACKEND") is None  # the test's environment is untouched
