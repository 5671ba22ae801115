"""Put this folder on PYTHONPATH to run Python as if torch were not installed (the pre-commit install):
a meta-path finder refuses torch and its submodules. NO_IMPORT="numpy,..." names other top-level packages
to refuse instead (tests/cli/test_help.py plays a host without numpy). Used by scripts/error_cases.py and the
torch-free CLI tests. The variable is inherited, so processes started from there refuse the same packages."""

import os
import sys

REFUSED = tuple(name.strip() for name in os.environ.get("NO_IMPORT", "torch").split(",") if name.strip())


class _Refused:
    def find_spec(self, name, path=None, target=None):
        if name.split(".", 1)[0] in REFUSED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _Refused())
