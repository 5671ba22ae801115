"""The reference docs cover every schema key and every FL_* variable (they drift otherwise)."""

from __future__ import annotations

from pathlib import Path

import pytest

from torch_fl import _env
from torch_fl.description.schema import SCHEMA

DOCS = Path(__file__).parents[1] / "docs"


@pytest.mark.parametrize("key", [k if s is None else f"{s}.{k}" for s, keys in SCHEMA.items() for k in keys])
def test_every_schema_key_is_documented(key):
    assert f"`{key}`" in (DOCS / "descriptions.md").read_text()


@pytest.mark.parametrize("var", [v.name for v in _env.ALL])
def test_every_env_var_is_documented(var):
    assert f"`{var}`" in (DOCS / "env.md").read_text()


def test_complete_example_in_the_docs_loads():
    from torch_fl.description.loader import parse

    text = (DOCS / "descriptions.md").read_text().split("## A complete example", 1)[1]
    example = text.split("```toml\n", 1)[1].split("```", 1)[0]
    desc = parse(example, "docs/descriptions.md")
    assert desc.name == "ascend-910b" and desc.section("ops")["dtypes"]["aten::bmm"] == ["float32", "float16"]


def test_every_cli_command_is_documented():
    from torch_fl.cli import COMMANDS

    text = (DOCS / "cli.md").read_text()
    for command in COMMANDS:
        assert f"`torchfl {command}`" in text, command


def test_troubleshooting_links_resolve():
    import re

    text = (DOCS / "troubleshooting.md").read_text()
    for target in re.findall(r"\]\(([a-z-]+\.md)", text):
        assert (DOCS / target).is_file(), target
    from torch_fl.cli import COMMANDS

    for command in re.findall(r"torchfl (\w+)", text):
        assert command in COMMANDS, command


def _shell(script: str, cwd: Path, **env: str):
    import os
    import subprocess
    import sys

    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PATH": path, **env}, check=False)


@pytest.mark.slow  # two torchfl processes
def test_new_description_recipe_runs_end_to_end(tmp_path):
    text = (DOCS / "descriptions.md").read_text().split("## Starting a new description", 1)[1]
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    recipe = "\n".join(line for line in block.splitlines() if "--probe" not in line)  # needs a live chip
    done = _shell(recipe, tmp_path)
    assert done.returncode == 0, done.stderr
    assert 'name = "mychip"' in done.stdout and "Copy of 'cuda'" in done.stdout
    listed = _shell("torchfl describe --list", tmp_path, FL_DESCRIPTION="mychip.toml")
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()[1:]}
    assert rows["cuda"].endswith("built-in") and rows["mychip"].endswith("mychip.toml")
    assert "warning" not in listed.stderr  # nothing replaced silently (or loudly)
    # Without --as the copy says, in its first line, that it would replace the built-in.
    same = _shell("torchfl describe cuda", tmp_path)
    assert same.stdout.startswith("# name = 'cuda': loaded as is, this file REPLACES the built-in 'cuda'")
