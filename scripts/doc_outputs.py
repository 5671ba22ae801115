"""Regenerate the command outputs shown in README.md and docs/*.md, or check that they are current.

Markers (an HTML comment on the line before a fenced block; invisible in rendered Markdown):

- ``<!-- output: COMMAND -->``: the block is what COMMAND prints (stdout; add ``2>&1`` for stderr).
- ``<!-- output -->`` before a block whose first line is ``$ COMMAND``: the lines after it are the output
  (stdout and stderr, as a terminal shows them).
- ``<!-- output (timings): ... -->``: the same, for a command whose numbers change from run to run
  (times, rates): ``--check`` compares the text with every number masked.
- ``<!-- illustrative: WHY -->``: the block shows an output that cannot be produced here (a real GPU,
  several machines, a failure staged by hand); no test runs it, and WHY says why.

A COMMAND runs under bash at the repository root, with this Python's bin folder first on PATH, every
``FL_*`` variable removed, ``HF_HUB_OFFLINE=1`` and ``COLUMNS=110``. The repository's own path is
written as ``/work/main`` in the docs, whatever the checkout's path is.

    python scripts/doc_outputs.py                 # rewrite every output block
    python scripts/doc_outputs.py --check         # exit 1, listing the blocks that differ
    python scripts/doc_outputs.py --only cli.md   # one file (--list shows every block)

tests/test_docs.py checks that every block claiming an output carries one of these markers, and runs
``--check`` on the generated ones.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHOWN_ROOT = "/work/main"  # how the docs spell the repository's path
MARKER = re.compile(r"^<!-- (output|illustrative)(?: \((timings)\))?(?::\s*(.*?))?\s*-->\s*$")
FENCE = re.compile(r"^(`{3,})(\w*)\s*$")
# Values that differ between machines and runs even when nothing changed: masked by --check.
VOLATILE_LINES = re.compile(r"^(\s*(?:- \*\*)?(?:platform|python|name|environment|cache dir|result|OS|runs on|device)"
                            r"(?:\*\*)?:\s*).*$", re.M)
DURATION = re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s|µs|min)\b")
CLOCK = re.compile(r"\[(?:\d\d:\d\d:\d\d|\.\.)\]")
# rows a timed run ranks or adds by load, and bench's alignment line, whose verdict (BELOW TARGET,
# UNCERTAIN) a loaded machine can move
TIMED_ROWS = re.compile(r"^(?:aten|prims)::|vary a lot|^alignment ")
RULE = re.compile(r"-{2,}")  # a table's rule under its header: as wide as the widest cell of the run
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?")


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    kind: str  # "output" or "illustrative"
    timings: bool
    command: str  # "" for illustrative blocks
    prompt: bool  # the block's first line is "$ COMMAND"
    body: list[str]
    start: int  # index of the first body line in the file's lines
    end: int  # index of the closing fence
    above: str  # the fenced block just before the marker (what `{above}` in the command runs)

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """Every marked fenced block of one Markdown file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found = []
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        fence = FENCE.match(lines[i + 1]) if m and i + 1 < len(lines) else None
        if not fence:
            continue
        end = next(j for j in range(i + 2, len(lines)) if lines[j].rstrip() == fence.group(1))
        body = lines[i + 2:end]
        prompt = m.group(1) == "output" and not m.group(3) and bool(body) and body[0].startswith("$ ")
        command = body[0][2:] if prompt else (m.group(3) or "" if m.group(1) == "output" else "")
        if m.group(1) == "output" and not command:
            raise SystemExit(f"{path}:{i + 2}: '<!-- output -->' needs a command: '<!-- output: COMMAND -->' "
                             "or a first line '$ COMMAND' in the block")
        found.append(Block(path, i + 2, m.group(1), bool(m.group(2)), command, prompt, body, i + 2, end,
                           _block_before(lines, i)))
    return found


def _block_before(lines: list[str], marker: int) -> str:
    """The content of the fenced block that ends just above line `marker` (blank lines between)."""
    j = marker - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    if j < 0 or not lines[j].startswith("```"):
        return ""
    fence = lines[j].rstrip()
    k = j - 1
    while k >= 0 and not (lines[k].startswith(fence) and lines[k].rstrip() != fence):
        k -= 1
    return "\n".join(lines[k + 1:j]) + "\n" if k >= 0 else ""


def run(command: str, above: str = "", check: bool = True) -> str:
    """What the docs show for `command`: its output, trailing spaces and blank lines removed. `{above}`
    in the command is a file holding the code block above the marker (a recipe that the doc shows)."""
    import tempfile

    if "{above}" in command:
        if not above:
            raise SystemExit(f"{command!r} runs {{above}}, but no code block ends just above its marker")
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False, encoding="utf-8") as f:
            f.write(above)
        try:
            return run(command.replace("{above}", f.name), check=check)
        finally:
            os.unlink(f.name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", HF_HUB_OFFLINE="1",
               COLUMNS="110")
    done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    # A recipe that fails must fail the check, not become an empty output; a `$ command` block shows
    # whatever the terminal shows, a failing command's message included (--strict's exit 1).
    if check and done.returncode != 0:
        raise SystemExit(f"{command!r} exited {done.returncode}:\n{done.stderr[-3000:]}")
    # Progress lines carry the time of day: the docs write it as [..].
    text = CLOCK.sub("[..]", done.stdout.replace(str(ROOT), SHOWN_ROOT))
    return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")


def invocation(block: Block) -> tuple[str, str, bool]:
    """run()'s arguments for a block: a `$ command` block with stderr and whatever exit status."""
    return (block.command + " 2>&1", "", False) if block.prompt else (block.command, block.above, True)


def rendered(block: Block, output: str) -> list[str]:
    return ([f"$ {block.command}"] if block.prompt else []) + output.splitlines()


def masked(text: str, timings: bool) -> str:
    text = VOLATILE_LINES.sub(r"\1<varies>", text.replace(str(ROOT), SHOWN_ROOT))
    text = CLOCK.sub("[time]", DURATION.sub("<t>", text))
    return NUMBER.sub("N", text) if timings else text


def differs(block: Block, output: str) -> bool:
    shown, now = (masked("\n".join(lines), block.timings).splitlines()
                  for lines in (block.body, rendered(block, output)))
    if block.timings:
        # What a timed run shows depends on the machine's load: which ops are the slowest and in what
        # order, column widths (and so the length of a table's rule of dashes), a noise warning. Its shape is
        # what must not drift.
        shown, now = ({RULE.sub("--", " ".join(line.split())) for line in lines if not TIMED_ROWS.search(line)}
                      for lines in (shown, now))
    return shown != now


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 when a block is stale")
    parser.add_argument("--only", help="only blocks of this file (name, e.g. cli.md) or of this block (cli.md:106)")
    parser.add_argument("--list", action="store_true", help="list the marked blocks and their commands")
    args = parser.parse_args(argv)
    stale = []
    for path in DOCS:
        marked = [b for b in blocks(path) if not args.only or args.only in (path.name, b.name.split("/")[-1])]
        if args.list:
            for b in marked:
                print(f"{b.name}\t{b.kind}{' (timings)' if b.timings else ''}\t{b.command}")
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        changed = False
        # From the end, so that a block whose length changes does not move the ones still to do.
        for block in reversed([b for b in marked if b.kind == "output"]):
            output = run(*invocation(block))
            if not differs(block, output):
                continue
            stale.append(block.name)
            lines[block.start:block.end] = rendered(block, output)
            changed = True
        if changed and not args.check:  # others edit these files too: write only what changed
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for name in stale:
        print(f"{'stale' if args.check else 'rewrote'}: {name}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
