#!/usr/bin/env python
"""Every safe fix site of some trees, for a person to judge, and two mechanical checks of `torchfl fix` on
them (issue 37): the fixed files still parse, and the in-place edits (migrate/textfix.py) give the same
text as the libcst rewrite, safe and unsafe. Trees are read, never written (fix_source in memory).

    python scripts/realworld_safe_sites.py TREE...   # e.g. /tmp/ext/huggingface+lerobot (a `fetch` mirror)

Prints a summary line (files, findings by safety, fixed files, broken files, fixes not applied, in-place vs
libcst: same / different) and then one line per safe site: path | line | code | source line.
"""

from __future__ import annotations

import ast
import collections
import sys
from pathlib import Path

from torch_fl.migrate import fix
from torch_fl.migrate.scan import scan_source


def main(trees: list[str]) -> None:
    stats: collections.Counter[str] = collections.Counter()
    sites = []
    for tree in trees:
        for path in sorted(Path(tree).rglob("*.py")):
            try:
                source = path.read_text(encoding="utf-8")
                findings = scan_source(source, str(path))
            except (SyntaxError, UnicodeDecodeError, ValueError):
                stats["skipped (does not parse here)"] += 1
                continue
            stats["files"] += 1
            for finding in findings:
                stats[f"findings {finding.safety}"] += 1
                if finding.safety == "safe":
                    sites.append((str(path), finding.line, finding.code,
                                  source.splitlines()[finding.line - 1].strip()[:110]))
            for unsafe in (False, True):
                fix.TEXT_EDITS = True
                fast = fix.fix_source(source, unsafe=unsafe, path=str(path))
                fix.TEXT_EDITS = False
                reference = fix.fix_source(source, unsafe=unsafe, path=str(path))
                fix.TEXT_EDITS = True
                if reference.new_source == source:
                    continue
                stats["in-place = libcst" if fast == reference else "IN-PLACE DIFFERS"] += 1
                if not unsafe:
                    stats["fixed files"] += 1
                    stats["fixes not applied"] += len(reference.not_applied)
                    try:
                        ast.parse(reference.new_source)
                    except SyntaxError:
                        stats["BROKEN"] += 1
    print(dict(stats))
    for site in sites:
        print(*site, sep=" | ")


if __name__ == "__main__":
    main(sys.argv[1:])
