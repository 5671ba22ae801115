"""Equality by one attribute, for the emulator's handles that stand for something the chip owns: two
objects of the class are equal, and hash alike, when that attribute is (a stream by its (device, stream id)
key, a memory pool by its id), as the vendor's handles compare by what they point to."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T", bound=type)


def equal_by(attribute: str) -> Callable[[T], T]:
    """Class decorator: ``a == b`` when b is an instance of the class with the same `attribute`; hash of it."""

    def decorate(cls: T) -> T:
        def __eq__(self: Any, other: object) -> bool:
            return isinstance(other, cls) and getattr(other, attribute) == getattr(self, attribute)

        def __hash__(self: Any) -> int:
            return hash(getattr(self, attribute))

        cls.__eq__, cls.__hash__ = __eq__, __hash__  # type: ignore[method-assign,assignment]
        return cls

    return decorate
