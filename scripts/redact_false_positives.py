"""False-positive rate of `torchfl bugreport`'s redaction on real public text (code, READMEs, configs).

    python scripts/redact_false_positives.py /tmp/src/examples /tmp/src/nanoGPT /tmp/src/pytorch-image-models

Checkouts of public repositories (pytorch/examples, karpathy/nanoGPT, huggingface/pytorch-image-models)
hold no secrets, so every line the redaction changes is a false positive; they are printed for review.
"""
import sys
from pathlib import Path

from torch_fl.cli.bugreport import redact

total = changed = 0
examples = []
for root in sys.argv[1:]:
    for path in Path(root).rglob("*"):
        if not path.is_file() or path.suffix not in {".py", ".md", ".txt", ".sh", ".yaml", ".yml", ".json", ".toml", ".cfg", ".ini", ".log"}:
            continue
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (UnicodeDecodeError, OSError):
            continue
        for line in lines:
            total += 1
            out = redact(line, environ={}, home="/home/nonexistent-user-xyz", user="nonexistent-user-xyz")
            if out != line:
                changed += 1
                examples.append(f"{path.relative_to(root)}: {line.strip()[:140]}\n    -> {out.strip()[:140]}")
print(f"lines {total}, changed {changed} ({100*changed/max(total,1):.3f}%)")
print("\n".join(examples))
