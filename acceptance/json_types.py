"""JSON as it comes off the disk or goes into a document, before a TypedDict can say more about it.

For values whose shape is genuinely open (a user's DeepSpeed config, a profile as plain data, a file
read before it is validated); a shape the code relies on has a TypedDict of its own in its family.
"""

from __future__ import annotations

from typing import TypeAlias

JSONScalar: TypeAlias = str | int | float | bool | None
JSONValue: TypeAlias = JSONScalar | list["JSONValue"] | dict[str, "JSONValue"]
JSONObject: TypeAlias = dict[str, JSONValue]
