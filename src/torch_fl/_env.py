"""Every ``FL_*`` environment variable torch-fl reads, in one place.

Values are read when asked for (not cached at import) so that tests and long-lived processes that
change the environment see the change; the dispatch hot path never calls into this module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class EnvVar:
    name: str
    default: str
    help: str

    def get(self) -> str:
        return os.environ.get(self.name, self.default).strip()

    def is_set(self) -> bool:
        return bool(os.environ.get(self.name, "").strip())


FL_DEVICE = EnvVar("FL_DEVICE", "", "Device used by torch.fl.device() with no argument (default acc0). "
                   "Accepts a virtual id (acc0), a physical name (cuda:1, cpu) or emu:NAME.")
FL_DEVICE_MAP = EnvVar("FL_DEVICE_MAP", "", "Explicit virtual-to-physical map, e.g. "
                       "'acc0=cuda:1,acc1=cpu'. Overrides config files and auto-detection.")
FL_BACKEND = EnvVar("FL_BACKEND", "", "Force the backend (a description name: cpu, cuda, npu, ...) "
                    "instead of auto-detection.")
FL_DESCRIPTION = EnvVar("FL_DESCRIPTION", "", "Path of one description file to load last "
                        "(it overrides a description of the same name).")
FL_DESCRIPTION_PATH = EnvVar("FL_DESCRIPTION_PATH", "", "os.pathsep-separated directories searched "
                             "for *.toml description files.")
FL_CONFIG = EnvVar("FL_CONFIG", "", "Path of the user config file "
                   "(default ~/.config/torch_fl/config.toml).")
FL_LOG = EnvVar("FL_LOG", "", "Per-module log levels, e.g. 'dispatch=DEBUG,compile=INFO'; "
                "a bare level ('DEBUG') applies to every torch_fl logger.")
FL_ROUTE = EnvVar("FL_ROUTE", "", "Per-op route overrides, e.g. 'aten::gelu=translate,"
                  "aten::bmm.default=fallback'; a bare name covers every overload.")
FL_ROUTE_LOG = EnvVar("FL_ROUTE_LOG", "", "Write the non-native call counts as JSON to this path "
                      "at exit.")
FL_FALLBACK = EnvVar("FL_FALLBACK", "", "Set to 'error' to turn every CPU fallback into an error "
                     "(strict mode for CI).")
FL_CACHE_DIR = EnvVar("FL_CACHE_DIR", "", "Root of the compile cache; overrides the description's "
                      "compile.cache_dir.")
FL_CACHE_KEEP = EnvVar("FL_CACHE_KEEP", "3", "How many compile cache entries (fingerprints) to keep per "
                       "description, the current one included; older ones are removed (default 3).")
FL_CUDA_ALIAS = EnvVar("FL_CUDA_ALIAS", "", "Set to 1 to run CUDA-hard-coded code on torch.fl.device() "
                       "in any process that imports torch (the torch.backends autoload hook), without "
                       "importing torch_fl.")
FL_PREFLIGHT = EnvVar("FL_PREFLIGHT", "1", "Set to 0 to skip the distributed preflight of "
                      "torch.fl.distributed.init_process_group (rank consistency, checked collectives).")
FL_COLLECTIVE_TIMEOUT = EnvVar("FL_COLLECTIVE_TIMEOUT", "600", "Seconds a collective may take before the "
                               "watchdog ends the process with a diagnosis; 0 keeps torch's default "
                               "timeout and turns the watchdog off.")

ALL: tuple[EnvVar, ...] = (
    FL_DEVICE, FL_DEVICE_MAP, FL_BACKEND, FL_DESCRIPTION, FL_DESCRIPTION_PATH, FL_CONFIG, FL_LOG,
    FL_ROUTE, FL_ROUTE_LOG, FL_FALLBACK, FL_CACHE_DIR, FL_CACHE_KEEP,
    FL_CUDA_ALIAS, FL_PREFLIGHT, FL_COLLECTIVE_TIMEOUT,
)
