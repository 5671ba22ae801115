"""``torch.fl.compile``: torch.compile with the description's backend and dynamic-shape policy, through
the fingerprinted cache.

Policies (``[compile] dynamic_shapes``):

``static``   ``dynamic=False``: one graph per input shape; every new shape is a recompilation, counted
             in the stats and logged (torch falls back to eager after ``recompile_limit``, 8).
``jit``      ``dynamic=None``: the first graph is static; on a shape change torch recompiles once with
             dynamic dimensions (automatic dynamic shapes).
``dynamic``  ``dynamic=True``: dynamic dimensions from the first compilation.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..errors import TorchFLError
from . import cache, isa, torchkey
from .target import description_of

_log = logging.getLogger("torch_fl.compile")

POLICIES: dict[str, bool | None] = {"static": False, "jit": None, "dynamic": True}

_disabled_logged: set[str] = set()
_pointed_at: Path | None = None
_stats: weakref.WeakKeyDictionary[Any, CompileStats] = weakref.WeakKeyDictionary()


@dataclass
class CompileStats:
    """What torch.fl.compile did for one model. A compilation is one frame (function) compiled by
    Dynamo (graph breaks add frames); a recompilation is a frame of this model compiled again because
    its guards failed (a new input shape under the static policy, say)."""

    name: str
    description: str
    backend: str
    policy: str
    dynamic: bool | None
    cache_entry: str
    compilations: int = 0
    recompilations: int = 0
    graphs: int = 0
    shapes: list[str] = field(default_factory=list)  # input shapes of each compiled graph: '8x64'
    dynamic_graphs: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def compile(model: Callable | None = None, *, device: str | torch.device | None = None,
            **kwargs: Any) -> Any:
    """``torch.compile(model)`` with the backend and dynamic-shape policy of the device's description,
    its artifacts in the fingerprinted compile cache (docs/compile.md).

    Args:
        model: a module or function (None: use as a decorator).
        device: whose description applies (default: the active one, i.e. ``torch.fl.device()``'s;
            ``emu:NAME`` for an emulated chip).
        **kwargs: passed to torch.compile (``fullgraph``, ``mode``, ``options``, ...); ``backend`` and
            ``dynamic`` override the description.

    Returns the compiled model, or `model` itself when the description sets ``jit = false`` (logged
    once). ``torch.fl.compile_stats(compiled)`` counts compilations and recompilations.

    Example::

        model = torch.fl.compile(GPT().to(torch.fl.device()))
        logits = model(tokens)               # compiles, or loads from the cache
        torch.fl.compile_stats(model).recompilations
    """
    if model is None:
        return functools.partial(compile, device=device, **kwargs)
    desc = description_of(device)
    section = desc.section("compile")
    if not section["jit"]:
        if desc.name not in _disabled_logged:
            _disabled_logged.add(desc.name)
            _log.warning("compile: the '%s' description sets compile.jit = false; torch.fl.compile returns "
                         "models unchanged (eager) on this device (%s)", desc.name, desc.path or "built-in")
        return model
    entry, persistent = _entry_or_uncached(desc)
    use_entry(entry)
    backend = kwargs.pop("backend", section["backend"])
    policy = section["dynamic_shapes"]
    dynamic = kwargs.pop("dynamic", POLICIES[policy])
    options = dict(kwargs.pop("options", None) or {})
    # torch.compile itself consumes guard_filter_fn; the backend would reject it as a config name.
    own = {k: options.pop(k) for k in ("guard_filter_fn",) if k in options}
    if backend == "inductor":
        isa.install(entry.path)
        private_headers(entry)
        torchkey.install(entry.path)
    inner = _backend(backend, kwargs.pop("mode", None), options or None, dynamic)
    stats = CompileStats(getattr(model, "__name__", type(model).__name__), desc.name,
                         getattr(inner, "compiler_name", str(backend)), policy, dynamic, str(entry.path))
    compiled = torch.compile(model, backend=_CountingBackend(inner, stats, entry if persistent else None),
                             dynamic=dynamic,
                             options=own or None, **kwargs)
    _stats[compiled] = stats
    return compiled


_uncached: dict[str, cache.Entry] = {}  # description -> this process's temporary entry


def _entry_or_uncached(desc: Any) -> tuple[cache.Entry, bool]:
    """The cache entry, or, when the cache cannot be used (refused, read-only, full, not a directory, its
    lock held too long), a private temporary directory for this process, removed at exit, with a warning
    that says why and how to fix the cache. Returns (entry, whether it is the persistent cache)."""
    from ..errors import CacheLockTimeout, CacheTrustError, CacheUnusableError

    try:
        return cache.open_entry(desc), True
    except (CacheTrustError, CacheUnusableError, CacheLockTimeout) as exc:
        if desc.name in _uncached:
            return _uncached[desc.name], False
        import shutil
        import tempfile

        root = Path(tempfile.mkdtemp(prefix="torch_fl-uncached-"))  # 0700
        atexit.register(shutil.rmtree, root, True)
        try:
            entry = cache.open_entry_at(desc, root)
        except (OSError, TorchFLError):  # even the temporary directory is unusable: compile there bare
            entry = cache.Entry(root, root, cache.fingerprint(desc))
        _uncached[desc.name] = entry
        _log.warning("compile: %s Compiling without the cache for now: this process writes its compiled "
                     "code to %s, removed at exit.", exc, root)
        return entry, False


def compile_stats(compiled: Any) -> CompileStats:
    """The CompileStats of a model returned by torch.fl.compile."""
    try:
        return _stats[compiled]
    except (KeyError, TypeError):
        raise ValueError(f"{type(compiled).__name__} was not returned by torch.fl.compile "
                         f"(with compile.jit = false the model is returned unchanged)") from None


def _backend(backend: str | Callable, mode: str | None, options: dict | None, dynamic: bool | None) -> Any:
    """The callable torch.compile would build for a backend name (mode and options applied)."""
    if not isinstance(backend, str):
        return backend
    if backend == "inductor":
        return torch._TorchCompileInductorWrapper(mode, options, dynamic)
    return torch._TorchCompileWrapper(backend, mode, options, dynamic)


class _CountingBackend:
    """Records each graph Dynamo hands to the backend, then compiles it with the real backend."""

    def __init__(self, inner: Any, stats: CompileStats, entry: cache.Entry | None = None):
        self.inner = inner
        self.stats = stats
        self.entry = entry
        self.compiler_name = stats.backend
        self._compiles: set[tuple[int, int]] = set()  # (frame, its compilation number)
        self._frames: set[int] = set()

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list, **kwargs: Any) -> Any:
        self._record(gm, example_inputs)
        compiled = self.inner(gm, example_inputs, **kwargs)
        if self.entry is not None:
            # Inductor and AOTAutograd have written this graph's artifacts: record their hashes now, so
            # that the next process can check them before loading them.
            try:
                cache.seal(self.entry)
            except (OSError, TorchFLError) as exc:  # a disk that filled up: the compiled graph still runs
                _log.warning("compile: recording the artifacts of %s failed, the next start checks and "
                             "rebuilds them: %s", self.entry.path, exc)
        return compiled

    def __getattr__(self, name: str) -> Any:
        # Dynamo asks backends for optional hooks (backend_ctx_ctor, reset, ...): answer as the real one.
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

    def _record(self, gm: torch.fx.GraphModule, example_inputs: list) -> None:
        from torch._guards import CompileContext

        stats = self.stats
        stats.graphs += 1
        stats.shapes.append(_shape_text(example_inputs))
        if _is_dynamic(gm):
            stats.dynamic_graphs += 1
        compile_id = CompileContext.current_compile_id()
        frame = (compile_id.frame_id, compile_id.frame_compile_id) if compile_id else (-1, stats.graphs)
        if frame in self._compiles:
            return  # another graph of a compilation already counted
        self._compiles.add(frame)
        stats.compilations += 1
        # Per model: Dynamo numbers compilations per code object, and two models of one class share it.
        if frame[0] in self._frames:
            stats.recompilations += 1
            _log.info("compile: recompiling %s for inputs %s (recompilation %d, dynamic=%s)", stats.name,
                      stats.shapes[-1], stats.recompilations, stats.dynamic)
        self._frames.add(frame[0])


def _shape_text(example_inputs: list) -> str:
    """Shapes of the graph's user inputs ('8x64, 8'): parameters are graph inputs too, and are left out."""
    shapes = []
    for value in example_inputs:
        if isinstance(value, torch.nn.Parameter):
            continue
        if isinstance(value, torch.Tensor):
            shapes.append("x".join(str(d) for d in value.shape) or "scalar")
    return ", ".join(shapes) or "no tensor inputs"


def _is_dynamic(gm: torch.fx.GraphModule) -> bool:
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        value = node.meta.get("example_value")
        if isinstance(value, torch.SymInt) or (
                isinstance(value, torch.Tensor) and any(not isinstance(d, int) for d in value.shape)):
            return True
    return False


def use_entry(entry: cache.Entry) -> None:
    """Point Inductor's and Triton's caches into `entry` for this process.

    Environment variables, not config: Inductor reads TORCHINDUCTOR_CACHE_DIR on every cache access and
    passes both variables to its compile workers, and a compile happens at the first call, long after
    torch.compile returns, so the location must hold process-wide from now on."""
    global _pointed_at
    if _pointed_at == entry.path:
        return
    if _pointed_at is None:
        _warn_if_user_set()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(entry.inductor_dir)
    os.environ["TRITON_CACHE_DIR"] = str(entry.triton_dir)
    # Graphs compiled after the last record (a lazily compiled backward) are recorded at exit.
    atexit.register(_seal_quietly, entry)
    if _pointed_at is not None:
        _log.info("compile: this process now compiles into %s (was %s)", entry.path, _pointed_at)
    _pointed_at = entry.path


def private_headers(entry: cache.Entry) -> None:
    """Move Inductor's precompiled headers into the cache root (``<root>/.precompiled_headers``).

    Inductor keeps them in ``<tmp>/torchinductor_<user>/precompiled_headers`` whatever
    TORCHINDUCTOR_CACHE_DIR says: a predictable path in a world-writable directory, where another user
    can create the directory first and plant a ``.gch`` that g++ then compiles into every kernel. Under
    the root they are private (the root is checked, the directory too). They stay out of the entries:
    a header is 150 MB and is keyed by its own content (compiler, flags, preprocessed text), so every
    entry of the root shares it, as every process of a machine shares Inductor's default one; a new
    fingerprint does not rebuild it (15 s of a cold start under load). torch 2.13 reads the module
    constants ``_HEADER_DIR`` / ``_HEADER_LOCK_DIR`` at each use; a torch without them has nothing to move."""
    import torch._inductor.codecache as codecache

    if not hasattr(codecache, "_HEADER_DIR"):
        return
    headers = cache.private_subdir(entry.root, cache.HEADERS)
    codecache._HEADER_DIR = str(headers)
    codecache._HEADER_LOCK_DIR = str(headers / "locks")


def _seal_quietly(entry: cache.Entry) -> None:
    try:
        cache.seal(entry)
    except Exception as exc:  # at exit: the artifacts stay unrecorded until the next record
        _log.debug("compile: recording the artifacts of %s at exit failed: %s", entry.path, exc)


def _warn_if_user_set() -> None:
    for var in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        value = os.environ.get(var)
        if not value:
            continue
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        # Inductor writes its default (and Triton's, below it) into the environment once it compiles.
        if not os.path.abspath(value).startswith(os.path.abspath(default_cache_dir())):
            _log.warning("compile: %s=%s is replaced by torch-fl's fingerprinted cache; set FL_CACHE_DIR "
                         "to choose where that cache lives", var, value)
