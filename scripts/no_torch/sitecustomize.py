"""Put this folder on PYTHONPATH to run Python as if torch were not installed (the pre-commit install):
a meta-path finder refuses torch and its submodules. Used by scripts/error_cases.py and the torch-free CLI
tests."""

import sys


class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoTorch())
