"""A cluster of CPU "nodes" on one machine, for the multi-node tests and the isolation benchmark.

Each node is a network namespace with its own hostname (a UTS namespace per process), one address in
10.250.0.0/24 on a veth whose other end sits on a bridge, and an ``/etc/hosts`` of its own
(``/etc/netns/<ns>/hosts``, which ``ip netns exec`` mounts over ``/etc/hosts``), so nodes reach each
other by name. The bridge lives in a switch namespace of its own: nothing is added to the machine's own
network, and ``close()`` deletes every namespace and file it made. ``throttle`` shapes one node's link
in both directions with a token bucket (tc tbf), a genuinely slow link; ``slow_cpu`` gives one node a
fraction of one core (a CPU-bandwidth cgroup, v1 or v2, that everything the node starts inherits, made by
``cpu_group``), a genuinely slow "GPU" for the CPU path's per-GPU figures.

``python -m tests.netns HOSTNAME -- ARGV...`` is the tiny launcher run inside a namespace: it enters a
UTS namespace of its own, sets the hostname there and becomes ARGV.

A machine without iproute2 (the GPU machines' image) can carry it: Debian's packages unpacked with
``dpkg -x`` into a folder named by ``NETNS_IPROUTE``; ``ip`` and ``tc`` are then run from there with its
libraries on LD_LIBRARY_PATH, and the commands started inside a namespace get the caller's own back.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness import ROOT

NETNS_ETC = Path("/etc/netns")
SUBNET = "10.250.0"  # private (RFC 1918), and only ever configured inside namespaces made here
PORT = 29400  # every node has a port space of its own: no collision with anything outside
HARNESS_TIMEOUT_S = 900  # only so that a broken run cannot hang CI; nothing here measures time
IPROUTE_ENV = "NETNS_IPROUTE"  # a folder holding iproute2 and its libraries unpacked with dpkg -x
CHILD_LIBS_ENV = "NETNS_CHILD_LD_LIBRARY_PATH"  # the caller's LD_LIBRARY_PATH, for what runs inside
CGROUP_V1, CGROUP_V2 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000  # the kernel's default CFS period


def _tool(name: str) -> str | None:
    folder = os.environ.get(IPROUTE_ENV)
    if folder:
        found = [Path(folder, sub, name) for sub in ("bin", "sbin", "usr/bin", "usr/sbin")]
        return next((str(path) for path in found if path.is_file()), None)
    return shutil.which(name)


def _tool_env(env: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if env is None else env)
    folder = os.environ.get(IPROUTE_ENV)
    if folder:
        env[CHILD_LIBS_ENV] = env.get("LD_LIBRARY_PATH", "")
        env["LD_LIBRARY_PATH"] = ":".join(f"{folder}/{d}" for d in ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu"))
    return env


def missing() -> str | None:
    """Why this machine cannot host the test bed, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    absent = [tool for tool in ("ip", "tc") if _tool(tool) is None]
    if not hasattr(os, "unshare") and shutil.which("unshare") is None:  # os.unshare: Python 3.12+
        absent.append("unshare")
    if absent:
        return f"{', '.join(absent)} not found (install iproute2 and util-linux, or name a folder in {IPROUTE_ENV})"
    return None


def cpu_cgroups() -> Path | None:
    """Where CPU-bandwidth cgroups can be made here (cgroup v1's cpu hierarchy, or v2 with cpu enabled)."""
    if os.geteuid() != 0:
        return None
    if (CGROUP_V1 / "cpu.cfs_quota_us").is_file():
        return CGROUP_V1
    controllers = CGROUP_V2 / "cgroup.subtree_control"
    return CGROUP_V2 if controllers.is_file() and "cpu" in controllers.read_text().split() else None


def _run(tool: str, *args: str) -> None:
    subprocess.run([_tool(tool) or tool, *args], check=True, capture_output=True, text=True, env=_tool_env())


def _ip(*args: str) -> None:
    _run("ip", *args)


@dataclass
class TestBed:
    nodes: int
    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    setup_s: list[float] = field(default_factory=list)  # seconds to set each node up
    made: list[str] = field(default_factory=list)
    cgroups: dict[int, Path] = field(default_factory=dict)  # node -> the CPU cgroup it runs in

    __test__ = False  # not a pytest class

    def ns(self, node: int) -> str:
        return f"acc{self.tag}n{node}"

    @property
    def switch(self) -> str:
        return f"acc{self.tag}sw"

    @staticmethod
    def host(node: int) -> str:
        return f"ns{node}"

    def start(self) -> TestBed:
        self._add(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        hosts = "127.0.0.1 localhost\n::1 localhost\n" + "".join(
            f"{SUBNET}.{i + 1} {self.host(i)}\n" for i in range(self.nodes)
        )
        for node in range(self.nodes):
            t0 = time.perf_counter()
            self._node(node, hosts)
            self.setup_s.append(time.perf_counter() - t0)
        return self

    def _add(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self.made.append(ns)

    def _node(self, node: int, hosts: str) -> None:
        ns, port = self.ns(node), f"p{node}"
        self._add(ns)
        # the pair is born with one end in each namespace: nothing appears in the machine's own
        _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
        _ip("-n", ns, "addr", "add", f"{SUBNET}.{node + 1}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        (NETNS_ETC / ns).mkdir(parents=True, exist_ok=True)
        (NETNS_ETC / ns / "hosts").write_text(hosts)

    def throttle(self, node: int, rate: str) -> None:
        """Both directions of ``node``'s link through a token bucket of ``rate`` (tc units: 40mbit, 2gbit)."""
        # burst: a few full-size TCP segments, so the bucket neither drops them nor lets the rate through
        shape = ["root", "tbf", "rate", rate, "burst", "256kb", "latency", "100ms"]
        _run("tc", "-n", self.ns(node), "qdisc", "add", "dev", "eth0", *shape)
        _run("tc", "-n", self.switch, "qdisc", "add", "dev", f"p{node}", *shape)

    def cpu_group(self, node: int) -> None:
        """Everything ``node`` starts from here on runs in a CPU cgroup of its own, unlimited until
        ``slow_cpu``; the node's start-up (pytest, torch) is then not slowed with it."""
        root = cpu_cgroups()
        if root is None:
            raise RuntimeError("no CPU-bandwidth cgroups on this machine")
        self.cgroups[node] = root / self.ns(node)
        self.cgroups[node].mkdir()

    def slow_cpu(self, node: int, cores: float) -> None:
        """``node``'s cgroup (``cpu_group``) shares ``cores`` of one CPU from now on (0.05: 5% of a core)."""
        group, quota = self.cgroups[node], str(max(1000, int(cores * CPU_PERIOD_US)))
        if group.parent == CGROUP_V1:
            (group / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(quota)
        else:
            (group / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")

    def popen(self, node: int, argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
        inner = [sys.executable, "-m", "tests.netns", self.host(node), "--", *argv]
        if not hasattr(os, "unshare"):
            inner = ["unshare", "--uts", *inner]
        argv = [_tool("ip") or "ip", "netns", "exec", self.ns(node), *inner]
        group = self.cgroups.get(node)
        if group:  # joined before ``ip netns exec``, whose fresh /sys has no cgroups; all it starts inherit it
            argv = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(group / "cgroup.procs"), *argv]
        with open(log, "wb") as out:
            return subprocess.Popen(
                argv,
                env=_tool_env(env),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=ROOT,
                start_new_session=True,
            )

    def close(self) -> None:
        """Ends what still runs inside the namespaces made here, then deletes them and their files."""
        for ns in reversed(self.made):
            ip = [_tool("ip") or "ip", "netns"]
            pids = subprocess.run([*ip, "pids", ns], capture_output=True, text=True, env=_tool_env()).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run([*ip, "del", ns], capture_output=True, env=_tool_env())
            shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)
        self.made.clear()
        for group in self.cgroups.values():
            _remove_cgroup(group)
        self.cgroups.clear()


def _remove_cgroup(group: Path) -> None:
    """A cgroup is removed once empty: what is left in it is killed, and its removal retried a while."""
    for _ in range(100):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, ValueError):
            for pid in (group / "cgroup.procs").read_text().split():
                os.kill(int(pid), signal.SIGKILL)
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # busy: the killed processes are not reaped yet
            time.sleep(0.1)
    warnings.warn(f"could not remove the cgroup {group}: processes are still in it", stacklevel=2)


@dataclass
class NodeRun:
    node: int
    returncode: int
    output: str
    wall_s: float


def run_suite(
    bed: TestBed,
    args: list[str],
    folder: Path,
    env: dict[str, str],
    per_node: list[dict[str, str]] | None = None,
    limit_s: float = HARNESS_TIMEOUT_S,
) -> list[NodeRun]:
    """One pytest per node, each in its namespace, placed by NNODES/NODE_RANK/MASTER_ADDR/MASTER_PORT;
    ``per_node[n]`` adds variables for node n alone (its GPUs); all are killed after ``limit_s``."""
    folder.mkdir(parents=True, exist_ok=True)
    common = {
        **env,
        "NNODES": str(bed.nodes),
        "MASTER_ADDR": bed.host(0),
        "MASTER_PORT": str(PORT),
        # the namespace's veth, for gloo and for NCCL's sockets: their own guesses may pick another interface
        "GLOO_SOCKET_IFNAME": "eth0",
        "NCCL_SOCKET_IFNAME": "eth0",
        "CLUSTER_RUN_ID": f"netns-{bed.tag}",
    }
    base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--cluster-evidence", str(folder), *args]
    t0 = time.perf_counter()
    envs = [{**common, **(per_node[n] if per_node else {}), "NODE_RANK": str(n)} for n in range(bed.nodes)]
    procs = [bed.popen(n, base, envs[n], folder / f"node{n}.log") for n in range(bed.nodes)]
    runs = []
    for node, proc in enumerate(procs):
        try:
            code = proc.wait(timeout=max(1.0, limit_s - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            for other in procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(other.pid, signal.SIGKILL)
            code = proc.wait()
        text = (folder / f"node{node}.log").read_text(errors="replace")
        runs.append(NodeRun(node, code, text, time.perf_counter() - t0))
    return runs


def _become(argv: list[str]) -> None:
    hostname, sep, *command = argv
    if sep != "--" or not command:
        sys.exit("usage: python -m tests.netns HOSTNAME -- ARGV...")
    if hasattr(os, "unshare"):
        os.unshare(os.CLONE_NEWUTS)  # type: ignore[attr-defined]  # Python 3.12+; else started under unshare --uts
    socket.sethostname(hostname)
    libs = os.environ.pop(CHILD_LIBS_ENV, None)
    if libs is not None:  # what ran ip had iproute2's libraries; what runs here gets the caller's
        if libs:
            os.environ["LD_LIBRARY_PATH"] = libs
        else:
            os.environ.pop("LD_LIBRARY_PATH", None)
    os.execvp(command[0], command)


if __name__ == "__main__":
    _become(sys.argv[1:])
