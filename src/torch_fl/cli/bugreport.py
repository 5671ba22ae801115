"""``torchfl bugreport``: a Markdown issue report with environment, versions, log tail and placeholders.

Secrets stay out, by name and by shape (`redact`):
- values of environment variables whose names contain TOKEN, KEY, SECRET, PASSWORD (or PASSWD, CREDENTIAL,
  AUTH), in the variable list, in ``NAME=value`` assignments, and wherever such a value appears verbatim;
- credentials in URLs (``postgres://user:pass@host``), ``Authorization:`` headers and ``Bearer`` tokens,
  known token shapes (GitHub ``ghp_``/``github_pat_``, Hugging Face ``hf_``, OpenAI ``sk-``, AWS ``AKIA``,
  Slack ``xox?-``, GitLab ``glpat-``), secret-like keys in JSON/YAML/TOML (``"password": "..."``,
  ``api_key: ...``) and on command lines (``--password x``, ``--api-key=x``);
- the home directory is written as ``~`` and the user name as ``<user>``.
The report is always produced (rc 0), also when doctor finds problems: they are listed in it.
"""

from __future__ import annotations

import argparse
import getpass
import os
import re
import sys
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..description import registry
from ..errors import TorchFLError
from . import doctor, positive_int

SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
REDACTED = "<redacted>"
USER = "<user>"
DEFAULT_LINES = 100
# Always worth seeing: they decide which shared libraries and Python modules load.
_FIXED_VARS = ("LD_LIBRARY_PATH", "PYTHONPATH")
# Shorter values ('1', 'true') are too common to replace wherever they occur.
_MIN_VERBATIM = 6
# Names whose value is a secret in any spelling (db_password, apiKey, client-secret) ...
_STRONG = frozenset({"password", "passwd", "pwd", "passphrase", "secret", "credential", "credentials", "apikey",
                     "accesstoken", "authtoken", "apitoken", "privatekey", "accesskey", "secretkey"})
# ... and 'key' or 'token' as the last word after a qualifier (hf_token, api_key, accessToken): bare ones
# (cls_token, class_token, sort_key, key=lambda) fill the tracebacks of ordinary ML code.
_QUALIFIERS = frozenset({"api", "access", "secret", "private", "auth", "aws", "ssh", "signing", "encryption",
                         "license", "client", "master", "hf", "hub", "github", "gh", "gitlab", "refresh",
                         "session", "oauth", "bearer", "personal", "wandb", "slack", "bot", "openai", "jwt"})
_NAME = r"[A-Za-z_][\w.-]*"
_VALUE = r"(\"[^\"]*\"|'[^']*'|[^\s,;}\]]+)"
_ASSIGNMENT = re.compile(rf"(?<![\w.-])({_NAME})=(\"[^\"]*\"|'[^']*'|\S+)")
_KEY_VALUE = re.compile(rf"([\"']?)(?<![\w.-])({_NAME})\1(\s*[:=]\s*){_VALUE}")
_OPTION = re.compile(rf"(--{_NAME})(=|\s+){_VALUE}")
# (pattern, replacement) applied in order; each keeps enough context to show what was removed.
_VALUE_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # scheme://user:password@host -> scheme://<redacted>@host
    (re.compile(r"\b([a-zA-Z][\w+.-]*://)[^\s/:@'\"]+:[^\s/@'\"]+@"), rf"\1{REDACTED}@"),
    # Authorization: Bearer xyz / Authorization=Basic xyz / "Authorization": "token xyz"
    (re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?)(?:(bearer|basic|token|digest)\s+)?[^\s\"',}]+"),
     rf"\1\2 {REDACTED}"),
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}"), rf"\1 {REDACTED}"),
    (re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{16,}|github_pat_\w{20,}|hf_[A-Za-z0-9]{16,}|sk-[A-Za-z0-9_-]{16,}"
                r"|(?:AKIA|ASIA)[0-9A-Z]{16}|xox[abposr]-[A-Za-z0-9-]{10,}|glpat-[\w-]{16,})"), REDACTED),
)
# Generic account names: replacing them as words would mangle ordinary text ('root' of a tree).
_GENERIC_USERS = frozenset({"root", "user", "admin", "ubuntu", "runner", "nobody"})


# Redaction ----------------------------------------------------------------------------------------
def is_secret(name: str) -> bool:
    """An environment variable name that holds a secret (any of SECRET_WORDS inside it)."""
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS)


def secret_name(name: str) -> bool:
    """A key, option or assignment name in text whose value is a secret: an env-style UPPER_CASE name as
    in `is_secret`; otherwise a strong word (password, secret, apiKey) or a last word 'key'/'token' after
    a qualifier (api_key, hf_token, access-key)."""
    if name.isupper():
        return is_secret(name)
    words = [w for w in re.split(r"[_.\-]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()) if w]
    if not words:
        return False
    if any(w in _STRONG for w in words):
        return True
    return words[-1] in ("key", "token") and len(words) > 1 and words[-2] in _QUALIFIERS


def _keep_value(value: str) -> bool:
    # references to secrets are not secrets: ${{ secrets.X }}, $TOKEN, {token}, <redacted>
    return value.strip("\"'").startswith(("$", "{", "<", "%"))


def redact(text: str, environ: Mapping[str, str] | None = None, *, home: str | None = None,
           user: str | None = None) -> str:
    """`text` without secrets (by variable name and by value shape), home as ~ and the user as <user>."""
    environ = os.environ if environ is None else environ
    for pattern, replacement in _VALUE_PATTERNS:
        text = pattern.sub(replacement, text)
    text = _ASSIGNMENT.sub(lambda m: f"{m.group(1)}={REDACTED}" if secret_name(m.group(1))
                           and not _keep_value(m.group(2)) else m.group(0), text)
    text = _KEY_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(1)}{m.group(3)}{REDACTED}"
                          if secret_name(m.group(2)) and not _keep_value(m.group(4)) else m.group(0), text)
    text = _OPTION.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}"
                       if secret_name(m.group(1)[2:]) and not _keep_value(m.group(3)) else m.group(0), text)
    secrets = sorted((v for k, v in environ.items() if is_secret(k) and len(v) >= _MIN_VERBATIM),
                     key=len, reverse=True)  # longest first, so a value containing another goes whole
    for value in secrets:
        text = text.replace(value, REDACTED)
    return _anonymise(text, home if home is not None else _home(environ),
                      user if user is not None else _user(environ))


def _home(environ: Mapping[str, str]) -> str:
    return environ.get("HOME") or os.path.expanduser("~")


def _user(environ: Mapping[str, str]) -> str:
    try:
        return environ.get("USER") or environ.get("USERNAME") or getpass.getuser()
    except Exception:  # no user name at all (a container with an unknown uid)
        return ""


def _anonymise(text: str, home: str, user: str) -> str:
    home = home.rstrip("/\\")
    if len(home) > 1:  # '/' as home would turn every absolute path into ~
        text = re.sub(r"(?<![\w.-])" + re.escape(home) + r"(?=[/\\\s'\":]|$)", "~", text)
    if len(user) >= 2:
        if user in _GENERIC_USERS:  # only where it is clearly the account: paths, user@host, USER=
            text = re.sub(rf"(?<=[/\\]){re.escape(user)}(?=[/\\])|\b{re.escape(user)}(?=@)", USER, text)
        else:
            text = re.sub(rf"(?<![\w.-]){re.escape(user)}(?![\w-])", USER, text)
    return text


# Environment --------------------------------------------------------------------------------------
def relevant_env(environ: Mapping[str, str], visible_env: str = "") -> dict[str, str]:
    """FL_* plus the variables of every device stack torch-fl knows, values of secrets redacted."""
    prefixes = ("FL_", *_stack_prefixes())
    names = sorted(name for name in environ
                   if name.startswith(prefixes) or name in (*_FIXED_VARS, visible_env))
    return {name: REDACTED if is_secret(name) else environ[name] for name in names}


def _stack_prefixes() -> tuple[str, ...]:
    # CUDA_VISIBLE_DEVICES -> CUDA_, ASCEND_RT_VISIBLE_DEVICES -> ASCEND_: each stack's variables share
    # the prefix of its visible-devices variable, and the descriptions know every stack.
    try:
        known = registry.descriptions().values()
    except TorchFLError:
        return ()
    return tuple(sorted({d.visible_devices_env.split("_")[0] + "_" for d in known if d.visible_devices_env}))


# Log ----------------------------------------------------------------------------------------------
def tail(path: Path, lines: int) -> str:
    with path.open(encoding="utf-8", errors="replace") as handle:
        return "".join(deque(handle, maxlen=lines)).rstrip("\n")


def _fence(text: str, lang: str = "") -> str:
    # A fence longer than any backtick run inside keeps a pasted log from closing the block early.
    runs = [len(r) for r in re.findall(r"`+", text)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return f"{fence}{lang}\n{text}\n{fence}"


# Report -------------------------------------------------------------------------------------------
def build_report(log: Path | None, lines: int, environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    try:
        data = doctor.collect()
    except Exception as exc:  # the report is how a broken setup gets reported: never let doctor stop it
        data = doctor._skeleton()
        data["errors"].append({"stage": "doctor", "type": type(exc).__name__, "message": str(exc)})
    sections = [
        "# torch-fl bug report",
        "<!-- Generated by `torchfl bugreport`. Secrets (variables named *TOKEN*, *KEY*, *SECRET*, "
        "*PASSWORD*; URL credentials, bearer and API tokens, password-like keys) are redacted, the home "
        "folder is ~ and the user name <user>; check the rest before posting. -->",
        "## Environment and versions", _environment(data, environ),
        f"## Error log (last {lines} lines)", _log_section(log, lines),
        "## Expected vs actual behaviour",
        "**Expected:** <!-- what should happen -->\n\n"
        "**Actual:** <!-- what happens instead; the full error message belongs in the log above -->",
        "## Minimal reproduction",
        "<!-- The smallest script that shows the problem; run it with FL_LOG=DEBUG for details. -->\n\n"
        + _fence("import torch\nimport torch_fl\n\ndev = torch.fl.device()\n"
                 "# ... the few lines that fail ...", "python"),
    ]
    return redact("\n\n".join(sections) + "\n", environ)


def _environment(data: dict[str, Any], environ: Mapping[str, str]) -> str:
    bullets = "\n".join(f"- **{key}**: {value}" for key, value in _facts(data))
    variables = relevant_env(environ, data["visible_devices"]["env"])
    listing = "\n".join(f"{k}={v}" for k, v in variables.items()) or "(none of the relevant variables set)"
    problems = doctor.diagnose(data)
    verdict = "\n".join(f"{i}. {p}" for i, p in enumerate(problems, 1)) or "none (healthy)"
    return (f"{bullets}\n\n**Environment variables** (FL_*, device stacks, library paths):\n\n"
            f"{_fence(listing)}\n\n**Problems found by `torchfl doctor`:**\n\n{verdict}")


def _facts(data: dict[str, Any]) -> Iterable[tuple[str, str]]:
    desc, dev, check = data["description"], data["device"], data["self_check"]
    plugin = f"{data['plugin']} {data['plugin_version'] or '(version unknown)'}" if data["plugin"] else "none"
    routes = ", ".join(f"{k} {v}" for k, v in data["routes"].items()) or "not computed"
    yield from (
        ("torch-fl", data["torch_fl_version"]),
        ("torch", data["torch_version"]),
        ("python", f"{data['python']['version']} ({data['python']['executable']})"),
        ("OS", data["platform"]),
        ("runs on", data["environment"]),
        ("plugin", plugin),
        ("runtime", data["runtime_version"] or "none reported"),
        ("device", f"{dev['requested'] or '?'} -> {dev['resolved'] or 'not resolved'} "
                   f"({data['device_name'] or 'unknown name'}, vendor {data['vendor'] or '?'})"),
        ("backend", f"{data['backend']['name'] or '?'} ({data['backend']['source'] or 'not loaded'})"),
        ("device map", f"{doctor.map_text(data['device_map'])} ({data['device_map_source'] or 'not built'})"),
        ("description", f"{desc['name'] or '?'} ({desc['path'] or '?'}, sha256 {desc['sha256'][:12] or '?'})"),
        ("routes", f"{routes} (other ops follow ops.default = {data['route_default'] or '?'})"),
        ("self-check", f"{'ok' if check['ok'] else 'FAILED'}: {check['detail']}"),
    )


def _log_section(log: Path | None, lines: int) -> str:
    if log is None:
        return ("No log attached. Capture one and run bugreport again:\n\n"
                + _fence("FL_LOG=DEBUG python train.py 2> err.log\n"
                         f"torchfl bugreport --log err.log --lines {lines}", "sh"))
    return f"From `{log}`:\n\n" + _fence(tail(log, lines) or "(the file is empty)", "text")


# Command ------------------------------------------------------------------------------------------
def add_parser(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = subparsers.add_parser(
        name, help=help_text,
        description="Print a Markdown issue report: environment and versions (from `torchfl doctor`), "
                    "the tail of an error log, and placeholders for expected/actual behaviour and a "
                    "reproduction. Secret-looking environment values are redacted.")
    parser.add_argument("--log", metavar="FILE", type=Path, default=None,
                        help="error log whose last lines go into the report")
    parser.add_argument("--lines", metavar="N", type=positive_int, default=DEFAULT_LINES,
                        help=f"how many log lines to include (default {DEFAULT_LINES})")
    parser.add_argument("-o", "--output", metavar="FILE", type=Path, default=None,
                        help="write the report to FILE instead of stdout")


def run(args: argparse.Namespace) -> int:
    if args.log is not None and not args.log.is_file():
        print(f"torchfl bugreport: error: --log {args.log}: no such file", file=sys.stderr)
        return 1
    report = build_report(args.log, args.lines)
    if args.output is None:
        sys.stdout.write(report)
    else:
        args.output.write_text(report, encoding="utf-8")
        print(f"wrote {args.output}; review it, then paste it into a new issue", file=sys.stderr)
    return 0
