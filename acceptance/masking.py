"""Secrets never leave the run: which names are credentials, and their values masked wherever a
profile, an environment, a command line or a whole record is written or digested.

A leaf module (imports nothing of the package), and the one place that masks: the profile's digest, the
evidence, the probes' records of the environment, the evidence folder's holder file and the reports all
mask here, so one name is masked the same way everywhere.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, TypeVar

V = TypeVar("V")

# A name holding one of these is a credential: left out of the environment, masked in the profile and argv.
# KEY alone also drops harmless names such as NCCL_IB_PKEY, and PASS names such as a BYPASS setting:
# losing a setting beats leaking a key.
SECRET_WORDS = ("TOKEN", "SECRET", "PASS", "CREDENTIAL", "KEY", "AUTH", "JWT", "COOKIE", "PRIVATE")
MASK = "***"
SET_OPTION = "--cluster-set"


def is_secret(name: str) -> bool:
    return any(word in name.upper() for word in SECRET_WORDS)


def masked_env(env: Mapping[str, V]) -> dict[str, V | str]:
    """A record of environment variables as it may be kept: every name, the credentials' values masked."""
    return {name: MASK if is_secret(str(name)) else value for name, value in env.items()}


def masked_profile(profile: dict[str, Any]) -> dict[str, Any]:
    """The profile as recorded: a copy (the run still needs the real values) whose secret ``env`` values are
    masked. The names stay, so a reader still sees that the variable was set."""
    out = copy.deepcopy(profile)
    env = (out.get("resolved") or {}).get("env")
    if isinstance(env, dict):
        out["resolved"]["env"] = masked_env(env)
    return out


def masked_record(data: Any) -> Any:
    """A copy of a record (evidence, a probe's result) to show or hand around: every mapping named ``env``
    or ``*_env`` masked as an environment, every ``command`` as a command line. For records written before
    a name counted as a credential: what shows them masks again."""
    if isinstance(data, list):
        return [masked_record(item) for item in data]
    if not isinstance(data, dict):
        return data
    out: dict[Any, Any] = {}
    for key, value in data.items():
        name = str(key)
        if (name == "env" or name.endswith("_env")) and isinstance(value, dict):
            out[key] = masked_env(value)
        elif name == "command" and isinstance(value, list) and all(isinstance(v, str) for v in value):
            out[key] = masked_command(value)
        else:
            out[key] = masked_record(value)
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


def _masked_arg(arg: str) -> tuple[str, bool]:
    """One argument outside ``--cluster-set``: ``--db-password=x`` and ``MY_PASS=x`` masked; and whether
    the next argument is the value of a secret option (``--api-token x``)."""
    if arg.startswith("-"):
        name, sep, _ = arg.lstrip("-").partition("=")
        if not is_secret(name):
            return arg, False
        return (f"{arg.partition('=')[0]}={MASK}", False) if sep else (arg, True)
    name, sep, _ = arg.partition("=")
    return (f"{name}={MASK}" if sep and name and is_secret(name) else arg), False


def masked_command(argv: list[str]) -> list[str]:
    """argv with the value of every ``--cluster-set env.SECRET_NAME=VALUE``, every secret-named option
    (``--api-token VALUE``, ``--db-password=VALUE``) and every ``SECRET_NAME=VALUE`` replaced by ``***``: a
    token passed on the command line must not end up in the evidence, which is meant to be handed around."""
    out, after_option, after_secret = [], False, False
    for arg in argv:
        if after_secret:
            arg, after_secret = MASK, False
        elif after_option:
            arg = _masked_override(arg)
        elif arg.startswith(f"{SET_OPTION}="):
            arg = f"{SET_OPTION}={_masked_override(arg.removeprefix(SET_OPTION + '='))}"
        else:
            arg, after_secret = _masked_arg(arg)
        after_option = arg == SET_OPTION
        out.append(arg)
    return out
