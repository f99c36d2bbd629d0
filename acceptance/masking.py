"""Secrets never leave the run: which names are credentials, and their values masked wherever a
profile, an environment, a command line or a whole record is written or digested.

A secret is found by its name (``HF_TOKEN``, ``MYSQL_PWD``, ``GITHUB_PAT``, and the names a profile adds
under ``secret_names``) and by its shape inside any value, whatever the value's name: a URL's credentials
(``https://user:***@db``, up to the last ``@`` before the host), a secret-named option inside a value
(``--token=***``, ``--password ***``), curl's ``-u user:***``, a secret-named key in a text of keys and
values (``DB_PASS=***``, ``?token=***``, JSON ``{"password": "***"}``, YAML ``{HF_TOKEN: ***}``), an HTTP
authorization (``Bearer ***``), and the values under secret-named keys of a mapping nested in an
environment. An allow-listed name (``NCCL_*``) keeps its value only after the value's shapes are masked.

Every pattern here runs in time linear in the text: each starts only where a run of name characters
starts (a look-behind), and scans that run once; a name found is judged by ``is_secret`` outside the
pattern. A message holding one unbroken megabyte token costs what a megabyte of prose costs.

A leaf module (imports nothing of the package), and the one place that masks: the profile's digest, the
evidence, the probes' records of the environment, the evidence folder's holder file and the reports all
mask here, so one name is masked the same way everywhere.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # a leaf: the alias for the checker only, nothing of the package at run time
    from acceptance.json_types import JSONObject

V = TypeVar("V")

# A name holding one of these is a credential: left out of the environment, masked in the profile and argv.
# KEY alone also drops harmless names such as NCCL_IB_PKEY, PASS names such as a BYPASS setting, and PWD the
# shell's working folder: losing a setting beats leaking a key. CRED covers CREDS and CREDENTIALS.
SECRET_WORDS = ("TOKEN", "SECRET", "PASS", "PWD", "CRED", "KEY", "AUTH", "JWT", "COOKIE", "PRIVATE")
# Words that are a credential only as a whole part of a name (GITHUB_PAT, not PATH or PYTHONPATH)
SECRET_PARTS = ("PAT",)
MASK = "***"
SET_OPTION = "--cluster-set"
# curl's and wget's options whose value is ``user:password`` (curl -u, --user, --proxy-user; wget --user
# takes the user alone, its password under --password, which a name already catches)
USER_OPTIONS = ("u", "user", "proxy-user", "U")

# a name holding a secret word (not ``tokens``: a figure's name, ``tokens_per_s_per_gpu``, is no secret)
_WORD = re.compile("|".join("TOKEN(?!S)" if word == "TOKEN" else word for word in SECRET_WORDS), re.IGNORECASE)
_PARTS = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z])(?=[A-Z])")


def is_secret(name: str, extra: Iterable[str] = ()) -> bool:
    """Whether a variable, option or key of this name holds a credential; ``extra``: the profile's own
    words (``secret_names``), each matched as ``SECRET_WORDS`` are, anywhere in the name."""
    if _WORD.search(name):
        return True
    upper = name.upper()
    if any(word.upper() in upper for word in extra if word):
        return True
    return any(part.upper() in SECRET_PARTS for part in _PARTS.split(name))


# Each pattern below starts only after "://" or where a run of name characters starts (the look-behind),
# and scans that run once: linear in the text, whatever its longest unbroken token.
# scheme://user:password@host: the password goes, up to the last @ before the host (RFC 3986 userinfo,
# whose password may hold a bare @); a user alone is no secret
_AFTER_SCHEME = re.compile(r"(?<=://)[^\s\"'<>]+")
# an HTTP authorization: Bearer TOKEN, Basic BASE64, Token TOKEN (RFC 9110's scheme names, capitalised as
# headers write them; the credential at least 8 characters): "per token and", "a basic check" are prose
_SCHEMES = ("Bearer", "BEARER", "Basic", "BASIC", "Token")
_AUTHORIZATION = re.compile(rf"(?P<head>\b(?:{'|'.join(_SCHEMES)})\s+)(?P<secret>[A-Za-z0-9._~+/=-]{{8,}})")
# a name (an option's with its dashes): where a run of name characters starts
_NAME = re.compile(r"(?<![\w.-])(?P<dash>--?)?(?P<name>\w[\w.-]*)")
_SPACE = re.compile(r"\s+")
_KEY_END = re.compile(r"[\"']?\s*(?P<sep>[:=])[ \t]*")  # after a JSON or YAML key: "key": / key:
_OPTION_VALUE = re.compile(r"[^\s'\"]+")
_VALUE = re.compile(r"[^\s&;,'\"}\]]*")  # unquoted, in a query (&), a list (,), a flow mapping (}), a shell (;)
# an exception's name before its message (``KeyError: 'x'``, ``AuthenticationError: ...``) names no secret
_NOT_A_KEY = ("Error", "Exception", "Warning", "Interrupt")


def _quoted(text: str, at: int) -> tuple[int, int]:
    """The span of the value at ``at``: inside its quotes when quoted (to the closing quote or the end),
    else the unquoted run."""
    if at < len(text) and text[at] in "\"'":
        end = text.find(text[at], at + 1)
        return at + 1, len(text) if end < 0 else end
    found = _VALUE.match(text, at)
    return at, found.end() if found else at


def _userinfo(m: re.Match[str]) -> str:
    rest = m[0]
    colon, slash, at = rest.find(":"), rest.find("/"), rest.rfind("@")
    if colon < 0 or at < colon or 0 <= slash < colon:
        return rest  # no user:password@ before the host (``example.com/a@b``)
    return f"{rest[:colon]}:{MASK}{rest[at:]}"


def _option_span(text: str, m: re.Match[str], extra: Iterable[str]) -> tuple[int, int] | None:
    """Where the value of a secret option (``--token=VALUE``, ``--password VALUE``) or of curl's ``-u
    user:VALUE`` lies in ``text``; None for another option, or one followed by an option."""
    name, end = m["name"], m.end()
    user = name in USER_OPTIONS
    if m["dash"] == "-" and name[0] == "u" and text.startswith(":", end):  # curl -uuser:password
        value = _OPTION_VALUE.match(text, end + 1)
        return (end + 1, value.end()) if value else None
    if not (user or is_secret(name, extra)):
        return None
    spaced = _SPACE.match(text, end)
    if text.startswith("=", end):
        start = end + 1
    elif spaced is not None:
        start = spaced.end()
    else:
        return None
    value = _OPTION_VALUE.match(text, start)
    if value is None or (spaced is not None and value[0].startswith("-")) or value[0] == MASK:
        return None
    if user:
        colon = value[0].find(":")
        return None if colon < 0 else (start + colon + 1, value.end())
    return start, value.end()


def _key_span(text: str, m: re.Match[str], extra: Iterable[str]) -> tuple[int, int] | None:
    """Where the value of a secret-named key lies: ``NAME=VALUE``, ``"name": "VALUE"``, ``name: VALUE``."""
    name, end = m["name"], m.end()
    after = _KEY_END.match(text, end)
    if after is None or not is_secret(name, extra) or name.endswith(_NOT_A_KEY):
        return None
    if after["sep"] == "=" and after.start("sep") != end:
        return None  # ``"key" = x`` is nothing's syntax; ``key = x`` (INI, TOML) is, but rarely carries one
    start, stop = _quoted(text, after.end())
    if after["sep"] == ":" and start == after.end() and _starts_a_line(text, m.start()):
        stop = _line_end(text, start)  # a YAML block's ``password: two words``: the value is the line's rest
    value = text[start:stop]
    scheme, _, credential = value.partition(" ")
    if value == MASK or (scheme in _SCHEMES and credential in ("", MASK)):  # ``Authorization: Bearer ***``
        return None
    return start, stop


_INDENT = 64  # how far back a key's line start is looked for: a bounded look keeps the scan linear


def _starts_a_line(text: str, at: int) -> bool:
    """Whether only indentation (or a YAML list's ``-``) stands before ``at`` on its line."""
    before = text[max(0, at - _INDENT) : at]
    _, newline, line = before.rpartition("\n")
    return bool(newline or at <= _INDENT) and not line.strip(" \t-")


def _line_end(text: str, at: int) -> int:
    end = text.find("\n", at)
    stop = len(text) if end < 0 else end
    return stop - 1 if stop > at and text[stop - 1] == "\r" else stop


def masked_text(text: str, extra: Iterable[str] = ()) -> str:
    """``text`` with every secret its shape gives away masked (see the module's docstring); ``extra``: the
    profile's own secret words."""
    extra = tuple(extra)
    text = _AFTER_SCHEME.sub(_userinfo, text)
    text = _AUTHORIZATION.sub(lambda m: f"{m['head']}{MASK}", text)
    out: list[str] = []
    at, m = 0, _NAME.search(text)
    while m is not None:
        span = _option_span(text, m, extra) if m["dash"] else _key_span(text, m, extra)
        if span is None:
            m = _NAME.search(text, m.end())
            continue
        start, stop = span
        out += [text[at:start], MASK]
        at = stop
        # on past the masked value: each character is read a bounded number of times (linear time)
        m = _NAME.search(text, stop)
    return "".join([*out, text[at:]])


def masked_value(value: Any, extra: Iterable[str] = ()) -> Any:
    """A value of an environment or a profile as it may be kept: strings masked by shape, and in a nested
    mapping every value under a secret-named key (``{HF_TOKEN: ...}``) masked whole."""
    if isinstance(value, str):
        return masked_text(value, extra)
    if isinstance(value, Mapping):
        return {k: MASK if is_secret(str(k), extra) else masked_value(v, extra) for k, v in value.items()}
    if isinstance(value, list):
        return [masked_value(item, extra) for item in value]
    return value


def _masked_strings(value: Any, extra: Iterable[str]) -> Any:
    """Every string of a record masked by shape; keys and structure as they are (a threshold's name holds
    ``tokens``, and is no secret)."""
    if isinstance(value, str):
        return masked_text(value, extra)
    if isinstance(value, dict):
        return {k: _masked_strings(v, extra) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked_strings(item, extra) for item in value]
    return value


def masked_env(env: Mapping[str, V], extra: Iterable[str] = ()) -> dict[str, V | str]:
    """A record of environment variables as it may be kept: every name, the credentials' values masked, and
    every other value masked by shape (a URL's password, a ``--token=`` inside it)."""
    extra = tuple(extra)
    return {name: MASK if is_secret(str(name), extra) else masked_value(value, extra) for name, value in env.items()}


def secret_names(profile: Any) -> tuple[str, ...]:
    """The words a resolved profile (or a record holding one under ``resolved``) adds to ``SECRET_WORDS``."""
    resolved = profile.get("resolved", profile) if isinstance(profile, dict) else None
    names = resolved.get("secret_names") if isinstance(resolved, dict) else None
    return tuple(str(n) for n in names if isinstance(n, str)) if isinstance(names, list) else ()


def masked_profile(profile: JSONObject) -> JSONObject:
    """The profile as recorded: a copy (the run still needs the real values) whose secret ``env`` values are
    masked, and every string masked by shape. The names stay, so a reader still sees that the variable was set."""
    extra = secret_names(profile)
    out: JSONObject = _masked_strings(copy.deepcopy(profile), extra)
    resolved = out.get("resolved")
    env = resolved.get("env") if isinstance(resolved, dict) else None
    if isinstance(resolved, dict) and isinstance(env, dict):
        shown = masked_env(env, extra)
        resolved["env"] = shown
    return out


def masked_record(data: Any, extra: Iterable[str] = ()) -> Any:
    """A copy of a record (evidence, a probe's result) to show or hand around: every mapping named ``env``
    or ``*_env`` masked as an environment, every ``command`` as a command line, and the words of the
    profile it records (``secret_names``) taken as secret throughout. For records written before a name
    counted as a credential: what shows them masks again."""
    if isinstance(data, dict) and isinstance(data.get("profile"), dict):
        extra = (*extra, *secret_names(data["profile"]))
    extra = tuple(extra)
    if isinstance(data, list):
        return [masked_record(item, extra) for item in data]
    if isinstance(data, str):
        return masked_text(data, extra)
    if not isinstance(data, dict):
        return data
    out: dict[Any, Any] = {}
    for key, value in data.items():
        name = str(key)
        if (name == "env" or name.endswith("_env")) and isinstance(value, dict):
            out[key] = masked_env(value, extra)
        elif name == "command" and isinstance(value, list) and all(isinstance(v, str) for v in value):
            out[key] = masked_command(value, extra)
        else:
            out[key] = masked_record(value, extra)
    return out


def _masked_override(item: str, extra: tuple[str, ...]) -> str:
    """``env.HF_TOKEN=hf_abc`` -> ``env.HF_TOKEN=***``; a whole ``env={...}`` is masked when it names a secret."""
    path, sep, value = item.partition("=")
    parts = path.strip().split(".")
    if not sep or parts[0] != "env":
        return item
    if len(parts) == 1:
        return f"{path}={MASK}" if is_secret(value, extra) else item
    return f"{path}={MASK}" if is_secret(".".join(parts[1:]), extra) else item


def _masked_arg(arg: str, extra: tuple[str, ...]) -> tuple[str, bool]:
    """One argument outside ``--cluster-set``: ``--db-password=x`` and ``MY_PASS=x`` masked; and whether
    the next argument is the value of a secret option (``--api-token x``) or curl's ``-u user:password``."""
    if arg.startswith("-"):
        name, sep, _ = arg.lstrip("-").partition("=")
        if not is_secret(name, extra):
            return arg, not sep and name in USER_OPTIONS
        return (f"{arg.partition('=')[0]}={MASK}", False) if sep else (arg, True)
    name, sep, _ = arg.partition("=")
    return (f"{name}={MASK}" if sep and name and is_secret(name, extra) else arg), False


def masked_command(argv: list[str], extra: Iterable[str] = ()) -> list[str]:
    """argv with the value of every ``--cluster-set env.SECRET_NAME=VALUE``, every secret-named option
    (``--api-token VALUE``, ``--db-password=VALUE``), curl's ``-u user:VALUE`` and every
    ``SECRET_NAME=VALUE`` replaced by ``***``: a token passed on the command line must not end up in the
    evidence, which is meant to be handed around."""
    extra = tuple(extra)
    out: list[str] = []
    after_option, after_secret = False, False
    for arg in argv:
        if after_secret:
            user, colon, _ = arg.partition(":")
            if not (out and out[-1].lstrip("-") in USER_OPTIONS):
                arg = MASK
            elif colon:  # curl -u user:password; a user alone (wget --user alice) is no secret
                arg = f"{user}:{MASK}"
            after_secret = False
        elif after_option:
            arg = _masked_override(arg, extra)
        elif arg.startswith(f"{SET_OPTION}="):
            arg = f"{SET_OPTION}={_masked_override(arg.removeprefix(SET_OPTION + '='), extra)}"
        else:
            arg, after_secret = _masked_arg(arg, extra)
        after_option = arg == SET_OPTION
        out.append(masked_text(arg, extra) if arg != MASK else arg)
    return out
