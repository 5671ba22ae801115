"""Every command's --help beyond its one line (cli.COMMANDS): the description, and the epilog (examples, exit
status, docs), by command name, printed as written (line breaks kept). args.command_parser looks a command's
up, so a command module holds only its arguments and its run. A text with a {field} gets the field's value
from that command (compare's default tolerances, scan's rule page); doctor and bugreport keep their own
(argparse wraps their descriptions).

Needs nothing (no torch): ``torchfl COMMAND --help`` reads it.
"""

from __future__ import annotations

from typing import NamedTuple


class Text(NamedTuple):
    """A command's help: the paragraph under its usage line, and the lines after its options."""

    description: str
    epilog: str | None = None


TEXTS: dict[str, Text] = {
    "describe": Text(
        "Print a device description as TOML that loads back unchanged (start a vendor "
        "description from a copy), list known descriptions, or write one for the live "
        "device from the dispatcher.",
        "Examples:\n  torchfl describe cuda --as mychip > mychip.toml\n  torchfl describe --list\n"
        "  torchfl describe --probe -o probed.toml"),
    "env": Text(
        "Write the versions that decide whether a node can run a job (Python and its ABI, torch and its "
        "runtime, torch-fl, vendor plugins, key packages, description file hashes, glibc, libstdc++) to a "
        "lock file, then check every node against it: each component that differs is named with the node "
        "and the command that fixes it. No vendor plugin is imported.",
        "Examples:\n  torchfl env lock -o cluster.lock\n  torchfl env check cluster.lock\n"
        "  srun -N 8 torchfl env check cluster.lock        # every node of a Slurm job\n"
        "  torchfl env diff node0.lock node1.lock node2.lock\n"
        "Exit status: 0 same; 1 a component differs; 2 a file that is not a lock.\n"
        "Docs: torchfl docs cli (the command), torchfl docs env (lock files and what they hold)"),
    "routes": Text(
        "Show the route every aten operator takes on a device (native, translate, "
        "fallback, kernel, unsupported) and which setting decided it, or compare two "
        "route logs (FL_ROUTE_LOG) taken before and after an upgrade.",
        "Examples:\n  torchfl routes show\n  torchfl routes show --device emu:minimal --route translate\n"
        "  torchfl routes show --device mps --dtype float64 --op matmul\n"
        "  FL_ROUTE_LOG=before.json python train.py; ...upgrade...; "
        "FL_ROUTE_LOG=after.json python train.py\n"
        "  torchfl routes diff before.json after.json"),
    "coverage": Text(
        "Trace a model without computing (fake tensors, seconds even for large models) and "
        "classify every (op, dtype) it calls with a device's routes: native, translate, "
        "fallback, kernel or unsupported, with the modules that call each op. Works for any "
        "described device, present on this machine or not.",
        "Examples:\n"
        "  torchfl coverage examples/gpt.py:factory --device emu:minimal --train\n"
        "  torchfl coverage examples/cnn.py:factory --device mps --amp --html cnn-mps.html\n"
        "  torchfl coverage mypkg.models:build --device ./my-chip.toml --train --strict\n"
        "  torchfl coverage examples/gpt.py:factory --device npu --train --plugin-version 2.5\n"
        "\nExit status: 0 (the report ran); with --strict, 1 when an op is unsupported; 2 when the\n"
        "model could not be traced (no verdict), or a wrong entry point or device (bad input).\n"
        "Docs: torchfl docs analysis"),
    "compare": Text(
        "Run MODEL with the same weights and inputs on the reference (routing off) and on "
        "the device (routing on), compare every module's output, the final output and with "
        "--train every parameter's gradient, and name the first module outside tolerance.",
        "Tolerances are normwise: max|device - reference| <= atol + rtol * max|reference| per "
        "tensor. Defaults (rtol/atol): {defaults}; the device description's "
        "precision.tolerances and precision.op_tolerances refine them, --rtol/--atol override.\n"
        "Examples:\n  torchfl compare examples/gpt.py:factory --device emu:minimal\n"
        "  torchfl compare examples/gpt.py:factory --device acc0 --dtype bfloat16 --train "
        "--json cmp.json --html cmp.html\n"
        "Exit status: 0 within tolerance, 1 outside tolerance or the device cannot run the model."),
    "bench": Text(
        "Time MODEL's training (or inference) steps on a device with torch-fl routing active "
        "and with routing disabled, in interleaved blocks; report the native alignment ratio "
        "(routed steps/s / native steps/s, target >= 0.9), the time spent in translate and "
        "fallback routes, peak memory, and whether memory grows from step to step. Below the target, "
        "a short profile (torchfl profile) says which routed ops take the time.",
        "For an emulated chip (emu:NAME), 'routing disabled' is the plain CPU run.\n"
        "Examples:\n  torchfl bench examples/gpt.py:factory --device emu:minimal --steps 10\n"
        "  torchfl bench examples/gpt.py:factory --device acc0 --no-train --json bench.json "
        "--html bench.html\n"
        "Exit status: 0 measured, 1 the routed run failed (unsupported operator), 2 usage error."),
    "profile": Text(
        "Run MODEL's warm-up and N steps on a device with torch-fl routing active, the steps under "
        "torch.profiler; write the trace (every translate, fallback and kernel call is a range "
        "'fl::ROUTE OP' in it) and report the time by route, the top ops by self time with the route "
        "each took, the host<->device copies, and the host syncs per step (.item(), nonzero, "
        "boolean masks, copies to the host, synchronize()) with the source line of each. MODEL may also "
        "be a training script (train.py, its arguments in --args), run as `torchfl run` runs it: a step is "
        "an optimizer step, and the script stops after the profiled ones.",
        "Open the trace in Perfetto (ui.perfetto.dev), chrome://tracing or TensorBoard's profiler plugin.\n"
        "Examples:\n  torchfl profile examples/gpt.py:factory --device emu:npu --steps 5 --trace gpt.json\n"
        "  FL_ROUTE=aten::gelu=translate torchfl profile examples/gpt.py:factory --device cpu --json -\n"
        "  torchfl profile train.py --device emu:npu --steps 3 --trace t.json --args='--epochs 1'   (a script: a "
        "step is an optimizer step)\n"
        "Exit status: 0 profiled, 1 the device cannot run the model (unsupported operator), 2 usage error."),
    "ops-bench": Text(
        "Time every op a step of MODEL runs natively on a device (the kernel the device has) against "
        "the alternatives torch-fl could route it to: its translation (decomposition), a registered "
        "kernel, and the reference device (the CPU, on a real chip), in interleaved rounds with one "
        "intra-op thread; an alternative 1.25x faster in three rounds of four makes the op 'slow'. "
        "Without MODEL, the ops of PyTorch's OpInfo samples (float32; narrow them with --op). --overlay FILE writes the verdicts "
        "as [ops.measured] / [ops.slow] of a description that extends the chip's; put FILE's folder in "
        "FL_DESCRIPTION_PATH and coverage and grade show those ops as 'native but slow'; with --prefer the "
        "overlay also routes the ops whose translation is faster to it.",
        "Examples:\n  torchfl ops-bench examples/gpt.py:factory --device acc0 --overlay ~/.config/fl/npu.toml\n"
        "  torchfl ops-bench --device cuda --op aten::gelu --op aten::layer_norm --json -\n"
        "  FL_DESCRIPTION_PATH=~/.config/fl torchfl coverage examples/gpt.py:factory --device npu\n"
        "Exit status: 0 measured, 1 the device cannot run the model (unsupported operator), 2 usage error."),
    "grade": Text(
        "Grade MODEL on a device at L0 (runs), L1 (deployable) or L2 (production) from measurements: "
        "torch.fl.distributed's preflight in two processes, a real training step, coverage of "
        "a traced training step, compare against a reference, a step under autocast, a "
        "second input shape, optionally torch.compile, and bench (alignment, memory over "
        "steps; below the alignment target, a short profile names the routed ops that take the time). Each criterion is PASS, FAIL, INCONCLUSIVE (a noisy measurement whose confidence "
        "interval contains the threshold, with the command that settles it) or NOT MEASURED, "
        "with its evidence; INCONCLUSIVE and NOT MEASURED never count as PASS.",
        "Thresholds: native calls >= 80%, alignment >= 0.9, 4-device scaling >= "
        "3.2x, precision within the dtype's rtol/atol, memory flat over the run.\n"
        "On an emulated chip (emu:NAME) alignment is not measured: it would time the emulation.\n"
        "Examples:\n  torchfl grade examples/gpt.py:factory --device cpu\n"
        "  torchfl grade examples/unusual.py:factory --device emu:minimal --steps 4\n"
        "  torchfl grade examples/gpt.py:factory --device acc0 --compile --json g.json --html g.html\n"
        "Exit status: 0 graded (any level), 2 usage error or bad input (entry point, device), 1 the "
        "model's code raised or the device failed.\n"
        "Docs: torchfl docs analysis"),
    "scan": Text(
        "Scan Python files for code that only runs on CUDA: device strings, .cuda(),\n"
        "torch.cuda.*, AMP, NCCL, cuDNN flags, raw pointers, CUDA extensions and\n"
        "libraries. Each finding has a rule code documented in\n"
        "{docs}. `# noqa: FL101` on a line silences it; [tool.torch_fl.scan] in\n"
        "pyproject.toml sets select, extend-select, ignore and extend-exclude.\n"
        "Performance hints (FL203, syncs hidden in loops) are opt-in: --select FL203.\n"
        "Needs no torch (runs in pre-commit hook environments).",
        "Examples:\n  torchfl scan src/\n  torchfl scan train.py --select FL1,FL2 --ignore FL105\n"
        "  torchfl scan src/ --select ALL       (coupling rules and performance hints)\n"
        "  torchfl scan . --format sarif --output torchfl.sarif --exit-zero\n"
        "  torchfl scan . --statistics\n"
        "  torchfl scan src/ --json findings.json   (the text here, the JSON in the file)\n\n"
        "Exit status: 0 no findings, 1 findings (or files that could not be scanned), "
        "2 usage error."),
    "fix": Text(
        "Rewrite the fixable findings of `torchfl scan` to the torch.fl API: device strings "
        "to torch.fl.device(), .cuda() to .to(torch.fl.device()), torch.cuda.is_available() to "
        "torch.fl.is_accelerator(), other torch.cuda.* runtime calls to torch.fl.*, "
        "torch.cuda.amp to torch.autocast/torch.amp.GradScaler with torch.fl.device_type(), "
        "'nccl' to torch.fl.dist_backend(). A safe fix keeps behaviour on the host the code "
        "already ran on, the CPU included. Formatting and comments are kept; `# noqa` is "
        "respected; files are replaced atomically; read-only files and links out of the tree "
        "are skipped.",
        "Examples:\n  torchfl fix train.py\n  torchfl fix src/ --diff\n"
        "  torchfl fix src/ --unsafe-fixes --select FL1,FL9\n"
        "Exit status: 0 done (or --diff: nothing to change), 1 --diff found changes or a file was "
        "skipped (syntax error, unreadable, unwritable), 2 usage error or libcst missing.\n"
        "Docs: docs/migrate-fix.md"),
    "run": Text(
        "Run a Python script or module as `python` would, with the CUDA alias enabled: "
        "'cuda' device arguments, .cuda(), torch.cuda.* calls, CUDA autocast and GradScaler, "
        "and the 'nccl' backend go to torch.fl.device() and its description. The script is "
        "not modified. FL_LOG=migrate=INFO logs each aliased call site once.",
        "Examples:\n"
        "  torchfl run train.py --batch_size=8\n"
        "  FL_DEVICE=emu:minimal torchfl run train.py\n"
        "  torchfl run --device cpu -m mypkg.train --epochs 1\n"
        "  torchfl run --report train.py      # + what the alias answered in place of CUDA\n"
        "  torchrun --nproc_per_node=2 --no-python torchfl run train.py\n"
        "\nExit status: the script's. Docs: torchfl docs migrate-runtime"),
    "audit": Text(
        "Run a model (forward; backward with --train) or a whole script on this machine's "
        "CPU with the CUDA alias active, and list every device request: each call that "
        "carried a device argument, each .to(device), .cuda() and torch.cuda.* call, with "
        "file:line and the text of the line. CUDA requests are flagged.",
        "Examples:\n"
        "  torchfl audit examples/gpt.py:factory --train\n"
        "  torchfl audit mypkg.models:build --json audit.json --strict\n"
        "  torchfl audit --script train.py --max_iters=2 --strict\n"
        "  torchfl audit --script train.py -- --strict   (--strict for the script)\n"
        "\nExit status: 0; with --strict, 1 when a CUDA request was made; 1 when the model "
        "raised; a script's own non-zero exit code.\nDocs: torchfl docs migrate-runtime"),
    "warmup": Text(
        "Run MODEL's example inputs, or inputs of each --shapes, through torch.fl.compile "
        "with the device description's backend and dynamic-shape policy, so that the "
        "fingerprinted compile cache holds the compiled code before the real job starts. "
        "Reports per shape the first-call time (compilation or cache load, plus one run), "
        "a second call's time, and whether Inductor's cache hit.",
        "Examples:\n  torchfl warmup examples/gpt.py:factory\n"
        "  torchfl warmup examples/gpt.py:factory --shapes 8x64 4x32 1x16 --train\n"
        "  FL_CACHE_DIR=/shared/fl-cache/$USER torchfl warmup examples/gpt.py:factory --device acc0\n"
        "Docs: torchfl docs compile"),
    "aot": Text(
        "Export MODEL with torch.export on its example inputs and compile it ahead of time "
        "with AOTInductor into a .pt2 package that records the fingerprint of this stack "
        "(torch, Python, torch-fl, description, plugin, runtime, compiler). "
        "and the sha256 of every file in it. torch.fl.load_aot(FILE) refuses a package whose "
        "files were altered, or built on a stack with another fingerprint. With --check FILE, "
        "check a package's files and compare it with this stack without loading it.",
        "Examples:\n  torchfl aot examples/gpt.py:factory --out gpt.pt2\n"
        "  torchfl aot --check gpt.pt2\n  torchfl aot --check gpt.pt2 --sha256 HEX\n"
        "Docs: torchfl docs compile"),
    "cache": Text(
        "Inspect, verify or clear the compile cache: one entry per fingerprint of the "
        "stack (torch, Python, torch-fl, description, plugin, runtime, compiler) under the "
        "root FL_CACHE_DIR, else the description's compile.cache_dir.",
        "Examples:\n  torchfl cache info\n  torchfl cache verify\n  torchfl cache clear --stale\n"
        "  torchfl cache clear --all\nDocs: torchfl docs compile"),
    "preflight": Text(
        "Start N local processes (ranks) with torchrun's launcher and run the torch-fl "
        "preflight in each: environment consistency across ranks, then a checked "
        "all_reduce, broadcast and barrier on every rank's device. Prints one row per rank; "
        "exits 1 when a rank fails, naming it.",
        "Examples:\n  torchfl preflight --nproc 2\n  torchfl preflight --nproc 8 --timeout 120\n"
        "  torchfl preflight --nproc 4 --backend gloo --json"),
    "docs": Text(
        "Print where torch-fl's documentation is: the folder of pages shipped with this copy "
        "(a wheel's torch_fl/docs, a checkout's docs/) and one line per page; with TOPIC, the "
        "path of that page (e.g. cli, analysis, errors); with --show, the page itself.",
        "Examples:\n  torchfl docs\n  torchfl docs cli\n  torchfl docs analysis --show | less\n"
        "Exit status: 0 found, 1 no pages shipped with this copy, 2 no such TOPIC."),
}
