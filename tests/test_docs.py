"""The reference docs cover every schema key and every FL_* variable (they drift otherwise)."""

from __future__ import annotations

import re
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


@pytest.mark.slow  # the recipe's two torchfl processes
def test_new_description_recipe_runs_end_to_end(tmp_path, monkeypatch, capsys):
    text = (DOCS / "descriptions.md").read_text().split("## Starting a new description", 1)[1]
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    recipe = "\n".join(line for line in block.splitlines() if "--probe" not in line)  # needs a live chip
    done = _shell(recipe, tmp_path)
    assert done.returncode == 0, done.stderr
    assert 'name = "mychip"' in done.stdout and "Copy of 'cuda'" in done.stdout
    # Then, in this process (the recipe's files are in tmp_path): both descriptions load, nothing replaced.
    import torch_fl
    from torch_fl.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FL_DESCRIPTION", "mychip.toml")
    torch_fl.reset()
    capsys.readouterr()
    assert main(["describe", "--list"]) == 0
    listed = capsys.readouterr()
    rows = {line.split()[0]: line for line in listed.out.splitlines()[1:]}
    assert rows["cuda"].endswith("built-in") and rows["mychip"].endswith("mychip.toml")
    assert "warning" not in listed.err  # nothing replaced silently (or loudly)
    # Without --as the copy says, in its first line, that it would replace the built-in.
    monkeypatch.delenv("FL_DESCRIPTION")
    torch_fl.reset()
    assert main(["describe", "cuda"]) == 0
    assert capsys.readouterr().out.startswith(
        "# name = 'cuda': loaded as is, this file REPLACES the built-in 'cuda'")


# ---------------------------------------------------------------- outputs shown in the docs cannot drift

def _doc_outputs():
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("doc_outputs", Path(__file__).parents[1] / "scripts" / "doc_outputs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["doc_outputs"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


DOC_OUTPUTS = _doc_outputs()



def _claiming_blocks(path: Path) -> list[tuple[int, str]]:
    """(line, why) of every fenced block that shows what something printed: a `$ command` line followed
    by output, a `>>>` session with results, or a plain/text/json block right after prose ending in ':'
    or right after another code block (the output of the code above)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        m = DOC_OUTPUTS.FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].rstrip() == m.group(1))
        body, lang = lines[i + 1:end], m.group(2)
        prev = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()
                     and not lines[k].startswith("<!--")), "")
        prompts = [k for k, line in enumerate(body) if line.startswith("$ ")]
        if prompts and any(line.strip() and not line.startswith("$ ") for line in body[prompts[0] + 1:]):
            found.append((i + 1, "a $ command with output"))
        elif any(line.startswith(">>> ") for line in body) and any(
                line.strip() and not line.startswith((">>> ", "... ")) for line in body):
            found.append((i + 1, "a >>> session with results"))
        elif lang in ("", "text", "json", "jsonc", "markdown") and not prev.startswith("#") and (
                prev.rstrip().endswith(":") or prev.startswith("```")) and not _commands_only(body):
            found.append((i + 1, "a block after '...:' or after code"))
        i = end + 1
    return found


_COMMAND_LINE = re.compile(r"^(pip|python|torchfl|make|git|export|\.venv/bin/\S+|[A-Z_]+=\S*)\b")


def _commands_only(body: list[str]) -> bool:
    """A block of commands to type (pip install ..., torchfl ...), not an output."""
    lines = [line for line in body if line.strip()]
    return bool(lines) and all(_COMMAND_LINE.match(line) for line in lines)


def _marked(path: Path) -> set[int]:
    return {b.line for b in DOC_OUTPUTS.blocks(path)}


# Generated whole by scripts/gen_rule_docs.py from the rules and their fixtures (tests/migrate check it).
GENERATED_FILES = {"migrate-rules.md"}


@pytest.mark.parametrize("path", [p for p in DOC_OUTPUTS.DOCS if p.name not in GENERATED_FILES],
                         ids=lambda p: p.name)
def test_every_block_showing_an_output_is_generated_or_marked_illustrative(path):
    unmarked = [f"{path.name}:{line} ({why})" for line, why in _claiming_blocks(path) if line not in _marked(path)]
    assert not unmarked, ("blocks that show an output need '<!-- output: COMMAND -->' (regenerated by "
                          "scripts/doc_outputs.py, checked by this file) or '<!-- illustrative: WHY -->' "
                          f"on the line before: {unmarked}")


def test_the_claim_detector_finds_outputs(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("Text:\n\n```\nout\n```\n\n```bash\n$ torchfl doctor\nResult: healthy\n```\n\n"
                   "## Usage\n\n```\ntorchfl doctor [--json]\n```\n\n```python\n>>> 1 + 1\n2\n```\n", encoding="utf-8")
    assert [why for _, why in _claiming_blocks(doc)] == [
        "a block after '...:' or after code", "a $ command with output", "a >>> session with results"]
    doc.write_text("Text:\n\n<!-- illustrative: a GPU run -->\n```\nout\n```\n", encoding="utf-8")
    assert _claiming_blocks(doc) == [(4, "a block after '...:' or after code")] and _marked(doc) == {4}


GENERATED = [b for path in DOC_OUTPUTS.DOCS for b in DOC_OUTPUTS.blocks(path) if b.kind == "output"]


@pytest.mark.slow  # each runs its command (a few seconds; the bench and compare examples up to a minute)
@pytest.mark.parametrize("block", GENERATED, ids=lambda b: b.name)
def test_generated_output_is_current(block):
    output = DOC_OUTPUTS.run(*DOC_OUTPUTS.invocation(block))
    assert not DOC_OUTPUTS.differs(block, output), (
        f"{block.name} shows an old output of `{block.command}`: run python scripts/doc_outputs.py "
        f"--only {block.path.name} and commit the change. Now:\n{output}")
