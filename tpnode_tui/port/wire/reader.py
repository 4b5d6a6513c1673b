"""Reading a JSON document strictly: :class:`Reader`, and the :class:`WireError` it raises
naming the first thing wrong."""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, TypeVar

from tpnode_tui.model.errors import TpnodeError
from tpnode_tui.text.printable import printable

T = TypeVar("T")


S = TypeVar("S", bound=str)


class WireError(TpnodeError):
    """A snapshot document that cannot be understood."""


class _Required:
    pass


#: the default of a key that must be present
_REQUIRED = _Required()


class Reader:
    """Typed access to one JSON object, naming the path of whatever is wrong."""

    def __init__(self, doc: Any, where: str) -> None:
        if not isinstance(doc, dict):
            raise WireError(f"{where} is {json_kind(doc)}, not an object")
        self.doc = doc
        self.where = where

    def only(self, *keys: str) -> Reader:
        """Refuse keys this reader does not know: a misspelt option silently
        ignored would do something other than what was asked."""
        unknown = sorted(set(self.doc) - set(keys))
        if unknown:
            raise WireError(f"{self.where} has unknown fields {unknown}; known: {', '.join(keys)}")
        return self

    def _get(self, key: str, ok: Callable[[Any], bool], want: str, default: Any) -> Any:
        if key not in self.doc:
            if default is _REQUIRED:
                raise WireError(f"{self.where} has no {key!r}")
            return default
        value = self.doc[key]
        if not ok(value):
            raise WireError(f"{self.where}.{key} is {json_kind(value)}, not {want}")
        return value

    def text(self, key: str, default: Any = _REQUIRED) -> str:
        return self._get(key, lambda v: isinstance(v, str), "a string", default)  # type: ignore[no-any-return]

    def opt_text(self, key: str) -> Optional[str]:
        return self._get(key, lambda v: v is None or isinstance(v, str), "a string or null", None)  # type: ignore[no-any-return]

    def whole(self, key: str, default: Any = _REQUIRED) -> int:
        return self._get(key, _is_int, "a whole number", default)  # type: ignore[no-any-return]

    def opt_whole(self, key: str) -> Optional[int]:
        return self._get(key, lambda v: v is None or _is_int(v), "a whole number or null", None)  # type: ignore[no-any-return]

    def number(self, key: str) -> float:
        return float(self._get(key, is_number, "a number", _REQUIRED))

    def opt_number(self, key: str) -> Optional[float]:
        value = self._get(key, lambda v: v is None or is_number(v), "a number or null", None)
        return None if value is None else float(value)

    def choice(self, key: str, choices: tuple[str, ...], default: Any = _REQUIRED) -> str:
        return self._get(key, lambda v: v in choices, f"one of {', '.join(choices)}", default)  # type: ignore[no-any-return]

    def state(self, key: str, states: tuple[S, ...]) -> S:
        """One of a typed enumeration's words (a card's or a slice's state), as
        that type. A word this code does not know is refused, named: read as
        another, a card of a newer node's state could be shown free."""
        value = self.text(key)
        for known in states:
            if value == known:
                return known
        shown = printable(value if len(value) <= 40 else value[:37] + "...")
        raise WireError(f"{self.where}.{key} is '{shown}', not one of {', '.join(states)}")

    def flag(self, key: str, default: Any = _REQUIRED) -> bool:
        return self._get(key, lambda v: isinstance(v, bool), "true or false", default)  # type: ignore[no-any-return]

    def opt_flag(self, key: str) -> Optional[bool]:
        return self._get(key, lambda v: v is None or isinstance(v, bool), "true, false or null", None)  # type: ignore[no-any-return]

    def items(self, key: str, default: Any = _REQUIRED) -> list[Any]:
        return self._get(key, lambda v: isinstance(v, list), "a list", default)  # type: ignore[no-any-return]

    def opt_items(self, key: str) -> Optional[list[Any]]:
        return self._get(key, lambda v: v is None or isinstance(v, list), "a list or null", None)  # type: ignore[no-any-return]

    def obj(self, key: str) -> dict[str, Any]:
        return self._get(key, lambda v: isinstance(v, dict), "an object", _REQUIRED)  # type: ignore[no-any-return]

    def each(self, key: str, read: Callable[[Reader], T], default: Any = _REQUIRED) -> list[T]:
        return [read(Reader(item, f"{self.where}.{key}[{n}]")) for n, item in enumerate(self.items(key, default))]

    def texts(self, key: str) -> tuple[str, ...]:
        items = self.items(key, [])
        if not all(isinstance(i, str) for i in items):
            raise WireError(f"{self.where}.{key} is not a list of strings")
        return tuple(items)

    def wholes(self, key: str) -> tuple[int, ...]:
        items = self.items(key, [])
        if not all(_is_int(i) for i in items):
            raise WireError(f"{self.where}.{key} is not a list of whole numbers")
        return tuple(items)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """Python's json reads Infinity and NaN, and 1e400 as inf: none is a number
    any field of ours can hold, and each breaks the arithmetic and clocks after."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} (Infinity or NaN)"
    return {
        bool: "true/false",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
    }.get(type(value), type(value).__name__)
