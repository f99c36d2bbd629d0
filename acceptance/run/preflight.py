"""Before any probe: does this node have what the profile needs (the GPUs, a torch that can use them), and
are its GPUs free of other processes (``acceptance.families.gpu_users``)?

Without this, a node one GPU short starts a rank per expected GPU and the missing one dies on "invalid
device ordinal" in every probe, and a CPU-only torch fails every test on ``_cuda_setDevice``: thousands
of lines, none of which says what is wrong. Here the answer is one line: what the profile expects, what
is present (index, PCI bus id, UUID) and what is missing.

The answers come from ``python -m acceptance.probes.inventory`` in a subprocess (it imports torch and
NVML; pytest does not, and the profile's environment, CUDA_VISIBLE_DEVICES included, applies to it as to
the ranks). ``check`` takes them through an injectable ``detect`` so recorded answers can be judged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import cast

from acceptance.evidence.causes import FOREIGN_LOAD_FIRST
from acceptance.families import nvlink_domain
from acceptance.families.gpu_users import GpuProcess, GpuUse, Ours, descends_from, foreign, foreign_use
from acceptance.families.inventory import NodeInventory, TorchView, same_model
from acceptance.profile.model import ProfileModel
from acceptance.profile.registry import FAMILIES
from acceptance.run import toolchain
from acceptance.verdicts import Category

FAULT_ENV = "ACCEPTANCE_TEST_FAULT"  # the tests' fault knob, the one the ranks read (acceptance.probes.rank)
DETECT_TIMEOUT_S = 120.0  # importing torch and initialising NVML; minutes would mean a wedged driver
Detect = Callable[[Mapping[str, str]], NodeInventory]
# one GPU as the views saw it, merged: cuda_index, nvml_index, pci_bus_id, uuid, name (those some view gave)
SeenGpu = dict[str, "int | str"]


@dataclass(frozen=True)
class PreflightResult:
    ok: bool
    message: str  # one line; empty when ok
    gpus: list[SeenGpu] = field(default_factory=list)  # every GPU any view saw, merged by PCI bus id
    answers: NodeInventory = field(default_factory=lambda: NodeInventory())  # the raw answers, for the evidence
    # the processes of others on its GPUs, each command line whole (masked): for the evidence, never the message
    foreign: list[GpuProcess] = field(default_factory=list)
    # whose fault a failure is: the node's (a GPU missing: hardware), the job's environment or the wrong profile
    # (environment), the suite's install (a CPU-only torch, no compiler: software), another process on a GPU
    # (foreign load); only the node's own drains it (acceptance.evidence.causes)
    category: Category = "hardware"
    # the families whose tests it stops; empty: every family that starts a rank on every GPU
    families: tuple[str, ...] = ()


def detect(env: Mapping[str, str]) -> NodeInventory:
    """This node's answers, from a subprocess with the ranks' environment."""
    argv = [sys.executable, "-m", "acceptance.probes.inventory"]
    try:
        done = subprocess.run(argv, env=dict(env), capture_output=True, text=True, timeout=DETECT_TIMEOUT_S)
        return cast(NodeInventory, dict(json.loads(done.stdout)))  # the inventory's JSON, as it wrote it
    except (subprocess.TimeoutExpired, ValueError, OSError) as exc:
        return {"error": f"{' '.join(argv[1:])} gave no answer: {type(exc).__name__}: {exc}"}


def injected(env: Mapping[str, str]) -> PreflightResult | None:
    """A failed preflight on request (``ACCEPTANCE_TEST_FAULT=preflight``): how the tests fail one node of a
    multi-node CPU run, where nothing else could."""
    knob = env.get(FAULT_ENV, "")
    return PreflightResult(False, f"injected preflight failure ({FAULT_ENV}={knob})") if knob == "preflight" else None


def detect_users(env: Mapping[str, str]) -> list[GpuUse] | None:
    """The GPUs' users before the run starts anything on them (``python -m acceptance.probes.inventory
    --users``: NVML only, well under a second). Read before the probe worker starts: in a container without
    the host's pid namespace NVML names the worker's own ranks by host pids that /proc here does not show,
    and they would read as another container's processes. None where it gave no answer (``check`` then
    takes the inventory's own reading)."""
    argv = [sys.executable, "-m", "acceptance.probes.inventory", "--users"]
    try:
        done = subprocess.run(argv, env=dict(env), capture_output=True, text=True, timeout=DETECT_TIMEOUT_S)
        found = json.loads(done.stdout).get("users")
    except (subprocess.TimeoutExpired, ValueError, OSError, AttributeError):
        return None
    return cast("list[GpuUse]", found) if isinstance(found, list) else None


def check(
    model: ProfileModel,
    env: Mapping[str, str],
    detect: Detect = detect,
    ours: Ours | None = None,
    users: list[GpuUse] | None = None,
    families: Collection[str] | None = None,
) -> PreflightResult:
    """Judge this node against ``model``'s topology, its GPUs free of other processes, and the compilers the
    run builds with on its PATH (``toolchain``; a CPU profile needs those alone: its GPUs are not
    inspected). ``ours(pid)``: whether a pid is the run's own (default: a descendant of this process, as the
    probe worker's ranks started beside the preflight are). ``users``: the GPUs' users as read before the run
    started anything (``detect_users``); None: the inventory's. ``families``: the selected tests' (None:
    every family)."""
    lacking = toolchain.problem(toolchain.missing(model, env, families))
    if model.topology.device != "cuda":
        if lacking is None:
            return PreflightResult(True, "")
        return PreflightResult(False, lacking[0], category="software", families=lacking[1])
    answers = detect(env)
    gpus = inventory(answers)
    problem, category = _problem(model, answers, gpus, env)
    if problem is not None:
        return PreflightResult(False, problem, gpus, answers, category=category)
    if lacking is not None:
        return PreflightResult(False, lacking[0], gpus, answers, category="software", families=lacking[1])
    imex = imex_problem(answers)
    if imex is not None:
        return PreflightResult(False, imex, gpus, answers, category="configuration")
    seen = the_run_s(users if users is not None else answers.get("users") or [], gpus)
    ours = ours or descends_from(os.getpid())
    others = foreign(seen, ours)
    # another process on a GPU is foreign load whenever it is seen, as a figure slowed by one mid-run is
    # (acceptance.plugin.drain_hooks.categorize): the GPU is shared, not broken
    used = "; ".join(foreign_use(seen, ours))
    message = f"{FOREIGN_LOAD_FIRST}{used}" if used else ""
    # a site may hold a process left on a GPU to be the node's own fault (``Behaviour.leftover_drains``)
    drains = any(
        f.behaviour.leftover_drains(f.section_of(model)) for f in FAMILIES if f.behaviour.leftover_drains is not None
    )
    return PreflightResult(not used, message, gpus, answers, others, "configuration" if drains else "foreign load")


def imex_problem(answers: NodeInventory) -> str | None:
    """A node whose GPUs are of a multi-node NVLink domain (GB200 NVL72) and that offers no IMEX channel: NCCL
    cannot import another tray's memory, and its traffic between trays leaves NVLink for the NICs (MNNVL off,
    ``src/mnnvl.cc``). None where the node is of no such domain, or has a channel."""
    domains = answers.get("nvlink_domains") or []
    if not domains or answers.get("imex_channels"):
        return None
    named = ", ".join(nvlink_domain.label(d) for d in domains)
    return (
        f"GPUs of NVLink domain {named} and no IMEX channel in {nvlink_domain.IMEX_CHANNELS}: NCCL cannot use "
        "NVLink between trays (start nvidia-imex and create channel0; check with nvidia-imex-ctl -N)"
    )


def the_run_s(users: list[GpuUse], gpus: list[SeenGpu]) -> list[GpuUse]:
    """The users of the GPUs the run computes on: those CUDA lists under the run's environment. NVML lists
    every GPU of the node; on a node shared between jobs (Slurm gives each its GPUs by CUDA_VISIBLE_DEVICES
    and the device cgroup) another job's processes on its own GPUs are no fault of this node. A GPU whose
    reading has neither bus id nor UUID cannot be placed and is kept: judged, never passed over."""
    mine = [g for g in gpus if g.get("cuda_index") is not None]
    buses, uuids = {g.get("pci_bus_id") for g in mine} - {None}, {g.get("uuid") for g in mine} - {None}

    def run_s(use: GpuUse) -> bool:
        bus, uuid = bus_id(use.get("pci_bus_id")), use.get("uuid")
        return (bus is None and uuid is None) or bus in buses or uuid in uuids

    return [use for use in users if run_s(use)]


def _problem(
    model: ProfileModel, answers: NodeInventory, gpus: list[SeenGpu], env: Mapping[str, str]
) -> tuple[str | None, Category]:
    """What this node lacks, and whose fault that is: the suite's install (torch cannot be imported, is a
    CPU-only build, has no NCCL) is ``software``, for review; GPUs of another model than the profile's (the
    wrong profile) and GPUs NVML lists that the job's CUDA_VISIBLE_DEVICES hides are ``environment``, for
    review; GPUs of the profile's model missing with none hidden are the node's ``hardware``."""
    topo, name = model.topology, model.name
    torch = answers.get("torch") or TorchView()
    if answers.get("error") or (torch.get("error") and not torch.get("version")):
        failure = answers.get("error") or torch["error"]
        return f"profile {name} needs CUDA GPUs, but this node could not be inspected: {failure}", "software"
    build = f"torch {torch.get('version')}"
    if not torch.get("cuda"):
        # PyTorch's wheels for CUDA X.Y are on https://download.pytorch.org/whl/cuXY (pytorch.org/get-started)
        release = str(torch.get("version") or "").split("+")[0]
        pinned = f"torch=={release}" if release else "torch"
        return (
            f"profile {name} runs on CUDA GPUs (topology.device: cuda), but this {build} is a CPU-only build "
            f"(no CUDA in it): install torch's CUDA build for this node's driver (pip install {pinned} --index-url "
            "https://download.pytorch.org/whl/cuXYZ, a CUDA X.YZ no newer than the one nvidia-smi names), or pick a "
            "CPU profile such as local-cpu"
        ), "software"
    if topo.backend == "nccl" and not torch.get("nccl"):
        return f"profile {name} uses NCCL (topology.backend: nccl), but this {build} has no NCCL", "software"
    return _short(model, answers, gpus, env)


def _short(
    model: ProfileModel, answers: NodeInventory, gpus: list[SeenGpu], env: Mapping[str, str]
) -> tuple[str | None, Category]:
    """The GPUs the profile expects against those this torch can use, and why any are not there."""
    topo, name, torch = model.topology, model.name, answers.get("torch") or TorchView()
    need = max(topo.gpus_per_node, topo.nproc_per_node)
    usable = [g for g in gpus if g.get("cuda_index") is not None]
    models = Counter(str(g["name"]) for g in gpus if g.get("name"))
    if topo.gpu_model and models and not any(same_model(m, topo.gpu_model) for m in models):
        # not one GPU of the profile's model: the profile is another machine's, whatever the count
        have = ", ".join(f"{n}x {m}" for m, n in models.items())
        return (
            f"wrong profile: {name} is for {topo.gpus_per_node}x {topo.gpu_model} (topology.gpu_model), this node "
            f"has {have}: run this machine's profile (`cluster-acceptance init` writes one) or run {name} on a "
            f"{topo.gpu_model} node"
        ), "environment"
    if len(usable) >= need:
        return None, "hardware"
    hidden = [g for g in gpus if g.get("cuda_index") is None and g.get("nvml_index") is not None]
    if "CUDA_VISIBLE_DEVICES" in env and hidden and len(usable) + len(hidden) >= need:
        # NVML lists every GPU of the node, CUDA those the job's environment lets it see: the GPUs are there
        value = env["CUDA_VISIBLE_DEVICES"] or '""'
        return (
            f"the job's environment hides GPUs: CUDA_VISIBLE_DEVICES={value} leaves the job {len(usable)} of this "
            f"node's {len(usable) + len(hidden)} GPU(s), profile {name} expects {need}: hidden "
            f"{', '.join(describe(g) for g in hidden)}; give the job the node's GPUs (unset CUDA_VISIBLE_DEVICES, "
            "or ask the scheduler for them) or run a profile for the GPUs it is given"
        ), "environment"
    why = f" ({torch['error']})" if torch.get("error") else ""
    shown = f", CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}" if "CUDA_VISIBLE_DEVICES" in env else ""
    model_name = f" {topo.gpu_model}" if topo.gpu_model else ""
    # the GPUs still there by CUDA's device name: "GPU n" in a drain reason names a GPU to drain
    present = ", ".join(f"cuda:{g['cuda_index']} ({_parts(g)})" for g in usable) or "none"
    build = f"torch {torch.get('version')}"
    return (
        f"profile {name} expects {need}{model_name} GPU(s) on this node, {build} (CUDA {torch.get('cuda')}{shown}) "
        f"finds {len(usable)}{why}: present {present}; missing {_missing(gpus, need - len(usable), answers)}"
    ), "hardware"


def _missing(gpus: list[SeenGpu], count: int, answers: NodeInventory) -> str:
    """The GPUs some view saw that CUDA cannot use, with the reason each is out; else how many are gone."""
    named = [f"{describe(g)} ({_why_out(g)})" for g in gpus if g.get("cuda_index") is None]
    if named:
        return ", ".join(named)
    nvml_note = f"; NVML: {answers['nvml_error']}" if answers.get("nvml_error") else ""
    return f"{count} GPU(s) that neither the PCI bus, NVML nor CUDA lists{nvml_note}"


def _why_out(gpu: SeenGpu) -> str:
    if gpu.get("nvml_index") is not None:
        return "NVML lists it, CUDA does not: hidden by CUDA_VISIBLE_DEVICES, or CUDA cannot use it"
    return "on the PCI bus, not answering NVML: fallen off the bus, or no driver bound"


def describe(gpu: SeenGpu) -> str:
    index = gpu.get("cuda_index", gpu.get("nvml_index"))
    return f"GPU {index} ({_parts(gpu)})" if index is not None else f"the GPU at {_parts(gpu)}"


def _parts(gpu: SeenGpu) -> str:
    return ", ".join(str(p) for p in (gpu.get("pci_bus_id"), gpu.get("uuid"), gpu.get("name")) if p)


def bus_id(raw: object) -> str | None:
    """NVML writes 00000000:18:00.0, sysfs and torch 0000:18:00.0: one spelling to compare them."""
    if not isinstance(raw, str) or raw.count(":") != 2:
        return None
    domain, rest = raw.lower().split(":", 1)
    try:
        return f"{int(domain, 16):04x}:{rest}"
    except ValueError:
        return None


def inventory(answers: NodeInventory) -> list[SeenGpu]:
    """One entry per GPU seen by any view, merged by bus id (or UUID): what CUDA, NVML and PCI say."""
    merged: dict[str, SeenGpu] = {}

    def add(key: str | None, fallback: str, **fields: int | str | None) -> None:
        entry = merged.setdefault(key or fallback, {})
        entry.update({k: v for k, v in fields.items() if v is not None and k not in entry})

    for dev in (answers.get("torch") or TorchView()).get("devices", []):
        key = bus_id(dev.get("pci_bus_id"))
        add(
            key,
            str(dev.get("uuid")),
            cuda_index=dev.get("index"),
            pci_bus_id=key,
            uuid=dev.get("uuid"),
            name=dev.get("name"),
        )
    for gpu in answers.get("nvml") or []:
        key = bus_id(gpu.get("pci_bus_id"))
        uuid, name = gpu.get("uuid"), gpu.get("name")
        uuid, name = (uuid if isinstance(uuid, str) else None), (name if isinstance(name, str) else None)
        add(
            key,
            str(uuid or f"nvml-{gpu.get('index')}"),
            nvml_index=gpu.get("index"),
            pci_bus_id=key,
            uuid=uuid,
            name=name,
        )
    for raw in answers.get("pci") or []:
        key = bus_id(raw)
        add(key, str(raw), pci_bus_id=key)
    return sorted(merged.values(), key=lambda g: (g.get("cuda_index") is None, g.get("pci_bus_id") or ""))
