"""The commands a README section prints: the lines of the first indented code block under a ``## `` heading,
one command a line (a line ending in a backslash goes on). ``.ci/run`` runs the README's set-up and test
commands from here, as the README prints them, so that the README and CI cannot drift apart.

    python3 .ci/readme_commands.py README.md "Install" "Test the plugin"

prints each section's commands, one a line, in order; exit 2 (naming the file and the heading) when a
section or its code block is not there."""

from __future__ import annotations

import sys
from pathlib import Path

INDENT = "    "  # a Markdown indented code block


class ReadmeError(Exception):
    pass


def section_commands(text: str, heading: str) -> list[str]:
    """The commands of the first indented code block under ``## heading`` (before the next ``## ``)."""
    lines = text.splitlines()
    try:
        start = lines.index(f"## {heading}") + 1
    except ValueError:
        raise ReadmeError(f"no section '## {heading}'") from None
    block: list[str] = []
    for line in lines[start:]:
        if line.startswith("## "):
            break
        if line.startswith(INDENT) and line.strip():
            block.append(line[len(INDENT) :])
        elif block and line.strip():
            break  # the block ended; later blocks of the section are examples, not its set-up
    if not block:
        raise ReadmeError(f"section '## {heading}' has no indented code block")
    commands: list[str] = []
    for line in block:
        if commands and commands[-1].endswith("\\"):
            commands[-1] = commands[-1][:-1].rstrip() + " " + line.strip()
        else:
            commands.append(line.rstrip())
    return commands


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: readme_commands.py README HEADING...", file=sys.stderr)
        return 2
    readme = Path(argv[0])
    try:
        commands = [c for heading in argv[1:] for c in section_commands(readme.read_text(), heading)]
    except (OSError, ReadmeError) as error:
        print(f"{readme}: {error}", file=sys.stderr)
        return 2
    print("\n".join(commands))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
