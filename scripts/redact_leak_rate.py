"""Leak rate of `torchfl bugreport`'s redaction on gitleaks' own example secrets, planted in the shapes
people paste (env lines, os.environ, header dicts, CLI options, URLs, YAML/INI/JSON, tracebacks).

    python scripts/redact_leak_rate.py [--no-detect-secrets] [--gitleaks DIR] [-v]

The secrets come from tests/cli/data/gitleaks_examples.txt (extracted by scripts/gitleaks_examples.py from
gitleaks' rule generators; with --gitleaks DIR they are extracted afresh from that checkout). A case
leaks when the redacted text still holds the secret, or a run of it at least half its length (8
characters or more): a token whose prefix alone was replaced is still a leak. BARE (a secret alone in a
log line, no name or shape around it) is reported apart: only vendor formats can be found there.
"""

from __future__ import annotations

import argparse
import json
import sys
from difflib import SequenceMatcher
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "cli" / "data" / "gitleaks_examples.txt"

# {i}: the vendor's word (adafruit), {I}: upper case, {V}: capitalised, {s}: the secret.
SHAPES: dict[str, str] = {
    "env line": "{I}_TOKEN={s}",
    "export": 'export {I}_API_KEY="{s}"',
    "os.environ": 'os.environ["{I}_TOKEN"] = "{s}"',
    "auth header dict": 'headers = {{"Authorization": "Bearer {s}", "Content-Type": "application/json"}}',
    "vendor header dict": 'r = requests.get(url, headers={{"X-{V}-Key": "{s}"}}, timeout=10)',
    "curl header": 'curl -sS -H "X-Api-Key: {s}" https://api.{i}.com/v1/me',
    "cli option": "python upload.py --{i}-key {s} --retries 3",
    "cli option=": "{i} login --token={s}",
    "url path": "POST https://api.{i}.com/v1/hooks/{s}/messages -> 404 Not Found",
    "url user": "git clone https://{s}@github.com/acme/models.git",
    "url password": "pip install --index-url https://{i}:{s}@pypi.example.com/simple/ pkg",
    "url query": "GET https://api.{i}.com/v2/data?apikey={s}&limit=10 (401)",
    "yaml": "{i}:\n  {i}_token: {s}\n  region: us-east-1",
    "yaml quoted": "{i}:\n  api_key: \"{s}\"",
    "ini": "[{i}]\nsecret = {s}\ntimeout = 30",
    "json": '{{"{i}": {{"token": "{s}", "region": "us-east-1"}}}}',
    "kwargs": 'client = {V}Client(token="{s}", retries=3)',
    "traceback repr": ("Traceback (most recent call last):\n  File \"train.py\", line 12, in <module>\n"
                       "    client.upload(model)\n{V}AuthError: 401 for Client(base_url='https://api.{i}.com', "
                       "api_key='{s}')"),
    "environ repr": "environ({{'{I}_SECRET': '{s}', 'PATH': '/usr/bin'}})",
    "said twice": "{I}_TOKEN={s}\nINFO uploading\nINFO retrying with credentials {s}",
}
BARE = "ERROR upload failed, credentials {s} rejected"


def load(gitleaks: str | None = None) -> list[tuple[str, str, str]]:
    """(rule id, vendor word, secret) of every example."""
    if gitleaks:
        sys.path.insert(0, str(ROOT / "scripts"))
        import gitleaks_examples

        return [(r, v, s) for r, v, s, _ in gitleaks_examples.extract(gitleaks)[1]]
    rows = []
    for line in FIXTURE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            rule, vendor, secret, _kind = json.loads(line)
            rows.append((rule, vendor, secret))
    return rows


def plant(shape: str, vendor: str, secret: str) -> str:
    word = vendor if vendor[:1].isalpha() else f"x{vendor}"
    return shape.format(i=word, I=word.upper(), V=word.capitalize(), s=secret)


def leaked(secret: str, text: str) -> bool:
    if secret in text:
        return True
    match = SequenceMatcher(None, secret, text, autojunk=False).find_longest_match(0, len(secret), 0, len(text))
    return match.size >= max(8, (len(secret) + 1) // 2)


def measure(redact, rows, shapes: dict[str, str] = SHAPES) -> dict[str, list[tuple[str, str, str]]]:
    """shape -> the (rule, secret, redacted text) that leaked."""
    leaks: dict[str, list[tuple[str, str, str]]] = {name: [] for name in shapes}
    for name, shape in shapes.items():
        for rule, vendor, secret in rows:
            out = redact(plant(shape, vendor, secret))
            if leaked(secret, out):
                leaks[name].append((rule, secret, out))
    return leaks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gitleaks", metavar="DIR", help="extract the examples afresh from this checkout")
    parser.add_argument("--no-detect-secrets", action="store_true", help="our own patterns alone")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every leak")
    args = parser.parse_args(argv)
    from torch_fl import redact as module

    def redact(text: str) -> str:
        return module.redact(text, environ={}, home="/home/nobody-xyz", user="nobody-xyz",
                             detector=not args.no_detect_secrets)

    rows = load(args.gitleaks)
    leaks = measure(redact, rows)
    bare = measure(redact, rows, {"bare": BARE})["bare"]
    total = len(rows) * len(SHAPES)
    count = sum(len(v) for v in leaks.values())
    print(f"{len(rows)} secrets of {len({r for r, _, _ in rows})} gitleaks rules x {len(SHAPES)} shapes: "
          f"{count} of {total} leak ({100 * count / total:.2f}%)"
          f"{' without detect-secrets' if args.no_detect_secrets else ''}")
    for name, found in leaks.items():
        print(f"  {name:20} {len(found):4} leak")
    print(f"  (bare in a log line: {len(bare)} of {len(rows)} leak; only vendor formats are findable there)")
    if args.verbose:
        for name, found in [*leaks.items(), ("bare", bare)]:
            for rule, secret, out in found:
                print(f"[{name}] {rule}: {secret[:60]!r}\n    -> {out[:200]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
