"""torch.fl.sanitize(): the stream sanitizer's public API (FL_SANITIZE=streams turns it on from the emulated
device's registration); the checking itself is sanitizer.py's."""

from __future__ import annotations

from typing import Any

from .sanitizer import active, disable, enable

KINDS = ("streams",)


class Sanitizing:
    """The running sanitizer: a context manager (closed on exit), with what it found so far."""

    def __init__(self, sanitizer: Any) -> None:
        self._sanitizer = sanitizer

    @property
    def reports(self) -> list[str]:
        """Every report so far (each also raised, unless raise_errors=False, and printed to stderr)."""
        return list(self._sanitizer.reports)

    def host_syncs(self) -> list[dict[str, Any]]:
        """Host synchronisations by source line, most frequent first: ``[{"what", "where", "count"}]``."""
        return self._sanitizer.host_syncs()

    def close(self) -> None:
        """Stop checking."""
        if active() is self._sanitizer:
            disable()

    def __enter__(self) -> Sanitizing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def sanitize(kind: str = "streams", *, raise_errors: bool = True) -> Sanitizing:
    """Check the stream order of the ops of emulated chips from now on (this thread, as PyTorch's CUDA
    sanitizer), until close() or the end of the ``with`` block.

    Args:
        kind: what to check; "streams" (the one kind so far).
        raise_errors: raise a RuntimeError (race_error) at the op that races (default); False only records
            the reports (``.reports``) and prints them to stderr.

    Example:
        >>> with torch.fl.sanitize() as check:
        ...     y = model(x)
        >>> check.host_syncs()
        []
    """
    if kind not in KINDS:
        raise ValueError(f"torch.fl.sanitize: unknown kind {kind!r}; known: {', '.join(KINDS)}")
    return Sanitizing(enable(raise_errors))


def enable_from_env() -> None:
    """``FL_SANITIZE=streams``: sanitize from the emulated device's registration on (once declared in
    _env.py; until then only the API turns it on)."""
    from ... import _env

    var = getattr(_env, "FL_SANITIZE", None)
    if var is None:
        return
    kinds = [k.strip() for k in str(var.value() or "").split(",") if k.strip()]
    if "streams" in kinds:
        sanitize("streams")
