"""Storages and serialisation on the emulated chip as the vendors' own tests expect them (issue 36): every
public storage method without a crash or a PyTorch internal assert, torch.tensor(<device storage>),
storage.npu(), x.data = x.data.npu(), legacy torch.save/torch.load with every map_location form, pickled
storages and DLPack; each value equal to the CPU round trip.

Checks of a chip under its vendor's name (npu, mlu) run in a fresh process with FL_DEVICE set, and every
check that once crashed the process runs in a subprocess: a segfault fails the test, not pytest."""

from __future__ import annotations

import io
import pickle
import warnings

import pytest
import torch

import torch_fl
from chip_process import run_on_chip  # tests/chip_process.py


@pytest.fixture
def d():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch_fl.errors.FallbackWarning)
        warnings.simplefilter("ignore", UserWarning)  # (TypedStorage is deprecated)
        with torch_fl.emulate("npu") as activation:
            yield activation.device


# every public storage method, each in a forked child (a crash is reported, not fatal) ---------------------
SWEEP = r"""
import json, os, sys, warnings, torch, torch_fl
warnings.simplefilter("ignore")
device = str(torch_fl.device())

def untyped():
    return torch.UntypedStorage([1, 2, 3, 4, 5, 6, 7, 8], device=device)

def typed():
    return torch.TypedStorage([1.0, 2.0, 3.0, 4.0], device=device)

ARGS = {"copy_": lambda s: (s.clone().fill_(0),), "fill_": lambda s: (3,), "resize_": lambda s: (4,),
        "__getitem__": lambda s: (slice(1, 3),), "__setitem__": lambda s: (slice(0, 2), 5),
        "__deepcopy__": lambda s: ({},), "_new_shared": lambda s: (4,), "type": lambda s: (),
        "__eq__": lambda s: (s,), "__reduce_ex__": lambda s: (2,), "byteswap": lambda s: (torch.uint8,),
        "_to": lambda s: (torch.float32,), "to": lambda s: ()}
SKIP = {"from_file", "from_buffer", "_from_buffer", "_new_with_file", "_set_from_file", "_write_file", "_set_cdata",
        "_new_with_weak_ptr", "_free_weak_ref", "_expired", "_weak_ref", "_new_using_fd_cpu",
        "_new_using_filename_cpu", "_new_shared_fd_cpu", "_new_shared_filename_cpu", "_new_shared_cuda",
        "_share_fd_cpu_", "_share_filename_cpu_", "_share_cuda_", "_release_ipc_counter",
        "_release_ipc_counter_cuda", "_shared_decref", "_shared_incref", "_fix_weakref", "_get_shared_fd",
        "_resize_with_addr_", "_swap_data_ptr_", "_byteswap", "_deepcopy", "_getitem", "_setitem",
        "_maybe_wrap_index", "_new_wrapped_storage", "_get_legacy_storage_class", "cuda", "hpu", "mps",
        "pin_memory", "_get_filename", "filename"}
DUNDER = {"__getitem__", "__setitem__", "__len__", "__iter__", "__copy__", "__deepcopy__", "__reduce__",
          "__reduce_ex__", "__repr__", "__sizeof__", "__eq__"}

def describe(out):
    if isinstance(out, (torch.UntypedStorage, torch.TypedStorage)):
        return ["storage", out.device.type != "cpu", out.tolist()]
    return out if isinstance(out, (bool, int, float, list)) else type(out).__name__

results = {}
for where, kind, make in ((w, k, m) for w in (device, "cpu") for k, m in (("untyped", untyped), ("typed", typed))):
    device = where
    for name in sorted(dir(type(make()))):
        if name in SKIP or (name.startswith("__") and name not in DUNDER) or name.startswith("float8") \
                or name.startswith("complex") or name in ("get_device", "device", "is_cuda", "is_hpu", "mlu",
                                                          "npu", "emu", "is_npu", "is_mlu", "is_emu"):
            continue
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            try:
                storage = make()
                attr = getattr(storage, name)
                out = attr(*ARGS.get(name, lambda s: ())(storage)) if callable(attr) else attr
                text = json.dumps(["ok", describe(out)], default=str)
            except BaseException as exc:
                text = json.dumps(["error", type(exc).__name__, str(exc)[:300]])
            os.write(write, text.encode())
            os._exit(0)
        os.close(write)
        text = os.read(read, 1 << 16).decode()
        os.close(read)
        _, status = os.waitpid(pid, 0)
        results.setdefault(where if where == "cpu" else "device", {})[f"{kind}.{name}"] = json.loads(text) if not os.WIFSIGNALED(status) else \
            ["crash", os.WTERMSIG(status)]
print(json.dumps(results))
"""


@pytest.mark.slow  # a fresh process, ~300 forked calls (~20 s)
@pytest.mark.parametrize("chip", ["npu", "mlu"])
def test_every_storage_method_runs_as_on_the_cpu(chip):
    out = run_on_chip(SWEEP, chip)
    device, host = out["device"], out["cpu"]
    assert len(device) == len(host) >= 90
    crashed = {k: v for k, v in device.items() if v[0] == "crash" or "INTERNAL ASSERT" in str(v)}
    assert not crashed
    # the same answers as the same calls on host storages (storages on the device say so: their flag)
    different = {}
    for key, (status, *value) in device.items():
        expected = host[key]
        if status == "ok" and expected[0] == "ok" and isinstance(value[0], list) and value[0][:1] == ["storage"]:
            if value[0][2] != expected[1][2]:
                different[key] = (value, expected)
        elif status != expected[0]:
            different[key] = (value, expected)
    assert not different


# storages of the device ------------------------------------------------------------------------------------
def test_new_slices_and_resize_of_device_storages(d):
    storage = torch.UntypedStorage([1, 2, 3, 4, 5, 6, 7, 8], device=d)
    empty = storage.new()
    assert empty.device == d and empty.nbytes() == 0
    part = storage[2:5]
    assert part.device == d and part.tolist() == [3, 4, 5]
    assert torch.empty(0, dtype=torch.uint8, device=d).set_(part).cpu().tolist() == [3, 4, 5]
    part.fill_(9)                                   # a slice is a view of the same memory
    assert storage.tolist() == [1, 2, 9, 9, 9, 6, 7, 8]

    from torch_fl.routing.emu import memory_allocated

    before = memory_allocated(d.index)
    x = torch.arange(4, dtype=torch.uint8, device=d)
    data = x.untyped_storage()
    assert data.resize_(6) is data and data.nbytes() == 6 and data.tolist()[:4] == [0, 1, 2, 3]
    assert memory_allocated(d.index) - before == 6
    data.resize_(0)                                 # FSDP2 frees a parameter so and regrows it before use
    assert x.untyped_storage().nbytes() == 0 and memory_allocated(d.index) == before
    data.resize_(4)
    assert memory_allocated(d.index) - before == 4
    x.copy_(torch.tensor([5, 6, 7, 8], dtype=torch.uint8))
    assert data.tolist() == [5, 6, 7, 8] and x.cpu().tolist() == [5, 6, 7, 8]


def test_storage_moves_to_the_device_with_its_method(d):
    name = d.type
    host = torch.arange(6, dtype=torch.int16).untyped_storage()
    moved = getattr(host, name)()
    assert moved.device == d and getattr(moved, f"is_{name}") and not getattr(host, f"is_{name}")
    assert moved.tolist() == host.tolist()
    assert getattr(moved, name)() is moved          # already there: no copy
    typed = getattr(torch.arange(3.0).storage(), name)()
    assert typed.device == d and typed.tolist() == [0.0, 1.0, 2.0]


def test_tensor_of_a_device_storage_equals_the_cpu(d):
    a = torch.arange(-30, 30).reshape(4, 5, 3).float()
    on_device = a.to(d)
    typed = torch.tensor(on_device.storage(), device=d, dtype=torch.float32).reshape(a.size())
    untyped = torch.tensor(on_device.untyped_storage(), device=d, dtype=torch.float32).reshape(a.size())
    assert typed.device == d and torch.equal(typed.cpu(), a) and torch.equal(untyped.cpu(), a)
    raw = torch.UntypedStorage([1, 2, 3, 4, 5, 6, 7, 8])
    assert torch.equal(torch.tensor(getattr(raw, d.type)()).cpu(), torch.tensor(raw))
    with pytest.raises(RuntimeError, match="Expected a Storage of type"):
        torch.tensor(on_device.to(torch.int32).storage(), device=d, dtype=torch.float32)


def test_data_assignment_moves_host_tensors_and_parameters(d):
    x = torch.arange(4.0)
    x.data = x.data.to(d)
    assert x.device == d and x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    expected = model(torch.ones(1, 3)).detach()
    weight = model.weight
    for param in model.parameters():
        param.data = param.data.to(d)
    assert model.weight is weight and isinstance(weight, torch.nn.Parameter) and weight.requires_grad
    assert torch.equal(model(torch.ones(1, 3, device=d)).detach().cpu(), expected)
    model(torch.ones(1, 3, device=d)).sum().backward()
    assert weight.grad is not None and weight.grad.device == d
    # the gradient moves along, and moving .grad.data next is then a no-op
    p = torch.nn.Parameter(torch.ones(2))
    (p * 2).sum().backward()
    p.data = p.data.to(d)
    p.grad.data = p.grad.data.to(d)
    assert p.device == d and p.grad.device == d and p.grad.cpu().tolist() == [2.0, 2.0]
    plain = torch.ones(2)
    plain.data = torch.zeros(2)                     # host to host: PyTorch's own setter
    assert plain.tolist() == [0.0, 0.0]


def test_data_assignment_moves_device_tensors_back_to_the_host(d):
    # the other way (offloading code: param.data = param.data.cpu()), with identity and gradient kept
    weight = torch.nn.Parameter(torch.arange(4.0).to(d))
    weight.grad = torch.ones(4, device=d)
    held = weight
    weight.data = weight.data.cpu()
    assert weight is held and isinstance(weight, torch.nn.Parameter) and weight.requires_grad
    assert weight.device.type == "cpu" and weight.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert weight.grad.device.type == "cpu" and weight.grad.tolist() == [1.0] * 4
    y = torch.arange(3.0).to(d)
    y.data = y.data.cpu() * 2
    assert y.device.type == "cpu" and y.tolist() == [0.0, 2.0, 4.0]
    y.data = y.data.to(d)                           # and back again
    assert y.device == d and y.cpu().tolist() == [0.0, 2.0, 4.0]


# serialisation ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("saved_on", ["device", "host"])
def test_legacy_checkpoints_load_with_every_map_location(d, saved_on):
    torch.manual_seed(0)
    state = {"w": torch.randn(3, 4), "i": torch.arange(5), "view": None}
    state["view"] = state["w"][1]
    saved = {k: v.to(d) for k, v in state.items()} if saved_on == "device" else dict(state)
    saved["view"] = saved["w"][1]
    buffer = io.BytesIO()
    torch.save(saved, buffer, _use_new_zipfile_serialization=False)
    name = d.type
    forms = [f"{name}:0", name, {"cpu": f"{name}:0", f"{name}:0": f"{name}:0"},
             lambda storage, loc: getattr(storage, name)(), torch.device(name, 0)]
    for form in forms:
        buffer.seek(0)
        loaded = torch.load(buffer, map_location=form, weights_only=False)
        for key, value in state.items():
            assert loaded[key].device == d, (form, key)
            assert torch.equal(loaded[key].cpu(), value)
        loaded["w"][1].fill_(7)                     # a view still shares its base's storage
        assert loaded["view"].cpu().tolist() == [7.0] * 4
    buffer.seek(0)
    host = torch.load(buffer, map_location="cpu", weights_only=False)
    assert host["w"].device.type == "cpu" and torch.equal(host["w"], state["w"])


def test_pickled_device_storages_and_tensors_equal_the_cpu(d):
    typed = torch.TypedStorage([1.0, 2.0, 3.0], device=d)
    again = pickle.loads(pickle.dumps(typed))
    assert again.device == d and again.tolist() == [1.0, 2.0, 3.0]
    x = torch.arange(6.0, device=d).view(2, 3)
    back = pickle.loads(pickle.dumps(x))
    assert back.device == d and torch.equal(back.cpu(), x.cpu())


# DLPack (torch_npu supports it: its test/npu/test_dlpack.py) -----------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int8, torch.int64, torch.bool, torch.float16,
                                   torch.bfloat16])
def test_dlpack_round_trip_shares_memory(d, dtype):
    from torch.utils.dlpack import from_dlpack, to_dlpack

    original = (torch.arange(24) % 7 - 3).reshape(2, 3, 4).to(dtype).to(d)
    restored = from_dlpack(to_dlpack(original))
    assert restored.device == d and restored.dtype == dtype and restored.stride() == original.stride()
    assert torch.equal(restored.cpu(), original.cpu())
    assert restored.data_ptr() == original.data_ptr()
    transposed = torch.arange(16.0, device=d).view(4, 4).t()
    again = torch.from_dlpack(to_dlpack(transposed))
    assert again.stride() == transposed.stride() and torch.equal(again.cpu(), transposed.cpu())


def test_dlpack_memory_is_shared_and_outlives_the_exporter(d):
    from torch.utils.dlpack import from_dlpack, to_dlpack

    original = torch.zeros(3, 3, device=d)
    restored = from_dlpack(to_dlpack(original))
    original.fill_(42.0)
    assert restored.cpu().tolist() == [[42.0] * 3] * 3
    also = torch.from_dlpack(original)
    del original
    assert (restored + also).cpu().sum().item() == 84.0 * 9
    host = torch.arange(3.0)
    assert from_dlpack(to_dlpack(host)).data_ptr() == host.data_ptr()     # host tensors: PyTorch's own
    with pytest.raises(BufferError, match="require gradient"):
        to_dlpack(torch.ones(2, device=d, requires_grad=True))


# under the vendor's name, in a fresh process --------------------------------------------------------------
NPU = r"""
import io, json, pickle, warnings, torch, torch_fl
from torch.utils.dlpack import from_dlpack, to_dlpack
warnings.simplefilter("ignore")
out = {}
s = torch.UntypedStorage([1, 2, 3], device="npu")
out["new"] = [str(s.new().device), s.new().nbytes()]
out["npu"] = [str(torch.UntypedStorage([1, 2]).npu().device), torch.UntypedStorage([1, 2]).npu().tolist()]
out["tensor"] = torch.tensor(torch.arange(3.0).npu().storage(), device="npu", dtype=torch.float32).cpu().tolist()
x = torch.arange(3.0)
x.data = x.data.npu()
p = torch.nn.Parameter(torch.ones(2))
p.data = p.data.npu()
out["data"] = [str(x.device), str(p.device), isinstance(p, torch.nn.Parameter)]
buf = io.BytesIO()
torch.save({"w": torch.arange(4.0).npu()}, buf, _use_new_zipfile_serialization=False)
loads = []
for form in ["npu:0", "npu", {"npu:0": "npu:0"}, lambda storage, loc: storage.npu()]:
    buf.seek(0)
    w = torch.load(buf, map_location=form, weights_only=False)["w"]
    loads.append([str(w.device), w.cpu().tolist()])
out["legacy"] = loads
t = torch.arange(6.0, device="npu")
out["dlpack"] = [str(from_dlpack(to_dlpack(t)).device), from_dlpack(to_dlpack(t)).data_ptr() == t.data_ptr()]
print(json.dumps(out))
"""


@pytest.mark.slow  # a fresh process: ~5 s
def test_storages_under_the_vendor_name():
    out = run_on_chip(NPU, "npu")
    assert out == {"new": ["npu:0", 0], "npu": ["npu:0", [1, 2]], "tensor": [0.0, 1.0, 2.0],
                   "data": ["npu:0", "npu:0", True], "legacy": [["npu:0", [0.0, 1.0, 2.0, 3.0]]] * 4,
                   "dlpack": ["npu:0", True]}


@pytest.mark.slow  # a fresh process
def test_a_typed_storage_class_of_the_chip_wraps_an_untyped_storage():
    # torch_mlu's tests: torch.mlu.ComplexDoubleStorage(wrap_storage=s.untyped()) (the wrapped storage says
    # where it lives; TypedStorage refuses a device= beside it)
    got = run_on_chip("""
import json, torch, torch_mlu
s = torch.mlu.ComplexDoubleStorage(4)
w = torch.mlu.ComplexDoubleStorage(wrap_storage=s.untyped())
print(json.dumps({"dtype": str(w.dtype), "device": str(w.device), "size": len(w),
                  "same": w.untyped().data_ptr() == s.untyped().data_ptr(),
                  "isinstance": isinstance(w, torch.mlu.ComplexDoubleStorage)}))
""", "mlu")
    assert got == {"dtype": "torch.complex128", "device": "mlu:0", "size": 4, "same": True, "isinstance": True}
