"""The vendors' own test suites, round five (issue 36): what torch_musa's and torch_mlu's tests do on the chip,
in our own words, on the emulated chip.

Each check runs in a fresh process with FL_DEVICE naming the chip (the vendor's name, its plugin imported), so
a crash fails the test rather than pytest, and no state of one chip leaks into another."""

from __future__ import annotations

from chip_process import run_on_chip  # tests/chip_process.py

LIBRARY_KERNEL = r"""
import json, torch, torch_musa
found = {}
for key in ("MUSA", "PrivateUse1"):
    lib = torch.library.Library(f"r5_{key}", "DEF")
    lib.define("shifted_relu(Tensor self) -> Tensor")
    calls = []
    def kernel(x, calls=calls):
        calls.append(x.device.type)
        return x.relu() + 1.0
    lib.impl("shifted_relu", kernel, key)
    x = torch.linspace(-2, 2, 9, device="musa")
    out = getattr(torch.ops, f"r5_{key}").shifted_relu(x)
    found[key] = {"calls": calls, "device": str(out.device),
                  "equal": bool(torch.equal(out.cpu(), x.cpu().relu() + 1.0))}
print(json.dumps(found))
"""


def test_a_library_kernel_on_the_device_key_runs_with_the_device_tensors():
    """A torch.library kernel registered for the chip's key (its vendor name or PrivateUse1) is what the op
    runs on a device tensor, called with the device tensor itself (it used to reach the CPU, which has none)."""
    found = run_on_chip(LIBRARY_KERNEL, "musa")
    for key in ("MUSA", "PrivateUse1"):
        assert found[key] == {"calls": ["musa"], "device": "musa:0", "equal": True}, (key, found[key])


JIT_ROUND_TRIP = r"""
import io, json, os, tempfile, torch, torch_musa
from torch import nn
import torch.nn.functional as F

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, kernel_size=3)
        self.fc = nn.Linear(4 * 3 * 3, 5)
    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv(x), 2))
        return F.log_softmax(self.fc(x.reshape(x.shape[0], -1)), dim=1)

torch.manual_seed(0)
net = Net().to("musa")
x = torch.randn(3, 1, 8, 8, device="musa")
eager = net(x)
traced = torch.jit.trace(net, [x], check_trace=False)
graph = str(traced.inlined_graph)
out = {"convolution_in_graph": "aten::_convolution" in graph, "traced_equal": bool((traced(x) == eager).all())}
path = os.path.join(tempfile.mkdtemp(), "net.pt")
torch.jit.save(traced, path)
loaded = torch.jit.load(path)
out["loaded_devices"] = sorted({str(p.device) for p in loaded.parameters()})
out["loaded_shapes_equal"] = [tuple(p.shape) for p in loaded.parameters()] == [tuple(p.shape) for p in net.parameters()]
out["loaded_equal"] = bool((loaded.to("musa")(x) == eager).all())
buffer = io.BytesIO()
torch.jit.save(traced, buffer)
buffer.seek(0)
on_host = torch.jit.load(buffer, map_location="cpu")
out["host_devices"] = sorted({str(p.device) for p in on_host.parameters()})
out["host_close"] = bool(torch.allclose(on_host(x.cpu()), eager.cpu(), atol=1e-5))
host_net = Net()
host_traced = torch.jit.trace(host_net, [x.cpu()], check_trace=False)
try:
    host_traced(x)
    out["scripted_mismatch"] = None
except RuntimeError as error:
    out["scripted_mismatch"] = str(error)
moved = host_traced.to("musa")
out["moved_devices"] = sorted({str(p.device) for p in moved.parameters()})
out["moved_close"] = bool(torch.allclose(moved(x).cpu(), host_net(x.cpu()), atol=1e-5))
try:
    F.conv2d(x, host_net.conv.weight)
    out["mismatch"] = None
except RuntimeError as error:
    out["mismatch"] = str(error)
print(json.dumps(out))
"""


def test_jit_trace_save_and_load_of_a_device_model():
    """torch_musa's jit tests: a conv model traced on the device records aten::_convolution (as PyTorch's tracer
    does on a real device), saves, loads back onto the device with its weights, and a host model moves there."""
    out = run_on_chip(JIT_ROUND_TRIP, "musa")
    assert out["convolution_in_graph"] and out["traced_equal"], out
    assert out["loaded_devices"] == ["musa:0"] and out["loaded_shapes_equal"] and out["loaded_equal"], out
    assert out["host_devices"] == ["cpu"] and out["host_close"], out
    assert out["moved_devices"] == ["musa:0"] and out["moved_close"], out
    # torch_musa's own convolution check (torch_musa/csrc/aten/ops/Conv.cpp)
    vendor = "Expected weight tensor and input tensor to be on the same MUSA device, but got weight on cpu and input on musa:0"
    assert out["mismatch"] == vendor, out
    # the same check inside a script module: TorchScript's interpreter keeps the vendor's text after its trace
    assert out["scripted_mismatch"].startswith("The following operation failed in the TorchScript interpreter"), out
    assert out["scripted_mismatch"].rstrip().endswith("RuntimeError: " + vendor), out


STORAGE_NAMES = r"""
import json, torch, torch_mlu
x = torch.randn(3, device="mlu", dtype=torch.complex128)
typed = torch.mlu.ComplexDoubleStorage(wrap_storage=x.untyped_storage())
print(json.dumps({"wrapped": typed.type(), "of_tensor": x.storage().type(), "new": torch.mlu.FloatStorage(4).type(),
                  "dtype": str(typed.dtype)}))
"""


def test_typed_storages_name_the_vendors_module():
    """torch_mlu's storage tests: TypedStorage.type() of a storage on the chip names torch_mlu's class."""
    out = run_on_chip(STORAGE_NAMES, "mlu")
    assert out == {"wrapped": "torch_mlu.mlu.ComplexDoubleStorage", "of_tensor": "torch_mlu.mlu.ComplexDoubleStorage",
                   "new": "torch_mlu.mlu.FloatStorage", "dtype": "torch.complex128"}, out


DEVICE_MODULE_PICKLE = r"""
import json, pickle, subprocess, sys, torch, torch_musa
data = pickle.dumps(torch.musa)
same = pickle.loads(data) is torch.musa
child = subprocess.run([sys.executable, "-c", "import pickle, sys; m = pickle.loads(sys.stdin.buffer.read()); "
                        "import torch; print(m is torch.musa, m.device_count())"],
                       input=data, capture_output=True, check=True)
print(json.dumps({"name": torch.musa.__name__, "same": same, "child": child.stdout.decode().split()}))
"""


def test_the_device_module_pickles_by_reference():
    """torch_musa's spawn_isolated_test pickles each test function (cloudpickle) for a fresh interpreter, with the
    torch.musa it reads: the device module goes by reference, as a module does, and is the child's own there."""
    out = run_on_chip(DEVICE_MODULE_PICKLE, "musa")
    assert out == {"name": "torch_musa", "same": True, "child": ["True", "1"]}, out
