"""Secrets never leave the run: which names are credentials, and their values masked wherever a
profile, an environment, a command line or a whole record is written or digested.

A secret is found by its name (``HF_TOKEN``) and by its shape inside any value, whatever the value's name:
a URL's credentials (``https://user:***@db``), a secret-named option inside a value (``--token=***``,
``--password ***``), a secret-named assignment (``DB_PASS=***``, ``?token=***``), an HTTP authorization
(``Bearer ***``), and the values under secret-named keys of a mapping nested in an environment. An
allow-listed name (``NCCL_*``) keeps its value only after the value's shapes are masked.

A leaf module (imports nothing of the package), and the one place that masks: the profile's digest, the
evidence, the probes' records of the environment, the evidence folder's holder file and the reports all
mask here, so one name is masked the same way everywhere.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # a leaf: the alias for the checker only, nothing of the package at run time
    from acceptance.json_types import JSONObject

V = TypeVar("V")

# A name holding one of these is a credential: left out of the environment, masked in the profile and argv.
# KEY alone also drops harmless names such as NCCL_IB_PKEY, and PASS names such as a BYPASS setting:
# losing a setting beats leaking a key.
SECRET_WORDS = ("TOKEN", "SECRET", "PASS", "CREDENTIAL", "KEY", "AUTH", "JWT", "COOKIE", "PRIVATE")
MASK = "***"
SET_OPTION = "--cluster-set"


def is_secret(name: str) -> bool:
    return any(word in name.upper() for word in SECRET_WORDS)


# scheme://user:password@host: the password goes (RFC 3986 userinfo; a user alone is no secret)
_URL_CREDENTIALS = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*):(?P<secret>[^/\s@]+)@")
# an HTTP authorization: Bearer TOKEN, Basic BASE64, Token TOKEN (RFC 9110's scheme names, capitalised as
# headers write them; the credential at least 8 characters): "per token and", "a basic check" are prose
_AUTHORIZATION = re.compile(r"(?P<head>\b(?:Bearer|BEARER|Basic|BASIC|Token)\s+)(?P<secret>[A-Za-z0-9._~+/=-]{8,})")
# a name holding a secret word (not ``tokens``: a figure's name, ``tokens_per_s_per_gpu``, is no secret)
_WORDS = "|".join("TOKEN(?!S)" if word == "TOKEN" else word for word in SECRET_WORDS)
_SECRET_NAME = rf"[\w.-]*(?:{_WORDS})[\w.-]*"
# an option inside a value: --token=VALUE, --password VALUE (an option next is no value)
_OPTION = re.compile(rf"(?<![\w-])(?P<name>--?{_SECRET_NAME})(?P<sep>=|\s+)(?P<secret>[^\s'\"]+)", re.IGNORECASE)
# an assignment inside a value: DB_PASS=VALUE, ?token=VALUE&
_ASSIGNMENT = re.compile(rf"(?<![\w.-])(?P<name>{_SECRET_NAME})=(?P<secret>[^\s&;,'\"]+)", re.IGNORECASE)


def masked_text(text: str) -> str:
    """``text`` with every secret its shape gives away masked (see the module's docstring)."""
    text = _URL_CREDENTIALS.sub(lambda m: f"{m['head']}:{MASK}@", text)
    text = _AUTHORIZATION.sub(lambda m: f"{m['head']}{MASK}", text)

    def option(m: re.Match[str]) -> str:
        next_option = m["sep"] != "=" and m["secret"].startswith("-")
        return m[0] if next_option or m["secret"] == MASK else f"{m['name']}{m['sep']}{MASK}"

    text = _OPTION.sub(option, text)
    return _ASSIGNMENT.sub(lambda m: f"{m['name']}={MASK}", text)


def masked_value(value: Any) -> Any:
    """A value of an environment or a profile as it may be kept: strings masked by shape, and in a nested
    mapping every value under a secret-named key (``{HF_TOKEN: ...}``) masked whole."""
    if isinstance(value, str):
        return masked_text(value)
    if isinstance(value, Mapping):
        return {k: MASK if is_secret(str(k)) else masked_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [masked_value(item) for item in value]
    return value


def _masked_strings(value: Any) -> Any:
    """Every string of a record masked by shape; keys and structure as they are (a threshold's name holds
    ``tokens``, and is no secret)."""
    if isinstance(value, str):
        return masked_text(value)
    if isinstance(value, dict):
        return {k: _masked_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked_strings(item) for item in value]
    return value


def masked_env(env: Mapping[str, V]) -> dict[str, V | str]:
    """A record of environment variables as it may be kept: every name, the credentials' values masked, and
    every other value masked by shape (a URL's password, a ``--token=`` inside it)."""
    return {name: MASK if is_secret(str(name)) else masked_value(value) for name, value in env.items()}


def masked_profile(profile: JSONObject) -> JSONObject:
    """The profile as recorded: a copy (the run still needs the real values) whose secret ``env`` values are
    masked, and every string masked by shape. The names stay, so a reader still sees that the variable was set."""
    out: JSONObject = _masked_strings(copy.deepcopy(profile))
    resolved = out.get("resolved")
    env = resolved.get("env") if isinstance(resolved, dict) else None
    if isinstance(resolved, dict) and isinstance(env, dict):
        shown = masked_env(env)
        resolved["env"] = shown
    return out


def masked_record(data: Any) -> Any:
    """A copy of a record (evidence, a probe's result) to show or hand around: every mapping named ``env``
    or ``*_env`` masked as an environment, every ``command`` as a command line. For records written before
    a name counted as a credential: what shows them masks again."""
    if isinstance(data, list):
        return [masked_record(item) for item in data]
    if isinstance(data, str):
        return masked_text(data)
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
        out.append(masked_text(arg) if arg != MASK else arg)
    return out
