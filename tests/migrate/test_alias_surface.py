"""The CUDA alias over the whole CUDA-API table (migrate/cuda_api.py): one test per entry, integer
ordinals wherever a device is accepted, queries answered from the description (and reported), the
issue's probe script under FL_CUDA_ALIAS=1, the failure message of a broken FL_CUDA_ALIAS setup, and
docs/migrate-runtime.md's generated table.

Everything aliases CUDA to the CPU explicitly, so the tests mean the same on a machine with a GPU.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import torch_fl
from torch_fl.cli import main
from torch_fl.errors import DeviceNotFoundError
from torch_fl.migrate import cuda_alias
from torch_fl.migrate.cuda_api import CUDA_API, CUDA_TENSOR_TYPES
from torch_fl.migrate.cuda_surface import CONSERVATIVE_CAPABILITY, CudaAliasError, _wrapped, surface_markdown

ROOT = Path(__file__).parents[2]
DOC = ROOT / "docs" / "migrate-runtime.md"
CPU_ENV = {"FL_BACKEND": "cpu", "FL_DEVICE": "cpu"}


def _stream_call():
    return torch.cuda.stream(torch.cuda.Stream())


def _enter(context):
    with context as value:
        return value


# Arguments for the aliased entries that need some; the others are called with none.
ALIASED_CALLS = {
    "set_device": lambda f: f(0),
    "synchronize": lambda f: f(0),
    "manual_seed": lambda f: f(0),
    "manual_seed_all": lambda f: f(0),
    "device": lambda f: _enter(f(0)),
    "device_of": lambda f: _enter(f(torch.ones(1))),
    "get_device_properties": lambda f: f(0),
    "stream": lambda f: _enter(f(torch.cuda.Stream())),
    "Event": lambda f: f(enable_timing=True),
    "amp.autocast": lambda f: _enter(f()),
    "amp.GradScaler": lambda f: f(),
    "set_rng_state": lambda f: f(torch.cuda.get_rng_state()),
    "set_rng_state_all": lambda f: f(torch.cuda.get_rng_state_all()),
    "nvtx": lambda f: (f.range_push("step"), f.range_pop(), _enter(f.range("r{}", 1)), f.mark("m")),
}
REFUSED_CALLS = {
    "graph": lambda f: f(None),
    "make_graphed_callables": lambda f: f(lambda x: x, (torch.ones(1),)),
}


def _resolve(entry):
    if entry.kind == "module":
        return importlib.import_module(entry.name)
    obj = torch
    for part in entry.name.split(".")[1:]:
        obj = getattr(obj, part, None)
        if obj is None and entry.kind != "attribute":
            pytest.skip(f"{entry.name} is not in torch {torch.__version__}")
    return obj


@pytest.mark.filterwarnings("ignore::FutureWarning")  # the renamed *_cached functions run as is
@pytest.mark.parametrize("name", sorted(CUDA_API))
def test_each_table_entry_under_the_alias(name):
    entry = CUDA_API[name]
    before = _resolve(entry) if not _wrapped(entry) else None
    with cuda_alias("cpu"):
        target = _resolve(entry)
        if entry.alias is not None:
            result = ALIASED_CALLS.get(entry.short, lambda f: f())(target)
            if entry.kind == "type":
                assert result.device.type == "cpu" and result.dtype == getattr(torch, CUDA_TENSOR_TYPES[entry.short])
        elif entry.alias_refuses:
            with pytest.raises(CudaAliasError, match=r"CUDA alias \(FL_CUDA_ALIAS=1") as err:
                REFUSED_CALLS.get(entry.short, lambda f: f())(target)
            assert entry.remedy.rstrip(".") in str(err.value)
        elif _wrapped(entry):
            try:  # runs as is: a result, or the documented error naming the alias and the remedy
                target()
            except CudaAliasError as err:
                assert "has no torch.fl counterpart" in str(err) and entry.remedy.rstrip(".") in str(err)
        else:
            assert target is before  # left alone


def test_typed_tensor_constructors_and_isinstance():
    with cuda_alias("cpu"):
        sized, data, copied = torch.cuda.FloatTensor(2, 3), torch.cuda.LongTensor([1, 2]), torch.cuda.HalfTensor(
            torch.ones(2))
        assert sized.shape == (2, 3) and data.tolist() == [1, 2] and copied.dtype == torch.float16
        assert isinstance(data, torch.cuda.LongTensor) and not isinstance(data, torch.cuda.FloatTensor)
        assert torch.cuda.FloatTensor().numel() == 0


@pytest.mark.filterwarnings("ignore:torch.set_default_tensor_type:UserWarning")
def test_legacy_type_names_and_record_stream():
    x = torch.ones(2)
    with cuda_alias("cpu"):
        assert x.type(torch.cuda.HalfTensor).dtype == torch.float16
        assert x.type("torch.cuda.LongTensor").dtype == torch.int64 and x.type() == "torch.FloatTensor"
        assert x.type("torch.DoubleTensor").dtype == torch.float64
        x.cuda().record_stream(torch.cuda.current_stream())  # the host stream: nothing to record
        try:
            torch.set_default_tensor_type(torch.cuda.DoubleTensor)
            assert torch.zeros(1).dtype == torch.float64
        finally:
            torch.set_default_tensor_type(torch.FloatTensor)
        assert torch.zeros(1).dtype == torch.float32 and torch.get_default_device() == torch.device("cpu")


def test_cuda_device_context_and_graphs_name_the_alternative():
    with cuda_alias("cpu"):
        with torch.cuda.device(0):
            assert torch.zeros(1, device="cuda").device.type == "cpu"
        with torch.cuda.device(-1), torch.cuda.device(None):  # "no device", as in torch
            pass
        with pytest.raises(CudaAliasError, match=r'torch.cuda.CUDAGraph .*torch.compile\(mode="reduce-overhead"\)'):
            torch.cuda.CUDAGraph()
        assert torch.cuda.is_current_stream_capturing() is False


# Integer ordinals -----------------------------------------------------------------------------------
def test_integer_ordinals_wherever_a_device_is_accepted():
    x = torch.ones(2)
    with cuda_alias("cpu"):
        dev = torch.device(0)
        assert dev == torch.device("cuda", 0)  # device objects stay CUDA, mapped where used
        moved = [x.to(0), x.to(0, torch.float16), x.to(dev), x.to(device=1), x.cuda(0), torch.zeros(1, device=0),
                 torch.ones(1, device=dev), x.new_zeros(2, device=0)]
        assert {t.device.type for t in moved} == {"cpu"} and moved[1].dtype == torch.float16
        model = torch.nn.Linear(2, 2).to(0)
        assert model.weight.device.type == "cpu"
        assert torch.nn.Linear(2, 2).to(1, torch.float64).weight.dtype == torch.float64
        assert x.to(torch.float64).dtype == torch.float64  # a dtype is not an ordinal


def test_untyped_storage_on_cuda_is_a_storage_of_the_target():
    # (the emulated device of the test session has its own UntypedStorage.__new__: the alias restores
    # whatever was there)
    before = vars(torch.UntypedStorage).get("__new__")
    with cuda_alias("cpu"):
        assert torch.UntypedStorage(4, device="cuda").device.type == "cpu"
        assert torch.UntypedStorage(4, device=0).nbytes() == 4 and torch.UntypedStorage(2).device.type == "cpu"
    assert vars(torch.UntypedStorage).get("__new__") is before


@pytest.mark.parametrize("map_location", ["cuda:0", 0, torch.device("cuda", 1), {"cpu": "cuda:0"},
                                          lambda storage, loc: storage.cuda(), lambda storage, loc: storage.cuda(0),
                                          lambda storage, loc: None])
def test_map_location_of_every_kind(map_location):
    buffer = io.BytesIO()
    torch.save({"w": torch.arange(3.0)}, buffer)
    with cuda_alias("cpu"):
        buffer.seek(0)
        loaded = torch.load(buffer, map_location=map_location)
    assert loaded["w"].device.type == "cpu" and loaded["w"].tolist() == [0.0, 1.0, 2.0]


def test_ddp_device_ids_and_output_device_as_ordinals(tmp_path):
    # A bounded store timeout (torch's default is 30 minutes: a FileStore retries a missing file that
    # long) and the DDP model released before the group is destroyed, so that the gloo group's destructor
    # runs here, while its store file exists, not at some later garbage collection (where it once hung
    # the suite for 30 minutes). The watchdog of an earlier torch.fl group no longer adopts this group.
    with cuda_alias("cpu"):
        dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1,
                                timeout=timedelta(seconds=60))
        try:
            model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).to(0), device_ids=[0],
                                                              output_device=0)
            model(torch.ones(1, 2).to(0)).sum().backward()
            assert model.device_ids is None and model.module.weight.grad is not None
            del model
        finally:
            dist.destroy_process_group()


def test_ordinals_out_of_range_are_a_clear_error(monkeypatch):
    monkeypatch.setenv("FL_DEVICE_MAP", "acc0=cpu:0")  # an indexed target: ordinal N means accN
    torch_fl.reset()
    x = torch.ones(1)
    with cuda_alias():
        assert x.to(0).device.type == "cpu"
        for call in (lambda: x.to(1), lambda: torch.nn.Linear(1, 1).to(3), lambda: torch.zeros(1, device=2),
                     lambda: torch.cuda.get_device_capability(5)):
            with pytest.raises(DeviceNotFoundError, match=r"cuda:\d.*FL_DEVICE_MAP"):
                call()
    with cuda_alias("cpu"), pytest.raises(DeviceNotFoundError, match="ordinals count from 0"):
        x.to(-1)


# Queries answered from the description, and the report -----------------------------------------------
def test_capability_and_properties_answer_from_the_description_and_are_reported():
    with cuda_alias("cpu") as alias:
        capability = torch.cuda.get_device_capability()
        props = torch.cuda.get_device_properties(0)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.enable_flash_sdp(False)
        torch.backends.cuda.enable_flash_sdp(True)
    facade = torch.fl.get_device_properties("cpu")
    assert capability == CONSERVATIVE_CAPABILITY and not capability >= (8, 0)
    assert (props.major, props.minor) == CONSERVATIVE_CAPABILITY
    assert (props.name, props.total_memory, props.multi_processor_count) == (
        facade.name, facade.total_memory, facade.multi_processor_count)
    report = alias.report()
    assert "torch.cuda.get_device_capability -> (7, 0)  (1x)" in report
    assert "torch.cuda.get_device_properties -> name=" in report
    assert "torch.backends.cuda.matmul.allow_tf32 = True -> accepted, no effect off CUDA" in report
    assert "torch.backends.cudnn.benchmark = True" in report and "enable_flash_sdp(False)" in report


def test_generator_on_cuda_is_a_generator_of_the_target():
    before = torch.Generator  # torch's, or the emulator's stand-in once the emu backend is registered
    with cuda_alias("cpu"):
        gen = torch.Generator(device="cuda")
        gen.manual_seed(3)
        first = torch.randn(2, generator=gen)
        assert isinstance(gen, torch.Generator) and gen.device.type == "cpu"
        assert isinstance(torch.Generator(), torch.Generator)
    gen = torch.Generator().manual_seed(3)
    assert torch.equal(first, torch.randn(2, generator=gen)) and torch.Generator is before


def test_torch_jit_script_keeps_working():
    @torch.jit.script
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    with cuda_alias("cpu"):
        scripted = torch.jit.script(torch.nn.Linear(2, 2).cuda())
        out = scripted(torch.ones(1, 2, device="cuda"))
        assert out.device.type == "cpu" and double(torch.ones(1).cuda()).item() == 2.0

        @torch.jit.script
        def triple(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
            return x * 3  # torch.Generator is the alias's stand-in here: TorchScript still resolves it

        assert triple(torch.ones(1)).item() == 3.0


def test_torchfl_run_report(tmp_path, capsys, monkeypatch):
    script = tmp_path / "caps.py"
    script.write_text("import torch\nassert torch.cuda.get_device_capability() < (8, 0)\n"
                      "torch.backends.cuda.matmul.allow_tf32 = True\n")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--device", "cpu", "--report", str(script)]) == 0
    err = capsys.readouterr().err
    assert "CUDA alias report (target cpu)" in err and "torch.cuda.get_device_capability -> (7, 0)" in err
    assert "allow_tf32 = True -> accepted, no effect off CUDA" in err


# The issue's probe, as a user runs it ----------------------------------------------------------------
PROBE = textwrap.dedent("""
    import io, json, torch
    results = {}
    def probe(name, fn):
        try:
            value = fn()
            results[name] = ["ok", str(value.device) if isinstance(value, torch.Tensor) else repr(value)]
        except Exception as exc:
            results[name] = ["error", f"{type(exc).__name__}: {exc}"]
    def load(map_location):
        buffer = io.BytesIO(); torch.save({"w": torch.ones(2)}, buffer); buffer.seek(0)
        return torch.load(buffer, map_location=map_location)["w"]
    def in_device_context():
        with torch.cuda.device(0):
            return torch.zeros(1, device="cuda")
    x = torch.ones(2)
    probe("x.to(0)", lambda: x.to(0))
    probe("torch.device(0)", lambda: torch.ones(1, device=torch.device(0)))
    probe("x.cuda(0)", lambda: x.cuda(0))
    probe("device=0", lambda: torch.zeros(2, device=0))
    probe("model.to(rank)", lambda: torch.nn.Linear(2, 2).to(0).weight)
    probe("get_device_capability", lambda: torch.cuda.get_device_capability())
    probe("torch.cuda.device(0)", in_device_context)
    probe("torch.cuda.FloatTensor(2)", lambda: torch.cuda.FloatTensor(2))
    probe("torch.Generator(device='cuda')", lambda: torch.randn(1, generator=torch.Generator(device="cuda")))
    probe("map_location=lambda s, l: s.cuda()", lambda: load(lambda s, l: s.cuda()))
    probe("map_location=0", lambda: load(0))
    probe("get_device_properties(0)", lambda: torch.cuda.get_device_properties(0).total_memory > 0)
    probe("torch.cuda.stream", lambda: torch.cuda.stream(torch.cuda.Stream()).__enter__() is not None)
    probe("torch.cuda.CUDAGraph()", lambda: torch.cuda.CUDAGraph())
    print(json.dumps(results))
""")


def test_the_issue_probe_under_fl_cuda_alias(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    env = {**os.environ, **CPU_ENV, "FL_CUDA_ALIAS": "1"}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])
    failed = {name: detail for name, (status, detail) in results.items() if status != "ok"}
    assert set(failed) == {"torch.cuda.CUDAGraph()"}, failed
    assert "CudaAliasError" in failed["torch.cuda.CUDAGraph()"] and "reduce-overhead" in failed["torch.cuda.CUDAGraph()"]
    assert results["get_device_capability"] == ["ok", repr(CONSERVATIVE_CAPABILITY)]
    assert all(detail == "cpu" for name, (_, detail) in results.items()
               if name.startswith(("x.", "device=", "model", "map_location")))


@pytest.mark.parametrize(("setting", "cause"), [
    ({"FL_CUDA_ALIAS": "maybe"}, "FL_CUDA_ALIAS: 'maybe'"),
    ({"FL_CUDA_ALIAS": "1", "FL_DEVICE": "bogus"}, "device 'bogus' (from FL_DEVICE)"),
])
def test_a_failing_fl_cuda_alias_ends_with_its_cause(setting, cause):
    env = {**os.environ, **CPU_ENV, **setting}
    done = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True,
                          timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and cause in lines[-1], done.stderr
    assert "Failed to load the backend extension" not in done.stderr and "Traceback" not in done.stderr
    assert f"FL_CUDA_ALIAS={setting['FL_CUDA_ALIAS']}" in lines[-2]


# docs -------------------------------------------------------------------------------------------------
def test_the_doc_table_is_generated_from_the_table():
    text = DOC.read_text()
    begin, end = "<!-- surface:begin (generated: cuda_surface.surface_markdown) -->\n", "<!-- surface:end -->"
    assert begin in text and end in text, "docs/migrate-runtime.md lost its generated-table markers"
    current = text.split(begin, 1)[1].split(end, 1)[0]
    assert current == surface_markdown(), (
        "docs/migrate-runtime.md is stale: regenerate the table between the markers with "
        "`python -c 'from torch_fl.migrate.cuda_surface import surface_markdown; print(surface_markdown(), end=\"\")'`")


# DDP with integer ordinals, as the DDP tutorials write it ----------------------------------------------
DDP_SCRIPT = textwrap.dedent("""
    import os, sys, torch
    import torch.nn.functional as F
    from torch.distributed import destroy_process_group, init_process_group
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    init_process_group(backend="nccl")
    snapshot = sys.argv[1]
    model = torch.nn.Linear(8, 1).to(rank)
    if os.path.exists(snapshot):
        model.load_state_dict(torch.load(snapshot, map_location=f"cuda:{rank}"))
    model = DDP(model, device_ids=[rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(rank)
    for step in range(3):
        source = torch.randn(4, 8, generator=generator).to(rank)
        target = torch.randn(4, 1, generator=generator).to(rank)
        optimizer.zero_grad()
        F.mse_loss(model(source), target).backward()
        optimizer.step()
    weights = [torch.zeros_like(model.module.weight) for _ in range(2)]
    torch.distributed.all_gather(weights, model.module.weight.detach())
    assert torch.equal(weights[0], weights[1]), "DDP replicas diverged"
    if rank == 0:
        torch.save(model.module.state_dict(), snapshot)
        print("trained on", model.module.weight.device, "backend", torch.distributed.get_backend())
    del model  # (the tutorial frees it after the group; that can deadlock in PyTorch's gloo destructor)
    destroy_process_group()
""")


@pytest.mark.slow
def test_ddp_tutorial_pattern_with_ordinals_runs_on_two_cpu_processes(tmp_path):
    script = tmp_path / "ddp_ordinals.py"
    script.write_text(DDP_SCRIPT)
    env = {**os.environ, **CPU_ENV, "FL_CUDA_ALIAS": "1", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script),
               str(tmp_path / "snapshot.pt")]
    for run in ("fresh", "resumed from the snapshot"):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert done.returncode == 0, f"{run}: {done.stderr[-3000:]}"
        assert "trained on cpu backend gloo" in done.stdout, run


def test_audit_lists_the_queries_answered_from_the_description(tmp_path, capsys):
    script = tmp_path / "capability.py"
    script.write_text("import torch\nmajor, minor = torch.cuda.get_device_capability(0)\n"
                      "print('flash' if major >= 8 else 'math')\n")
    out_json = tmp_path / "audit.json"
    assert main(["audit", "--json", str(out_json), "--script", str(script)]) == 0
    assert json.loads(out_json.read_text())["answered"] == [
        {"query": "torch.cuda.get_device_capability", "answer": "(7, 0)", "count": 1}]
    text = capsys.readouterr().out
    assert "math" in text and "Answered by the alias from the description" in text


def test_device_mesh_of_cuda_is_a_mesh_of_the_target(tmp_path):
    from torch.distributed.device_mesh import init_device_mesh

    with cuda_alias("cpu"):
        dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
        try:
            from torch.distributed.device_mesh import init_device_mesh as aliased

            assert init_device_mesh is not aliased  # imported before the alias: torch's own
            assert aliased("cuda", (1,)).device_type == "cpu"
        finally:
            dist.destroy_process_group()


def test_disable_restores_the_new_entry_points_exactly():
    import torch.distributed.device_mesh as mesh

    owners = {"torch": torch, "torch.Tensor": torch.Tensor, "StorageBase": torch.storage._StorageBase,
              "TypedStorage": torch.storage.TypedStorage, "torch.cuda": torch.cuda, "nvtx": torch.cuda.nvtx,
              "cuda.random": torch.cuda.random, "cuda.memory": torch.cuda.memory, "cuda.graphs": torch.cuda.graphs,
              "torch.accelerator": torch.accelerator, "UntypedStorage": torch.UntypedStorage,
              "backends.cuda": torch.backends.cuda, "cudnn class": type(torch.backends.cudnn),
              "matmul class": type(torch.backends.cuda.matmul), "device_mesh": mesh, "DeviceMesh": mesh.DeviceMesh}
    before = {name: dict(vars(owner)) for name, owner in owners.items()}
    with cuda_alias("cpu"):
        assert torch.Generator is not before["torch"]["Generator"]
        assert torch.cuda.get_device_capability is not before["torch.cuda"]["get_device_capability"]
    after = {name: dict(vars(owner)) for name, owner in owners.items()}
    for name in owners:
        changed = {k for k in before[name].keys() | after[name].keys()
                   if before[name].get(k, "<absent>") is not after[name].get(k, "<absent>")}
        assert not changed, f"{name}: {sorted(changed)} not restored"


def test_rng_states_of_the_target_round_trip_through_cuda_random():
    with cuda_alias("cpu"):
        states = torch.cuda.random.get_rng_state_all()  # as HF Trainer saves them
        first = torch.randn(3, device="cuda")
        torch.cuda.random.set_rng_state_all(states)
        assert torch.equal(torch.randn(3, device="cuda"), first)
        torch.cuda.set_rng_state(torch.cuda.get_rng_state(0), 0)
        assert isinstance(torch.cuda.initial_seed(), int) and torch.cuda.memory.memory_allocated() >= 0


def test_torch_accelerator_answers_for_the_target():
    with cuda_alias("cpu"):
        device_type = torch.accelerator.current_accelerator().type  # None on a CPU-only host without the alias
        assert device_type == "cpu" and torch.accelerator.is_available() is True
        assert torch.accelerator.device_count() == torch.fl.device_count("cpu")
        torch.accelerator.synchronize()
        with torch.accelerator.device_index(0):
            assert torch.zeros(1, device=device_type).device.type == "cpu"


@pytest.mark.filterwarnings("ignore::UserWarning")  # FSDP: sharding initialization on the CPU is slow
def test_fsdp_device_id_is_mapped(tmp_path):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP  # imported before init, as scripts do

    with cuda_alias("cpu"):
        dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
        try:
            # device_id=0 reaches FSDP as None (the host); without the mapping FSDP failed on CUDA ("Torch
            # not compiled with CUDA enabled"). FSDP1 then wants torch's current accelerator: none on a
            # CPU-only host ("FSDP needs a non-CPU accelerator device"), or the emulated device when a test
            # registered it in this process; either way no CUDA.
            try:
                FSDP(torch.nn.Linear(2, 2), device_id=0)(torch.ones(1, 2))
            except (RuntimeError, AssertionError) as err:
                assert "CUDA" not in str(err), err
        finally:
            dist.destroy_process_group()
    assert "__init__" not in vars(FSDP) or FSDP.__init__.__module__.startswith("torch.")
