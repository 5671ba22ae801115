"""``torch_npu.onnx`` of the emulated plugin: importing it gives the emulated fused ops ONNX nodes of the vendor's
``npu`` domain, as the vendor's module does (Ascend/pytorch test/onnx/test_combined_onnx_ops.py exports models
calling torch_npu's ops after ``import torch_npu.onnx``; writing the file needs the onnx package, absent here, so
this checks the exported graph). Runs on the emulated npu in a fresh process (the chip's name is per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

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
    done = subprocess.run([sys.executable, "-c", EXPORT], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "FL_DEVICE": "emu:npu"}, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["lazy"]  # not imported with torch_npu: torch.onnx is heavy
    assert {"npu::NPURmsNorm", "npu::NPUFastGelu", "onnx::Transpose"} <= set(out["kinds"])
    assert abs(out["epsilon"] - 1e-5) < 1e-9
