"""`torchfl doctor`: JSON shape, the healthy CPU case, and diagnoses that name a next step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_fl
from torch_fl import plugins
from torch_fl.analysis import doctor
from torch_fl.cli import main
from torch_fl.compiler.fingerprint import fingerprint
from torch_fl.description.loader import parse
from torch_fl.description.probe import all_aten_ops

ROUTES = ("native", "translate", "fallback", "kernel", "unsupported")
needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")

MISSING_PLUGIN_TOML = """\
schema = 1
name = "fakeacc"
vendor = "Example"
device_type = "fakeacc"
dispatch_key = "PrivateUse1"
plugin = "torch_fl_no_such_plugin"
visible_devices_env = "FAKEACC_VISIBLE_DEVICES"
"""


def _env(monkeypatch: pytest.MonkeyPatch, **extra: str) -> None:
    for name, value in extra.items():
        monkeypatch.setenv(name, value)
    torch_fl.reset()


def _doctor(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["doctor", *argv])
    return code, capsys.readouterr().out


def _check_shape(data: dict) -> None:
    for key in ("device_type", "vendor", "device_name", "torch_version", "torch_fl_version",
                "plugin_version", "runtime_version", "cache_dir"):
        assert isinstance(data[key], str), key
    assert {"name", "path", "sha256"} <= set(data["description"])
    assert all(isinstance(data["description"][k], str) for k in ("name", "path", "sha256"))
    assert set(data["routes"]) == set(ROUTES)
    assert all(isinstance(n, int) and n >= 0 for n in data["routes"].values())
    assert isinstance(data["self_check"]["ok"], bool)
    assert isinstance(data["self_check"]["detail"], str)
    assert isinstance(data["device_map"], dict)


def test_json_on_cpu_is_healthy(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _doctor(capsys, "--json")
    data = json.loads(out)
    _check_shape(data)
    assert code == 0
    assert data["healthy"] is True and data["problems"] == []
    assert data["torch_version"] == torch.__version__
    assert data["torch_fl_version"] == torch_fl.__version__
    assert data["backend"]["source"] and data["device_map"]
    assert data["self_check"]["ok"] is True
    assert data["description"]["compat"]["torch"]["ok"] is True


def test_json_file_next_to_the_text(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "doctor.json"
    code, out = _doctor(capsys, "--json", str(target))
    assert code == 0 and "healthy" in out.lower() and not out.lstrip().startswith("{")  # the text
    _check_shape(json.loads(target.read_text(encoding="utf-8")))
    code, out = _doctor(capsys, "--json", "-")                                           # = --json alone
    _check_shape(json.loads(out))


def test_routes_partition_every_known_op(capsys: pytest.CaptureFixture[str]) -> None:
    _, out = _doctor(capsys, "--json")
    assert sum(json.loads(out)["routes"].values()) == len(all_aten_ops())


def test_text_output_has_sections_and_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _doctor(capsys)
    assert code == 0
    for title in ("Versions", "Device", "Description", "Routes", "Platform", "Self-check"):
        assert f"\n{title}\n" in out
    assert "torch:" in out and torch.__version__ in out
    assert out.rstrip().endswith("\nResult\n------\nhealthy")


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["python -m", "console script"])
def test_json_through_a_subprocess(tmp_path: Path, entry: str) -> None:
    script = Path(sys.executable).with_name("torchfl")
    if entry == "console script" and not script.exists():
        pytest.skip("the torchfl console script is not installed next to this python")
    command = [sys.executable, "-m", "torch_fl"] if entry == "python -m" else [str(script)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    env["FL_CONFIG"] = str(tmp_path / "empty-user-config.toml")  # a missing FL_CONFIG file is an error
    (tmp_path / "empty-user-config.toml").write_text("")
    done = subprocess.run([*command, "doctor", "--json"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    _check_shape(data)
    assert data["self_check"]["ok"] is True


@needs_no_cuda
def test_map_to_absent_cuda_fails_with_next_step(capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _env(monkeypatch, FL_DEVICE_MAP="acc0=cuda:0")
    code, out = _doctor(capsys)
    assert code == 1
    assert "self-check failed" in " ".join(out.split())
    assert "FL_DEVICE_MAP" in " ".join(out.split()) and "cuda:0" in " ".join(out.split())
    assert "Next step" in " ".join(out.split())


@needs_no_cuda
def test_no_devices_names_the_visible_devices_variable(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _env(monkeypatch, FL_BACKEND="cuda", CUDA_VISIBLE_DEVICES="")
    code, out = _doctor(capsys, "--json")
    data = json.loads(out)
    assert code == 1 and data["device_map"] == {}
    problem = data["problems"][0]
    assert "no devices visible" in problem
    assert "CUDA_VISIBLE_DEVICES (currently ''" in problem
    assert "FL_BACKEND=cpu" in problem


def test_missing_plugin_is_named(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                tmp_path: Path) -> None:
    path = tmp_path / "fakeacc.toml"
    path.write_text(MISSING_PLUGIN_TOML, encoding="utf-8")
    _env(monkeypatch, FL_DESCRIPTION=str(path), FL_BACKEND="fakeacc")
    code, out = _doctor(capsys)
    words = " ".join(out.split())  # the text is wrapped at a width, wherever the temp path ends
    assert code == 1
    assert "torch_fl_no_such_plugin" in words and "not installed" in words
    assert "unset FL_BACKEND" in words and "Next step" in words

    code, out = _doctor(capsys, "--json")
    data = json.loads(out)
    assert code == 1
    assert data["plugin"] == "torch_fl_no_such_plugin" and data["plugin_installed"] is False
    assert data["description"]["path"] == str(path)
    assert data["errors"][0]["type"] == "PluginImportError"


def test_broken_description_file_is_diagnosed(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _env(monkeypatch, FL_DESCRIPTION=str(tmp_path / "missing.toml"))
    code, out = _doctor(capsys)
    assert code == 1
    assert "missing.toml" in " ".join(out.split()) and "Next step" in " ".join(out.split())


def test_wrong_result_is_a_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "_matmul_on", lambda dev, a, b: a @ b + 1e-2)
    check = doctor.self_check(torch.device("cpu"))
    assert check["ran"] and not check["ok"]
    assert "differs from the CPU result" in check["detail"]
    data = doctor.collect()
    data["self_check"] = check
    [problem] = doctor.diagnose(data)
    assert "self-check failed" in problem and "Next step" in problem


def test_route_counts_come_from_the_route_table() -> None:
    desc = parse(MISSING_PLUGIN_TOML + """
[ops]
native = ["aten::add.Tensor", "aten::mul.Tensor"]
translate = ["aten::gelu"]
fallback = ["aten::add.Tensor"]
unsupported = ["aten::nonzero.default"]
""")
    known = all_aten_ops()
    counts = doctor.route_counts(desc)
    gelu = sum(op.startswith("aten::gelu.") for op in known)
    assert counts["translate"] >= gelu > 0          # forced, plus ops.default translations
    assert counts["native"] >= 1                      # mul (and CompositeImplicitAutograd ops)
    assert counts["fallback"] == 1                    # the explicit list overrides the native entry
    assert counts["unsupported"] > 0                  # not native and no decomposition
    assert sum(counts.values()) == len(known)


def test_runtime_version_follows_the_torch_build() -> None:
    cuda = torch_fl.description("cuda")
    assert plugins.runtime_version(cuda) == (("cuda", torch.version.cuda) if torch.version.cuda else ("", ""))
    assert plugins.runtime_version(torch_fl.description("cpu")) == ("", "")
    # one function answers doctor and the compile fingerprint (they used to keep a copy each)
    assert fingerprint(cuda).components["runtime"] == (f"cuda {torch.version.cuda}" if torch.version.cuda else "none")


@pytest.mark.slow
def test_module_entry_point_without_command_prints_help() -> None:
    done = subprocess.run([sys.executable, "-m", "torch_fl"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "doctor" in done.stdout


@pytest.mark.slow  # two interpreters (the failed start and the run with the entry points off)
def test_a_backend_entry_point_that_breaks_import_torch_does_not_stop_doctor(tmp_path):
    """A package in torch's torch.backends entry point group whose import fails makes every `import torch`
    fail (torch_npu without its CANN libraries); doctor, bugreport and env run again with the entry points off
    and say so, instead of ending in torch's traceback before they start."""
    site = tmp_path / "site"
    (site / "fp_broken").mkdir(parents=True)
    (site / "fp_broken" / "__init__.py").write_text('raise ImportError("libfake_rt.so: cannot open shared object file")\n')
    (site / "fp_broken-1.0.dist-info").mkdir()
    (site / "fp_broken-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: fp-broken\nVersion: 1.0\n")
    (site / "fp_broken-1.0.dist-info" / "entry_points.txt").write_text("[torch.backends]\nfp_broken = fp_broken:_load\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_") and k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    env.update(PYTHONPATH=os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])]),
               OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "_torch_fl_cli", "doctor"], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "running again with TORCH_DEVICE_BACKEND_AUTOLOAD=0" in done.stderr
    assert done.returncode == 1  # a problem was found
    assert "`import torch` fails in this environment: Failed to load the backend extension: fp_broken" in \
        " ".join(done.stdout.split())
    assert "repair or uninstall that package" in " ".join(done.stdout.split())
