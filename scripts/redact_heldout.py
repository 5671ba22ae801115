"""Leak rate and false-positive rate of `torchfl bugreport`'s redaction on a held-out corpus: token shapes from
a secret-detector's rule list this project never tuned on, and harmless lines that must stay readable.

    python scripts/redact_heldout.py build [--rules FILE] [--seed N]   # writes tests/fixtures/redact_heldout.jsonl
    python scripts/redact_heldout.py [measure] [--no-detect-secrets] [-v]

Secrets: one token synthesized (seeded random, never a real secret) for every high-confidence rule of
secrets-patterns-db (https://github.com/mazen160/secrets-patterns-db, db/rules-stable.yml, CC BY-SA 4.0; by
default read from the fetched mirror) whose secret is 12 characters or longer, plus GitHub's documented token
formats (ghp_, gho_, ghu_, ghs_, ghr_, github_pat_). Each is planted in CONTEXTS: a log line, a traceback, an
FL_* value (also in the environment, as bugreport sees it, and echoed as doctor echoes a bad value), Go, Java,
XML and YAML assignments, prose, a route-log line and a command line. A case leaks when the redacted text
still holds the secret or a run of it at least half its length (8+ characters; scripts/redact_leak_rate.py).

Harmless: lines a bug report holds that must stay readable (tensor shapes and digests, op names, paths,
versions, cache keys, HF model ids, W&B run names and ids, git SHAs after 'commit', identifiers and string
constants, the issue's over-redaction file). A line is a false positive when redaction changes it.
MASKED_BY_DESIGN lists what default deny masks on purpose (a bare 40-hex SHA, a UUID): reported apart.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import string
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "redact_heldout.jsonl"
MIRROR = Path("/work/.mirror/mazen160+secrets-patterns-db/repo")
MIN_SECRET = 12  # shorter values cannot be told from a word or a number by their form (the name rules remain)
HOME, USER = "/home/nobody-xyz", "nobody-xyz"

# {s}: the secret, {v}: the vendor's word. Each context is how a token reaches a report.
CONTEXTS: dict[str, str] = {
    "log line": "2026-01-05 12:00:01,442 ERROR upload.py:88 server rejected {s} (401 Unauthorized)",
    "traceback": ('Traceback (most recent call last):\n  File "/home/nobody-xyz/proj/push.py", line 12, in <module>\n'
                  "    client.push(model)\nRuntimeError: authentication failed for {s}"),
    "FL_DEVICE_MAP": "FL_DEVICE_MAP=acc0=cuda:0,acc1={s}",
    "FL_CACHE_DIR": "FL_CACHE_DIR=/tmp/{s}/cache",
    "FL_CONFIG": "FL_CONFIG=https://configs.example.com/{s}/fl.toml",
    "FL_ROUTE": "FL_ROUTE=aten::addmm={s}",
    "FL_DESCRIPTION": "FL_DESCRIPTION=/srv/descriptions/{s}.toml",
    "Go": 'API_KEY := "{s}"\nconst key string = "{s}"',
    "Java": 'private static final String ENDPOINT_ID = "{s}";',
    "XML": "<com.cloudbees.plugins.credentials.impl.StringCredentialsImpl>\n  <secret>{{{s}}}</secret>\n"
           "</com.cloudbees.plugins.credentials.impl.StringCredentialsImpl>",
    "YAML": "{v}:\n  endpoint: https://api.{v}.com\n  value: {s}",
    "prose": "Hi, my {v} key is {s} and the call still fails with 403.",
    "route log": "route aten::mm float32 translate caller=train.py:41 tag={s}",
    "command line": "$ twine upload -p {s} dist/*",
}
# An FL_* context is also a variable of the environment; doctor echoes a bad value in its problem text.
ECHO = "{name}: {value!r} is not valid (expected a device map such as 'acc0=cuda:0')"


# Synthesis ----------------------------------------------------------------------------------------
def _synth(regex: str, rng: random.Random) -> str | None:
    """A random string the regex's secret matches: its longest capturing group, else the whole pattern."""
    import re._parser as sre  # the stdlib's regex parser (sre_parse): no third-party generator needed

    try:
        tree = sre.parse(regex)
    except re.error:
        return None
    groups: list[tuple[int, object]] = []

    def collect(items: object) -> None:
        for op, av in items:  # type: ignore[attr-defined]
            if op is sre.SUBPATTERN:
                if av[0]:
                    groups.append((len(_gen(av[3], random.Random(0))), av[3]))
                collect(av[3])
            elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
                collect(av[2])
            elif op is sre.BRANCH:
                for branch in av[1]:
                    collect(branch)

    try:
        collect(tree)
        body = max(groups, key=lambda g: g[0])[1] if groups else tree
        return _gen(body, rng).strip()
    except (ValueError, KeyError):
        return None


_ALNUM = string.ascii_letters + string.digits


def _gen(items: object, rng: random.Random) -> str:
    import re._parser as sre

    out = []
    for op, av in items:  # type: ignore[attr-defined]
        if op is sre.LITERAL:
            out.append(chr(av))
        elif op is sre.NOT_LITERAL:
            out.append(rng.choice([c for c in _ALNUM if ord(c) != av]))
        elif op is sre.ANY:
            out.append(rng.choice(_ALNUM))
        elif op is sre.IN:
            out.append(rng.choice(_charset(av)))
        elif op is sre.BRANCH:
            out.append(_gen(rng.choice(av[1]), rng))
        elif op is sre.SUBPATTERN:
            out.append(_gen(av[3], rng))
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            low, high = av[0], av[1]
            high = low + 24 if high is sre.MAXREPEAT or high > low + 64 else high
            out.extend(_gen(av[2], rng) for _ in range(rng.randint(low, high)))
        elif op in (sre.AT, sre.ASSERT, sre.ASSERT_NOT):
            continue
        else:
            raise ValueError(f"unsupported regex node {op}")
    return "".join(out)


def _charset(items: list[tuple[object, object]]) -> list[str]:
    import re._parser as sre

    chars: set[str] = set()
    negate = False
    for op, av in items:
        if op is sre.NEGATE:
            negate = True
        elif op is sre.LITERAL:
            chars.add(chr(av))  # type: ignore[arg-type]
        elif op is sre.RANGE:
            chars.update(chr(c) for c in range(av[0], av[1] + 1))  # type: ignore[index]
        elif op is sre.CATEGORY:
            chars.update({sre.CATEGORY_DIGIT: string.digits, sre.CATEGORY_WORD: _ALNUM + "_",
                          sre.CATEGORY_SPACE: " "}.get(av, ""))
    if negate:
        return [c for c in _ALNUM if c not in chars]
    printable = sorted(c for c in chars if c.isprintable() and not c.isspace())
    if not printable:
        raise ValueError("no printable character in the class")
    return printable


def rules(path: Path | None) -> list[tuple[str, str]]:
    """(name, regex) of every high-confidence rule of secrets-patterns-db's db/rules-stable.yml."""
    if path is not None:
        text = path.read_text(encoding="utf-8")
    else:
        text = subprocess.run(["git", "--git-dir", str(MIRROR), "show", "HEAD:db/rules-stable.yml"],
                              check=True, capture_output=True, text=True).stdout
    found, name, regex = [], "", ""
    for line in text.splitlines():  # the file's own flat layout: name, regex, confidence per pattern
        key, _, value = line.strip().partition(": ")
        value = value.strip()
        if len(value) >= 2 and value[0] in "\"'" and value[-1] == value[0]:
            value = value[1:-1].replace("\\\\", "\\") if value[0] == '"' else value[1:-1]
        if key == "name":
            name = value
        elif key == "regex":
            regex = value
        elif key == "confidence" and value == "high":
            found.append((name, regex))
    return found


def _random_chars(regex: str) -> int:
    """How many characters of the rule's secret come from a character class (the random part), at least."""
    import re._parser as sre

    try:
        tree = sre.parse(regex)
    except re.error:
        return 0

    def count(items: object) -> int:
        total = 0
        for op, av in items:  # type: ignore[attr-defined]
            if op in (sre.IN, sre.ANY, sre.NOT_LITERAL):
                total += 1
            elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
                total += av[0] * count(av[2])
            elif op is sre.SUBPATTERN:
                total += count(av[3])
            elif op is sre.BRANCH:
                total += min(count(b) for b in av[1])
        return total

    groups = [av[3] for op, av in tree if op is sre.SUBPATTERN and av[0]]
    return max((count(g) for g in groups), default=count(tree))


def github_tokens(rng: random.Random) -> list[tuple[str, str]]:
    """GitHub's documented formats (docs.github.com, "About authentication to GitHub": token formats)."""
    rows = [(f"GitHub {p}", p + "".join(rng.choice(_ALNUM) for _ in range(36)))
            for p in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")]
    rows.append(("GitHub github_pat_", "github_pat_" + "".join(rng.choice(_ALNUM) for _ in range(22)) + "_"
                 + "".join(rng.choice(_ALNUM) for _ in range(59))))
    return rows


def secrets(rule_file: Path | None, seed: int) -> tuple[list[dict[str, str]], int]:
    """The secret cases, and how many rules were left out (a secret under MIN_SECRET characters)."""
    rng = random.Random(seed)
    rows, skipped = [], 0
    for name, regex in rules(rule_file):
        secret = _synth(regex, rng)
        # a rule for a key's name (mailchimp_api_key) or a URL (webhooks, buckets: their host stays by
        # design, bugreport masks the token in the path) has no token of its own to plant
        if "://" in regex or secret is None or _random_chars(regex) < MIN_SECRET:
            skipped += 1
            continue
        if len(secret) < MIN_SECRET or re.search(r"\s", secret) or len(secret) > 300 or "://" in secret:
            skipped += 1
            continue
        rows.append({"source": "secrets-patterns-db", "rule": name, "secret": secret})
    rows += [{"source": "github-docs", "rule": r, "secret": s} for r, s in github_tokens(rng)]
    return rows, skipped


def vendor_word(rule: str) -> str:
    word = re.sub(r"[^a-z0-9]", "", rule.lower().split()[0]) or "vendor"
    return word if word[0].isalpha() else "x" + word


# Harmless lines -----------------------------------------------------------------------------------
HF_MODELS = ("bert-base-uncased", "gpt2", "meta-llama/Llama-2-7b-hf", "meta-llama/Meta-Llama-3.1-8B-Instruct",
             "mistralai/Mistral-7B-Instruct-v0.2", "TheBloke/Mistral-7B-Instruct-v0.2-GPTQ",
             "google/flan-t5-xxl", "facebook/opt-1.3b", "EleutherAI/gpt-neox-20b", "Qwen/Qwen2.5-72B-Instruct",
             "microsoft/phi-2", "openai/clip-vit-large-patch14", "stabilityai/stable-diffusion-xl-base-1.0",
             "sentence-transformers/all-MiniLM-L6-v2", "deepseek-ai/DeepSeek-V3", "tiiuae/falcon-40b",
             "bigscience/bloom-560m", "distilbert/distilbert-base-uncased-finetuned-sst-2-english",
             "HuggingFaceH4/zephyr-7b-beta", "google/gemma-2-9b-it", "Salesforce/blip2-opt-2.7b",
             "nvidia/Llama-3.1-Nemotron-70B-Instruct-HF", "FacebookAI/roberta-large",
             "BAAI/bge-large-en-v1.5", "intfloat/e5-mistral-7b-instruct", "01-ai/Yi-34B-Chat")
OVER_REDACTION = ('CHECKPOINT_HYPER_PARAMS_KEY = "hyper_parameters"',
                  'hparams = checkpoint["hyper_parameters"]', "class _AccessToken:",
                  "    token: _AccessToken | None = None", 'ACCESS_TOKEN_KEY = "_access_token"',
                  'STATE_DICT_KEY = "state_dict"', 'OPTIMIZER_KEY = "optimizer_states"')


def harmless(seed: int) -> Iterator[tuple[str, str]]:
    """(category, line) of lines a report holds that must stay readable."""
    import importlib.metadata

    import torch

    rng = random.Random(seed)
    ops = sorted(torch._C._dispatch_get_all_op_names())
    for op in rng.sample(ops, 600):
        yield "op name", f"route {op} float32 -> translate (decomposition) x{rng.randint(1, 999)}"
    for op in rng.sample(ops, 200):
        yield "traceback", f"NotImplementedError: Could not run '{op}' with arguments from the 'PrivateUse1' backend."
    for _ in range(300):
        shape = [rng.choice((1, 3, 8, 16, 32, 64, 128, 512, 768, 1024, 4096, 32000)) for _ in range(rng.randint(1, 4))]
        digest = hashlib.sha256(repr(shape).encode() + bytes([rng.randrange(256)])).hexdigest()
        yield "tensor digest", f"tensor torch.Size({shape}) float32 sha256 {digest}"
        yield "tensor digest", f"layer.{rng.randint(0, 31)}.mlp.weight shape={tuple(shape)} digest={digest[:16]}"
    dists = sorted({(d.metadata["Name"] or "", d.version) for d in importlib.metadata.distributions()})
    for name, version in dists:
        yield "version", f"{name}=={version}"
    for name, version in dists[:150]:
        yield "version", f"- **{name}**: {version}"
    site = Path(torch.__file__).resolve().parents[1]
    files = sorted(str(p.relative_to(site)) for p in (site / "torch").rglob("*.py"))
    for rel in rng.sample(files, 400):
        yield "path", f'  File "{HOME}/.venv/lib/python3.11/site-packages/{rel}", line {rng.randint(1, 3000)}, in forward'
    for _ in range(300):
        key = hashlib.sha256(str(rng.random()).encode()).hexdigest()[:16]
        yield "cache key", f"compile cache hit {key} in {HOME}/.cache/torch_fl/ascend-910b/{key}/model.so"
    for model in HF_MODELS:
        sha = hashlib.sha1(model.encode()).hexdigest()
        yield "hf model id", f"loading {model} from the hub"
        yield "hf model id", f"{HOME}/.cache/huggingface/hub/models--{model.replace('/', '--')}/snapshots/{sha}/config.json"
        yield "hf model id", f"https://huggingface.co/{model}/resolve/main/model-00001-of-00002.safetensors"
    adjectives, nouns = ("dry", "fancy", "glad", "quiet", "royal", "misty", "wild", "brisk"), (
        "sun", "river", "forest", "wave", "dream", "pond", "smoke", "night")
    for _ in range(150):
        run_id = "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(8))
        name = f"{rng.choice(adjectives)}-{rng.choice(nouns)}-{rng.randint(1, 500)}"
        yield "wandb run", f"wandb: Syncing run {name}"
        yield "wandb run", f"wandb: View run at https://wandb.ai/acme/llm-pretrain/runs/{run_id}"
    for _ in range(150):
        sha = hashlib.sha1(str(rng.random()).encode()).hexdigest()
        yield "git sha", f"commit {sha}"
        yield "git sha", f"torch-fl 0.1.0 (editable, git {sha[:12]})"
        yield "git sha", f"https://github.com/pytorch/pytorch/blob/{sha}/torch/nn/modules/linear.py#L120"
    yield from _identifiers(rng, site)
    for line in OVER_REDACTION:
        yield "over-redaction", line


def _identifiers(rng: random.Random, site: Path) -> Iterator[tuple[str, str]]:
    """Names and string constants of transformers and torch, as code lines of a traceback."""
    import ast

    names: set[str] = set()
    constants: set[str] = set()
    for module in ("transformers/modeling_utils.py", "transformers/trainer.py", "torch/nn/modules/module.py",
                   "lightning_fabric/fabric.py", "accelerate/accelerator.py"):
        path = site / module
        if not path.exists():
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and re.fullmatch(r"[A-Za-z_][\w.]{7,}", node.value):
                constants.add(node.value)
    for name in rng.sample(sorted(names), min(400, len(names))):
        yield "identifier", f"    return self.{name}(*args, **kwargs)"
    for value in rng.sample(sorted(constants), min(400, len(constants))):
        yield "string constant", f'    state["{value}"] = value'


# Things default deny masks on purpose: not false positives, but counted so the choice stays visible.
MASKED_BY_DESIGN: dict[str, Callable[[random.Random], str]] = {
    "bare 40-hex (a git SHA, or a 40-hex API key: no way to tell)": lambda r: f"HEAD is {r.getrandbits(160):040x}",
    "UUID (request ids; also Heroku, Snyk, HubSpot keys)": lambda r: f"request id {_uuid(r)} failed",
}


def _uuid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# Build and measure --------------------------------------------------------------------------------
def build(rule_file: Path | None, seed: int) -> int:
    rows, skipped = secrets(rule_file, seed)
    with FIXTURE.open("w", encoding="utf-8") as out:
        out.write(json.dumps({"header": "torch-fl's held-out redaction corpus (scripts/redact_heldout.py build). "
                              "Secrets are synthesized (seeded random) from the token shapes of secrets-patterns-db "
                              "(https://github.com/mazen160/secrets-patterns-db, db/rules-stable.yml, "
                              "CC BY-SA 4.0, Mazin Ahmed) and GitHub's documented token formats: none is real.",
                              "seed": seed, "rules_left_out": skipped}) + "\n")
        for row in rows:
            out.write(json.dumps({"kind": "secret", **row}) + "\n")
        for category, line in harmless(seed):
            out.write(json.dumps({"kind": "harmless", "category": category, "text": line}) + "\n")
    print(f"wrote {FIXTURE.relative_to(ROOT)}: {len(rows)} secrets ({skipped} rules left out: a key's name or a "
          f"URL, no printable match, or a secret under {MIN_SECRET} characters)")
    return 0


def load() -> tuple[dict[str, object], list[dict[str, str]], list[dict[str, str]]]:
    lines = FIXTURE.read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines[1:]]
    return (json.loads(lines[0]), [r for r in rows if r["kind"] == "secret"],
            [r for r in rows if r["kind"] == "harmless"])


def plant(context: str, row: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The text and the environment of one case."""
    text = CONTEXTS[context].format(s=row["secret"], v=vendor_word(row["rule"]))
    if not context.startswith("FL_"):
        return text, {}
    name, value = text.split("=", 1)
    return f"{text}\n{ECHO.format(name=name, value=value)}", {name: value}


def leaked(secret: str, text: str) -> bool:
    if str(ROOT / "scripts") not in sys.path:  # (once: a path entry per call grew sys.path by thousands)
        sys.path.insert(0, str(ROOT / "scripts"))
    from redact_leak_rate import leaked as judge

    return judge(secret, text)


def measure(redact: Callable[[str, dict[str, str]], str]) -> dict[str, object]:
    """Leaks per context and false positives per category."""
    _, secret_rows, harmless_rows = load()
    leaks: dict[str, list[tuple[str, str]]] = {c: [] for c in CONTEXTS}
    for context in CONTEXTS:
        for row in secret_rows:
            text, environ = plant(context, row)
            out = redact(text, environ)
            if leaked(row["secret"], out):
                leaks[context].append((row["rule"], out))
    false: dict[str, list[tuple[str, str]]] = {}
    counts: dict[str, int] = {}
    for row in harmless_rows:
        counts[row["category"]] = counts.get(row["category"], 0) + 1
        out = redact(row["text"], {})
        if out != row["text"].replace(HOME, "~"):  # the home folder as ~ is wanted, not a false positive
            false.setdefault(row["category"], []).append((row["text"], out))
    rng = random.Random(0)
    design = {what: sum(redact(make(rng), {}).count("<redacted>") for _ in range(50)) for what, make
              in MASKED_BY_DESIGN.items()}
    return {"secrets": len(secret_rows), "leaks": leaks, "harmless": len(harmless_rows), "counts": counts,
            "false": false, "design": design}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", nargs="?", choices=("measure", "build"), default="measure")
    parser.add_argument("--rules", type=Path, default=None, help="secrets-patterns-db's db/rules-stable.yml")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--no-detect-secrets", action="store_true", help="our own patterns alone")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every leak and false positive")
    args = parser.parse_args(argv)
    if args.action == "build":
        return build(args.rules, args.seed)
    from torch_fl import redact as module

    def redact(text: str, environ: dict[str, str]) -> str:
        return module.redact(text, environ=environ, home=HOME, user=USER, detector=not args.no_detect_secrets)

    found = measure(redact)
    cases = found["secrets"] * len(CONTEXTS)  # type: ignore[operator]
    leaks = found["leaks"]
    count = sum(len(v) for v in leaks.values())  # type: ignore[union-attr]
    false = found["false"]
    wrong = sum(len(v) for v in false.values())  # type: ignore[union-attr]
    print(f"{found['secrets']} secrets x {len(CONTEXTS)} contexts: {count} of {cases} leak "
          f"({100 * count / cases:.2f}%){' without detect-secrets' if args.no_detect_secrets else ''}")
    for context, rows in leaks.items():  # type: ignore[union-attr]
        print(f"  {context:16} {len(rows):4} leak")
    print(f"{found['harmless']} harmless lines: {wrong} masked ({100 * wrong / found['harmless']:.2f}%)")  # type: ignore[operator]
    for category, n in found["counts"].items():  # type: ignore[union-attr]
        print(f"  {category:16} {len(false.get(category, [])):4} of {n}")  # type: ignore[union-attr]
    print("masked by design (50 lines each): " + "; ".join(f"{k}: {v}" for k, v in found["design"].items()))  # type: ignore[union-attr]
    if args.verbose:
        for context, rows in leaks.items():  # type: ignore[union-attr]
            for rule, out in rows:
                print(f"[leak {context}] {rule}: {out[:220]!r}")
        for category, rows in false.items():  # type: ignore[union-attr]
            for text, out in rows:
                print(f"[false {category}] {text[:160]!r}\n    -> {out[:160]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
