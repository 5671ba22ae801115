"""The runtime CUDA alias (torch_fl.migrate.alias), `torchfl run`, FL_CUDA_ALIAS and `torchfl audit`.

The unit tests alias CUDA to the CPU explicitly (cuda_alias("cpu")), so they mean the same on a machine
with a GPU. The end-to-end tests run tests/migrate/fixtures/train_gpt_cuda.py, an unmodified
CUDA-hard-coded training script, in subprocesses with FL_BACKEND=cpu.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import subprocess
import sys
import threading
from importlib import metadata
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.overrides import _get_current_function_mode_stack

import torch_fl
from torch_fl.cli import main
from torch_fl.errors import ConfigError, DeviceNotFoundError
from torch_fl.migrate import alias as alias_mod
from torch_fl.migrate import autoload, cuda_alias

ROOT = Path(__file__).parents[2]
FIXTURE = Path(__file__).parent / "fixtures" / "train_gpt_cuda.py"
LOSS = re.compile(r"^iter (\d+): loss ([-+0-9.eEnaif]+),", re.M)
CPU_ENV = {"FL_BACKEND": "cpu"}  # acc0 is the CPU even on a machine with an accelerator


def patched_namespaces() -> dict[str, object]:
    return {"torch": torch, "torch.cuda": torch.cuda, "torch.cuda.amp": torch.cuda.amp, "torch.amp": torch.amp,
            "torch.Tensor": torch.Tensor, "torch.nn.Module": torch.nn.Module, "torch.distributed": dist,
            "DistributedDataParallel": torch.nn.parallel.DistributedDataParallel}


def snapshot() -> dict[str, dict[str, object]]:
    return {name: dict(vars(owner)) for name, owner in patched_namespaces().items()}


@pytest.fixture
def migrate_log():
    """INFO records of torch_fl.migrate (the torch_fl logger does not propagate, so caplog misses them)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("torch_fl.migrate")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(level)


# Device arguments -----------------------------------------------------------------------------------
def test_factories_and_device_arguments_run_on_the_target():
    with cuda_alias("cpu"):
        made = [
            torch.zeros(2, device="cuda"), torch.ones(2, device="cuda:0"), torch.empty(2, device=0),
            torch.tensor([1.0], device=torch.device("cuda")), torch.randn(2, device=torch.device("cuda", 0)),
            torch.arange(3, device="cuda"), torch.zeros(2).new_zeros(3, device="cuda"),
            torch.full((2,), 1.0, device="cuda"), torch.zeros_like(torch.ones(2), device="cuda"),
        ]
    assert {t.device for t in made} == {torch.device("cpu")}


def test_device_objects_stay_cuda_and_are_rewritten_where_used():
    with cuda_alias("cpu"):
        dev = torch.device("cuda")
        x = torch.ones(2, device=dev)
    assert dev.type == "cuda" and x.device.type == "cpu"


def test_tensor_to_cuda_and_module_to_cuda():
    x = torch.ones(2)
    model = torch.nn.Linear(2, 2)
    with cuda_alias("cpu"):
        moved = [x.to("cuda"), x.to(torch.device("cuda", 0)), x.to(device="cuda"), x.cuda(), x.cuda(0),
                 x.to("cuda:0", non_blocking=True), x.pin_memory().to("cuda")]
        half = x.to("cuda", torch.float16)
        assert model.cuda() is model and model.to("cuda") is model and model.to(torch.device("cuda")) is model
        assert model.to("cuda", torch.float64) is model
    assert {t.device.type for t in moved} == {"cpu"}
    assert half.dtype == torch.float16
    assert next(model.parameters()).dtype == torch.float64 and next(model.parameters()).device.type == "cpu"


def test_cuda_ordinal_beyond_the_virtual_devices_names_the_fix(monkeypatch):
    monkeypatch.setenv("FL_DEVICE_MAP", "acc0=cpu:0")  # a target with an index: cuda:N means accN
    torch_fl.reset()
    with cuda_alias():
        assert torch.zeros(1, device="cuda:0").device.type == "cpu"
        with pytest.raises(DeviceNotFoundError, match=r"cuda:1.*acc0 -> cpu:0.*FL_DEVICE_MAP"):
            torch.zeros(1, device="cuda:1")


# torch.cuda ----------------------------------------------------------------------------------------
def test_cuda_runtime_calls_answer_for_the_target():
    with cuda_alias("cpu"):
        assert torch.cuda.is_available() is True  # so code gated on it takes its GPU path
        assert torch.cuda.device_count() == 1 and torch.cuda.current_device() == 0
        torch.cuda.set_device(0)
        torch.cuda.set_device("cuda:0")
        torch.cuda.synchronize()
        torch.cuda.synchronize("cuda")
        assert torch.cuda.get_device_name() == torch.fl.get_device_properties("cpu").name
        assert torch.cuda.get_device_properties(0).total_memory > 0
        assert torch.cuda.is_bf16_supported() is True  # bfloat16 is in the cpu description's dtypes
        torch.cuda.reset_peak_memory_stats()
        assert torch.cuda.max_memory_allocated() >= torch.cuda.memory_allocated() > 0
        assert torch.cuda.memory_reserved() > 0 and torch.cuda.max_memory_reserved() > 0
        free, total = torch.cuda.mem_get_info()
        assert 0 < free <= total
        torch.cuda.empty_cache()


def test_cuda_seeding_is_reproducible():
    with cuda_alias("cpu"):
        torch.cuda.manual_seed(7)
        a = torch.randn(4, device="cuda")
        torch.cuda.manual_seed_all(7)
        b = torch.randn(4, device="cuda")
        torch.manual_seed(7)  # torch seeds CUDA through torch.cuda.manual_seed_all: the original, no loop
    assert torch.equal(a, b)


def test_cuda_streams_and_events_time_work():
    with cuda_alias("cpu"):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        stream = torch.cuda.Stream()
        start.record()
        with torch.cuda.stream(stream):
            torch.ones(64, 64, device="cuda") @ torch.ones(64, 64, device="cuda")
        end.record()
        torch.cuda.current_stream().synchronize()
        assert isinstance(start, torch.cuda.Event) and isinstance(stream, torch.cuda.Stream)
    assert start.elapsed_time(end) >= 0


def test_torch_internals_see_the_real_torch_cuda():
    # A caller inside torch (here: code compiled with a file name in torch's directory) gets the
    # original functions, so torch's own checks (DataLoader pinning, seeding) keep seeing the truth.
    inside_torch = compile("found = torch.cuda.is_available()", os.path.join(torch.__path__[0], "_probe.py"), "exec")
    scope = {"torch": torch}
    with cuda_alias("cpu"):
        exec(inside_torch, scope)
        user = torch.cuda.is_available()
    assert user is True and scope["found"] is (torch.cuda.device_count() > 0)


def test_torch_fl_own_requests_are_not_aliased():
    # torch-fl's analyses name devices on purpose (`torchfl coverage --device cuda` under FL_CUDA_ALIAS=1).
    own = compile("try:\n    found = torch.zeros(1, device='cuda').device.type\n"
                  "except (AssertionError, RuntimeError):\n    found = 'not rewritten'\n",
                  os.path.join(os.path.dirname(torch_fl.__file__), "_probe.py"), "exec")
    scope = {"torch": torch}
    with cuda_alias("cpu"):
        exec(own, scope)
        assert torch.zeros(1, device="cuda").device.type == "cpu"
    assert scope["found"] in ("cuda", "not rewritten")


def test_unaliased_cuda_functions_run_as_is_and_are_logged(migrate_log):
    with cuda_alias("cpu"):
        assert isinstance(torch.cuda.get_arch_list(), list)  # no torch.fl counterpart: the original runs
    assert any("torch.cuda.get_arch_list" in r.getMessage() and "not aliased" in r.getMessage()
               for r in migrate_log)


# Autocast, GradScaler ------------------------------------------------------------------------------
def test_autocast_uses_the_target_type_and_a_dtype_it_supports():
    a = torch.ones(4, 4)
    with cuda_alias("cpu"):
        with torch.autocast("cuda"):
            default = (a @ a).dtype
        with torch.amp.autocast(device_type="cuda", dtype=torch.float16):
            requested = (a @ a).dtype
        with torch.cuda.amp.autocast():
            legacy = (a @ a).dtype
        assert isinstance(torch.autocast("cuda"), torch.amp.autocast_mode.autocast)
    assert default == torch.bfloat16  # the cpu description's autocast dtype
    assert requested == torch.float16  # listed in the cpu description: kept
    assert legacy == torch.bfloat16


def test_grad_scaler_trains_on_the_target():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with cuda_alias("cpu"):
        model.cuda()
        scaler = torch.cuda.amp.GradScaler()
        assert torch.amp.GradScaler("cuda")._device == "cpu"
        x = torch.randn(16, 8, device="cuda")
        losses = []
        for _ in range(5):
            with torch.cuda.amp.autocast(dtype=torch.float16):
                loss = model(x).float().pow(2).mean()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
            losses.append(loss.item())
    assert scaler._device == "cpu" and losses[-1] < losses[0]


# torch.distributed, torch.load --------------------------------------------------------------------
def test_nccl_becomes_the_description_backend_and_ddp_drops_host_device_ids(tmp_path):
    with cuda_alias("cpu"):
        dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
        try:
            assert dist.get_backend() == torch.fl.dist_backend("cpu") == "gloo"
            model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).cuda(), device_ids=[0])
            model(torch.ones(1, 2, device="cuda")).sum().backward()
            # Before the group goes: a DDP model freed after destroy_process_group() runs the group's
            # destructor, which joins gloo's workers holding the GIL; under load one of them can still
            # need it (PyTorch's deadlock, also without torch-fl: it stalled CI for 90 minutes).
            del model
        finally:
            dist.destroy_process_group()


def test_checkpoints_saved_on_cuda_load_on_the_target(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    # Make torch.save tag the storage 'cuda:0', as a checkpoint written on a GPU is.
    monkeypatch.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
    torch.save({"w": torch.arange(3.0)}, path)
    monkeypatch.undo()
    with pytest.raises(RuntimeError, match="CUDA"):
        torch.load(path)
    with cuda_alias("cpu"):
        plain = torch.load(path)["w"]
        mapped = torch.load(path, map_location="cuda")["w"]
        by_dict = torch.load(path, map_location={"cuda:0": "cuda:0"})["w"]
    assert all(t.device.type == "cpu" and t.tolist() == [0.0, 1.0, 2.0] for t in (plain, mapped, by_dict))


def test_set_default_device():
    try:
        with cuda_alias("cpu"):
            torch.set_default_device("cuda")
            assert torch.zeros(1).device.type == "cpu"
    finally:
        torch.set_default_device(None)


# Mechanics ----------------------------------------------------------------------------------------
def test_exit_restores_every_attribute_exactly():
    before, modes = snapshot(), len(_get_current_function_mode_stack())
    with cuda_alias("cpu"):
        during = snapshot()
    after = snapshot()
    assert during["torch.cuda"]["synchronize"] is not before["torch.cuda"]["synchronize"]
    assert "cuda" in during["torch.Tensor"] and "cuda" not in before["torch.Tensor"]  # inherited
    for name, attrs in before.items():
        assert after[name].keys() == attrs.keys(), name
        changed = [k for k, v in attrs.items() if after[name][k] is not v]
        assert not changed, (name, changed)
    assert len(_get_current_function_mode_stack()) == modes


def test_enable_disable_and_one_alias_at_a_time():
    first = cuda_alias("cpu").enable()
    try:
        assert alias_mod.active() is first and first.enable() is first
        with pytest.raises(RuntimeError, match="already active"):
            cuda_alias("cpu").enable()
        errors: list[BaseException] = []
        worker = threading.Thread(target=lambda: _capture(first.disable, errors))
        worker.start()
        worker.join()
        assert errors and "thread that enabled it" in str(errors[0])
    finally:
        first.disable()
    assert alias_mod.active() is None and not first.enabled
    first.disable()  # idempotent


def _capture(fn, errors):
    try:
        fn()
    except RuntimeError as exc:
        errors.append(exc)


def test_other_threads_get_the_patches_but_not_the_mode():
    results: dict[str, object] = {}

    def work():
        results["to"] = torch.ones(1).to("cuda").device.type  # a process-wide patch
        try:
            torch.zeros(1, device="cuda")
        except (AssertionError, RuntimeError) as exc:  # the mode is per thread (documented)
            results["factory"] = exc
        else:
            results["factory"] = "rewritten"

    with cuda_alias("cpu"):
        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
    assert results["to"] == "cpu"
    if not torch.cuda.is_available():
        assert isinstance(results["factory"], (AssertionError, RuntimeError))


def test_each_site_is_logged_once_with_its_line(migrate_log):
    with cuda_alias("cpu"):
        for _ in range(3):
            torch.zeros(1, device="cuda"); torch.cuda.synchronize()  # noqa: E702  (one site, two calls)
    line = sys._getframe().f_lineno - 1
    messages = [r.getMessage() for r in migrate_log]
    site = f"{Path(__file__).name}:{line}"
    assert sum(site in m and "torch.zeros(cuda) runs on cpu" in m for m in messages) == 1
    assert sum(site in m and "torch.cuda.synchronize" in m for m in messages) == 1


def test_a_real_cuda_target_is_a_noop(migrate_log):
    # Physical names pass through torch.fl.device() unchecked, so "cuda:0" is a real-CUDA target on
    # any machine: no mock needed. On a CPU-only build the originals still fail as they always did.
    before = snapshot()
    with cuda_alias("cuda:0") as noop:
        assert snapshot() == before and noop.real_cuda
        assert torch.cuda.is_available() is (torch.cuda.device_count() > 0)
    assert sum("does nothing" in r.getMessage() for r in migrate_log) == 1


def test_a_deferred_target_that_turns_out_cuda_passes_everything_through(monkeypatch):
    monkeypatch.setenv("FL_DEVICE", "cuda:0")
    torch_fl.reset()
    alias = cuda_alias().enable(resolve_now=False)  # what the autoload hook does
    try:
        assert torch.cuda.is_available() is (torch.cuda.device_count() > 0)  # the original answers
        assert alias.map_device("cuda:1") == torch.device("cuda", 1)
    finally:
        alias.disable()


def test_emulated_chip_target_routes_the_aliased_code(monkeypatch):
    monkeypatch.setenv("FL_DEVICE", "emu:minimal")
    torch_fl.reset()
    with cuda_alias():
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU()).cuda()
        model(torch.randn(2, 4, device="cuda")).sum().backward()
    assert torch.fl.route_stats()  # the emulated chip translated some of the aliased model's ops


@pytest.mark.filterwarnings("ignore::UserWarning")  # Dynamo: graph breaks at the patched Tensor.to
def test_torch_compile_of_aliased_code():
    class WithCudaRequests(torch.nn.Module):
        def forward(self, x):
            return x + torch.arange(x.shape[-1], device="cuda") + torch.ones(1).to("cuda")

    model = WithCudaRequests()
    with cuda_alias("cpu"):
        x = torch.randn(2, 4, device="cuda")
        compiled = torch.compile(model, backend="eager")  # Dynamo's tracing, without Inductor's compile time
        out = compiled(x)
        assert out.device.type == "cpu" and torch.equal(out, model(x))


# FL_CUDA_ALIAS ------------------------------------------------------------------------------------
def test_autoload_hook(monkeypatch):
    assert autoload.autoload() is None and alias_mod.active() is None  # unset: nothing happens
    monkeypatch.setenv("FL_CUDA_ALIAS", "maybe")
    with pytest.raises(ConfigError, match="FL_CUDA_ALIAS: 'maybe'"):
        autoload.autoload()
    monkeypatch.setenv("FL_CUDA_ALIAS", "1")
    monkeypatch.setenv("FL_BACKEND", "cpu")
    torch_fl.reset()
    autoload.autoload()
    try:
        assert alias_mod.active() is not None and torch.zeros(1, device="cuda").device.type == "cpu"
    finally:
        alias_mod.active().disable()


def test_autoload_entry_point_is_registered():
    names = {ep.value for ep in metadata.entry_points(group="torch.backends")}
    assert "_torch_fl_alias:autoload" in names, "reinstall: pip install -e . --no-deps"


def test_autoload_without_the_variable_imports_nothing_of_torch_fl():
    # `import torch` runs the hook in every process: unset, it must not even import torch_fl, so a
    # broken FL_* setting can never break `import torch`.
    code = "import sys, torch; print(sorted(m for m in sys.modules if m.startswith('torch_fl')))"
    env = {k: v for k, v in os.environ.items() if k != "FL_CUDA_ALIAS"}
    out = subprocess.run([sys.executable, "-c", code], env={**env, "FL_LOG": "dispatch=LOUD"},
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# End to end ---------------------------------------------------------------------------------------
def run_fixture(argv: list[str], env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess:
    full_env = {**{k: v for k, v in os.environ.items() if not k.startswith("FL_")}, **CPU_ENV, **env}
    return subprocess.run(argv, env=full_env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def losses(stdout: str) -> list[float]:
    found = [(int(step), float(loss)) for step, loss in LOSS.findall(stdout)]
    assert [step for step, _ in found] == list(range(len(found))), stdout
    return [loss for _, loss in found]


@pytest.mark.slow
def test_unmodified_cuda_script_trains_under_torchfl_run():
    out = run_fixture([sys.executable, "-m", "torch_fl", "run", str(FIXTURE), "--max_iters=4",
                       "--eval_interval=2"], {})
    assert out.returncode == 0, out.stderr
    found = losses(out.stdout)
    assert len(found) == 4 and all(math.isfinite(v) for v in found) and found[-1] < found[0]
    assert "step 2: train loss" in out.stdout  # estimate_loss: torch.zeros(...).cuda()


@pytest.mark.slow
def test_unmodified_cuda_script_trains_with_fl_cuda_alias():
    # float16: the GradScaler path (torch.cuda.amp.GradScaler(enabled=True)) on the CPU.
    out = run_fixture([sys.executable, str(FIXTURE), "--max_iters=3", "--dtype=float16"],
                      {"FL_CUDA_ALIAS": "1", "FL_LOG": "migrate=INFO"})
    assert out.returncode == 0, out.stderr
    found = losses(out.stdout)
    assert len(found) == 3 and all(math.isfinite(v) for v in found) and found[-1] < found[0]
    assert "dtype float16" in out.stdout
    assert re.search(r"train_gpt_cuda\.py:\d+: torch\.cuda\.amp\.GradScaler\(cuda\) runs on cpu", out.stderr)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the script runs natively where CUDA exists")
def test_without_the_alias_the_script_fails():
    out = run_fixture([sys.executable, str(FIXTURE), "--max_iters=1"], {})
    assert out.returncode != 0 and "Torch not compiled with CUDA enabled" in out.stderr


@pytest.mark.slow
def test_ddp_with_nccl_runs_on_two_cpu_processes():
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun is not installed next to this Python")
    out = run_fixture([str(torchrun), "--standalone", "--nproc_per_node=2", str(FIXTURE), "--max_iters=2"],
                      {"FL_CUDA_ALIAS": "1", "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "backend nccl, world size 2" in out.stdout and len(losses(out.stdout)) == 2  # rank 0 logs


def test_torchfl_run_module_and_exit_code(tmp_path, monkeypatch, capsys):
    (tmp_path / "cudamod.py").write_text(
        "import sys, torch\n"
        "print('argv', sys.argv[1:], torch.ones(1, device='cuda').device)\n"
        "sys.exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--device", "cpu", "-m", "cudamod", "--flag", "x"]) == 3
    assert "argv ['--flag', 'x'] cpu" in capsys.readouterr().out
    assert main(["run", "--device", "cpu", str(tmp_path / "cudamod.py")]) == 3
    assert alias_mod.active() is None


def test_torchfl_run_reports_a_crash_as_python_does(tmp_path, capsys):
    script = tmp_path / "boom.py"
    script.write_text("raise ValueError('boom')\n")
    assert main(["run", str(script)]) == 1
    err = capsys.readouterr().err
    assert "ValueError: boom" in err and "cli/run.py" not in err


# torchfl audit ------------------------------------------------------------------------------------
def test_audit_of_the_example_gpt_reports_its_device_argument(tmp_path, capsys):
    out_json = tmp_path / "audit.json"
    assert main(["audit", str(ROOT / "examples" / "gpt.py") + ":factory", "--train", "--json", str(out_json)]) == 0
    data = json.loads(out_json.read_text())
    (row,) = [r for r in data["requests"] if r["call"] == "torch.arange"]
    source = (ROOT / "examples" / "gpt.py").read_text().splitlines()[row["line"] - 1].strip()
    assert row["source"] == source and "device=idx.device" in source
    assert row["requested"] == row["resolved"] == "cpu" and not row["cuda"]
    assert data["summary"]["cuda_requests"] == 0
    assert "none: this run asked for no CUDA device" in capsys.readouterr().out


CUDA_SCRIPT = """\
import torch

device = "cuda"
x = torch.zeros(3, device=device)
model = torch.nn.Linear(3, 2).cuda()
for _ in range(2):
    y = model(x.to(device))
torch.cuda.synchronize()
print("trained", y.shape)
"""


def test_audit_of_a_script_flags_each_cuda_line(tmp_path, capsys):
    script = tmp_path / "cuda_train.py"
    script.write_text(CUDA_SCRIPT)
    out_json = tmp_path / "audit.json"
    assert main(["audit", "--json", str(out_json), "--strict", "--script", str(script)]) == 1
    rows = {(r["line"], r["call"]): r for r in json.loads(out_json.read_text())["requests"]}
    assert rows[(4, "torch.zeros")]["source"] == 'x = torch.zeros(3, device=device)'
    assert rows[(5, "Module.cuda")]["cuda"] and rows[(7, "Tensor.to")]["count"] == 2
    assert rows[(8, "torch.cuda.synchronize")]["resolved"] == "cpu"
    text = capsys.readouterr().out
    assert "trained torch.Size([2])" in text and "cuda_train.py:4" in text


def test_audit_of_a_model_with_a_cuda_literal_in_forward(tmp_path):
    model_file = tmp_path / "cudamodel.py"
    model_file.write_text(
        "import torch\n\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x + torch.ones(x.shape, device='cuda')\n\n"
        "def factory():\n"
        "    return M(), (torch.zeros(2),)\n")
    out_json = tmp_path / "audit.json"
    assert main(["audit", f"{model_file}:factory", "--json", str(out_json)]) == 0
    (row,) = json.loads(out_json.read_text())["requests"]
    assert (row["line"], row["call"], row["requested"], row["resolved"], row["cuda"]) == (
        5, "torch.ones", "cuda", "cpu", True)
    assert row["source"] == "return x + torch.ones(x.shape, device='cuda')"


def _protocol_members(protocol: type) -> set[str]:
    return {n for n in vars(protocol) if not n.startswith("_")} | set(protocol.__annotations__)


def test_the_alias_has_every_member_its_entry_points_ask_for():
    # patches.py and cuda_surface.py name alias_calls.AliasHooks, not alias.CudaAlias (no import cycle):
    # the class must still provide all of it. Class members are looked up on the class, so that `target`
    # (a property that resolves the device) is not run.
    from torch_fl.migrate.alias_calls import AliasHooks

    alias = cuda_alias("cpu")
    members = _protocol_members(AliasHooks)
    assert {"target", "map_args", "note", "patch", "recorder"} <= members
    missing = sorted(n for n in members if not hasattr(type(alias), n) and n not in vars(alias))
    assert not missing, f"CudaAlias lacks {missing} of alias_calls.AliasHooks"
