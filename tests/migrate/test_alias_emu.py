"""The CUDA alias under emulation: FL_CUDA_ALIAS=1 FL_DEVICE=emu:<description> maps "cuda" to the
emulated device, and autocast through the alias uses the emulated description's dtype (not the host's
bfloat16). Each case runs in its own process: the emulated device borrows PrivateUse1 for the process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import io, json, torch
    from torch_fl.device import description_for
    out = {}
    x = torch.ones(2, 4)
    model = torch.nn.Linear(4, 4).cuda()
    out["devices"] = sorted({str(t.device) for t in (torch.zeros(1, device="cuda"), x.to(0), x.cuda(),
                                                     model.weight, torch.ones(1, device=torch.device(0)))})
    with torch.autocast("cuda"):
        out["autocast"] = str(model(x.cuda()).dtype)
    with torch.cuda.amp.autocast():
        out["cuda.amp.autocast"] = str(model(x.cuda()).dtype)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out["autocast(bfloat16)"] = str(model(x.cuda()).dtype)
    out["description_autocast"] = "torch." + description_for(torch.zeros(1, device="cuda").device).autocast_dtype
    out["generator"] = str(torch.Generator(device="cuda").device)
    out["capability"] = list(torch.cuda.get_device_capability())
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(2)}, buffer)
    loaded = {}
    for name, where in (("'cuda'", "cuda"), ("0", 0), ("dict", {"cpu": "cuda:0"}), ("lambda", lambda s, l: s.cuda())):
        buffer.seek(0)
        try:
            loaded[name] = str(torch.load(buffer, map_location=where)["w"].device)
        except Exception as exc:
            loaded[name] = f"{type(exc).__name__}: {exc}"
    saved = io.BytesIO()
    torch.save({"w": model.weight.detach()}, saved)  # saved on the emulated device
    saved.seek(0)
    loaded["emu checkpoint"] = str(torch.load(saved)["w"].device)
    out["load"] = loaded
    print(json.dumps(out))
""")


@pytest.mark.slow
@pytest.mark.parametrize("description", ["cuda", "minimal"])
def test_the_alias_maps_cuda_to_the_emulated_device(tmp_path, description):
    script = tmp_path / "emu_alias.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "FL_CUDA_ALIAS": "1", "FL_DEVICE": f"emu:{description}"}
    env.pop("FL_BACKEND", None)
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["devices"] == ["emu:0"]
    assert out["autocast"] == out["cuda.amp.autocast"] == out["description_autocast"] == "torch.float16"
    if description == "minimal":  # no bfloat16 on that chip: the alias falls back to its autocast dtype
        assert out["autocast(bfloat16)"] == out["description_autocast"]
    assert out["generator"] == "emu:0" and out["capability"] == [7, 0]
    assert out["load"] == {"'cuda'": "emu:0", "0": "emu:0", "dict": "emu:0", "lambda": "emu:0", "emu checkpoint": "emu:0"}
