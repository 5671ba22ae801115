"""Level-2 dispatch: JIT (torch.compile) and AOT (torch.export + AOTInductor) through a fingerprinted
compile cache. See docs/compile.md.

Importing this package is cheap: Dynamo and Inductor load when something is compiled. (The
fingerprint function stays in its module, ``compiler.fingerprint.fingerprint``: re-exported here it would
shadow the module of the same name.)
"""

from __future__ import annotations

from .aot import AOTFingerprintError, AOTIntegrityError, export_aot, load_aot, read_package_fingerprint
from .cache import Entry, cache_root, open_entry
from .fingerprint import COMPONENTS, Fingerprint
from .jit import CompileStats, compile, compile_stats
from .target import description_of
from .trust import CacheTrustError

__all__ = [
    "COMPONENTS", "AOTFingerprintError", "AOTIntegrityError", "CacheTrustError", "CompileStats", "Entry", "Fingerprint", "cache_root", "compile",
    "compile_stats", "description_of", "export_aot", "load_aot", "open_entry",
    "read_package_fingerprint",
]
