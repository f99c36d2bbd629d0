"""This machine's pip settings for a container build, kept out of the image.

CI's pip may reach the package index through a proxy whose certificate only the host trusts, through
local wheel folders (find-links), a local index (file://), or a constraint file, set in pip's
configuration files or in PIP_* variables. The image build must install the same way, yet none of it may
end up in the image. This writes pip's effective configuration (``pip config list``: files and PIP_*
variables, the variables winning, as in pip) into one pip.conf for the build to mount at /etc/pip.conf,
and prints one ``podman build -v`` mount per line: that file, and every local file or folder the settings
name (certificates, wheel folders, file:// indexes, constraint files), each read-only at its own path.
Volumes given to ``podman build -v`` exist only while a RUN step runs; no layer keeps them.

    python deploy/container/pip_settings.py OUT_DIR [EXTRA_INDEX_URL]

EXTRA_INDEX_URL (e.g. PyTorch's CPU wheels, CI's TORCH_INDEX_URL) is added to the index URLs.
"""

from __future__ import annotations

import ast
import configparser
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

# settings whose value names local files or folders: the build must see them at the same path
PATH_KEYS = ("cert", "client-cert", "constraint", "requirement", "find-links", "index-url", "extra-index-url")


def effective_settings(python: str) -> dict[str, str]:
    """pip's settings as pip itself reads them, ``[global]`` only; PIP_* variables override the files."""
    listing = subprocess.run([python, "-m", "pip", "config", "list"], check=True, capture_output=True, text=True).stdout
    from_files: dict[str, str] = {}
    from_env: dict[str, str] = {}
    for line in listing.splitlines():
        key, sep, quoted = line.partition("=")
        if not sep:
            continue
        section, _, name = key.rpartition(".")
        value = ast.literal_eval(quoted)  # pip prints each value as a Python string literal
        if section == ":env:":
            from_env[name] = str(value)
        elif section in ("global", "install"):
            from_files[name] = str(value)
    return {**from_files, **from_env}


def local_paths(settings: dict[str, str]) -> list[Path]:
    """The local files and folders the settings name, as they are on this machine."""
    found: list[Path] = []
    for key in PATH_KEYS:
        for item in settings.get(key, "").split():
            parsed = urlparse(item)
            if parsed.scheme == "file":
                path = Path(unquote(parsed.path))
                if key.endswith("index-url") and path.name == "simple":
                    # a PEP 503 index's pages link to their files beside simple/, e.g. ../../files/
                    path = path.parent
            elif parsed.scheme == "" and item.startswith("/"):
                path = Path(item)
            else:
                continue  # an http(s) index: reached through the build's network
            if path.exists() and path not in found:
                found.append(path)
    return found


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__, file=sys.stderr)
        return 4
    out = Path(argv[0])
    settings = effective_settings(sys.executable)
    if len(argv) == 2 and argv[1]:
        settings["extra-index-url"] = " ".join([*settings.get("extra-index-url", "").split(), argv[1]])
    config = configparser.ConfigParser(interpolation=None)
    config["global"] = settings
    out.mkdir(parents=True, exist_ok=True)
    conf = out / "pip.conf"
    with conf.open("w") as fh:
        config.write(fh)
    print(f"{conf.resolve()}:/etc/pip.conf:ro")
    for path in local_paths(settings):
        print(f"{path.resolve()}:{path}:ro")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
