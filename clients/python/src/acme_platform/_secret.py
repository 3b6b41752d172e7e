"""Values that never show themselves."""

from __future__ import annotations

from typing import Any, cast


class Secret:
    """A string that never shows itself: not in ``repr``, ``str``,
    ``format``, tracebacks' locals, nor a pickle. :meth:`reveal` returns
    it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError("a secret must be a str")
        object.__setattr__(self, "_value", value)

    def reveal(self) -> str:
        return cast(str, object.__getattribute__(self, "_value"))

    def __repr__(self) -> str:
        return "Secret('[redacted]')"

    def __str__(self) -> str:
        return "[redacted]"

    def __format__(self, spec: str) -> str:
        return "[redacted]"

    def __bool__(self) -> bool:
        return bool(self.reveal())

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a Secret is immutable")

    def __reduce__(self) -> Any:
        raise TypeError("a Secret cannot be pickled")
