"""The evidence file: one JSON document a person or a pipeline can trust, and JUnit built from it.

Written atomically (temp file + rename) after every test, so a run killed half-way still leaves a
readable file marked ``"complete": false``.
"""

from __future__ import annotations

import datetime
import json
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
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "_KEY", "AUTH")
PACKAGES = ("torch", "pytest", "transformers", "deepspeed", "nvidia-ml-py", "cluster-acceptance")


def allowed_env(env: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for key, value in env.items():
        if any(word in key.upper() for word in SECRET_WORDS):
            continue
        if key in ENV_NAMES or key.startswith(ENV_PREFIXES):
            out[key] = value
    return dict(sorted(out.items()))


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


def schema() -> dict[str, Any]:
    return json.loads((resources.files("acceptance") / "evidence.schema.json").read_text())


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
            "command": sys.argv,
            "profile": profile,
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
        write_atomic(self.path, json.dumps(self.data, indent=1, default=str))
        return self.path


def junit_xml(data: Mapping[str, Any], suite_name: str | None = None) -> str:
    """JUnit XML for an evidence document; every check goes to the case's system-out."""
    from junit_xml import TestCase, TestSuite, to_xml_report_string

    cases = []
    for test in data.get("tests", []):
        classname, _, name = test["nodeid"].rpartition("::")
        lines = [
            f"{c['metric']} = {c['value']} {c.get('unit', '')} [{c.get('bound') or 'no bound'}] {c['verdict']}"
            for c in test.get("checks", [])
        ]
        case = TestCase(
            name or test["nodeid"],
            classname=classname.replace("/", ".").removesuffix(".py"),
            elapsed_sec=test.get("duration_s", 0.0),
            stdout="\n".join(lines) or None,
        )
        outcome = test.get("outcome")
        if outcome == "failed":
            case.add_failure_info(message=test.get("message", "failed"), output=test.get("longrepr"))
        elif outcome == "error":
            case.add_error_info(message=test.get("message", "error"), output=test.get("longrepr"))
        elif outcome in ("skipped", "xfailed"):
            case.add_skipped_info(message=test.get("message", outcome))
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
        merged["merged_from"].append(
            {
                "host": host,
                "verdict": doc.get("verdict"),
                "complete": doc.get("complete"),
                "profile_sha256": doc.get("profile", {}).get("sha256"),
            }
        )
        merged["tests"] += [{**t, "nodeid": f"{host}::{t['nodeid']}"} for t in doc.get("tests", [])]
        merged["probes"] += doc.get("probes", [])
    merged["complete"] = all(d.get("complete") for d in documents)
    merged["verdict"] = "PASS" if all(d.get("verdict") == "PASS" for d in documents) else "FAIL"
    return merged
