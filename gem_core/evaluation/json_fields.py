"""Reading the fields of a JSON file one by one, with errors that name the field.

The small toolkit behind :mod:`gem_core.evaluation.result_file`: :class:`Block` reads one JSON
object (refusing fields it does not know), the ``read_*`` functions check one value each. A
problem raises :class:`Malformed` whose message is ``<path>: <what is wrong>``, one line.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, Optional, TypeVar

T = TypeVar("T")
Reader = Callable[[Any, str], T]


class Malformed(ValueError):
    """A value that is not what its field holds (message: ``<path>: <problem>``)."""


def kind(value: Any) -> str:
    """The JSON name of a value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return f"the text {value[:40]!r}"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return type(value).__name__


def where(at: str) -> str:
    """``at`` as the head of a message (nothing for the file itself)."""
    return f"{at}: " if at else ""


def bad(at: str, expected: str, value: Any) -> Malformed:
    """The error of a field ``at`` holding ``value`` where ``expected`` belongs."""
    return Malformed(f"{where(at)}expected {expected}, got {kind(value)}")


def child(at: str, key: object) -> str:
    """The path of ``key`` inside ``at`` (``methods.gem.accuracy_at_k``)."""
    return f"{at}.{key}" if at else str(key)


class Block:
    """One JSON object, read field by field; a field outside ``known`` is an error."""

    def __init__(self, value: Any, at: str, known: Collection[str]) -> None:
        if not isinstance(value, Mapping):
            raise bad(at, "an object", value)
        unknown = [key for key in value if key not in known]
        if unknown:
            raise Malformed(f"{where(at)}unknown field {unknown[0]!r}")
        self.value, self.at = value, at

    def __contains__(self, key: str) -> bool:
        return key in self.value

    def need(self, key: str, read: Reader[T]) -> T:
        """The field ``key`` read by ``read``; its absence is an error."""
        if key not in self.value:
            raise Malformed(f"{where(self.at)}missing field {key!r}")
        return read(self.value[key], child(self.at, key))

    def get(self, key: str, read: Reader[T], default: T) -> T:
        """The field ``key`` read by ``read``, ``default`` when absent."""
        if key not in self.value:
            return default
        return read(self.value[key], child(self.at, key))


def read_number(value: Any, at: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad(at, "a number", value)
    return float(value)


def read_int(value: Any, at: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(at, "an integer", value)
    return int(value)


def read_text(value: Any, at: str) -> str:
    if not isinstance(value, str):
        raise bad(at, "a text", value)
    return value


def read_flag(value: Any, at: str) -> bool:
    if not isinstance(value, bool):
        raise bad(at, "true or false", value)
    return value


def optional(read: Reader[T]) -> Reader[Optional[T]]:
    """``read``, with null read as None."""

    def read_optional(value: Any, at: str) -> Optional[T]:
        return None if value is None else read(value, at)

    return read_optional


def list_of(read: Reader[T]) -> Reader[tuple[T, ...]]:
    """A JSON list, each item read by ``read``."""

    def read_list(value: Any, at: str) -> tuple[T, ...]:
        if not isinstance(value, (list, tuple)):
            raise bad(at, "a list", value)
        return tuple(read(item, child(at, i)) for i, item in enumerate(value))

    return read_list


def map_of(read: Reader[T]) -> Reader[dict[str, T]]:
    """A JSON object of free names (methods, protocols), each value read by ``read``."""

    def read_map(value: Any, at: str) -> dict[str, T]:
        if not isinstance(value, Mapping):
            raise bad(at, "an object", value)
        return {str(key): read(item, child(at, key)) for key, item in value.items()}

    return read_map


def _int_key(key: Any, at: str) -> int:
    if isinstance(key, int) and not isinstance(key, bool):
        return key
    if isinstance(key, str) and key.strip().lstrip("-").isdigit():
        return int(key)
    raise Malformed(f"{at}: expected whole numbers as keys, got {key!r}")


def by_int(read: Reader[T]) -> Reader[dict[int, T]]:
    """A JSON object keyed by whole numbers written as text (K, a class), each value read by
    ``read``; the keys come back as ``int`` in the file's order."""

    def read_by_int(value: Any, at: str) -> dict[int, T]:
        if not isinstance(value, Mapping):
            raise bad(at, "an object", value)
        return {_int_key(key, at): read(item, child(at, key)) for key, item in value.items()}

    return read_by_int


#: K -> a share (the K-sweep cells: accuracy, agreement, fidelity, sufficiency … at K)
read_k_map: Reader[dict[int, float]] = by_int(read_number)
