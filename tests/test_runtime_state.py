"""Issue 43 item 1: the process's state is one object (torch_fl/_state.py) that the runtime object owns and
forgets in one call; resolving a spec registers nothing; no module looks a higher layer's module up in
sys.modules (an import the layering test would see, hidden from it)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

import test_architecture as architecture
import torch_fl
from torch_fl import device
from torch_fl._state import process
from torch_fl.description import registry
from torch_fl.routing import activation
from torch_fl.routing.current import runtime


def test_the_runtime_object_owns_every_part_of_the_process_state():
    torch_fl.device()
    assert runtime.state is process
    assert registry.descriptions() is process.descriptions
    assert device.backend() is process.backend
    assert activation.stack is process.activations and activation.stack[-1] is torch_fl.routing.active()
    assert activation.kernels is process.kernels and process.activated
    assert process.emulator is not None  # the port routing set when torch_fl loaded


def test_one_call_forgets_it():
    torch_fl.device()
    torch_fl.route_table()
    assert process.backend is not None and process.descriptions is not None and process.activations
    torch_fl.reset()
    assert process.backend is None and process.descriptions is None and not process.shadowed
    assert process.activations == [] and process.tables == {} and not process.activated
    assert torch_fl.device() == torch.device("cpu")  # and everything comes back on first use


PURE = textwrap.dedent("""
    import json, sys, torch, torch_fl
    from torch_fl._state import process
    from torch_fl.device import resolve_spec
    resolved = resolve_spec(sys.argv[1])
    before = (torch._C._get_privateuse1_backend_name(), process.emulated_type)
    first = resolved.device  # the first use registers the emulated device
    print(json.dumps({"before": before, "name": resolved.description.name, "device": str(first),
                      "after": [torch._C._get_privateuse1_backend_name(), process.emulated_type],
                      "emulated": torch_fl.device.is_emulated(first)}))
""")


def _resolved_in_a_child(tmp_path: Path, spec: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    env.update(OMP_NUM_THREADS="1", HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", PURE, spec], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_resolving_an_emulated_chip_registers_nothing_until_its_device_is_used(tmp_path):
    assert _resolved_in_a_child(tmp_path, "emu:npu") == {
        "before": ["privateuseone", ""], "name": "npu", "device": "npu:0", "after": ["npu", "npu"],
        "emulated": True}


def test_a_virtual_id_of_an_emulating_process_registers_nothing_either(tmp_path):
    # the config's device (unlike FL_DEVICE) does not register the chip at import
    (tmp_path / "torch_fl.toml").write_text('device = "emu:npu"\n')
    assert _resolved_in_a_child(tmp_path, "acc0") == {
        "before": ["privateuseone", ""], "name": "npu", "device": "npu:0", "after": ["npu", "npu"],
        "emulated": True}


def _module_reaches(path: Path) -> list[tuple[int, str]]:
    """(line, module) of each sys.modules lookup of a torch_fl module: sys.modules.get("torch_fl.x"),
    sys.modules["torch_fl.x"], `"torch_fl.x" in sys.modules`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        key = None
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "sys.modules.get" and node.args:
            key = node.args[0]
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "sys.modules":
            key = node.slice
        elif isinstance(node, ast.Compare) and any(ast.unparse(c) == "sys.modules" for c in node.comparators):
            key = node.left
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.startswith("torch_fl"):
            found.append((node.lineno, key.value))
    return found


def _depends_on(module: str, graph: dict[str, set[str]]) -> set[str]:
    """Every torch_fl module that `module` (each module of it, when it is a package) imports, directly or
    through others."""
    seen: set[str] = set()
    todo = [m for m in graph if m == module or m.startswith(module + ".")]
    while todo:
        for found in graph.get(todo.pop(), ()):
            if found not in seen:
                seen.add(found)
                todo.append(found)
    return seen


def test_no_module_reaches_up_through_sys_modules():
    # device.py looked routing.emu.slot up, routing/stats.py routing.emu (issue 43): what a module may not
    # import it may not look up either. Upward: into a higher layer, or, within one unit, into a module that
    # imports the one looking (stats is below the emulator, which imports it)
    layers = architecture.layers()
    paths = sorted(architecture.PACKAGE.rglob("*.py"))
    graph = {architecture.module_name(p): {i.module for i in architecture.imports(p)} for p in paths}
    upward = []
    for path in paths:
        importer = architecture.module_name(path)
        for line, module in _module_reaches(path):
            higher = layers[architecture.unit_of(module)] > layers[architecture.unit_of(importer)]
            same_unit = architecture.unit_of(module) == architecture.unit_of(importer)
            if higher or (same_unit and importer in _depends_on(module, graph)):
                upward.append(f"{path.relative_to(architecture.ROOT)}:{line} looks up {module}")
    assert upward == []


def test_the_check_sees_a_reach(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text('import sys\nslot = sys.modules.get("torch_fl.routing.emu.slot")\n'
                       'emu = sys.modules["torch_fl.routing.emu"]\nloaded = "torch_fl.cli" in sys.modules\n')
    assert _module_reaches(planted) == [(2, "torch_fl.routing.emu.slot"), (3, "torch_fl.routing.emu"),
                                        (4, "torch_fl.cli")]
