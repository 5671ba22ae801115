"""``torch_npu.onnx`` of the emulated plugin: importing it gives the emulated fused ops ONNX nodes of the vendor's
``npu`` domain, as the vendor's module does (Ascend/pytorch test/onnx/test_combined_onnx_ops.py exports models
calling torch_npu's ops after ``import torch_npu.onnx``; writing the file needs the onnx package, absent here, so
this checks the exported graph). Runs on the emulated npu in a fresh process (the chip's name is per process)."""

from __future__ import annotations

from chip_process import run_on_chip  # tests/chip_process.py

EXPORT = r'''
import json, sys, torch, torch_npu
out = {"lazy": "torch_npu.onnx" not in sys.modules}
import torch_npu.onnx
from torch.onnx import utils

class Model(torch.nn.Module):
    def forward(self, x):
        y = torch_npu.npu_rms_norm(x, torch.ones(8), epsilon=1e-5)[0] + torch_npu.fast_gelu(x)
        return torch_npu.npu_transpose(y, (1, 0), True)  # composed of aten ops: standard ONNX

graph, _, _ = utils._model_to_graph(Model(), (torch.randn(2, 8),))
nodes = [n for n in graph.nodes()]
out["kinds"] = sorted({n.kind() for n in nodes})
rms = [n for n in nodes if n.kind() == "npu::NPURmsNorm"][0]
out["epsilon"] = rms.f("epsilon")
print(json.dumps(out))
'''


def test_exporting_the_fused_ops_gives_the_vendors_nodes():
    out = run_on_chip(EXPORT, "npu")
    assert out["lazy"]  # not imported with torch_npu: torch.onnx is heavy
    assert {"npu::NPURmsNorm", "npu::NPUFastGelu", "onnx::Transpose"} <= set(out["kinds"])
    assert abs(out["epsilon"] - 1e-5) < 1e-9
