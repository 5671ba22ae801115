"""The emulated Ascend chip's runtime surface beyond the device calls: the caching allocator's settings
(``torch_npu._C._npu_npuCachingAllocator_set_allocator_settings``: throw_on_npumalloc_oom rejects an allocation over
per_process_memory_fraction, counted in memory_stats) and the ACL runtime calls (``torch_npu.npu.npurt()``), checked
as Ascend/pytorch's test/allocator/test_throw_on_npumalloc_oom.py and test/npu/test_npurt.py check them, in our
words. The chip's name is fixed per process, so the checks on the emulated npu run in a fresh one."""

from __future__ import annotations

import ctypes
import os

import pytest
import torch

from chip_process import run_on_chip  # tests/chip_process.py
from torch_fl.routing.emu import memory, npu_runtime


@pytest.fixture
def defaults():
    saved = dict(memory.allocator_settings)
    yield
    memory.allocator_settings.clear()
    memory.allocator_settings.update(saved)
    memory._limit.clear()


def test_allocator_settings_parse_as_the_vendors(defaults):
    memory.set_allocator_settings("throw_on_npumalloc_oom:True,per_process_memory_fraction:0.25")
    assert memory.allocator_settings["throw_on_npumalloc_oom"] is True
    assert memory.allocator_settings["per_process_memory_fraction"] == 0.25 and memory._limit == [0.25]
    memory.set_allocator_settings("throw_on_npumalloc_oom:False")
    assert memory._limit == []
    with pytest.raises(RuntimeError, match="True/False argument for throw_on_npumalloc_oom"):
        memory.set_allocator_settings("throw_on_npumalloc_oom:maybe")
    with pytest.raises(RuntimeError, match=r"per_process_memory_fraction is invalid, set it in \[0.0, 1.0\]"):
        memory.set_allocator_settings("per_process_memory_fraction:1.5")
    with pytest.raises(RuntimeError, match="Unrecognized key 'no_such_key'"):
        memory.set_allocator_settings("no_such_key:1")
    memory.set_allocator_settings("expandable_segments:True,max_split_size_mb:128")  # recorded
    assert memory.allocator_settings["max_split_size_mb"] == 128


def test_npurt_registers_host_memory_and_makes_streams():
    rt = npu_runtime.npurt()
    assert rt is npu_runtime.npurt()
    t = torch.ones(1024)
    assert rt.npuHostRegister(t.data_ptr(), 4096, npu_runtime.ACL_HOST_REG_PINNED) == 0
    assert rt.npuHostRegister(t.data_ptr(), 4096, npu_runtime.ACL_HOST_REG_PINNED) != 0  # twice: refused
    assert rt.npuHostUnregister(t.data_ptr()) == 0
    assert rt.npuHostUnregister(t.data_ptr()) != 0  # not registered any more
    assert rt.npuHostRegister(t.data_ptr(), 0, npu_runtime.ACL_HOST_REG_PINNED) != 0  # size 0
    assert rt.npuHostRegister(0, 4096, npu_runtime.ACL_HOST_REG_MAPPED) != 0
    stream = ctypes.c_void_p()
    assert rt.npuStreamCreate(ctypes.addressof(stream)) == 0 and stream.value
    assert rt.npuStreamDestroy(stream.value) == 0
    assert rt.npuStreamDestroy(stream.value) != 0 and rt.npuStreamCreate(0) != 0


ON_NPU = r'''
import json, torch, torch_npu
out = {}
set_settings = torch_npu._C._npu_npuCachingAllocator_set_allocator_settings
set_settings("throw_on_npumalloc_oom:False,per_process_memory_fraction:1.0")
torch_npu.npu.reset_accumulated_memory_stats()
out["initial"] = torch_npu.npu.memory_stats()["num_oom_rejections"]
from torch_fl.hostmem import memory_info
fraction = 32 * 2**20 / memory_info()[1]  # 32 MiB of the emulated device's memory (the host's)
set_settings(f"throw_on_npumalloc_oom:True,per_process_memory_fraction:{fraction:.10f}")
try:
    torch.empty(64, 1024, 1024, dtype=torch.uint8, device="npu")
    out["big"] = "allocated"
except torch.OutOfMemoryError as exc:
    out["big"] = "OutOfMemoryError" if "throw_on_npumalloc_oom" in str(exc) else str(exc)
out["rejections"] = torch_npu.npu.memory_stats()["num_oom_rejections"]
out["small"] = str(torch.randn(10, 10, device="npu").device)
set_settings(f"throw_on_npumalloc_oom:False,per_process_memory_fraction:{fraction:.10f}")
out["off"] = str(torch.empty(64, 1024, 1024, dtype=torch.uint8, device="npu").device)
torch_npu.npu.reset_accumulated_memory_stats()
out["reset"] = torch_npu.npu.memory_stats()["num_oom_rejections"]
out["npurt"] = [torch_npu.npu.npurt() is torch.npu.npurt(), hasattr(torch_npu._C, "_npurt")]
print(json.dumps(out))
'''


def test_on_the_emulated_npu():
    out = run_on_chip(ON_NPU, "npu")
    assert out == {"initial": 0, "big": "OutOfMemoryError", "rejections": 1, "small": "npu:0", "off": "npu:0",
                   "reset": 0, "npurt": [True, True]}


ON_MUSA = r'''
import json, threading, torch, torch_musa
from torch_musa.utils.musa_extension import MUSA_HOME, MUSAExtension
out = {"home": MUSA_HOME}
# MooreThreads/torch_musa tests/unittest/core/test_mempool.py, in our words
first, second = torch.musa.graph_pool_handle(), torch.musa.MemPool().id
out["ids"] = [first[0] == second[0], second[1] > first[1]]
out["none"] = torch.musa.MemPoolContext.active_pool() is None
pool = torch.musa.MemPool()
ctx = torch.musa.MemPoolContext(pool)
out["active"] = torch.musa.MemPoolContext.active_pool() == pool
del ctx
out["restored"] = torch.musa.MemPoolContext.active_pool() is None
seen = []
def make():
    mine = torch.musa.MemPool()
    ctx = torch.musa.MemPoolContext(mine)
    seen.append((mine.id, torch.musa.MemPoolContext.active_pool().id))
    del ctx
threads = [threading.Thread(target=make) for _ in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
out["threads"] = [len({a for a, _ in seen}), all(a == b for a, b in seen)]
with torch.musa.use_mem_pool(pool):
    out["in_pool"] = [str(torch.randn(2, device="musa").device), torch.musa.MemPoolContext.active_pool() == pool]
torch.musa.memory._set_allocator_settings("expandable_segments:True")
out["stats"] = torch.musa.memory.memory_stats()["allocated_bytes.all.current"] == torch.musa.memory_allocated()
for refused in (lambda: MUSAExtension("x", ["x.mu"]),
                lambda: torch.musa.memory.MUSAPluggableAllocator("a.so", "alloc", "free")):
    try:
        refused()
    except (RuntimeError, NotImplementedError) as exc:
        out.setdefault("refused", []).append("real" in str(exc))
print(json.dumps(out))
'''


def test_musa_memory_pools_and_extension_home_on_the_emulated_musa():
    env = {k: v for k, v in os.environ.items() if k not in ("MUSA_HOME", "MUSA_PATH")}
    out = run_on_chip(ON_MUSA, "musa", env=env)
    assert out.pop("home") in (None, "/usr/local/musa")
    assert out == {"ids": [True, True], "none": True, "active": True, "restored": True, "threads": [4, True],
                   "in_pool": ["musa:0", True], "stats": True, "refused": [True, True]}


TYPED_STORAGES = r'''
import json, warnings, torch, torch_mlu
warnings.simplefilter("ignore")  # (TypedStorage is deprecated)
x = torch.FloatStorage([1, 2, 3])
out = {"isinstance": [isinstance(x.mlu().double(), torch.mlu.DoubleStorage),
                      isinstance(x.double().mlu(), torch.mlu.DoubleStorage),
                      isinstance(x.mlu().half(), torch.mlu.HalfStorage), isinstance(x.mlu().bool(), torch.mlu.BoolStorage),
                      isinstance(x.mlu().float(), torch.mlu.DoubleStorage), isinstance(x.double(), torch.mlu.DoubleStorage)]}
made = torch.mlu.ComplexDoubleStorage(4)
out["made"] = [str(made.device), str(made.dtype), made.size()]
out["values"] = torch.mlu.IntStorage([1, 2, 3]).tolist()
print(json.dumps(out))
'''


def test_the_legacy_typed_storages_of_the_chip():
    # Cambricon/torch_mlu test/storage/test_storage.py test_type, in our words
    out = run_on_chip(TYPED_STORAGES, "mlu")
    assert out == {"isinstance": [True, True, True, True, False, False], "made": ["mlu:0", "torch.complex128", 4],
                   "values": [1, 2, 3]}


TF32 = r'''
import json, warnings, torch, torch_mlu
out = {"start": [torch.get_float32_matmul_precision(), torch.backends.mlu.matmul.allow_tf32,
                 torch._C._get_cnmatmul_allow_tf32(), torch.backends.cnnl.allow_tf32]}
with torch.backends.cnnl.flags(allow_tf32=False):
    out["cnnl_in_flags"] = torch.backends.cnnl.allow_tf32
out["cnnl_after"] = torch.backends.cnnl.allow_tf32
torch.backends.mlu.matmul.allow_tf32 = True
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    torch.backends.cuda.matmul.allow_tf32 = False  # inert once torch_mlu is imported, as the vendor's
out["cuda_switch"] = [torch.backends.mlu.matmul.allow_tf32, any("cuda API does not take effect" in str(w.message)
                                                                  for w in caught)]
torch._C._set_cnmatmul_allow_tf32(False)
out["off"] = [torch.backends.mlu.matmul.allow_tf32, torch.get_float32_matmul_precision()]
torch.set_float32_matmul_precision("medium")
out["medium"] = torch._C._get_cnmatmul_allow_tf32()
print(json.dumps(out))
'''


def test_mlu_tf32_switches_as_torch_mlu_has_them():
    # Cambricon/torch_mlu test/mlu/test_tf32_ctrl.py, in our words
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_ALLOW_TF32")}
    out = run_on_chip(TF32, "mlu", env=env)
    assert out == {"start": ["highest", False, False, True], "cnnl_in_flags": False, "cnnl_after": True,
                   "cuda_switch": [True, True], "off": [False, "highest"], "medium": True}


CNPX = r'''
import json, torch, torch_mlu
out = {}
with torch.profiler.profile() as prof:
    out["depths"] = [torch.mlu.cnpx.range_push("outer"), torch.mlu.cnpx.range_push("inner")]
    torch.mlu.cnpx.mark("bar")
    out["pops"] = [torch.mlu.cnpx.range_pop(), torch.mlu.cnpx.range_pop(), torch.mlu.cnpx.range_pop()]
    handle = torch.mlu.cnpx.range_start("started")
    torch.mlu.cnpx.range_end(handle)
    with torch.mlu.cnpx.range("step {}", 3):
        torch.ones(2, device="mlu") * 2
out["names"] = sorted({e.name for e in prof.events()} & {"outer", "inner", "bar", "started", "step 3"})
print(json.dumps(out))
'''


def test_cnpx_ranges_appear_in_the_emulated_chips_trace():
    # Cambricon/torch_mlu test/cnpx/test_cnpx.py calls these, in our words; here the ranges are also checked in
    # the profile
    out = run_on_chip(CNPX, "mlu")
    assert out == {"depths": [0, 1], "pops": [1, 0, -1], "names": ["bar", "inner", "outer", "started", "step 3"]}
