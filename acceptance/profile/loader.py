"""Profiles: find a YAML by name or path, resolve ``extends:``, validate strictly, evaluate thresholds."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import ValidationError

from acceptance.json_types import JSONObject, JSONValue
from acceptance.masking import masked_profile
from acceptance.profile.metrics import bound_problem, canonical_metric, metric_problem
from acceptance.profile.model import ProfileModel
from acceptance.profile.strict_yaml import LineMap, parse, read
from acceptance.profile.strict_yaml import ProfileError as ProfileError  # raised to callers of this module
from acceptance.profile.tiers import DEFAULT_TIER, TIER_NAMES
from acceptance.schema.bounds import Threshold
from acceptance.schema.bounds import evaluate as evaluate  # re-exported: where the run and tests look
from acceptance.schema.bounds import limits as limits

LOCAL_DIR = Path("thresholds")
OVERRIDE = "--cluster-set"  # names a value an option set, in errors and in a threshold's source
MAX_PROBLEMS = 20  # listed in one error; a generated profile can hold thousands, and the first ones tell


@dataclass(frozen=True)
class Profile:
    model: ProfileModel
    path: Path
    resolved: JSONObject
    sha256: str
    chain: tuple[Path, ...]
    origins: Mapping[tuple[str, ...], str] = field(default_factory=dict)  # key path -> FILE:LINE or the option

    @property
    def name(self) -> str:
        return self.model.name

    def origin(self, *key: str) -> str:
        """Where the key's value was set (``FILE:LINE``, ``--cluster-set '...'``), or ``the default``."""
        return self.origins.get(key, "the default")

    def threshold(self, metric: str) -> Threshold | None:
        return self.model.thresholds.get(canonical_metric(metric))


def shipped_dir() -> Path:
    """A source checkout: ``thresholds/`` beside the package that was imported (an editable install's
    ``acceptance.thresholds`` would name the checkout it was installed from, which may be another one);
    installed: the ``acceptance.thresholds`` package."""
    beside = Path(__file__).resolve().parents[2] / "thresholds"
    if (beside / "__init__.py").is_file():
        return beside
    return Path(str(resources.files("acceptance.thresholds")))


def available() -> dict[str, Path]:
    """Profile name -> file, local ``./thresholds`` first, then the ones shipped with the package."""
    found: dict[str, Path] = {}
    for folder in (LOCAL_DIR, shipped_dir()):
        if folder.is_dir():
            for path in sorted(folder.glob("*.yaml")):
                found.setdefault(path.stem, path)
    return found


def find(name_or_path: str, relative_to: Path | None = None) -> Path:
    candidates = _candidates(name_or_path, relative_to)
    for candidate in candidates:
        if candidate.is_file() or (candidate.exists() and not candidate.is_dir()):
            return candidate  # one that is not a regular file (a FIFO, a device) is refused as it is read
    folder = next((c for c in candidates[:-2] if c.is_dir()), None)  # a path given, not a profile's name
    if folder is not None:
        raise ProfileError(f"{folder}: is a folder, not a profile file")
    names = ", ".join(sorted(available())) or "(none)"
    raise ProfileError(
        f"unknown profile {name_or_path!r}: no such file, and no profile of that name. Profiles: {names}"
    )


def _candidates(name_or_path: str, relative_to: Path | None) -> list[Path]:
    out = [Path(name_or_path)]
    if relative_to is not None:
        out += [relative_to / name_or_path, relative_to / f"{name_or_path}.yaml"]
    out += [LOCAL_DIR / f"{name_or_path}.yaml", shipped_dir() / f"{name_or_path}.yaml"]
    return out


def load(name_or_path: str, overrides: list[str] | None = None, tier: str | None = None) -> Profile:
    """Load, merge ``extends:``, apply the settings the profile gives the run's tier (``tiers:``; ``tier``:
    the run's ``--cluster-tier``), then ``KEY.PATH=VALUE`` overrides (``--cluster-set``, so the command line
    has the last word), validate. Every tier's settings are validated, not only the running tier's: a
    misspelt key under ``burn-in`` is found by the handover's run, not hours into the burn-in."""
    path = find(name_or_path)
    raw, chain, lines = _resolve(path, ())
    running = _running_tier(raw, overrides, tier, lines)
    for other in _declared_tiers(raw):
        if other != running:
            seen = dict(lines)
            _build(_tier_settings(copy.deepcopy(raw), other, seen, chain[0]), chain, seen, overrides)
    raw = _tier_settings(raw, running, lines, chain[0])
    return _build(raw, chain, lines, overrides)


# keys a tier's settings cannot change: which profile this is and which tier runs
NOT_PER_TIER = ("name", "extends", "tier", "tiers")


def _running_tier(raw: JSONObject, overrides: list[str] | None, tier: str | None, lines: LineMap) -> str:
    """The tier whose settings apply: the option's, else the ``tier:`` the profile has once the
    ``--cluster-set`` options are applied (what ``model.tier`` will say, so the settings and the selection
    agree; the options are read as ``_build`` reads them)."""
    if tier:
        return tier
    seen = raw
    for item in overrides or []:
        seen = _override(seen, item, dict(lines))
    found = seen.get("tier", DEFAULT_TIER)
    return found if isinstance(found, str) else DEFAULT_TIER  # not a name: the model's validation says so


def _declared_tiers(raw: JSONObject) -> list[str]:
    tiers = raw.get("tiers")
    return [t for t in tiers if isinstance(t, str) and t in TIER_NAMES] if isinstance(tiers, dict) else []


def _tier_settings(raw: JSONObject, tier: str, lines: LineMap, path: Path) -> JSONObject:
    """The tier's settings (``tiers: {standard: {storage.checkpoint_size: 4G}}``) applied as overrides.

    A tier is one selection of families at one moment, and each moment has its time (DCGM's run levels run
    the same plugins for longer at higher levels): the handover's standard tier may write a smaller
    checkpoint or time fewer steps than the burn-in, from the same profile."""
    tiers = raw.get("tiers")
    if tier not in _declared_tiers(raw) or not isinstance(tiers, dict):
        return raw
    settings = tiers[tier]
    if not isinstance(settings, dict):
        return raw  # not a mapping: the model's validation names it
    for key, value in settings.items():
        where = lines.get(("tiers", tier, str(key)), str(path))
        label = f"{where} (tiers.{tier})"
        parts = _key_path(str(key))
        if not all(parts) or parts[0] in NOT_PER_TIER:
            raise ProfileError(
                f"{label}: {key!r}: expected a KEY.PATH of a section (e.g. training.steps), "
                f"not one of {', '.join(NOT_PER_TIER)}"
            )
        raw = _set(raw, tuple(parts), value, label, lines)
    return raw


def from_mapping(raw: JSONObject, origin: Path, overrides: list[str] | None = None) -> Profile:
    """A profile made in memory (the sweep command without ``--profile``); ``origin`` stands for its file."""
    return _build(raw, (origin,), {}, overrides)


def _build(raw: JSONObject, chain: tuple[Path, ...], lines: LineMap, overrides: list[str] | None) -> Profile:
    path, lines = chain[0], dict(lines)
    for item in overrides or []:
        raw = _override(raw, item, lines)
    try:
        model = ProfileModel.model_validate(raw)
    except ValidationError as exc:
        raise ProfileError(_explain(exc, chain, lines)) from None
    model = _canonical_thresholds(model, path)
    _check_metric_names(model, path, lines)
    resolved = model.model_dump(mode="json")
    return Profile(model, path.resolve(), resolved, _digest(resolved), chain, lines)


def _digest(resolved: JSONObject) -> str:
    """The sha256 of the profile as the evidence records it, secret values masked: a digest of the real
    value would let anyone holding the evidence confirm a guess of it offline. So two nodes whose profiles
    differ only in a secret's value agree on the plan (multinode/plan.py compares this digest); intended:
    a token is a node's own credential, not part of what the cluster is tested against."""
    shown = masked_profile({"resolved": resolved})["resolved"]
    return hashlib.sha256(json.dumps(shown, sort_keys=True).encode()).hexdigest()


def _resolve(path: Path, seen: tuple[Path, ...]) -> tuple[JSONObject, tuple[Path, ...], LineMap]:
    real = path.resolve()
    if real in seen:
        cycle = " -> ".join(str(p) for p in [*seen, real])
        raise ProfileError(f"{path}: extends: cycle {cycle}")
    data, lines = read(path)
    parent_name = data.get("extends")
    if parent_name is None:
        return data, (*seen, real), lines
    if not isinstance(parent_name, str):
        raise ProfileError(f"{path}: extends: expected a profile name or path, got {parent_name!r}")
    try:
        parent_path = find(parent_name, relative_to=path.parent)
    except ProfileError as exc:
        raise ProfileError(f"{path}: extends: {exc}") from None
    _refuse_other_files(path, parent_path)
    parent, chain, parent_lines = _resolve(parent_path, (*seen, real))
    merged = _merge(parent, data, origin=f"profile {path.name}")
    if "description" not in data:  # the parent's words describe the parent ("one node, 2x H200"), not this one
        merged.pop("description", None)
    return merged, chain, {**parent_lines, **lines}


PROFILE_SUFFIXES = (".yaml", ".yml")


def _refuse_other_files(path: Path, parent: Path) -> None:
    """``extends:`` takes a profile only: a YAML file whose top level names a profile (``name:``). Any other
    file is refused in one line that quotes none of it: its keys or lines in an error would show what a
    system file holds to whoever reads the error."""
    refused = f"{path}: extends: {parent} is not a profile"
    if parent.suffix not in PROFILE_SUFFIXES:
        raise ProfileError(f"{refused} (a profile is a {' or '.join(PROFILE_SUFFIXES)} file, or a profile's name)")
    data, _ = read(parent)  # its errors name a line and a reason, never the line's text
    if not isinstance(data.get("name"), str):
        raise ProfileError(f"{refused} (its top level has no name: key)")


def _override(raw: JSONObject, item: str, lines: LineMap) -> JSONObject:
    """``training.micro_batch=8`` -> raw["training"]["micro_batch"] = 8; the value is read as YAML."""
    key, sep, text = item.partition("=")
    parts = _key_path(key.strip())
    if not sep or not all(parts):
        raise ProfileError(f"--cluster-set {item!r}: expected KEY.PATH=VALUE, e.g. training.micro_batch=8")
    if not text.strip():  # an empty YAML value is null, which would silently reset the key to its default
        raise ProfileError(
            f"--cluster-set {item!r}: empty value (expected KEY.PATH=VALUE; KEY.PATH=null removes a key)"
        )
    if parts[0] == "env" and len(parts) == 2:
        value: JSONValue = text.strip()  # environment values are strings, verbatim: NCCL_IB_DISABLE=1 means "1"
    else:
        value = _override_value(text, item, tuple(parts))
    return _set(raw, tuple(parts), value, f"{OVERRIDE} {item}", lines)


def _set(raw: JSONObject, parts: tuple[str, ...], value: JSONValue, label: str, lines: LineMap) -> JSONObject:
    """``raw`` with the key at ``parts`` set to ``value``; errors under it name ``label``."""
    _mark_replaced(raw, lines, parts, label)
    _mark_override(lines, parts, value, label)
    patch: JSONObject = {parts[-1]: value}
    for part in reversed(parts[:-1]):
        patch = {part: patch}
    return _merge(raw, patch, origin=label)


def _override_value(text: str, item: str, at: tuple[str, ...]) -> JSONValue:
    """Read like a profile file (duplicate keys, ``1e6``, non-finite numbers); errors name the option."""
    label = f"--cluster-set {item!r}"
    return parse(text, lambda mark: label if mark is None else f"{label} (value column {mark.column + 1})", at)[0]


def _mark_override(lines: LineMap, at: tuple[str, ...], value: JSONValue, label: str) -> None:
    """Errors under an overridden key name the option, not the file line the option replaced."""
    if not isinstance(value, dict):
        for loc in [loc for loc in lines if loc[: len(at)] == at]:
            del lines[loc]
    lines[at] = label
    for cut in range(1, len(at)):
        lines.setdefault(at[:cut], label)  # a key the override creates
    if isinstance(value, dict):
        for key, sub in value.items():
            _mark_override(lines, (*at, str(key)), sub, label)


def _mark_replaced(raw: JSONObject, lines: LineMap, at: tuple[str, ...], label: str) -> None:
    """An override through a key that is not a mapping (``training.steps.x=3`` where steps is a number)
    replaces that key's value whole: from there on, the key is the option's, not the file line's."""
    node: JSONValue = raw
    for cut in range(1, len(at)):
        node = node.get(at[cut - 1]) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            for loc in [loc for loc in lines if loc[:cut] == at[:cut]]:
                del lines[loc]
            lines[at[:cut]] = label
            return


def _overrides_under(loc: tuple[str, ...], lines: LineMap) -> list[str]:
    """The ``--cluster-set`` options that set a key under ``loc``: a section's own check (one key against
    another) is then the option's doing as much as the file's."""
    found = {where for key, where in lines.items() if key[: len(loc)] == loc and where.startswith(SET_LABEL)}
    return sorted(found)


SET_LABEL = "--cluster-set "
THRESHOLD_FIELDS = frozenset(Threshold.model_fields)


def _key_path(key: str) -> list[str]:
    """Split an override key; a metric name holds dots, so under ``thresholds`` it stays whole:
    ``thresholds.collectives.all_reduce.busbw_gbps@1G.min`` -> thresholds / collectives...@1G / min."""
    parts = key.split(".")
    if parts[0] != "thresholds" or len(parts) < 3:
        return parts
    if parts[-1] in THRESHOLD_FIELDS:
        return [parts[0], ".".join(parts[1:-1]), parts[-1]]
    return [parts[0], ".".join(parts[1:])]


def _merge(base: JSONObject, over: JSONObject, origin: str | None = None) -> JSONObject:
    """Deep merge: mappings merge key by key, anything else (lists too) is replaced; ``null`` deletes.
    ``origin`` names where ``over`` comes from (a child profile, a ``--cluster-set`` option): a threshold
    whose bound it sets without a ``source`` of its own is sourced there, never to the parent's words."""
    out = dict(base)
    for key, value in over.items():
        if key == "extends":
            continue
        if value is None:
            out.pop(key, None)
        elif key == "thresholds" and isinstance(value, dict):
            earlier = out.get(key)
            out[key] = _merge_thresholds(earlier if isinstance(earlier, dict) else {}, value, origin)
        elif isinstance(value, dict) and isinstance(earlier := out.get(key), dict):
            out[key] = _merge(earlier, value, origin)
        else:
            out[key] = value
    return out


BOUND_KEYS = frozenset({"min", "max", "eq", "ref", "tol", "lower", "upper"})


def _merge_thresholds(base: JSONObject, over: JSONObject, origin: str | None) -> JSONObject:
    out = dict(base)
    for metric, bound in over.items():
        if bound is None:
            out.pop(metric, None)
            continue
        earlier = out.get(metric)
        if not isinstance(bound, dict):
            out[metric] = bound  # malformed: the model names it
            continue
        if not isinstance(earlier, dict):
            # a new threshold: sourced where it was written, unless it says
            sourced = "source" not in bound and origin is not None
            out[metric] = {**bound, "source": origin} if sourced else bound
            continue
        merged = _merge(earlier, bound)
        if BOUND_KEYS & set(bound) and "source" not in bound:
            merged.pop("source", None)  # the parent's reason does not hold for another bound
            if origin is not None:
                merged["source"] = origin
        out[metric] = merged
    return out


def _where(loc: tuple[str, ...], chain: tuple[Path, ...], lines: LineMap) -> str:
    for cut in range(len(loc), 0, -1):
        hit = lines.get(loc[:cut])
        if hit is not None:
            return hit
    return str(chain[0])


def _explain(exc: ValidationError, chain: tuple[Path, ...], lines: LineMap) -> str:
    problems = []
    for err in exc.errors():
        loc = tuple(str(part) for part in err["loc"])
        key = ".".join(loc) or "(top level)"
        where, options = _where(loc, chain, lines), _overrides_under(loc, lines)
        if options and not where.startswith(SET_LABEL):
            where = f"{'; '.join(options)} (in {key}, {where})"
        problems.append((where, f"{key}: {_expected(err, loc)}"))
    # in the files' own order, as a person reads them (pydantic's follows the model's fields)
    problems.sort(key=lambda found: _file_line(found[0]))
    return _listed([f"{where}: {what}" for where, what in problems])


def _listed(problems: list[str]) -> str:
    """One error listing the problems, the first ``MAX_PROBLEMS`` of them and how many more."""
    shown = problems[:MAX_PROBLEMS]
    if len(problems) > MAX_PROBLEMS:
        shown.append(f"... and {len(problems) - MAX_PROBLEMS} more")
    return "invalid profile:\n  " + "\n  ".join(shown)


def _file_line(where: str) -> tuple[str, int]:
    """``thresholds/p.yaml:6`` as a sort key; a label without a line (``--cluster-set ...``) sorts first."""
    file, _, line = where.rpartition(":")
    return (file, int(line)) if line.isdigit() else ("", 0)


def _expected(err: Any, loc: tuple[str, ...]) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        known = ", ".join(model.model_fields) if model is not None else "see the README"
        return f"unknown key (expected one of: {known})"
    if kind == "literal_error":
        return f"got {err['input']!r}, {err['msg'][0].lower()}{err['msg'][1:]}"
    if kind == "missing":
        return "required key is missing"
    msg = str(err["msg"]).removeprefix("Value error, ")
    shown = repr(err.get("input"))
    return f"{msg} (got {shown})" if not isinstance(err.get("input"), dict) and shown not in msg else msg


def _model_at(loc: tuple[str, ...]) -> Any:
    """The pydantic model at ``loc``, through named maps (``storage.paths.NAME``) and optional sections."""
    model: Any = ProfileModel
    for part in loc:
        model = _unwrap(model)
        if get_origin(model) is dict:
            model = get_args(model)[1]  # ``part`` is a name the profile chose
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return None
        model = field.annotation
    model = _unwrap(model)
    return model if hasattr(model, "model_fields") else None


def _unwrap(annotation: Any) -> Any:
    """``X | None`` and ``Annotated[X, ...]`` as X: the model a key of the section must belong to."""
    if get_origin(annotation) is Annotated:
        return _unwrap(get_args(annotation)[0])
    if get_origin(annotation) in (Union, UnionType):
        models = [a for a in get_args(annotation) if a is not type(None)]
        return _unwrap(models[0]) if len(models) == 1 else annotation
    return annotation


def _canonical_thresholds(model: ProfileModel, path: Path) -> ProfileModel:
    renamed: dict[str, Threshold] = {}
    for key, value in model.thresholds.items():
        name = canonical_metric(key)
        if name in renamed:
            raise ProfileError(f"{path}: thresholds.{key}: the same metric as thresholds.{name}")
        renamed[name] = value
    return model.model_copy(update={"thresholds": renamed})


def _check_metric_names(model: ProfileModel, path: Path, lines: LineMap) -> None:
    problems = []
    named: list[tuple[str, ...]] = [("thresholds", key) for key in model.thresholds]
    named += [("baseline", "tolerances", key) for key in model.baseline.tolerances]
    for loc in named:
        why = metric_problem(loc[-1], model)
        if why is not None:
            problems.append(f"{_where(loc, (path,), lines)}: {'.'.join(loc)}: {why}")
            continue
        field_why = bound_problem(loc[-1], model.thresholds[loc[-1]]) if loc[0] == "thresholds" else None
        if field_why is not None:
            where = (*loc, field_why[0])
            problems.append(f"{_where(where, (path,), lines)}: {'.'.join(where)}: {field_why[1]}")
    if problems:
        raise ProfileError(_listed(problems))


def describe(profile: Profile) -> str:
    """What a profile is, in a few words: its own description, else one made from its resolved topology and
    the profile it extends (a child that says none is described by what it resolves to, never by its parent's
    words)."""
    model = profile.model
    if model.description:
        return model.description
    topo = model.topology
    if topo.device == "cuda":
        shape = f"{topo.nodes} node(s) x {topo.gpus_per_node}x {topo.gpu_model or 'GPU'} ({topo.backend})"
    else:
        shape = f"{topo.nodes} node(s) x {topo.nproc_per_node} CPU rank(s) ({topo.backend})"
    return f"{shape}, extends {profile.chain[1].stem}" if len(profile.chain) > 1 else shape
