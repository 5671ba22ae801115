"""Secrets out of text that users paste into public issues (``torchfl bugreport``).

Two passes: `_scan` runs every rule and keeps each secret it finds; `_everywhere` then replaces each one
wherever it occurs (a token redacted in one line is not printed two lines below). The rules:

1. **Vendors' token formats** (`VENDOR_FORMATS`, always on, no dependency): every format with a prefix
   or shape of its own, gitleaks' rules as the reference; JWTs; PEM private-key blocks.
2. **detect-secrets' pattern plugins** (``pip install torch-fl[redact]``), when installed. Its entropy and
   keyword plugins are not used: they flag every sha256 and ``key=`` in ordinary ML logs.
3. **Names and shapes**: ``NAME=value``, ``os.environ["NAME"] = ...``, ``("NAME", value)`` pairs, key/value
   pairs (JSON, YAML, INI, TOML, dicts, reprs, headers), ``--option value``, query parameters, URL
   credentials, a token as a URL's user or path segment, ``Authorization``/``Bearer``, ``curl -u``. Strong
   names (password, api_key, HF_TOKEN) always; weak ones (token, x_key, X-Vendor-Key) when the value has a
   credential's shape (`credential_like`).

4. **Default deny** (`_deny`, `looks_random`), last: every other token of a secret's form is masked
   whatever surrounds it, judged by length and character mix, not by a vendor's shape: 12+ characters that
   do not read as words, acronyms and numbers (letters and digits interleaved, case flipping every few
   letters, letter pairs words lack, random chunks joined by dashes), 15+ digits, hex over 16 digits
   outside a digest's context, UUIDs. Op names, identifiers, versions, paths, model ids and torch-fl's own
   digests (`safe`) stay. It runs after the rules' values are replaced everywhere, so a value a rule found
   whole is replaced whole.

Values of environment variables are redacted by name and by shape (`redact_value`, `secret_values`), and
their secret parts everywhere (`environment_secrets`); `redact_data` redacts each string of JSON data
(`torchfl doctor --json`). Measured by scripts/redact_heldout.py (a held-out corpus: secrets-patterns-db's
token shapes in 14 contexts, and harmless lines), scripts/redact_leak_rate.py (gitleaks' examples in 20
shapes) and scripts/redact_false_positives.py (public code); docs/cli.md has the numbers.
"""

from __future__ import annotations

import functools
import getpass
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping

from .redact_formats import VENDOR_FORMATS

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
_SEP = r"[ \t]*[:=：＝][ \t]*"  # full-width colon and equals sign too (CJK input methods type them)
_VALUE = r"(\"[^\"]*\"|'[^']*'|[^\s,;}\]\"']+)"
_ASSIGNMENT = re.compile(rf"(?<![\w.-])({_NAME})[=＝](\"[^\"]*\"|'[^']*'|[^\s;&]+)")
_KEY_VALUE = re.compile(rf"([\"']?)(?<![\w.-])({_NAME})\1({_SEP}){_VALUE}")
# A strong name with an unquoted value: the rest of the line is the value ('password: correct horse').
_PHRASE = re.compile(rf"([\"']?)(?<![\w.-])({_NAME})\1([ \t]*[:：=＝][ \t]*)(?![\"'\s])([^\n,;}}\]]+)")
# 'password' in the languages of the chip vendors' users (Chinese, Japanese, Korean) and a few more
_NATIVE_PASSWORD = re.compile(r"(?i)(密码|密碼|口令|パスワード|비밀번호|passwort|contraseña|mot de passe)"
                              r"(\s*[:=：＝]\s*)([^\s,;]+)")
_OPTION = re.compile(rf"(--{_NAME})(=|\s+){_VALUE}")
# Short options that are a password only for the command that owns them (`-p` is a port or a flag elsewhere):
# twine's, docker/podman/buildah/skopeo/nerdctl login's, sshpass's, Azure CLI's and OpenShift's `-p VALUE`, and the
# MySQL clients' attached `-pVALUE` (their manual: no space between -p and the password).
_SHORT_PASSWORD = re.compile(
    r"(\b(?:twine|sshpass|(?:docker|podman|buildah|skopeo|nerdctl|az|oc)[ \t]+login)\b[^\n|;&]*?\s-p[ \t]+)"
    r"(\"[^\"]*\"|'[^']*'|[^\s\"']+)")
_ATTACHED_PASSWORD = re.compile(
    r"(\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mariadb|mariadb-dump)\b[^\n|;&]*?\s-p)(\"[^\"]*\"|'[^']*'|[^\s\"']+)")
_QUERY = re.compile(r"([?&;])([\w.-]+)=([^&;#\s'\"<>]+)")
# scheme://user:password@host: the password may hold '@', '/' or quotes; ':digits/' is a port, not one.
_URL_CREDENTIALS = re.compile(
    r"\b([a-zA-Z][\w+.-]*://)([^\s/:@'\"]*):(?!\d+(?:[/?#\s]|$))((?:\"[^\"]*\"|[^\s\"])+)"
    r"@(?=[\w\[][\w.\[\]-]*(?:[:/?#\s'\"]|$))")
_VENDOR = re.compile("|".join(f"(?:{regex})" for _, regex in VENDOR_FORMATS))
# a match inside a longer word is none (a '/' may sit either side: tokens are path segments too)
_VENDOR_TOKEN = re.compile(rf"(?<![\w+~.\-])(?:{_VENDOR.pattern})(?![\w+=~\-])")
_PEM = re.compile(r"(-----BEGIN ([A-Z0-9 _-]*PRIVATE KEY(?: BLOCK)?)-----)(.*?)(-----END \2-----|\Z)", re.S)
_AUTHORIZATION = re.compile(r"(?i)(authorization[\"']?\s*[:=：]\s*[\"']?)(?:(bearer|basic|token|digest)\s+)?"
                            r"([^\s\"',}]+)")
_BEARER = re.compile(r"(?i)\b(bearer)\s+([A-Za-z0-9._~+/=-]{8,})")
_AZURE = re.compile(r"(?i)\b(AccountKey|SharedAccessKey|SharedAccessSignature)\s*=\s*([^;\s'\"]+)")
_CURL_USER = re.compile(r"(\s(?:-u|--user)[= ]\s*)([\"']?)([^\s\"':]*):([^\s\"']+)\2")
# scheme://TOKEN@host (a token as the user: `git clone https://ghp_...@github.com/...`)
_URL_USER = re.compile(r"\b([a-zA-Z][\w+.-]*://)([^\s/:@'\"]+)@(?=[\w\[][\w.\[\]-]*(?:[:/?#\s'\"]|$))")
_URL_PATH = re.compile(r"\b([a-zA-Z][\w+.-]*://[^\s/'\"<>]+)(/[^\s?#'\"<>]*)")
# os.environ["X_TOKEN"] = "v", config['api_key'] = 'v'; setdefault("X_TOKEN", "v"), setProperty(...)
_SUBSCRIPT = re.compile(rf"(\[\s*)([\"'])({_NAME})\2(\s*\]\s*=\s*){_VALUE}")
_CALL_PAIR = re.compile(rf"(\(\s*)([\"'])({_NAME})\2(\s*,\s*){_VALUE}")
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
    # references to secrets are not secrets: ${{ secrets.X }}, $TOKEN, {token}, <redacted>; nor are the
    # placeholders of docs and examples: "hf_...", "hf_***", "xxxx", "your-api-key", "my-secret"
    v = value.strip("\"'")
    return v.startswith(("$", "{", "<", "%")) or _PLACEHOLDER.search(v) is not None


_PLACEHOLDER = re.compile(r"(?i)\.\.\.|\*\*\*|x{4,}|^(?:your|my)[-_]")


def _code_like(value: str) -> bool:
    """A value that is code, not a literal: a call, an index, a constant, a dotted name (self.eod_token),
    a variable named for a secret (`= aws_secret_access_key`: where it comes from, not what it is)."""
    quoted = value[:1] in "\"'`"
    v = value.strip("\"'`").rstrip(",;")
    if re.search(r"[()\[\]{}<>`]", v) or v.startswith("=") or v.lower() in _CONSTANTS or _ANNOTATION.match(v):
        return True
    if re.fullmatch(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+", v) and _wordy(v):
        return True
    if not quoted and v.startswith("_") and _identifier(v):  # a private name: `password: _AccessToken`
        return True
    return (not quoted and re.fullmatch(r"[a-z_][a-z0-9_]*|[A-Za-z]+_\w+", v) is not None
            and _name_kind(v) > 0)


# a type annotation: `password: str | None = None`
_ANNOTATION = re.compile(r"(?:str|bool|int|float|bytes|dict|list|tuple|set|Any|Optional|Union|None|Path)"
                         r"(?:\s*[|=,]|\s*$)")
_CONSTANTS = frozenset({"none", "null", "nil", "true", "false", "undefined", "yes", "no", "on", "off", "required",
                        "optional", "str", "string", "bytes", "int", "secret", "token", "password", "changeme",
                        "xxx", "***", "...", "redacted"})


def _wordy(value: str) -> bool:
    """Made of words and numbers (bert-base-uncased, model.layers.0.weight, input_ids), not of random
    characters: every part between separators is letters, or digits, or 4 characters at most."""
    parts = [p for p in re.split(r"[-_.:/~+]+", value) if p]
    return all(p.isdigit() or len(p) <= 4 or (_WORD.fullmatch(p) and not _HEX.fullmatch(p)) for p in parts)


# a word as people write them (lower, UPPER, Capitalised, camelCase), not random letters (yqDVtkqPECriaLRi);
# 8+ hex digits are a number, not a word
_WORD = re.compile(r"(?:[A-Z]?[a-z]+(?:[A-Z][a-z]+)*|[A-Z]+[a-z]*)\d*")
_HEX = re.compile(r"[0-9a-f]{8,}")


def _entropy(value: str) -> float:
    counts = {c: value.count(c) for c in set(value)}
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def credential_like(value: str) -> bool:
    """A value with a credential's shape: 8+ characters without spaces, not code, not a path or URL,
    not words and numbers alone (a slug, a dotted name), varied enough (entropy) to be random."""
    v = value.strip("\"'`").rstrip(",;")
    if not 8 <= len(v) <= 4096 or re.search(r"\s", v) or _code_like(v) or _keep_value(v):
        return False
    if "://" in v or v.startswith(("/", "./", "../", "~/", "-")):
        return False
    if re.fullmatch(r"[\d.:,eE+-]+", v) and not v.isdigit():  # a number, a version, a time
        return False
    if _PASSWORD_WORD.search(v):  # token: "TestSource-Password", a password however wordy
        return True
    if v.isdigit():
        return len(v) >= 10
    if v.isalpha():  # random letters in both cases, not a word (DeepLearningExamples)
        return len(v) >= 16 and not _WORD.fullmatch(v) and _entropy(v) >= 3.5
    if _wordy(v):
        return False
    return _entropy(v) >= 2.5


# 'bearer' in prose ('HTTP bearer authorization'), not before a token
_NOT_BEARER = frozenset({"authorization", "authentication", "token", "tokens", "auth", "header", "scheme"})
_PASSWORD_WORD = re.compile(r"(?i)pass(?:word|wd)|secret")


class _Found:
    """The secret values one pass finds, to replace everywhere in the second."""

    def __init__(self) -> None:
        self.values: set[str] = set()

    def hide(self, value: str) -> str:
        value = value.strip().strip("\"'`").strip()
        # a phrase (`password: correct horse battery`) is replaced where it was found, not everywhere:
        # words would reach too far
        if len(value) >= _MIN_VERBATIM and REDACTED not in value and not re.search(r"\s", value):
            self.values.add(value)
        return REDACTED


def _name_kind(name: str) -> int:
    """2: a name whose value is a secret whatever it looks like (password, api_key, HF_TOKEN, SECRET_X);
    1: a name whose value is a secret when it looks like one (token, x_key, adafruit_token, X-Vendor-Key,
    ARROW_KEY_FLAG); 0: not a secret's name."""
    words = _words(name)
    if not words:
        return 0
    if name.isupper() or (name.upper() == name and any(c.isalpha() for c in name)):
        if not is_secret(name):
            return 0
        upper = [w.upper() for w in words]
        return 2 if upper[0] in SECRET_WORDS or upper[-1] in SECRET_WORDS or "".join(upper[-2:]) == "APIKEY" else 1
    if secret_name(name):
        return 2
    if words[-1] in _WEAK_WORDS and (len(words) == 1 or words[-2] not in _NOT_SECRET):
        return 1
    return 0


# The last word of a name that holds a secret when its value looks like one ...
_WEAK_WORDS = frozenset({"token", "key", "secret", "password", "passwd", "pwd", "pass", "passphrase", "credential",
                         "credentials", "creds", "auth", "apikey", "sig", "signature", "pat", "dsn", "cookie"})
# ... unless the word before says it is another kind of key (sort_key, cache_key, cls_token, pad_token)
_NOT_SECRET = frozenset({"cache", "sort", "primary", "foreign", "public", "pub", "hash", "lookup", "dict", "row",
                         "col", "column", "partition", "group", "idx", "index", "map", "state", "cls", "sep", "pad",
                         "mask", "eos", "bos", "unk", "special", "start", "end", "max", "min", "num", "next", "prev",
                         "page", "cursor", "continuation", "sequence", "schema", "natural", "bucket", "object",
                         "file", "path", "name", "input", "output", "label", "image", "text", "metric", "monitor",
                         "config", "query", "value", "class", "position", "pos", "model", "layer", "param",
                         "weight", "batch", "sample", "random", "rng", "prng", "seed", "event", "hot", "target",
                         "source", "src", "tgt", "dataset", "module", "attr", "field", "type",
                         "ssh", "gpg", "pgp", "dispatch", "eod", "sos", "img", "vision", "id"})


def _redacts(name: str, value: str) -> bool:
    if _keep_value(value):
        return False
    kind = _name_kind(name)
    if kind == 2 and name.isupper() and _words(name.lower())[-1] in ("key", "token"):
        # KEY=VALUE in a usage text, _TOTAL_KEY = "Total": a plain word is a name, not a key
        word = value.strip("\"'")
        if word.isalpha() and len(word) <= 12 and word[0].isupper() and _WORD.fullmatch(word):
            return False
        # CHECKPOINT_HYPER_PARAMS_KEY = "hyper_parameters", ACCESS_TOKEN = "_AccessToken": the name of a
        # field or a class, replaced everywhere it would blank every use of it (issue 42)
        if _identifier(word) and not _strong(name):  # SECRET_KEY = "django_insecure_key" stays a secret
            return False
    return (kind == 2 and not _code_like(value)) or (kind == 1 and credential_like(value))


def _identifier(value: str) -> bool:
    """A Python identifier made of words (hyper_parameters, _AccessToken), not a password in one word."""
    return (re.fullmatch(r"_*[A-Za-z][A-Za-z0-9]*(?:_+[A-Za-z0-9]+)*", value) is not None
            and "_" in value and not _PASSWORD_WORD.search(value)
            and all(_readable(p) for p in re.split(r"_+", value) if p) and not looks_random(value))


def _scan(text: str, found: _Found, detector: bool = True) -> str:
    """Pass 1: every rule that looks at the text, each secret replaced where it was found and kept in
    `found`."""
    hide = found.hide
    text = _PEM.sub(lambda m: f"{m.group(1)}\n{hide(m.group(3))}\n{m.group(4)}", text)
    text = _URL_CREDENTIALS.sub(lambda m: f"{m.group(1)}{hide(m.group(3))}@", text)
    text = _URL_USER.sub(lambda m: f"{m.group(1)}{hide(m.group(2))}@" if credential_like(m.group(2))
                         or _VENDOR_TOKEN.fullmatch(m.group(2)) else m.group(0), text)
    text = _AUTHORIZATION.sub(lambda m: m.group(0) if REDACTED in m.group(3) or _keep_value(m.group(3))
                              or not re.search(r"[A-Za-z0-9]", m.group(3))
                              else f"{m.group(1)}{m.group(2) or ''} {hide(m.group(3))}", text)
    text = _BEARER.sub(lambda m: m.group(0) if m.group(2).lower() in _NOT_BEARER
                       else f"{m.group(1)} {hide(m.group(2))}", text)
    text = _VENDOR_TOKEN.sub(lambda m: hide(m.group(0)), text)
    text = _AZURE.sub(lambda m: f"{m.group(1)}={hide(m.group(2))}" if re.search(r"[A-Za-z0-9]", m.group(2))
                      else m.group(0), text)
    text = _CURL_USER.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}:{hide(m.group(4))}{m.group(2)}", text)
    if detector:
        text = _detected(text, found)
    text = _QUERY.sub(lambda m: _query(m, found), text)
    text = _NATIVE_PASSWORD.sub(lambda m: f"{m.group(1)}{m.group(2)}{hide(m.group(3))}", text)
    text = _PHRASE.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(1)}{m.group(3)}{hide(m.group(4))}"
                       if _strong(m.group(2)) and not _keep_value(m.group(4)) and REDACTED not in m.group(4)
                       and not _code_like(m.group(4).strip()) else m.group(0), text)
    text = _SUBSCRIPT.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}{m.group(2)}{m.group(4)}{hide(m.group(5))}"
                          if _redacts(m.group(3), m.group(5)) else m.group(0), text)
    text = _CALL_PAIR.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}{m.group(2)}{m.group(4)}{hide(m.group(5))}"
                          if _redacts(m.group(3), m.group(5)) else m.group(0), text)
    text = _ASSIGNMENT.sub(lambda m: f"{m.group(1)}={hide(m.group(2))}" if _redacts(m.group(1), m.group(2))
                           else m.group(0), text)
    text = _KEY_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(1)}{m.group(3)}{hide(m.group(4))}"
                          if _redacts(m.group(2), m.group(4)) else m.group(0), text)
    text = _OPTION.sub(lambda m: f"{m.group(1)}{m.group(2)}{hide(m.group(3))}" if _option_secret(m) else m.group(0),
                       text)
    for short in (_SHORT_PASSWORD, _ATTACHED_PASSWORD):
        text = short.sub(lambda m: m.group(0) if REDACTED in m.group(2) else f"{m.group(1)}{hide(m.group(2))}", text)
    return _URL_PATH.sub(lambda m: m.group(1) + _path(m.group(2), found), text)


def _option_secret(m: re.Match[str]) -> bool:
    name, value = m.group(1)[2:], m.group(3)
    if name.lower() in _SECRET_OPTIONS:
        return not _keep_value(value) and not _code_like(value)
    return _redacts(name, value)


def _path(path: str, found: _Found) -> str:
    # a token as a path segment (webhooks, bot APIs): long, random, not a word, a slug or a commit hash
    segments = path.split("/")
    for i, seg in enumerate(segments):
        if REDACTED in seg or len(seg) < 12 or not credential_like(seg) or _entropy(seg) < 3.0:
            continue
        if not (re.search(r"[0-9]", seg) and re.search(r"[A-Za-z]", seg)):  # names in paths have no digits
            continue
        if re.fullmatch(r"[0-9a-f]{7,64}", seg) and i and segments[i - 1] in _HASH_PARENTS:
            continue
        if all(_readable(p) for p in re.split(r"[^A-Za-z0-9]+", seg) if p):  # a model id: all-MiniLM-L6-v2
            continue
        if re.search(r"\.[A-Za-z][A-Za-z0-9]{0,7}$", seg):  # a file name: weights.safetensors
            continue
        segments[i] = found.hide(seg)
    return "/".join(segments)


# URL folders whose next segment is a commit or a content hash, not a credential
_HASH_PARENTS = frozenset({"commit", "commits", "blob", "tree", "raw", "resolve", "archive", "compare", "pull",
                           "refs", "sha", "sha256", "blobs", "snapshots", "revision", "revisions"})


# Default deny ---------------------------------------------------------------------------------------
# Most real tokens have no vendor shape and no name beside them (a bare token in an exception message, a
# pasted route log), so every run of characters that looks random is masked, whatever surrounds it; what
# stays is what reads as words, numbers, versions, paths and identifiers (docs/cli.md, "Default deny").
_CANDIDATE = re.compile(r"[A-Za-z0-9_+/=.~%@!$#-]{12,}")
_PIECE_SEP = re.compile(r"([/.=+~%])")
_UUID = re.compile(r"(?i)(?<![0-9a-z])[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?![0-9a-z])")
# a hex string right after these is a digest or a commit, not a secret: sha256 <hex>, commit <sha>,
# snapshots/<sha>, git+<sha>
_DIGEST_WORDS = ("md5", "sha", "sha1", "sha256", "sha512", "blake2b", "digest", "hash", "checksum", "commit", "rev",
                 "revision", "etag", "git", "fingerprint", *sorted(_HASH_PARENTS))
_DIGEST_BEFORE = re.compile(rf"(?i)(?<![a-z])(?:{'|'.join(_DIGEST_WORDS)})[\s:=@\"'(#+/_-]{{1,6}}$")
# Pure hex up to this length stays anywhere: torch-fl's cache keys (16), short commits, digest prefixes.
_SHORT_HEX = 16
_HUMP = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
# Letter pairs (of 676) that make up 0.2% of the words in torch's and transformers' sources (identifiers,
# docstrings), less a few of common words (ascii, yaml): random letters have one in 2.6 pairs.
_RARE_BIGRAMS = frozenset(re.findall(r"[a-z]{2}",
    "aj aq bh bk bq bv bx bz cb cg cj cn cq cv cw cx cz dh dj dk dm dq dv dw dz ej ek fb fd fg fh fj fk "
    "fv fz gc gd gj gk gq gv gw gx gz hb hc hd hg hh hj hk hl hn hp hq hv hx hz ih ij iw jb jc jd jf jg "
    "jh jj jk jl jm jn jp jq jr jt jv jw jx jy jz kc kd kf kg kh kj kk kq kr kt kx kz lh lj lq lx lz mc "
    "mf mh mj mq mr mw mx mz nq nr nz oz pb pf pj pq pv pw px pz qb qd qe qf qg qh qi qj qm qo qp qq qt "
    "qv qx qy qz rj rq rx rz sb sj sx sz tb tg tj tk tq tz uh uj uk uq uv uw uy uz vb vc vd vf vh vj vk "
    "vn vp vq vr vu vv vw vx vy vz wb wc wf wj wk wl wm wp wq wt wu wv wx wy wz xb xd xf xg xh xj xk xl "
    "xm xn xq xr xu xv xw xx xz yd yf yg yh yj yk yq yu yv yx yy yz zb zc zd zf zg zh zj zk zl zm zn zo "
    "zp zq zr zs zt zu zw zx zz"))


def _pronounceable(word: str) -> bool:
    """Letters as a word is written (Attention, tokenizer, GPTQ): vowels between consonants, almost no
    letter pair that words lack; random letters (zbxqwk, hdoeimtywlqykls) fail."""
    w = word.lower()
    if len(w) <= 3:
        return True
    vowels = sum(c in "aeiouy" for c in w)
    rare = sum(w[i:i + 2] in _RARE_BIGRAMS for i in range(len(w) - 1))
    return 0.15 <= vowels / len(w) <= 0.8 and re.search(r"[^aeiouy]{6,}", w) is None and rare <= len(w) // 6


def _readable(part: str) -> bool:
    """A part of an identifier, a version or a file name (hyper_parameters, _AccessToken, Llama-2-7b-hf,
    HunyuanImageRefinerCausalConv3d, FSDPStrategy): made of words, acronyms and numbers. A random token has
    letters and digits interleaved, case flipping every few letters, or letter runs no one could read."""
    humps = _HUMP.findall(part)
    if "".join(humps) != part:  # characters outside [A-Za-z0-9]
        return False
    letters = [h for h in humps if not h.isdigit()]
    digits = len(humps) - len(letters)
    if digits >= 3 and digits * 5 >= len(humps):  # letters and digits interleaved: ao8phgyh6zbiv1y1kdis
        return False
    if _choppy(humps):
        return False
    # humps of one or two letters (the d of Conv3d, hf, v2) say nothing; a foreign word (Hunyuan) may
    # fail the letter-pair test, so a third of the letters may be odd
    words = [h for h in letters if len(h) >= 3]
    acronyms = sum(h.isupper() for h in words) <= 2  # three in one name are random capitals (VDR...JXKF...TUNXU)
    odd = sum(len(h) for h in words if not _wordlike(h, acronyms))
    return odd * 3 <= sum(map(len, words))


def _wordlike(hump: str, acronyms: bool = True) -> bool:
    return (acronyms and hump.isupper() and len(hump) <= 5) or _pronounceable(hump)  # FSDP, NCCL; a word


def looks_random(piece: str, before: str = "") -> bool:
    """A token of a secret's form by length and character mix (not by a vendor's shape): 12+ characters
    that are not words, a number, a version or a short hex digest; `before` is the text in front of it
    (a hex string after 'sha256 ' or 'commit ' is a digest)."""
    parts = [p for p in re.split(r"[^A-Za-z0-9]+", piece) if p]
    if any(_random_part(p, before) for p in parts):
        return True
    # short random chunks joined by separators (a UUID-like ybz1tdsi-qv8j-g9ro-supy-y2ny56fma2pl): most
    # chunks mix letters and digits or cannot be read; parts under 4 characters are a version's or a
    # platform's (x86_64-with-glibc2), and most chunks of an op name read as words (slow_conv_dilated2d)
    chunks = [p for p in parts if len(p) >= 4]
    joined = "".join(chunks)
    odd = sum(_odd(c) for c in chunks)
    if re.fullmatch(r"[0-9a-fA-F]+", joined):  # dashed hex (ace3-9641-f29e5e-...): no digest is written so
        return len(chunks) >= 3 and len(joined) > _SHORT_HEX and not _DIGEST_BEFORE.search(before)
    return len(chunks) >= 2 and odd * 2 > len(chunks) and len(joined) >= 14 and _entropy(joined) >= 3.0


def _odd(chunk: str) -> bool:
    """A chunk no one would write: letters and digits interleaved (qv8j, g9ro) or letters without a word's
    shape (htbc, FSHLLQ)."""
    runs = len(re.findall(r"[A-Za-z]+|\d+", chunk))
    if len(chunk) >= 12:  # long enough to be read as a name (nvmlDeviceGetHandleByIndex, HunyuanVideo15Block)
        return runs >= 5 or not _readable(chunk)
    humps = _HUMP.findall(chunk)
    letters = [h for h in humps if not h.isdigit()]
    flips = len(letters) >= 4 and sum(map(len, letters)) < 2.5 * len(letters)  # mFarrvEeT
    return (runs >= 3 or flips or _choppy(humps)
            or any(not h.isdigit() and len(h) >= 4 and not _wordlike(h) for h in humps))


def _choppy(humps: list[str]) -> bool:
    # case flipping every few letters (DSwxXcwQ, ibTnQKZlSKBNtsli): words in camelCase have longer humps,
    # or short ones with vowels (UNetMidBlock2D, SeqAllToAllDim)
    letters = [h for h in humps if not h.isdigit()]
    total = sum(map(len, letters))
    titled = sum(len(h) for h in letters if re.fullmatch(r"[A-Z][a-z]{2,}", h) and re.search("[aeiouy]", h.lower())
                 and _pronounceable(h))
    return len(letters) >= 4 and total < 3.5 * len(letters) and titled * 2 < total


def _random_part(part: str, before: str) -> bool:
    if len(part) < 12:
        return False
    if part.isdigit():  # 15+ digits: no count or millisecond time stamp is that long; Discord's ids are
        return len(part) >= 15
    if re.fullmatch(r"[0-9a-f]+|[0-9A-F]+", part):
        return len(part) > _SHORT_HEX and not part.isalpha() and not _DIGEST_BEFORE.search(before)
    if re.fullmatch(r"0x[0-9a-fA-F]+", part):  # an address in a repr
        return False
    return not _readable(part) and _entropy(part) >= 3.0


# a number with a point or an exponent (a loss printed in full: 0.6931471805599453), a version, a time
_NUMBER = re.compile(r"[-+]?\d*[.,:]\d[\d.,:eE+-]*|[-+]?\d+[eE][-+]?\d+")


def _deny(text: str, found: _Found, safe: frozenset[str] = frozenset()) -> str:
    """Every UUID and every piece of a word that `looks_random` masked, unless `safe` (torch-fl's own
    digests) holds it."""
    text = _UUID.sub(lambda m: m.group(0) if m.group(0) in safe else found.hide(m.group(0)), text)

    def word(segment: str, start: int, text: str) -> str:
        if not segment or segment in safe:
            return segment
        out, offset = [], start
        for piece in _PIECE_SEP.split(segment):
            before = text[max(0, offset - 24):offset]
            out.append(found.hide(piece) if piece not in safe and looks_random(piece, before) else piece)
            offset += len(piece)
        if any(REDACTED in piece for piece in out) or looks_random(segment, text[max(0, start - 24):start]):
            # one word: a secret's every part goes, not its random half (a sentence's full stop stays), but a
            # readable name before '=' stays (acc1=<redacted>, sig=<redacted>)
            whole = segment.rstrip(".")
            name = re.match(r"(?:[A-Za-z_][\w.-]*=)+", whole)
            keep = name.group(0) if name and all(_readable(p) for p in re.split(r"[^A-Za-z0-9]+", name.group(0))
                                                 if p) else ""
            return keep + found.hide(whole[len(keep):]) + segment[len(whole):]
        return "".join(out)

    def candidate(m: re.Match[str]) -> str:
        if m.group(0) in safe or _NUMBER.fullmatch(m.group(0)):
            return m.group(0)
        out, offset = [], m.start()
        for segment in m.group(0).split("/"):  # a path or URL: each segment a word of its own
            out.append(word(segment, offset, m.string))
            offset += len(segment) + 1
        return "/".join(out)

    return _CANDIDATE.sub(candidate, text)


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


def _detected(text: str, found: _Found) -> str:
    for analyze in detectors():
        for line in text.splitlines():
            try:
                secrets = [str(s) for s in analyze(line)]  # type: ignore[operator]
            except Exception:
                continue
            for secret in sorted(secrets, key=len, reverse=True):
                if len(secret) >= _MIN_DETECTED and REDACTED not in secret:
                    text = text.replace(secret, found.hide(secret))
    return text


def _query(match: re.Match[str], found: _Found) -> str:
    sep, name, value = match.groups()
    if _keep_value(value) or REDACTED in value:
        return match.group(0)
    if name.lower() in _SECRET_PARAMS or _redacts(name, value):
        return f"{sep}{name}={found.hide(value)}"
    return match.group(0)


def _everywhere(text: str, values: Iterable[str]) -> str:
    """Pass 2: each secret found anywhere replaced wherever else it occurs (longest first, so a value that
    contains another goes whole; short ones only as whole words)."""
    for value in sorted(set(values), key=len, reverse=True):
        if len(value) < _MIN_VERBATIM or value not in text:
            continue
        if len(value) >= 12:
            text = text.replace(value, REDACTED)
        else:
            text = re.sub(rf"(?<![\w-]){re.escape(value)}(?![\w-])", REDACTED, text)
    return text


def find_secrets(text: str, *, detector: bool = True) -> set[str]:
    """The secret values in `text` (what `redact_shapes` replaces)."""
    found = _Found()
    _passes(text, found, detector)
    return found.values


def _passes(text: str, found: _Found, detector: bool = True, known: Iterable[str] = (),
            safe: frozenset[str] = frozenset()) -> str:
    """The rules (`_scan`), each value found (and `known`) replaced everywhere, then the default deny
    (`_deny`) on what is left and its finds replaced everywhere too. The deny comes last so that a value
    a rule found whole is replaced whole before the deny could split it."""
    text = _everywhere(_scan(text, found, detector), {*found.values, *known})
    denied = _Found()
    text = _everywhere(_deny(text, denied, safe), denied.values)
    found.values |= denied.values
    return text


def redact(text: str, environ: Mapping[str, str] | None = None, *, home: str | None = None,
           user: str | None = None, detector: bool = True, known: Iterable[str] = (),
           safe: Iterable[str] = ()) -> str:
    """`text` without secrets, in two passes: every rule finds secrets (by name, by shape, in the
    environment: values of secret-named variables and the secret parts of FL_* values), then each one
    found is replaced wherever it occurs, also where no rule would see it (a token printed bare two
    lines below its assignment). `known`: more values to replace everywhere; `safe`: values the default
    deny keeps (torch-fl's own digests). Home as ~, the user as <user>. `detector=False` leaves
    detect-secrets out (the floor alone)."""
    environ = os.environ if environ is None else environ
    secrets = {v for v in known if v} | environment_secrets(environ)
    text = _passes(text, _Found(), detector, secrets, frozenset(safe))
    return _anonymise(text, home if home is not None else _home(environ),
                      user if user is not None else _user(environ))


def environment_secrets(environ: Mapping[str, str]) -> set[str]:
    """The values of secret-named variables and the secret parts of FL_* values: replaced wherever they
    occur, so a problem text that echoes an FL_* value echoes none of its secret."""
    secrets = {v for k, v in environ.items() if is_secret(k) and len(v) >= _MIN_VERBATIM}
    for name, value in environ.items():
        if name.startswith("FL_") and not is_secret(name):
            secrets |= secret_values(name, value)
    return secrets


def redact_data(data: object, environ: Mapping[str, str] | None = None, *, safe: Iterable[str] = ()) -> object:
    """JSON-ready `data` (dicts, lists, strings, numbers) with every string redacted as `redact` redacts a
    report: what `torchfl doctor --json` prints. Keys stay; the environment's secrets are found once."""
    environ = os.environ if environ is None else environ
    known = environment_secrets(environ)
    home, user, kept = _home(environ), _user(environ), frozenset(safe)

    def walk(item: object) -> object:
        if isinstance(item, str):
            return _anonymise(_passes(item, _Found(), True, known, kept), home, user)
        if isinstance(item, dict):
            return {key: walk(value) for key, value in item.items()}
        if isinstance(item, (list, tuple)):
            return [walk(value) for value in item]
        return item

    return walk(data)


def redact_shapes(text: str, *, detector: bool = True) -> str:
    """Every rule that looks at the text itself (not at the environment), both passes."""
    return _passes(text, _Found(), detector)


def secret_values(name: str, value: str) -> set[str]:
    """The secrets in an environment variable: its whole value for a secret name or a key-like value,
    else what the text rules find in it (the token of FL_CONFIG=https://host/c.toml?token=...)."""
    if is_secret(name):
        return {value} if value else set()
    found = find_secrets(value)
    if not found and _looks_like_key(value):
        return {value}
    return found


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
    return _entropy(value) >= 4.0


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
