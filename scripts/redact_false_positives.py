"""False-positive rate of `torchfl bugreport`'s redaction on real public text (code, READMEs, configs).

    python scripts/redact_false_positives.py [--per-line] [--no-detect-secrets] DIR...

    S=.venv/lib/python3.11/site-packages
    python scripts/redact_false_positives.py $S/accelerate $S/lightning_fabric $S/transformers/models/llama \
        $S/transformers/models/gpt2 $S/transformers/models/bert $S/diffusers/models docs examples

Public code (accelerate, Lightning, transformers, diffusers as installed; this repository's docs and
examples; checkouts such as pytorch/examples or nanoGPT) holds no secrets, so every line the redaction
changes is a false positive; they are printed for review. Each file is redacted whole, as a report is:
a value found once is replaced wherever it occurs, so a false find counts on every line it reaches.
--per-line redacts line by line instead (the measure before the two-pass redaction).
"""
import argparse
import sys
from difflib import SequenceMatcher
from pathlib import Path

from torch_fl.cli.bugreport import redact

SUFFIXES = {".py", ".md", ".txt", ".sh", ".yaml", ".yml", ".json", ".toml", ".cfg", ".ini", ".log"}
HOME, USER = "/home/nonexistent-user-xyz", "nonexistent-user-xyz"


def changed_lines(before: list[str], after: list[str]) -> list[tuple[str, str]]:
    if len(before) == len(after):
        return [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    pairs = []
    for op, i1, i2, j1, j2 in SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if op != "equal":
            pairs.extend((b, "\n".join(after[j1:j2])) for b in before[i1:i2])
    return pairs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="+", metavar="DIR")
    parser.add_argument("--per-line", action="store_true", help="redact each line alone")
    parser.add_argument("--no-detect-secrets", action="store_true", help="our own patterns alone")
    args = parser.parse_args(argv)
    total = changed = 0
    examples = []
    for root in args.roots:
        for path in sorted(Path(root).rglob("*")):
            if not path.is_file() or path.suffix not in SUFFIXES:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            lines = text.splitlines()
            total += len(lines)
            if args.per_line:
                after = [redact(line, environ={}, home=HOME, user=USER, detector=not args.no_detect_secrets)
                         for line in lines]
            else:
                after = redact(text, environ={}, home=HOME, user=USER,
                               detector=not args.no_detect_secrets).splitlines()
            for line, out in changed_lines(lines, after):
                changed += 1
                examples.append(f"{path.relative_to(root)}: {line.strip()[:140]}\n    -> {out.strip()[:140]}")
    print(f"lines {total}, changed {changed} ({100 * changed / max(total, 1):.3f}%)")
    print("\n".join(examples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
