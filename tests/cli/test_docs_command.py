"""`torchfl docs` and the help texts' pointers to the documentation (issue 31): the pages ship in the
wheel (torch_fl/docs), every command's help names its page as `torchfl docs TOPIC`, and no help points
at a docs/*.md path, which an installed copy does not have."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import _torch_fl_cli
from torch_fl.cli import COMMANDS, DOC_PAGES, build_parser, main
from torch_fl.cli.docs import docs_folder, pages

SRC = Path(_torch_fl_cli.__file__).resolve().parent
ROOT = SRC.parent
DOCS = ROOT / "docs"
# Owned by the scan/fix work of issue 31 (cli/scan.py, cli/fix.py): their own epilogs still name the file;
# their help ends with the `torchfl docs` pointer all the same.
FILE_MENTIONS_LEFT = {"scan", "fix"}


def _help(*argv: str) -> str:
    parser = build_parser(list(argv))
    sub = parser._subparsers._group_actions[0].choices[argv[0]]
    return sub.format_help()


def test_docs_lists_every_page(capsys):
    assert main(["docs"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"torch-fl documentation: {DOCS}\n")
    for page in DOCS.glob("*.md"):
        assert re.search(rf"^  {re.escape(page.stem)} +\S", out, re.M), page.stem
    assert "  cli " in out and "The torchfl command" in out


def test_docs_topic_names_the_page_and_show_prints_it(capsys):
    assert main(["docs", "cli"]) == 0
    assert capsys.readouterr().out == f"{DOCS / 'cli.md'}\n"
    assert main(["docs", "docs/errors.md"]) == 0  # the spelling old help texts used
    assert capsys.readouterr().out == f"{DOCS / 'errors.md'}\n"
    assert main(["docs", "analysis", "--show"]) == 0
    assert capsys.readouterr().out == (DOCS / "analysis.md").read_text(encoding="utf-8")


def test_an_unknown_topic_is_bad_input(capsys):
    assert main(["docs", "clii"]) == 2
    err = capsys.readouterr().err
    assert "no page 'clii'. Did you mean 'cli'?" in err and "analysis, architecture" in err


def test_without_shipped_pages_the_web_home_or_the_reason(monkeypatch, capsys):
    from torch_fl.cli import docs

    monkeypatch.setattr(docs, "docs_folder", lambda: None)
    monkeypatch.setattr(docs, "web_home", lambda: "https://example.org/torch-fl/docs")
    assert main(["docs", "cli"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "https://example.org/torch-fl/docs\n"
    assert "not shipped with this copy" in captured.err and "online: https://example.org" in captured.err
    monkeypatch.setattr(docs, "web_home", lambda: None)
    assert main(["docs"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "not shipped with this copy" in captured.err


def test_every_help_names_a_page_that_exists():
    topics = pages(docs_folder())
    assert set(DOC_PAGES.values()) <= set(topics)
    for name in COMMANDS:
        text = _help(name)
        named = re.findall(r"torchfl docs ([a-z-]+)", text)
        assert named, f"torchfl {name} --help names no page"
        assert set(named) <= set(topics), (name, named)
        assert f"torchfl docs {DOC_PAGES.get(name, 'cli')}" in text, name
        if name not in FILE_MENTIONS_LEFT:
            assert not re.search(r"docs/[a-z-]+\.md", text), (name, re.findall(r"docs/[a-z-]+\.md", text))
    top = build_parser([]).format_help()
    assert "torchfl docs" in top and "docs/" not in top


@pytest.mark.slow  # builds the wheel (hatchling, well under a second) and runs its console script
def test_the_wheel_ships_the_pages_that_help_names(tmp_path):
    hatchling = pytest.importorskip("hatchling.builders.wheel")
    (wheel,) = hatchling.WheelBuilder(str(ROOT)).build(directory=str(tmp_path / "dist"), versions=["standard"])
    with zipfile.ZipFile(wheel) as archive:
        shipped = {n.removeprefix("torch_fl/docs/") for n in archive.namelist() if n.startswith("torch_fl/docs/")}
        archive.extractall(tmp_path / "site")
    # every page, and what the pages show (docs/img/...)
    assert shipped == {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*") if p.is_file()}
    assert {p.name for p in DOCS.glob("*.md")} <= shipped
    # The installed copy finds its own pages (not this checkout's): the wheel's console-script module.
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, str(site / "_torch_fl_cli.py"), "docs", "analysis"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(site / "torch_fl" / "docs" / "analysis.md")
