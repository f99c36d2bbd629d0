"""Profile YAML, read strictly: UTF-8 only, no duplicate keys, ``1e12`` is a number; every error one line.

PyYAML's safe loader lets the last of two equal keys win, so a second ``thresholds:`` block or a bound
written twice silently replaces the first: a failing gate can vanish. Here that is an error naming both
lines. The same reader serves profile files and ``--cluster-set`` values, so both follow one rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from acceptance.json_types import JSONObject
from acceptance.regular_file import FileRefused, read_regular

LineMap = dict[tuple[str, ...], str]  # key path -> where it was set: FILE:LINE or --cluster-set ...
Place = Callable[[yaml.Mark | None], str]  # a position in the text in words: FILE:LINE, or the option


# A profile is a few hundred lines; a generated one with thousands of thresholds stays under a megabyte.
# Past these a file is refused before it is read whole or expanded: ten lines of aliases nested nine deep
# (the "billion laughs") expand to 9^9 nodes, which no machine holds.
MAX_BYTES = 4 * 2**20
MAX_NODES = 200_000  # keys and items, aliases counted each time they are used


class ProfileError(Exception):
    """A profile that cannot be used; the message names the file, the key and what was expected."""


class StrictLoader(yaml.SafeLoader):
    """The safe loader, plus exponent numbers without a dot or an exponent sign as floats. Duplicate keys
    are refused by ``parse`` on the composed nodes, where both lines and the key path are known."""


# YAML 1.1 (PyYAML) reads only 1.0e+12 as a float; 1e12, 1.0e12 and -3E-2 stay strings there. YAML 1.2's
# core schema reads them all as floats, and so do people: https://yaml.org/spec/1.2.2/#1032-tag-resolution
StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def read(path: Path) -> tuple[JSONObject, LineMap]:
    """A profile file as a mapping, and the line each key was set on."""
    try:
        text = read_regular(path, MAX_BYTES).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad = exc.object[exc.start]
        raise ProfileError(
            f"{path}: not UTF-8 text: byte 0x{bad:02x} at byte offset {exc.start} ({exc.reason}); "
            "save the profile as UTF-8"
        ) from None
    except FileRefused as exc:
        raise ProfileError(f"{path}: cannot read profile: {exc}") from None
    data, lines = parse(text, lambda mark: f"{path}:{mark.line + 1}" if mark is not None else str(path), ())
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: expected a mapping of profile keys at the top level, got {type(data).__name__}")
    return data, lines


def parse(text: str, place: Place, prefix: tuple[str, ...]) -> tuple[Any, LineMap]:
    """One YAML document, read safely; ``place`` words a position, ``prefix`` is where the text sits."""
    try:
        loader = StrictLoader(text)  # the reader checks every character here
        try:
            node = loader.get_single_node()
            lines: LineMap = {}
            _map_lines(node, prefix, place, lines, set(), _Budget(place))
            return (loader.construct_document(node) if node is not None else None), lines
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        raise ProfileError(f"{place(exc.problem_mark)}: YAML syntax error: {exc.problem or exc.context}") from None
    except RecursionError:  # thousands of nested brackets: the composer's recursion ends first
        raise ProfileError(f"{place(None)}: nested too deep to be a profile") from None
    except yaml.reader.ReaderError as exc:  # a control character; its str() spans two lines
        raise ProfileError(f"{place(_mark_at(text, exc.position))}: {exc.reason} (#x{exc.character:04x})") from None


def _mark_at(text: str, position: int) -> yaml.Mark:
    line = text.count("\n", 0, position)
    return yaml.Mark("", position, line, position - (text.rfind("\n", 0, position) + 1), None, 0)


class _Budget:
    """How many more keys and items the walk may visit: aliases are walked each time they are used, so a
    few lines can stand for billions of nodes; refused at the first one past ``MAX_NODES``."""

    def __init__(self, place: Place) -> None:
        self.left, self.place = MAX_NODES, place

    def spend(self, node: yaml.Node) -> None:
        self.left -= 1
        if self.left < 0:
            raise ProfileError(
                f"{self.place(node.start_mark)}: its aliases expand to more than {MAX_NODES} keys and items: "
                "not a profile"
            )


def _map_lines(
    node: yaml.Node | None, prefix: tuple[str, ...], place: Place, out: LineMap, open_: set[int], budget: _Budget
) -> None:
    """Record where each key was set, and refuse a key set twice in one mapping. On the composed nodes, as
    written: the constructor knows no key path, and a mapping that another merges (``<<:``) may already
    hold the merged pairs when it is built, which would look like duplicates. ``open_``: nodes being walked."""
    if not isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
        return
    if id(node) in open_:  # an alias inside its own anchor: the data would contain itself
        raise ProfileError(f"{place(node.start_mark)}: {'.'.join(prefix)}: an alias refers to a node that contains it")
    open_.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first: dict[str, yaml.Node] = {}
        for key, value in node.value:
            at = (*prefix, str(key.value))
            if at[-1] in first:
                raise ProfileError(
                    f"{place(key.start_mark)}: {'.'.join(at)}: duplicate key, first set at "
                    f"{place(first[at[-1]].start_mark)} (the second would silently replace the first)"
                )
            first[at[-1]] = key
            budget.spend(key)
            out[at] = place(key.start_mark)
            _map_lines(value, at, place, out, open_, budget)
    else:
        for index, item in enumerate(node.value):
            at = (*prefix, str(index))
            budget.spend(item)
            out[at] = place(item.start_mark)
            _map_lines(item, at, place, out, open_, budget)
    open_.discard(id(node))
