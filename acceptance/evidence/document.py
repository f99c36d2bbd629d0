"""The evidence file: one JSON document a person or a pipeline can trust, and JUnit built from it.

Written atomically (temp file + rename) after every test, so a run killed half-way still leaves a
readable file marked ``"complete": false``.
"""

from __future__ import annotations

import copy
import datetime
import json
import math
import os
import platform
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata, resources
from pathlib import Path
from typing import Any

SCHEMA_ID = "cluster-acceptance/evidence/1"
# Only these variables reach the evidence: the environment also holds credentials.
ENV_PREFIXES = ("NCCL_", "CUDA_", "TORCH_", "NVIDIA_", "UCX_", "FI_", "OMPI_MCA_", "DS_", "PYTORCH_")
ENV_NAMES = (
    "OMP_NUM_THREADS",
    "CLUSTER_PROFILE",
    "NNODES",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "JOB_COMPLETION_INDEX",
    "CLUSTER_HEAD",
    "SLURM_JOB_ID",
    "SLURM_NNODES",
    "SLURM_NODEID",
    "SLURM_JOB_NODELIST",
    "KUBERNETES_SERVICE_HOST",
)
# A name holding one of these is a credential: left out of the environment, masked in the profile and argv.
# KEY alone also drops harmless names such as NCCL_IB_PKEY: losing a setting beats leaking a key.
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "KEY", "AUTH")
MASK = "***"
SET_OPTION = "--cluster-set"
PACKAGES = ("torch", "pytest", "transformers", "deepspeed", "nvidia-ml-py", "cluster-acceptance")


def is_secret(name: str) -> bool:
    return any(word in name.upper() for word in SECRET_WORDS)


def allowed_env(env: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for key, value in env.items():
        if is_secret(key):
            continue
        if key in ENV_NAMES or key.startswith(ENV_PREFIXES):
            out[key] = value
    return dict(sorted(out.items()))


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


def finite(value: Any) -> Any:
    """``value`` with every NaN and infinity turned into None, recursively: strict JSON has no NaN, and a
    figure that is not a number must read as missing, never as a number."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def dumps(data: Any) -> str:
    """Strict JSON: non-finite floats become null; anything else unknown (a Path) becomes its text."""
    return json.dumps(finite(data), indent=1, default=str, allow_nan=False)


def software() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version(), "platform": platform.platform()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def read(path: Path) -> dict[str, Any]:
    """An evidence file, or ValueError with one line naming the file and what is wrong with it."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ValueError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("cluster-acceptance/evidence/"):
        raise ValueError(f"{path} is not a cluster-acceptance evidence file (no 'schema' of that name)")
    return data


def schema() -> dict[str, Any]:
    return json.loads((resources.files("acceptance.evidence") / "evidence.schema.json").read_text())


class Evidence:
    """The evidence of one pytest session on one node."""

    def __init__(
        self, directory: Path, profile: dict[str, Any], topology: dict[str, Any], env: Mapping[str, str]
    ) -> None:
        self.dir = directory
        self.data: dict[str, Any] = {
            "schema": SCHEMA_ID,
            "complete": False,
            "verdict": "FAIL",
            "started": now(),
            "finished": None,
            "command": masked_command(list(sys.argv)),
            "profile": masked_profile(profile),
            "topology": topology,
            "cluster": {"nodes": [], "software": software(), "env": allowed_env(env)},
            "probes": [],
            "tests": [],
            "unchecked_thresholds": [],
            "errors": [],
        }
        self._tests: dict[str, dict[str, Any]] = {}

    @property
    def path(self) -> Path:
        return self.dir / "evidence.json"

    def test(self, nodeid: str) -> dict[str, Any]:
        if nodeid not in self._tests:
            entry = {"nodeid": nodeid, "outcome": "running", "duration_s": 0.0, "measurements": {}, "checks": []}
            self._tests[nodeid] = entry
            self.data["tests"].append(entry)
        return self._tests[nodeid]

    def checks(self) -> Iterable[dict[str, Any]]:
        for entry in self.data["tests"]:
            yield from entry["checks"]

    def finish(self, complete: bool, verdict: str) -> None:
        self.data.update(complete=complete, verdict=verdict, finished=now())

    def write(self) -> Path:
        write_atomic(self.path, dumps(self.data))
        return self.path


PASSED = ("passed", "xpassed")  # xpassed: a known issue that did not show; strict xfail makes it a failure
INTERRUPTED = "did not finish: the run was interrupted"


def _value_text(value: Any) -> str:
    return "not a number" if value is None else str(value)


def junit_xml(data: Mapping[str, Any], suite_name: str | None = None) -> str:
    """JUnit XML for an evidence document; every check goes to the case's system-out."""
    from junit_xml import TestCase, TestSuite, to_xml_report_string

    data = finite(data)  # a NaN duration or value must not reach the XML as "nan"
    cases = []
    for test in data.get("tests", []):
        classname, _, name = test["nodeid"].rpartition("::")
        lines = [
            f"{c['metric']} = {_value_text(c['value'])} {c.get('unit', '')} [{c.get('bound') or 'no bound'}] "
            f"{c['verdict']}"
            for c in test.get("checks", [])
        ]
        case = TestCase(
            name or test["nodeid"],
            classname=classname.replace("/", ".").removesuffix(".py"),
            elapsed_sec=test.get("duration_s") or 0.0,
            stdout="\n".join(lines) or None,
        )
        outcome = test.get("outcome")
        if outcome == "failed":
            case.add_failure_info(message=test.get("message", "failed"), output=test.get("longrepr"))
        elif outcome == "error":
            case.add_error_info(message=test.get("message", "error"), output=test.get("longrepr"))
        elif outcome in ("skipped", "xfailed"):
            case.add_skipped_info(message=test.get("message", outcome))
        elif outcome == "running":
            # the evidence was written before the test ended: a killed run must not read as a pass
            case.add_error_info(message=INTERRUPTED, output=test.get("longrepr"))
        elif outcome not in PASSED:
            case.add_error_info(message=f"{INTERRUPTED} (outcome {outcome!r})", output=test.get("longrepr"))
        cases.append(case)
    profile = data.get("profile", {})
    props = {
        "profile": profile.get("name"),
        "profile_sha256": profile.get("sha256"),
        "verdict": data.get("verdict"),
        "complete": data.get("complete"),
    }
    host = (data.get("topology") or {}).get("host", "")
    suite = TestSuite(
        suite_name or f"cluster-acceptance[{profile.get('name')}]",
        cases,
        hostname=host,
        properties=props,
        timestamp=data.get("started"),
    )
    return to_xml_report_string([suite])


def merge(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """One evidence document from several (nodes of one run, or several runs): tests are concatenated,
    each nodeid prefixed by the host that ran it; the verdict is PASS only if every document passed."""
    if not documents:
        raise ValueError("nothing to merge")
    merged = json.loads(json.dumps(documents[0]))
    merged["tests"], merged["probes"], merged["merged_from"] = [], [], []
    for doc in documents:
        host = (doc.get("topology") or {}).get("host", "?")
        # hosts can share a name (containers, loopback runs): the node rank tells the nodes apart in reports
        node = f"node{(doc.get('topology') or {}).get('node_rank', len(merged['merged_from']))}-{host}"
        merged["merged_from"].append(
            {
                "host": host,
                "node": node,
                "verdict": doc.get("verdict"),
                "complete": doc.get("complete"),
                "profile_sha256": doc.get("profile", {}).get("sha256"),
            }
        )
        merged["tests"] += [{**t, "nodeid": f"{host}::{t['nodeid']}", "node": node} for t in doc.get("tests", [])]
        merged["probes"] += [{**p, "node": node} for p in doc.get("probes", [])]
    merged["complete"] = all(d.get("complete") for d in documents)
    merged["verdict"] = "PASS" if all(d.get("verdict") == "PASS" for d in documents) else "FAIL"
    return merged
