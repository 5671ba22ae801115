"""A scan result as a SARIF 2.1.0 log, for code-scanning dashboards (GitHub's upload-sarif and others).

:func:`sarif` renders a :class:`~torch_fl.migrate.scan.ScanResult`: one run with every rule in
``tool.driver.rules`` (its text, fix safety and a link to its section of docs/migrate-rules.md), one
result per finding, and the files that could not be scanned as tool execution notifications. It returns
the log as a dict; the caller serialises it. ``torchfl scan --format sarif`` (cli/scan.py) calls it, and
so can anything else that holds a scan result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..._version import __version__
from ..rules import RULES

DOCS = "docs/migrate-rules.md"  # the rules' documentation: informationUri, and helpUri with a rule's anchor
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"


def _uri(path: str) -> str:
    candidate = Path(path)
    return candidate.as_uri() if candidate.is_absolute() else candidate.as_posix()


def _region(line: int, col: int, end_line: int, end_col: int) -> dict[str, int]:
    return {"startLine": line, "startColumn": col, "endLine": end_line, "endColumn": end_col}


def sarif(result: Any) -> dict[str, Any]:
    """A SARIF 2.1.0 log with one run: every rule in tool.driver.rules, one result per finding, and
    files that could not be scanned as tool execution notifications."""
    index = {code: i for i, code in enumerate(RULES)}
    rules = [{
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": f"{rule.what} {rule.why}"},
        "help": {"text": f"{rule.fix_safety_text()} See {DOCS}#{rule.anchor}."},
        "helpUri": f"{DOCS}#{rule.anchor}",
        "defaultConfiguration": {"level": rule.level},
        "properties": {"family": rule.family, "fix": rule.fix or "none"},
    } for rule in RULES.values()]
    results = [{
        "ruleId": f.code,
        "ruleIndex": index[f.code],
        "level": RULES[f.code].level,
        "message": {"text": f"{f.message}. {f.fix_title}." if f.fix_title else f.message},
        "locations": [{"physicalLocation": {
            "artifactLocation": {"uri": _uri(f.path)},
            "region": _region(f.line, f.col, f.end_line, f.end_col),
        }}],
        "properties": {"fixable": f.safety is not None, "fixSafety": f.safety or "none",
                       "fixCommand": f.fix_command},
    } for f in result.findings]
    notifications = [{
        "level": "error",
        "descriptor": {"id": e.code},
        "message": {"text": e.message},
        "locations": [{"physicalLocation": {
            "artifactLocation": {"uri": _uri(e.path)},
            "region": _region(e.line, e.col, e.line, e.col),
        }}],
    } for e in result.errors]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "torchfl", "version": __version__, "informationUri": DOCS,
                                "rules": rules}},
            "columnKind": "unicodeCodePoints",
            "invocations": [{"executionSuccessful": True, "toolExecutionNotifications": notifications}],
            "results": results,
        }],
    }
