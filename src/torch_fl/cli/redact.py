"""Secrets out of text that users paste into public issues (``torchfl bugreport``).

Two layers:

1. **Our own patterns, the floor** (always on, no dependency): secret-named variables, keys, options and
   query parameters; credentials in URLs (passwords with ``@``, ``/`` or quotes in them); ``Authorization``
   headers and bearer tokens; JWTs; PEM private-key blocks; and the token shapes of the services ML code
   talks to (GitHub, GitLab, Hugging Face, OpenAI, AWS, Slack, Stripe, Google, PyPI, Azure).
2. **detect-secrets' pattern plugins** (``pip install torch-fl[redact]``), when installed: a maintained
   list of vendor token shapes (Twilio, SendGrid, npm, Discord, Mailchimp, Telegram, Artifactory, ...).
   Its entropy and keyword plugins are not used: they flag every sha256 and ``key=`` in ordinary ML logs.

Values of environment variables are also redacted by shape (`redact_value`): a token in a variable
without a secret-like name (``FL_CONFIG=https://host/c.toml?token=...``) is still a token.

Measured on public code (scripts/redact_false_positives.py) and the probe shapes of
tests/cli/test_bugreport_probes.py.
"""

from __future__ import annotations

import functools
import getpass
import math
import os
import re
from collections.abc import Callable, Mapping

SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
REDACTED = "<redacted>"
USER = "<user>"
# Shorter values ('1', 'true') are too common to replace wherever they occur.
_MIN_VERBATIM = 6
# Names whose value is a secret in any spelling (db_password, apiKey, client-secret) ...
_STRONG = frozenset({"password", "passwd", "pwd", "passphrase", "secret", "credential", "credentials", "apikey",
                     "accesstoken", "authtoken", "apitoken", "privatekey", "accesskey", "secretkey", "accountkey",
                     "sharedaccesskey", "sas"})
# ... and 'key' or 'token' as the last word after a qualifier (hf_token, api_key, accessToken): bare ones
# (cls_token, class_token, sort_key, key=lambda) fill the tracebacks of ordinary ML code.
_QUALIFIERS = frozenset({"api", "access", "secret", "private", "auth", "aws", "ssh", "signing", "encryption",
                         "license", "client", "master", "hf", "hub", "github", "gh", "gitlab", "refresh",
                         "session", "oauth", "bearer", "personal", "wandb", "slack", "bot", "openai", "jwt",
                         "account", "storage", "pypi", "npm", "deploy", "service"})
# Command-line options whose value is a secret even bare: `--token x`, `--auth x` (an option names one thing).
_SECRET_OPTIONS = frozenset({"token", "auth", "password", "passwd", "pass", "secret", "apikey", "api-key"})
# URL query parameters that carry a credential (signed URLs: S3, GCS, Azure SAS; OAuth callbacks).
_SECRET_PARAMS = frozenset({"token", "sig", "signature", "key", "secret", "password", "pwd", "pass", "auth",
                            "code", "access_token", "id_token", "refresh_token", "api_key", "apikey",
                            "client_secret", "x-amz-signature", "x-amz-security-token", "x-amz-credential",
                            "x-goog-signature", "x-goog-credential", "sv", "se", "sp"})
_NAME = r"[A-Za-z_][\w.-]*"
_SEP = r"\s*[:=：＝]\s*"  # full-width colon and equals sign too (CJK input methods type them)
_VALUE = r"(\"[^\"]*\"|'[^']*'|[^\s,;}\]]+)"
_ASSIGNMENT = re.compile(rf"(?<![\w.-])({_NAME})[=＝](\"[^\"]*\"|'[^']*'|[^\s;&]+)")
_KEY_VALUE = re.compile(rf"([\"']?)(?<![\w.-])({_NAME})\1({_SEP}){_VALUE}")
# A strong name with an unquoted value: the rest of the line is the value ('password: correct horse').
_PHRASE = re.compile(rf"([\"']?)(?<![\w.-])({_NAME})\1([ \t]*[:：=＝][ \t]*)(?![\"'\s])([^\n,;}}\]]+)")
# 'password' in the languages of the chip vendors' users (Chinese, Japanese, Korean) and a few more
_NATIVE_PASSWORD = re.compile(r"(?i)(密码|密碼|口令|パスワード|비밀번호|passwort|contraseña|mot de passe)"
                              r"(\s*[:=：＝]\s*)[^\s,;]+")
_OPTION = re.compile(rf"(--{_NAME})(=|\s+){_VALUE}")
_QUERY = re.compile(r"([?&;])([\w.-]+)=([^&;#\s'\"<>]+)")
# scheme://user:password@host: the password may hold '@', '/' or quotes; ':digits/' is a port, not one.
_URL_CREDENTIALS = re.compile(
    r"\b([a-zA-Z][\w+.-]*://)([^\s/:@'\"]*):(?!\d+(?:[/?#\s]|$))((?:\"[^\"]*\"|[^\s\"])+)"
    r"@(?=[\w\[][\w.\[\]-]*(?:[:/?#\s'\"]|$))")
_PEM = re.compile(r"(-----BEGIN ([A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)-----)(.*?)(-----END \2-----|\Z)", re.S)
# (pattern, replacement) applied in order; each keeps enough context to show what was removed.
_VALUE_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (_PEM, rf"\1\n{REDACTED}\n\4"),
    (_URL_CREDENTIALS, rf"\1{REDACTED}@"),
    # Authorization: Bearer xyz / Authorization=Basic xyz / "Authorization": "token xyz"
    (re.compile(r"(?i)(authorization[\"']?\s*[:=：]\s*[\"']?)(?:(bearer|basic|token|digest)\s+)?[^\s\"',}]+"),
     rf"\1\2 {REDACTED}"),
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}"), rf"\1 {REDACTED}"),
    # JSON Web Tokens: header.payload.signature, each base64url; the header always starts eyJ ('{"')
    (re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"), REDACTED),
    (re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{16,}|github_pat_\w{20,}|hf_[A-Za-z0-9]{16,}|sk-[A-Za-z0-9_-]{16,}"
                r"|(?:AKIA|ASIA)[0-9A-Z]{16}|xox[abposr]-[A-Za-z0-9-]{10,}|glpat-[\w-]{16,}"
                r"|[sr]k_(?:live|test)_[A-Za-z0-9]{10,}|AIza[0-9A-Za-z_-]{30,}|pypi-[A-Za-z0-9_-]{40,}"
                r"|npm_[A-Za-z0-9]{30,})"), REDACTED),
    # Azure connection strings: AccountKey=...; SharedAccessKey=...; SharedAccessSignature=...
    (re.compile(r"(?i)\b(AccountKey|SharedAccessKey|SharedAccessSignature)\s*=\s*[^;\s'\"]+"), rf"\1={REDACTED}"),
)
# Generic account names: replacing them as words would mangle ordinary text ('root' of a tree).
_GENERIC_USERS = frozenset({"root", "user", "admin", "ubuntu", "runner", "nobody"})
# detect-secrets plugins that look for a vendor's token shape (not entropy, not keywords).
_DETECTORS = ("AWSKeyDetector", "ArtifactoryDetector", "AzureStorageKeyDetector", "CloudantDetector",
              "DiscordBotTokenDetector", "GitHubTokenDetector", "GitLabTokenDetector", "IbmCloudIamDetector",
              "IbmCosHmacDetector", "JwtTokenDetector", "MailchimpDetector", "NpmDetector", "OpenAIDetector",
              "PypiTokenDetector", "SendGridDetector", "SlackDetector", "SoftlayerDetector", "SquareOAuthDetector",
              "StripeDetector", "TelegramBotTokenDetector", "TwilioKeyDetector")
_MIN_DETECTED = 8  # a detector's shorter "secret" (BasicAuth's 'p' of 'user:p@ss') is not replaced everywhere


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
    words = _words(name)
    if not words:
        return False
    if any(w in _STRONG for w in words) or "".join(words) in _STRONG:
        return True
    return words[-1] in ("key", "token") and len(words) > 1 and words[-2] in _QUALIFIERS


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[_.\-]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()) if w]


def _strong(name: str) -> bool:
    words = _words(name)
    return any(w in ("password", "passwd", "passphrase", "secret") for w in words)


def _keep_value(value: str) -> bool:
    # references to secrets are not secrets: ${{ secrets.X }}, $TOKEN, {token}, <redacted>
    return value.strip("\"'").startswith(("$", "{", "<", "%"))


@functools.cache
def detectors() -> tuple[Callable[[str], object], ...]:
    """The detect-secrets plugins' analyze_string functions, or () when detect-secrets is not installed."""
    try:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    except ImportError:
        return ()
    try:
        classes = {cls.__name__: cls for cls in get_mapping_from_secret_type_to_class().values()}
        return tuple(classes[name]().analyze_string for name in _DETECTORS if name in classes)
    except Exception:  # a detect-secrets release with another plugin API: the floor still applies
        return ()


def _detected(text: str) -> str:
    for analyze in detectors():
        for line in text.splitlines():
            try:
                found = [str(s) for s in analyze(line)]  # type: ignore[operator]
            except Exception:
                continue
            for secret in sorted(found, key=len, reverse=True):
                if len(secret) >= _MIN_DETECTED and REDACTED not in secret:
                    text = text.replace(secret, REDACTED)
    return text


def _query(match: re.Match[str]) -> str:
    sep, name, value = match.groups()
    if (name.lower() in _SECRET_PARAMS or secret_name(name)) and not _keep_value(value):
        return f"{sep}{name}={REDACTED}"
    return match.group(0)


def redact(text: str, environ: Mapping[str, str] | None = None, *, home: str | None = None,
           user: str | None = None, detector: bool = True) -> str:
    """`text` without secrets (by variable name and by value shape), home as ~ and the user as <user>.
    `detector=False` leaves detect-secrets out (the floor alone)."""
    environ = os.environ if environ is None else environ
    text = redact_shapes(text, detector=detector)
    secrets = sorted((v for k, v in environ.items() if is_secret(k) and len(v) >= _MIN_VERBATIM),
                     key=len, reverse=True)  # longest first, so a value containing another goes whole
    for value in secrets:
        text = text.replace(value, REDACTED)
    return _anonymise(text, home if home is not None else _home(environ),
                      user if user is not None else _user(environ))


def redact_shapes(text: str, *, detector: bool = True) -> str:
    """Every rule that looks at the text itself (not at the environment)."""
    for pattern, replacement in _VALUE_PATTERNS:
        text = pattern.sub(replacement, text)
    if detector:
        text = _detected(text)
    text = _QUERY.sub(_query, text)
    text = _NATIVE_PASSWORD.sub(rf"\1\2{REDACTED}", text)
    text = _PHRASE.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(1)}{m.group(3)}{REDACTED}"
                       if _strong(m.group(2)) and not _keep_value(m.group(4)) and REDACTED not in m.group(4)
                       else m.group(0), text)
    text = _ASSIGNMENT.sub(lambda m: f"{m.group(1)}={REDACTED}" if secret_name(m.group(1))
                           and not _keep_value(m.group(2)) else m.group(0), text)
    text = _KEY_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(1)}{m.group(3)}{REDACTED}"
                          if secret_name(m.group(2)) and not _keep_value(m.group(4)) else m.group(0), text)
    return _OPTION.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}"
                       if (secret_name(m.group(1)[2:]) or m.group(1)[2:].lower() in _SECRET_OPTIONS)
                       and not _keep_value(m.group(3)) else m.group(0), text)


def redact_value(name: str, value: str) -> str:
    """An environment variable's value for a report: wholly redacted for a secret name, else redacted by
    shape, and wholly when the value itself looks like a key (one long high-entropy word)."""
    if is_secret(name):
        return REDACTED
    shaped = redact_shapes(value)
    if shaped != value:
        return shaped
    return REDACTED if _looks_like_key(value) else value


def _looks_like_key(value: str) -> bool:
    # 20+ characters of one word, mixing letters and digits, ~4.5 bits per character or more: a random key.
    # Paths, lists and versions have separators ('/', ':', ',', '.', spaces) and are left alone.
    if len(value) < 20 or re.search(r"[\s/:,.;]", value):
        return False
    if not (re.search(r"[A-Za-z]", value) and re.search(r"[0-9]", value)):
        return False
    counts = {c: value.count(c) for c in set(value)}
    entropy = -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())
    return entropy >= 4.0


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
