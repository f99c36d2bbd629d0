"""A probe's result checked against its family's type where it is read, so that the family's rules read
what the type says, not what a ``cast`` hopes.

Each family types its probe's result as a TypedDict (``ConnectivityResult``, ...); pydantic validates the
result against it (every field the type names there, of its type) and the result itself goes on: pydantic's
copy of a TypedDict would drop the fields the type does not name (the evidence keeps the probe's whole
result) and turn an int where a float is declared into a float.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

import pydantic

T = TypeVar("T")
_ADAPTERS: dict[type[Any], pydantic.TypeAdapter[Any]] = {}  # one per shape: building one walks the whole type


class ResultMismatch(ValueError):
    """A probe's result that does not match its family's type: the probe and each field that is off."""


def _adapter(shape: type[Any]) -> pydantic.TypeAdapter[Any]:
    if shape not in _ADAPTERS:
        _ADAPTERS[shape] = pydantic.TypeAdapter(shape)
    return _ADAPTERS[shape]


def validated(name: str, shape: type[T], found: object) -> T:
    """``found`` (the probe ``name``'s result), checked against ``shape``; ``ResultMismatch`` naming the first
    fields that are off where it does not match."""
    try:
        _adapter(shape).validate_python(found)
    except pydantic.ValidationError as exc:
        fields = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:10])
        raise ResultMismatch(f"probe {name}'s result does not match {shape.__name__}: {fields}") from None
    return cast(T, found)  # the same object, now checked against its type
