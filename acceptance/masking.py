"""Secrets never leave the run: which names are credentials, and their values masked wherever a
profile or a command line is recorded or digested.

A leaf module (imports nothing of the package): the profile's digest and the evidence both mask here.
"""

from __future__ import annotations

import copy
from typing import Any

# A name holding one of these is a credential: left out of the environment, masked in the profile and argv.
# KEY alone also drops harmless names such as NCCL_IB_PKEY: losing a setting beats leaking a key.
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "KEY", "AUTH")
MASK = "***"
SET_OPTION = "--cluster-set"


def is_secret(name: str) -> bool:
    return any(word in name.upper() for word in SECRET_WORDS)


def masked_profile(profile: dict[str, Any]) -> dict[str, Any]:
    """The profile as recorded: a copy (the run still needs the real values) whose secret ``env`` values are
    masked. The names stay, so a reader still sees that the variable was set."""
    out = copy.deepcopy(profile)
    env = (out.get("resolved") or {}).get("env")
    if isinstance(env, dict):
        for name in env:
            if is_secret(str(name)):
                env[name] = MASK
    return out


def _masked_override(item: str) -> str:
    """``env.HF_TOKEN=hf_abc`` -> ``env.HF_TOKEN=***``; a whole ``env={...}`` is masked when it names a secret."""
    path, sep, value = item.partition("=")
    parts = path.strip().split(".")
    if not sep or parts[0] != "env":
        return item
    if len(parts) == 1:
        return f"{path}={MASK}" if is_secret(value) else item
    return f"{path}={MASK}" if is_secret(".".join(parts[1:])) else item


def masked_command(argv: list[str]) -> list[str]:
    """argv with the value of every ``--cluster-set env.SECRET_NAME=VALUE`` replaced by ``***``: a token
    passed on the command line must not end up in the evidence, which is meant to be handed around."""
    out, after_option = [], False
    for arg in argv:
        if after_option:
            arg = _masked_override(arg)
        elif arg.startswith(f"{SET_OPTION}="):
            arg = f"{SET_OPTION}={_masked_override(arg.removeprefix(SET_OPTION + '='))}"
        after_option = arg == SET_OPTION
        out.append(arg)
    return out
