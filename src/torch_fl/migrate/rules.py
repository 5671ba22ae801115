"""The migration rules as data: one :class:`Rule` per code, the :class:`Finding` a scan produces, and
rule selection (``--select FL1`` / ``ignore = ["FL203"]``).

Codes are stable: a code is never reused for a different check. ``docs/migrate-rules.md`` is generated
from this table (``scripts/gen_rule_docs.py``), so the text here is the documentation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from ..errors import did_you_mean

FixSafety = Literal["safe", "unsafe"] | None
Level = Literal["error", "warning"]

FAMILIES = {
    "FL1": "device strings and placement",
    "FL2": "CUDA runtime calls",
    "FL3": "automatic mixed precision",
    "FL4": "backend flags",
    "FL5": "distributed",
    "FL6": "raw memory",
    "FL7": "kernels and extensions",
    "FL8": "third-party libraries",
    "FL9": "control flow",
}


@dataclass(frozen=True)
class Rule:
    """One check. ``message_template`` and ``fix_title`` are ``str.format`` templates whose fields the
    scanner fills per finding (the literal, the attribute, the module...).

    ``fix`` is the best fix any finding of this rule can get; a finding carries its own ``safety``
    because some rules fix only some shapes (FL201 fixes ``is_available()`` but not
    ``current_stream()``). ``level`` is "error" where the code breaks or silently falls back on another
    device, "warning" where it still runs but is slow, a no-op or fragile there.
    """

    code: str
    name: str
    family: str
    message_template: str
    fix_title: str
    fix: FixSafety
    what: str
    why: str
    example: str
    use_instead: str
    level: Level = "error"
    fix_notes: str = ""

    @property
    def summary(self) -> str:
        """The first sentence of `what`, for one-line listings (SARIF shortDescription)."""
        return self.what.split(". ")[0].rstrip(".") + "."

    @property
    def anchor(self) -> str:
        """Fragment of this rule's section in docs/migrate-rules.md."""
        return self.code.lower()

    def fix_safety_text(self) -> str:
        """The docs' "Fix safety" paragraph."""
        if self.fix is None:
            text = "No automatic fix: the right replacement depends on what the code means to do."
        elif self.fix == "safe":
            text = "Safe fix (`torchfl fix`): the rewrite keeps behaviour on CUDA and works elsewhere."
        else:
            text = ("Unsafe fix (`torchfl fix --unsafe-fixes`): the rewrite can change behaviour, "
                    "so review it.")
        return f"{text} {self.fix_notes}".strip()


@dataclass(frozen=True)
class Finding:
    """One problem at one place, as ``torchfl scan`` reports it and ``torchfl fix`` consumes it.

    Positions are 1-based lines and 1-based columns counted in characters (Unicode code points, not
    UTF-8 bytes); ``end_col`` is exclusive, as in ruff and SARIF. The range is exactly the source of
    the AST node the finding is about, and for a fixable finding it is the node the fix rewrites:

    * FL101: the string literal, or the whole ``torch.device("cuda"[, N])`` call;
    * FL102, FL201, FL202, FL301, FL302: the call; FL104: the literal (``set_default_device``);
    * FL105, FL303, FL501, FL902: the string literal to replace.

    (A libcst ``PositionProvider`` range has the same lines and 0-based columns: ``col - 1``.)
    ``safety`` is the fix this finding can get ("safe", "unsafe" or None); ``fixable`` says whether
    that fix is allowed at the level the caller asked for (safe only, unless unsafe fixes are on).
    """

    code: str
    name: str
    path: str
    line: int
    col: int
    end_line: int
    end_col: int
    message: str
    fix_title: str | None
    fixable: bool
    safety: FixSafety = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def sort_key(self) -> tuple[str, int, int, str]:
        return (self.path, self.line, self.col, self.code)


def _rule(code: str, name: str, message: str, fix_title: str, fix: FixSafety, *, what: str, why: str,
          example: str, use_instead: str, level: Level = "error", fix_notes: str = "") -> Rule:
    return Rule(code, name, FAMILIES[code[:3]], message, fix_title, fix, what, why, example.strip("\n"),
                use_instead.strip("\n"), level, fix_notes)


# Third-party imports that only run on NVIDIA GPUs (FL801): module prefix -> (what it provides, the
# portable alternative). A prefix matches the module and its submodules ("apex" matches "apex.amp").
CUDA_ONLY_LIBRARIES: dict[str, tuple[str, str]] = {
    "apex": ("NVIDIA Apex: mixed precision, fused optimizers and fused layers",
             "`torch.autocast` / `torch.amp.GradScaler`, `torch.optim.AdamW(fused=True)` where the "
             "device supports it, `torch.nn.LayerNorm`"),
    "flash_attn": ("FlashAttention CUDA kernels",
                   "`torch.nn.functional.scaled_dot_product_attention` (each device picks its fused kernel)"),
    "xformers": ("memory-efficient attention CUDA kernels",
                 "`torch.nn.functional.scaled_dot_product_attention`"),
    "bitsandbytes": ("8-bit and 4-bit optimizers and quantization CUDA kernels",
                     "torchao / `torch.ao.quantization`, or the chip vendor's quantization library"),
    "nvidia.dali": ("GPU data loading and augmentation",
                    "`torch.utils.data.DataLoader` with torchvision transforms"),
    "pynvml": ("NVIDIA management library queries (memory, utilisation)",
               "`torch.fl.mem_get_info()`, `torch.fl.get_device_properties()`"),
    "deepspeed.ops": ("DeepSpeed fused CUDA ops (FusedAdam, transformer kernels)",
                      "`torch.optim.AdamW`, or DeepSpeed's accelerator-neutral `deepspeed.accelerator`"),
    "transformer_engine": ("NVIDIA Transformer Engine FP8 layers",
                           "`torch.nn` layers under `torch.fl.autocast()`"),
    "torch_tensorrt": ("TensorRT compilation", "`torch.compile` / `torch.export` with AOTInductor"),
    "tensorrt": ("TensorRT inference engines", "`torch.compile` / `torch.export` with AOTInductor"),
}

# Libraries that hand raw CUDA memory or kernels to and from tensors (FL603): module prefix -> what.
GPU_INTEROP_LIBRARIES: dict[str, str] = {
    "cupy": "CuPy arrays in CUDA memory",
    "pycuda": "the PyCUDA driver API",
    "numba.cuda": "Numba CUDA kernels",
    "cuda": "NVIDIA cuda-python bindings",
}

_RULES: tuple[Rule, ...] = (
    _rule(
        "FL101", "cuda-device-string",
        "Hard-coded CUDA device {text} used as a device", "Replace with `{replacement}`", "safe",
        what="A `\"cuda\"` or `\"cuda:N\"` string used as a device: `torch.device(\"cuda\")`, a "
             "`device=`/`map_location=`/`device_map=` keyword of any call, or the first argument of "
             "`.to(...)`. f-strings such as `f\"cuda:{rank}\"` are reported too.",
        why="The code then runs only on NVIDIA (and ROCm) builds; on an Ascend, Cambricon, Intel or Apple "
            "device it fails with \"Torch not compiled with CUDA enabled\", or someone edits every string "
            "by hand.",
        example="""
model = Net().to("cuda")
x = torch.zeros(8, device="cuda:1")
dev = torch.device("cuda")
""",
        use_instead="""
model = Net().to(torch.fl.device())
x = torch.zeros(8, device=torch.fl.device("acc1"))
dev = torch.fl.device()
""",
        fix_notes="`\"cuda\"` becomes `torch.fl.device()` and `\"cuda:N\"` / `torch.device(\"cuda\", N)` "
                  "becomes `torch.fl.device(\"accN\")`: on a CUDA machine accN is cuda:N unless "
                  "FL_DEVICE_MAP says otherwise. f-strings and other computed strings are not fixed.",
    ),
    _rule(
        "FL102", "cuda-method",
        "`{call}` moves to a CUDA device only", "Replace with `.to({replacement})`", "safe",
        what="A `.cuda()` or `.cuda(N)` call on a tensor or module.",
        why="`.cuda()` exists on every tensor and module but fails on any backend other than CUDA.",
        example="""
model = Net().cuda()
x = batch.cuda(1, non_blocking=True)
""",
        use_instead="""
model = Net().to(torch.fl.device())
x = batch.to(torch.fl.device("acc1"), non_blocking=True)
""",
        fix_notes="Only calls with no device or an integer literal device are fixed; `.cuda(rank)` with "
                  "a variable is reported without a fix.",
    ),
    _rule(
        "FL103", "cuda-tensor-type",
        "`{attr}` is a CUDA-only tensor type", "Use a `{dtype}` tensor with `device=torch.fl.device()`",
        None,
        what="The legacy typed-tensor classes `torch.cuda.FloatTensor`, `HalfTensor`, `LongTensor`, ... "
             "used as constructors, in `isinstance`, or in `.type(...)`.",
        why="These classes exist only for CUDA; they are also deprecated in favour of dtype + device.",
        example="""
x = torch.cuda.FloatTensor(4, 4)
y = x.type(torch.cuda.HalfTensor)
""",
        use_instead="""
x = torch.empty(4, 4, dtype=torch.float32, device=torch.fl.device())
y = x.to(torch.float16)
""",
        fix_notes="A constructor call takes sizes or data depending on its arguments, so the rewrite is "
                  "left to a person.",
    ),
    _rule(
        "FL104", "cuda-default-device",
        "`{call}` makes CUDA the default device", "Use `torch.set_default_device(torch.fl.device())`",
        "safe",
        what="`torch.set_default_device(\"cuda\")` or `torch.set_default_tensor_type(torch.cuda.*)`.",
        why="Every factory call afterwards allocates on CUDA, so the whole program is CUDA-bound by one "
            "line that is easy to miss.",
        example="""
torch.set_default_device("cuda")
torch.set_default_tensor_type(torch.cuda.FloatTensor)
""",
        use_instead="""
torch.set_default_device(torch.fl.device())
torch.set_default_dtype(torch.float32); torch.set_default_device(torch.fl.device())
""",
        fix_notes="Only `set_default_device` with a string literal is fixed; `set_default_tensor_type` "
                  "mixes dtype and device and is reported without a fix.",
    ),
    _rule(
        "FL105", "cuda-device-variable",
        "CUDA device {text} in `{target}` reaches a device argument (line {sink_line})",
        "Replace with `{replacement}`", "unsafe",
        what="A `\"cuda\"` string bound to a variable, attribute, config-dict key, dataclass field, "
             "argparse default or parameter default that later reaches a device argument in the same "
             "module (`.to(device)`, `device=cfg.device`, `torch.device(args.device)`).",
        why="It is FL101 one step removed: the string is the hard-coded device, the call site only "
            "passes it along.",
        example="""
device = "cuda" if torch.cuda.is_available() else "cpu"
model.to(device)
parser.add_argument("--device", default="cuda")
""",
        use_instead="""
device = torch.fl.device()
model.to(device)
parser.add_argument("--device", default=str(torch.fl.device()))
""",
        fix_notes="The literal at the assignment becomes `torch.fl.device_type()` (`\"cuda:N\"`: "
                  "`str(torch.fl.device(\"accN\"))`). Unsafe because the variable may be used as a "
                  "string elsewhere (compared with \"cuda\", logged, saved in a config). The tracking is "
                  "by name within one module: a function's locals, module globals, and attribute or key "
                  "names of any object.",
    ),
    _rule(
        "FL201", "cuda-runtime-call",
        "`{call}()` is CUDA-only", "{remedy}", "safe",
        what="A `torch.cuda.*` runtime call: `is_available`, `device_count`, `set_device`, "
             "`current_device`, `empty_cache`, memory statistics, `manual_seed[_all]`, "
             "`get_device_name`, `get_device_properties`, `Stream`, `Event`, `stream`, "
             "`current_stream`, and any other `torch.cuda` function.",
        why="`torch.cuda` answers for CUDA only: on another accelerator `is_available()` is False and "
            "the program silently runs on the CPU, or the call raises.",
        example="""
n = torch.cuda.device_count()
torch.cuda.manual_seed_all(0)
print(torch.cuda.max_memory_allocated())
""",
        use_instead="""
n = torch.fl.device_count()
torch.fl.manual_seed(0)
print(torch.fl.max_memory_allocated())
""",
        fix_notes="Safe where torch.fl has the same call (is_available, device_count, set_device, "
                  "current_device, empty_cache, memory_allocated, max_memory_allocated, "
                  "reset_peak_memory_stats, mem_get_info, manual_seed, Stream, Event, stream; "
                  "manual_seed_all becomes torch.fl.manual_seed). `get_device_name(x)` becomes "
                  "`torch.fl.get_device_properties(x).name` as an unsafe fix (the name's format differs "
                  "per vendor). Other calls have no fix.",
    ),
    _rule(
        "FL202", "cuda-synchronize",
        "`torch.cuda.synchronize()` waits for CUDA only", "Replace with `torch.fl.synchronize()`", "safe",
        what="A `torch.cuda.synchronize(...)` call.",
        why="On another device it raises, or (if guarded) waits for nothing, so timings measure only "
            "the time to queue work.",
        example="""
torch.cuda.synchronize()
elapsed = time.perf_counter() - start
""",
        use_instead="""
torch.fl.synchronize()
elapsed = time.perf_counter() - start
""",
    ),
    _rule(
        "FL203", "synchronize-in-loop",
        "`{call}` inside a loop waits for the device on every iteration",
        "Move it out of the loop, or read values every N steps", None, level="warning",
        what="`torch.cuda.synchronize()`, `torch.fl.synchronize()` or `.item()` inside the body of a "
             "`for`/`while` loop, a `while` condition, or a comprehension.",
        why="Each call is a hidden host-device synchronisation: the host stops queueing work until the "
            "device is idle. On asynchronous devices that costs throughput every step; on chips with "
            "synchronous submission it can serialise the whole step, and with collectives it is a "
            "classic cause of a hang at step N.",
        example="""
for batch in loader:
    loss = step(batch)
    total += loss.item()
""",
        use_instead="""
for i, batch in enumerate(loader):
    loss = step(batch)
    total += loss.detach()          # stays on the device
    if i % 100 == 0:
        print(total.item())         # one sync every 100 steps
""",
        fix_notes="Whether a sync is needed is a design decision; a warning, not an error.",
    ),
    _rule(
        "FL301", "cuda-amp-autocast",
        "`torch.cuda.amp.autocast` is deprecated and CUDA-only",
        "Replace with `torch.autocast(torch.fl.device_type(), ...)`", "safe",
        what="A `torch.cuda.amp.autocast(...)` call, including `autocast()` imported from "
             "`torch.cuda.amp`.",
        why="It enables autocast for CUDA only; on any other device the region silently runs in "
            "float32, and torch warns that it is deprecated.",
        example="""
from torch.cuda.amp import autocast
with autocast(dtype=torch.float16):
    out = model(x)
""",
        use_instead="""
with torch.autocast(torch.fl.device_type(), dtype=torch.float16):
    out = model(x)
# or, with the description's autocast dtype: with torch.fl.autocast():
""",
    ),
    _rule(
        "FL302", "cuda-grad-scaler",
        "`torch.cuda.amp.GradScaler` is deprecated and CUDA-only",
        "Replace with `torch.amp.GradScaler(torch.fl.device_type(), ...)`", "safe",
        what="A `torch.cuda.amp.GradScaler(...)` call.",
        why="The CUDA scaler keeps its state on CUDA; elsewhere it disables itself with a warning and "
            "float16 gradients underflow.",
        example="""
scaler = torch.cuda.amp.GradScaler()
""",
        use_instead="""
scaler = torch.amp.GradScaler(torch.fl.device_type())
""",
    ),
    _rule(
        "FL303", "autocast-cuda-device-type",
        "`{func}` with the hard-coded device type {text}", "Replace {text} with `torch.fl.device_type()`",
        "safe",
        what="`\"cuda\"` as the device type of `torch.autocast`, `torch.amp.autocast`, "
             "`torch.amp.GradScaler`, `torch.amp.custom_fwd/custom_bwd`, or any `device_type=` keyword.",
        why="Autocast for `\"cuda\"` does nothing for tensors on another device: the region silently "
            "runs in float32 there.",
        example="""
with torch.autocast("cuda", dtype=torch.bfloat16):
    out = model(x)
""",
        use_instead="""
with torch.autocast(torch.fl.device_type(), dtype=torch.bfloat16):
    out = model(x)
""",
    ),
    _rule(
        "FL401", "cudnn-flag",
        "`{attr}` is a cuDNN setting: it does nothing on other devices", "{remedy}", None,
        level="warning",
        what="A read or write of `torch.backends.cudnn.*` (`benchmark`, `deterministic`, `allow_tf32`, "
             "`enabled`, `flags(...)`).",
        why="On another device the flag is silently ignored: `deterministic = True` does not make an NPU "
            "run deterministic, and reading `benchmark` says nothing about it.",
        example="""
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.deterministic = True
""",
        use_instead="""
torch.use_deterministic_algorithms(True)        # every backend
if torch.fl.device_type() == "cuda":            # CUDA-only tuning, said so
    torch.backends.cudnn.benchmark = True
""",
        fix_notes="Whether a flag should become portable (`torch.use_deterministic_algorithms`) or "
                  "stay CUDA-only behind a guard is a decision for a person.",
    ),
    _rule(
        "FL402", "cuda-backend-flag",
        "`{attr}` is a CUDA backend setting: it does nothing on other devices", "{remedy}", None,
        level="warning",
        what="A read or write of `torch.backends.cuda.*`: `matmul.allow_tf32`, the scaled-dot-product "
             "attention kernel toggles (`enable_flash_sdp`, `sdp_kernel`, ...), `preferred_linalg_library`.",
        why="These tune CUDA kernels only; the same intent on another device needs the portable switch "
            "or is simply absent.",
        example="""
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cuda.enable_flash_sdp(False)
""",
        use_instead="""
torch.set_float32_matmul_precision("high")
with torch.nn.attention.sdpa_kernel([SDPBackend.MATH]):
    out = attention(q, k, v)
""",
    ),
    _rule(
        "FL501", "nccl-backend",
        "Hard-coded `nccl` process-group backend{detail}", "Replace with `torch.fl.dist_backend()`",
        "safe",
        what="`\"nccl\"` passed as the backend of `init_process_group` / `new_group`, or as a "
             "`backend=`, `process_group_backend=` or `dist_backend=` keyword; also `\"nccl\"` bound to "
             "a variable that is then passed as the backend.",
        why="NCCL exists only for NVIDIA GPUs; Ascend uses hccl, Cambricon cncl, Intel xccl, the CPU "
            "gloo. The description of each device names its collective backend.",
        example="""
dist.init_process_group("nccl")
backend = "nccl" if torch.cuda.is_available() else "gloo"
dist.init_process_group(backend=backend)
""",
        use_instead="""
dist.init_process_group(torch.fl.dist_backend())
# or torch.fl.distributed.init_process_group(), which also runs a preflight check
""",
        fix_notes="A literal passed directly is a safe fix; a literal reaching the call through a "
                  "variable gets an unsafe fix, because the variable may also be compared with \"nccl\".",
    ),
    _rule(
        "FL502", "nccl-env",
        "NCCL environment variable `{var}` {action} in code",
        "Set it in the launch environment (or leave it to the collective backend)", None, level="warning",
        what="Setting or removing an `NCCL_*` environment variable from Python: `os.environ[...] = `, "
             "`os.environ.setdefault`, `os.environ.update`, `os.environ.pop`, `del os.environ[...]`, "
             "`os.putenv`.",
        why="NCCL tuning does nothing on other collective backends (hccl, cncl, xccl, gloo), and setting "
            "it inside the program hides a deployment decision in code.",
        example="""
os.environ["NCCL_P2P_DISABLE"] = "1"
os.environ.setdefault("NCCL_DEBUG", "INFO")
""",
        use_instead="""
# In the launcher or job spec, for the clusters that use NCCL:
#   NCCL_P2P_DISABLE=1 torchrun --nproc-per-node 8 train.py
""",
    ),
    _rule(
        "FL503", "cuda-visible-devices",
        "`CUDA_VISIBLE_DEVICES` {action} in code",
        "Use the device description's `visible_devices_env`, or map devices with `FL_DEVICE_MAP`", None,
        level="warning",
        what="Reading or setting `CUDA_VISIBLE_DEVICES` from Python.",
        why="Each runtime has its own variable (`ASCEND_RT_VISIBLE_DEVICES`, `MLU_VISIBLE_DEVICES`, "
            "`ZE_AFFINITY_MASK`, ...); code that sets the CUDA one pins nothing on other chips, and code "
            "that reads it computes a wrong device list there.",
        example="""
os.environ["CUDA_VISIBLE_DEVICES"] = str(local_rank)
""",
        use_instead="""
# Let the launcher pin devices, or choose the device symbolically:
device = torch.fl.device(f"acc{local_rank}")
# FL_DEVICE_MAP="acc0=cuda:1" maps virtual devices without touching the runtime's variable;
# torch.fl.description().visible_devices_env names the variable of the current chip.
""",
    ),
    _rule(
        "FL601", "data-ptr",
        "`.data_ptr()` exposes a raw device address",
        "Keep raw addresses inside device-aware code (DLPack, torch ops, registered kernels)", None,
        level="warning",
        what="A `.data_ptr()` call (including `.untyped_storage().data_ptr()`).",
        why="The number is an address in the device's memory space. Comparing two of them works "
            "everywhere, but handing one to a library or doing arithmetic on it assumes CUDA's unified "
            "virtual addressing; on other devices the address may be a handle or not host-visible.",
        example="""
lib.scale_inplace(x.data_ptr(), x.numel())
""",
        use_instead="""
lib.scale_inplace(torch.utils.dlpack.to_dlpack(x))   # carries device, dtype, shape and strides
# Identity checks (a.data_ptr() == b.data_ptr()) are portable: mark them `# noqa: FL601`.
""",
    ),
    _rule(
        "FL602", "pointer-arithmetic",
        "Arithmetic on a device address ({how})",
        "Use tensor views (`narrow`, `view`, `as_strided`) or DLPack instead of raw pointers", None,
        what="Arithmetic on a `.data_ptr()` result or a storage offset (`x.data_ptr() + k`, a variable "
             "holding one), or a device address handed to `ctypes` (`ctypes.c_void_p(x.data_ptr())`).",
        why="Offsetting or dereferencing a device address only works where the address is a flat "
            "virtual address the caller may use, which is CUDA's model and not every chip's.",
        example="""
ptr = x.data_ptr() + x.element_size() * 16
lib.launch(ctypes.c_void_p(x.data_ptr()))
""",
        use_instead="""
view = x.view(-1)[16:]
lib.launch(torch.utils.dlpack.to_dlpack(x))
""",
    ),
    _rule(
        "FL603", "gpu-interop",
        "GPU interop through {what} (CUDA only)",
        "Exchange tensors through DLPack (`torch.from_dlpack`) with a library that supports the device",
        None,
        what="Imports of CUDA interop libraries (`cupy`, `pycuda`, `numba.cuda`, NVIDIA's `cuda` "
             "bindings) and `ctypes` loading a CUDA library (`ctypes.CDLL(\"libcudart.so\")`).",
        why="These share memory and kernels with tensors through CUDA's runtime; nothing of it exists on "
            "other accelerators.",
        example="""
import cupy as cp
arr = cp.from_dlpack(torch.utils.dlpack.to_dlpack(x))
""",
        use_instead="""
arr = torch.from_dlpack(x)   # or numpy on the host; or a Triton kernel (FL703) where supported
""",
    ),
    _rule(
        "FL701", "cuda-extension",
        "`{call}` builds a CUDA extension", "Provide a portable implementation (torch ops, a kernel "
        "registered per device with torch.library) and build the CUDA one only for CUDA", None,
        what="`torch.utils.cpp_extension.CUDAExtension(...)`, `load(...)` with `.cu` sources or CUDA "
             "flags, and `load_inline(..., cuda_sources=...)`.",
        why="The extension compiles with nvcc and its kernels exist only for CUDA; on another device the "
            "import fails or the op has no kernel.",
        example="""
ext = load(name="fused", sources=["fused.cpp", "fused_kernel.cu"])
""",
        use_instead="""
# A reference implementation in torch ops, registered as the op's default; the CUDA build
# registers a faster kernel for CUDA only (torch.library.custom_op + register_kernel).
""",
    ),
    _rule(
        "FL702", "cuda-source-file",
        "CUDA source file", "Give its kernels a portable implementation (torch ops or Triton)", None,
        what="A `.cu` or `.cuh` file in the scanned tree (reported at line 1, column 1).",
        why="CUDA C++ compiles for NVIDIA GPUs only (HIP can translate some of it for AMD); every other "
            "chip needs another implementation.",
        example="""
csrc/fused_kernel.cu
""",
        use_instead="""
# Keep the .cu kernel for CUDA, and register a portable version of the same op for every other
# device (see FL701).
""",
    ),
    _rule(
        "FL703", "triton-kernel",
        "Triton kernel `{func}` runs only where the target device has a Triton backend",
        "Register a fallback implementation for devices without Triton", None, level="warning",
        what="A function decorated with `@triton.jit` or `@triton.autotune`.",
        why="Triton compiles for NVIDIA, AMD and Intel GPUs and a few vendor backends, not for every "
            "chip; the kernel needs a fallback (torch ops) where there is no Triton backend.",
        example="""
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    ...
""",
        use_instead="""
# Route the op to the Triton kernel only where Triton runs; other devices keep their own route:
torch.fl.register_kernel("aten::gelu", triton_gelu, device_type="cuda")
""",
    ),
    _rule(
        "FL801", "cuda-only-library",
        "`{module}` is CUDA-only ({provides})", "Use {alternative}", None,
        what="An import of a third-party library that runs only on NVIDIA GPUs: " + ", ".join(
            f"`{m}`" for m in CUDA_ONLY_LIBRARIES) + ".",
        why="The import fails on other machines, or succeeds and fails at the first kernel launch.",
        example="""
from apex.optimizers import FusedAdam
from flash_attn import flash_attn_func
""",
        use_instead="""
opt = torch.optim.AdamW(model.parameters(), fused=torch.fl.device_type() == "cuda")
out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
""",
        fix_notes="The table of libraries and alternatives is `CUDA_ONLY_LIBRARIES` in "
                  "`torch_fl/migrate/rules.py`.",
    ),
    _rule(
        "FL901", "cuda-availability-branch",
        "Branch on `torch.cuda.is_available()`: every non-CUDA accelerator takes the other path",
        "Use `torch.fl.device()` (CPU is a device too) instead of branching", None, level="warning",
        what="An `if` or conditional expression whose condition calls `torch.cuda.is_available()` or "
             "`torch.cuda.device_count()`.",
        why="The `else` branch (or the code after the `if`) is the CPU path, so an NPU or MLU machine "
            "silently trains on the CPU: the 3x slowdown that takes days to find.",
        example="""
device = "cuda" if torch.cuda.is_available() else "cpu"
if torch.cuda.is_available():
    model.cuda()
""",
        use_instead="""
device = torch.fl.device()          # acc0 on any accelerator, the CPU when there is none
model.to(device)
""",
    ),
    _rule(
        "FL902", "device-type-comparison",
        "Device type compared with {text}", "Compare with `{replacement}`", "unsafe", level="warning",
        what="A comparison of a device or device type with `\"cuda\"`: `x.device.type == \"cuda\"`, "
             "`device_type != \"cuda\"`, `\"cuda\" in str(device)`, `str(device).startswith(\"cuda\")`.",
        why="Code behind the comparison is the CUDA path; every other accelerator takes the fallback "
            "path, usually one written for the CPU.",
        example="""
if x.device.type == "cuda":
    y = fused_op(x)
""",
        use_instead="""
if x.device.type == torch.fl.device_type():   # the accelerator in use, whatever it is
    y = fused_op(x)
""",
        fix_notes="Unsafe: the rewrite changes which branch runs on non-CUDA devices, which is the "
                  "point, but the branch may hold CUDA-only code (then fix that too).",
    ),
)

RULES: dict[str, Rule] = {rule.code: rule for rule in _RULES}
_BY_NAME: dict[str, Rule] = {rule.name: rule for rule in _RULES}


def by_name(name: str) -> Rule:
    """The rule called `name` (kebab-case, e.g. "cuda-device-string")."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no rule named '{name}'.{did_you_mean(name, _BY_NAME)}") from None


def expand(selector: str) -> list[str]:
    """The codes a selector names: a code ("FL101"), a prefix ("FL1", "FL10", "FL") or "ALL".

    Raises ValueError for a selector that names no rule.
    """
    if selector == "ALL":
        return list(RULES)
    codes = [code for code in RULES if code.startswith(selector)]
    if not codes:
        raise ValueError(f"'{selector}' selects no rule (codes FL101 ... FL902, prefixes like FL1 or "
                         f"FL10, or ALL).{did_you_mean(selector, RULES)}")
    return codes


def _layer(enabled: set[str], select: list[str] | None, ignore: list[str]) -> set[str]:
    # As in ruff: within one layer the most specific selector wins (select FL101 + ignore FL1 keeps
    # FL101); on equal specificity ignore wins. A layer with `select` starts from nothing.
    if select is not None:
        enabled = set()
    best: dict[str, tuple[int, bool]] = {}
    for selector, on in [(s, True) for s in select or ()] + [(s, False) for s in ignore]:
        rank = 0 if selector == "ALL" else len(selector)
        for code in expand(selector):
            previous = best.get(code)
            if previous is None or rank > previous[0] or (rank == previous[0] and not on):
                best[code] = (rank, on)
    for code, (_, on) in best.items():
        if on:
            enabled.add(code)
        else:
            enabled.discard(code)
    return enabled


def selected(*layers: tuple[Iterable[str] | None, Iterable[str] | None]) -> frozenset[str]:
    """The enabled codes after applying (select, ignore) layers in order, e.g. the pyproject.toml
    layer then the command line. Every rule is on before the first layer. A layer whose select is
    None keeps what earlier layers enabled and only removes its ignores."""
    enabled = set(RULES)
    for select, ignore in layers:
        enabled = _layer(enabled, None if select is None else list(select), list(ignore or ()))
    return frozenset(enabled)
