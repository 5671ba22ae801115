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
