"""Extract gitleaks' own true-positive examples (one fixture line per secret) for the redaction judge.

    python scripts/gitleaks_examples.py [GITLEAKS] [-o tests/cli/data/gitleaks_examples.txt]

GITLEAKS is a checkout of https://github.com/gitleaks/gitleaks (MIT license, Copyright (c) 2019 Zachary
Rice): a work tree, or a bare git directory such as the one `fetch github:gitleaks/gitleaks` leaves
(default: $GITLEAKS_REPO, then /work/.mirror/gitleaks+gitleaks/repo). Each rule generator in
cmd/generate/config/rules/*.go declares `tps`, the strings its rule must find; this script evaluates
them (Go string literals, `+`, fmt.Sprintf, utils.GenerateSampleSecret(s), and `secrets.NewSecret(regex)`
sampled here from the same regex with a generator seeded by the rule id, as gitleaks samples them at
test time), runs the rule's regex from config/gitleaks.toml over each and keeps the secret it captures:
up to --per-rule distinct secrets per rule, literal examples first. Nothing of gitleaks is committed but
those extracted example strings (tests/cli/data/gitleaks_examples.txt, with the attribution in its header).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import re._parser as sre_parse
import subprocess
import sys
from pathlib import Path
from re._constants import (  # the regex parser's own modules (3.11+, as tomllib; the sre_* names warn)
    ANY,
    ASSERT,
    ASSERT_NOT,
    AT,
    BRANCH,
    CATEGORY,
    CATEGORY_DIGIT,
    CATEGORY_NOT_DIGIT,
    CATEGORY_NOT_SPACE,
    CATEGORY_NOT_WORD,
    CATEGORY_SPACE,
    CATEGORY_WORD,
    GROUPREF,
    IN,
    LITERAL,
    MAX_REPEAT,
    MIN_REPEAT,
    NEGATE,
    NOT_LITERAL,
    RANGE,
    SUBPATTERN,
)

import tomllib

DEFAULT_REPO = "/work/.mirror/gitleaks+gitleaks/repo"
FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "cli" / "data" / "gitleaks_examples.txt"
HEADER = """\
# Example secrets extracted from gitleaks' rule generators (the `tps` of cmd/generate/config/rules/*.go,
# https://github.com/gitleaks/gitleaks, commit {commit}) by scripts/gitleaks_examples.py; regenerate with it.
# gitleaks is MIT licensed: Copyright (c) 2019 Zachary Rice. Permission is hereby granted, free of charge,
# to any person obtaining a copy of this software and associated documentation files (the "Software"), to
# deal in the Software without restriction, including without limitation the rights to use, copy, modify,
# merge, publish, distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom
# the Software is furnished to do so, subject to the following conditions: The above copyright notice and
# this permission notice shall be included in all copies or substantial portions of the Software.
# THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED.
# These values are published examples (most of them fake or revoked), not live credentials.
# One JSON array a line: [rule id, vendor (the rule id's first word), secret, "literal" | "sampled"].
"""


# Reading the checkout ---------------------------------------------------------------------------
class Checkout:
    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.bare = not (self.path / "cmd").is_dir()

    def read(self, name: str) -> str:
        if not self.bare:
            return (self.path / name).read_text(encoding="utf-8")
        return self._git("show", f"HEAD:{name}")

    def rule_files(self) -> list[str]:
        if not self.bare:
            root = self.path / "cmd/generate/config/rules"
            return sorted(f"cmd/generate/config/rules/{p.name}" for p in root.glob("*.go"))
        names = self._git("ls-tree", "--name-only", "HEAD", "cmd/generate/config/rules/").split()
        return sorted(n for n in names if n.endswith(".go"))

    def commit(self) -> str:
        try:
            return self._git("rev-parse", "HEAD").strip()
        except (subprocess.CalledProcessError, OSError):
            return "unknown"

    def _git(self, *args: str) -> str:
        flag = f"--git-dir={self.path}" if self.bare else f"--work-tree={self.path}"
        extra = [] if self.bare else [f"--git-dir={self.path / '.git'}"]
        return subprocess.run(["git", flag, *extra, *args], check=True, capture_output=True,
                              text=True).stdout


# Go regexes in Python -----------------------------------------------------------------------------
def python_regex(go: str) -> re.Pattern[str] | None:
    text = go.replace("[[:alnum:]]", "[0-9A-Za-z]").replace("[:alnum:]", "0-9A-Za-z").replace(r"\z", r"\Z")
    flags = 0
    if "(?i)" in text[1:]:  # a flag group in the middle: Python takes flags at the start only
        text = text.replace("(?i)", "")
        flags = re.I
    try:
        return re.compile(text, flags)
    except re.error:
        return None


# A string that a regex matches (as reggen, which gitleaks uses) -----------------------------------
_CATEGORIES = {
    CATEGORY_DIGIT: "0123456789", CATEGORY_WORD: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_",
    CATEGORY_SPACE: " ", CATEGORY_NOT_DIGIT: "abcXYZ", CATEGORY_NOT_WORD: "-", CATEGORY_NOT_SPACE: "aZ9",
}
_PRINTABLE = [chr(c) for c in range(33, 127)]


def sample(regex: str, rng: random.Random) -> str:
    return _gen(sre_parse.parse(regex), rng)


def _gen(items, rng: random.Random) -> str:
    out = []
    for op, arg in items:
        if op is LITERAL:
            out.append(chr(arg))
        elif op is NOT_LITERAL:
            out.append(rng.choice([c for c in _PRINTABLE if ord(c) != arg]))
        elif op is ANY:
            out.append(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789"))
        elif op is IN:
            out.append(rng.choice(_class(arg)))
        elif op is BRANCH:
            out.append(_gen(rng.choice(arg[1]), rng))
        elif op is SUBPATTERN:
            out.append(_gen(arg[-1], rng))
        elif op in (MAX_REPEAT, MIN_REPEAT):
            low, high, body = arg
            high = low + 8 if high > 10_000 else high
            out.extend(_gen(body, rng) for _ in range(rng.randint(low, high)))
        elif op is CATEGORY:
            out.append(rng.choice(_CATEGORIES[arg]))
        elif op in (AT, ASSERT, ASSERT_NOT, GROUPREF):
            continue
    return "".join(out)


def _class(items) -> list[str]:
    chars: set[str] = set()
    negate = False
    for op, arg in items:
        if op is NEGATE:
            negate = True
        elif op is LITERAL:
            chars.add(chr(arg))
        elif op is RANGE:
            chars.update(chr(c) for c in range(arg[0], arg[1] + 1))
        elif op is CATEGORY:
            chars.update(_CATEGORIES[arg])
    if negate:
        return [c for c in _PRINTABLE if c not in chars]
    return sorted(chars)


# Evaluating the tps expressions of a rule generator -----------------------------------------------
_TOKEN = re.compile(r'`[^`]*`|"(?:\\.|[^"\\])*"|[A-Za-z_][\w.]*|//[^\n]*|:=|\S')
_HELPERS = {
    "utils.Numeric": "[0-9]{%s}", "utils.Hex": "[a-f0-9]{%s}", "utils.AlphaNumeric": "[a-z0-9]{%s}",
    "utils.AlphaNumericExtendedShort": "[a-z0-9_-]{%s}", "utils.AlphaNumericExtended": r"[a-z0-9=_\-]{%s}",
    "utils.AlphaNumericExtendedLong": r"[a-z0-9\/=_\+\-]{%s}",
}


class Unknown(Exception):
    pass


def _go_string(token: str) -> str:
    if token.startswith("`"):
        return token[1:-1]
    return json.loads(token) if "\\x" not in token else token[1:-1]


class Evaluator:
    """The values of Go expressions made of string literals and the generator helpers tps use."""

    def __init__(self, tokens: list[str], rng: random.Random, env: dict[str, object]) -> None:
        self.tokens, self.i, self.rng, self.env = tokens, 0, rng, env
        self.samples: list[str] = []  # GenerateSampleSecret(s)' secret arguments
        self.sampled = False  # whether the last expression drew from secrets.NewSecret

    def peek(self) -> str:
        return self.tokens[self.i] if self.i < len(self.tokens) else ""

    def take(self) -> str:
        self.i += 1
        return self.tokens[self.i - 1]

    def expr(self):
        value = self.term()
        while self.peek() == "+":
            self.take()
            right = self.term()
            if not (isinstance(value, str) and isinstance(right, str)):
                raise Unknown
            value += right
        return value

    def term(self):
        tok = self.take()
        if tok[:1] in "`\"":
            return _go_string(tok)
        if re.fullmatch(r"[A-Za-z_][\w.]*", tok):
            if self.peek() == "(":
                self.take()
                args = []
                while self.peek() != ")":
                    if not self.peek():
                        raise Unknown
                    args.append(self.expr())
                    if self.peek() == ",":
                        self.take()
                self.take()
                return self.call(tok, args)
            if tok in self.env:
                return self.env[tok]
        raise Unknown

    def call(self, name: str, args: list):
        if name in _HELPERS:
            return _HELPERS[name] % args[0]
        if name == "utils.Hex8_4_4_4_12":
            return "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
        if name == "secrets.NewSecret":
            self.sampled = True
            return sample(args[0], self.rng)
        if name == "fmt.Sprintf":
            return re.sub(r"%[sdv]", "{}", args[0].replace("{", "{{").replace("}", "}}")).format(*args[1:])
        if name in ("utils.GenerateSampleSecret", "utils.GenerateSampleSecrets"):
            self.samples.append(args[1])
            return f'{args[0]}_api_token = "{args[1]}"'
        if name in ("strings.Repeat",):
            return args[0] * int(args[1])
        raise Unknown


def _locals(code: str, rng: random.Random) -> dict[str, object]:
    tokens = [t for t in _TOKEN.findall(code) if not t.startswith("//")]
    env: dict[str, object] = {}
    for i in range(len(tokens) - 2):
        if re.fullmatch(r"[A-Za-z_]\w*", tokens[i]) and tokens[i + 1] in (":=", "="):
            ev = Evaluator(tokens, rng, env)
            ev.i = i + 2
            try:
                env[tokens[i]] = ev.expr()
            except (Unknown, IndexError, ValueError, TypeError, KeyError, re.error):
                continue
    return env


def rule_examples(source: str, rng_seed: str) -> dict[str, tuple[list[tuple[str, bool]], list[str]]]:
    """rule id -> (evaluated tps strings with whether NewSecret drew them, GenerateSampleSecret(s)'
    secret arguments)."""
    found: dict[str, tuple[list[str], list[str]]] = {}
    for body in re.split(r"\nfunc ", source)[1:]:
        rule_id = re.search(r'RuleID:\s*"([^"]+)"', body)
        start = re.search(r"\btps\s*:?=", body)
        if not rule_id or not start:
            continue
        end = re.search(r"\bfps\s*:?=|return utils\.Validate", body[start.start():])
        region = body[start.end(): start.start() + (end.start() if end else len(body))]
        rng = random.Random(f"{rng_seed}:{rule_id.group(1)}")
        env = _locals(body[:start.start()], rng)  # `validToken := ...` before tps (a few generators)
        tokens = [t for t in _TOKEN.findall(region) if not t.startswith("//")]
        ev = Evaluator(tokens, rng, env)
        strings: list[tuple[str, bool]] = []
        while ev.i < len(tokens):
            here, ev.sampled = ev.i, False
            try:
                value = ev.expr()
                if isinstance(value, str):
                    strings.append((value, ev.sampled))
            except (Unknown, IndexError, ValueError, TypeError, KeyError, re.error):
                ev.i = here + 1
        found[rule_id.group(1)] = (strings, ev.samples)
    return found


def extract(repo: str, per_rule: int = 3) -> tuple[str, list[tuple[str, str, str, str]]]:
    checkout = Checkout(repo)
    config = tomllib.loads(checkout.read("config/gitleaks.toml"))
    rules = {r["id"]: r for r in config["rules"]}
    examples: dict[str, tuple[list[tuple[str, bool]], list[str]]] = {}
    for name in checkout.rule_files():
        examples.update(rule_examples(checkout.read(name), "torch-fl"))
    rows: list[tuple[str, str, str, str]] = []
    for rule_id, rule in sorted(rules.items()):
        if "regex" not in rule or rule_id not in examples:
            continue
        pattern = python_regex(rule["regex"])
        strings, samples = examples[rule_id]
        keyword = re.sub(r"[^a-z0-9]", "", rule_id.split("-")[0])
        kept: list[tuple[str, str]] = []
        lines = [(s, "sampled" if drawn else "literal") for s, drawn in strings]
        for text, kind in lines + [(s, "") for s in samples]:
            secret = _secret(pattern, rule, text) if kind else (
                _secret(pattern, rule, f'{keyword}_api_token = "{text}"') or text)
            kind = kind or ("sampled" if any(text in s and drawn for s, drawn in strings) else "literal")
            if secret and len(secret) >= 8 and secret not in [k for k, _ in kept]:
                kept.append((secret, kind))
        literal = [k for k in kept if k[1] == "literal"]
        for secret, kind in (literal + [k for k in kept if k[1] != "literal"])[:per_rule]:
            rows.append((rule_id, keyword, secret, kind))
    return checkout.commit(), rows


def _secret(pattern: re.Pattern[str] | None, rule: dict, text: str) -> str | None:
    """What the rule captures as the secret: its secretGroup, else its first non-empty group (as
    gitleaks), else the whole match; without the quotes around it and the `key:` in front of it (the
    kubernetes rule's group holds the pair)."""
    if pattern is None:
        return None
    match = pattern.search(text)
    if not match:
        return None
    if rule.get("secretGroup"):
        found = match.group(rule["secretGroup"]) or ""
    else:
        found = next((g for g in match.groups() if g), "")
    found = found if len(found) >= 8 else match.group(0)  # a repeated group's last part is not the secret
    found = re.sub(r"^[\w.-]+:\s+", "", found.strip()) if re.match(r"^[\w.-]+:\s+\S+$", found.strip()) else found
    return found.strip().strip("\"'")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo", nargs="?", default=os.environ.get("GITLEAKS_REPO", DEFAULT_REPO))
    parser.add_argument("-o", "--output", type=Path, default=FIXTURE)
    parser.add_argument("--per-rule", type=int, default=3)
    args = parser.parse_args(argv)
    if not Path(args.repo).exists():
        print(f"no gitleaks checkout at {args.repo} (set GITLEAKS_REPO)", file=sys.stderr)
        return 2
    commit, rows = extract(args.repo, args.per_rule)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(list(row), ensure_ascii=False) for row in rows]
    args.output.write_text(HEADER.format(commit=commit) + "\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(rows)} secrets from {len({r[0] for r in rows})} rules -> {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
