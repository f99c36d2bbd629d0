"""The health rules on NVML answers given in NVML's own shapes, through the real adapter.

``RecordedNvml`` stands in for the pynvml module: each query answers from a table, and an entry
``{"error": CODE}`` raises pynvml's own NVMLError for that code, so the adapter's error path runs as it
would on a GPU that lacks the query or a user without permission.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any, TypeVar, cast

import pynvml
import pytest

from acceptance.families import health as gpu_health
from acceptance.families.answers import NotMeasured
from acceptance.families.health import Expect, NodeHealth
from acceptance.probes import nvml
from acceptance.profile.loader import evaluate
from acceptance.profile.metrics import builtin_bound
from acceptance.profile.model import ProfileModel
from acceptance.schema.figure import Figure

UNSUPPORTED = {"error": pynvml.NVML_ERROR_NOT_SUPPORTED}
NO_PERMISSION = {"error": pynvml.NVML_ERROR_NO_PERMISSION}
H100 = "NVIDIA H100 80GB HBM3"
EXPECT = Expect(gpus_per_node=2, gpu_model=H100, min_driver="535.104.05", nvlink_links=18, pcie_gen=5, pcie_width=16)


def h100(index: int) -> dict[str, Any]:
    """A healthy H100 SXM as NVML describes it: idle, cool, every link up, no memory errors."""
    return {
        "nvmlDeviceGetUUID": f"GPU-{index}f2a6c1e-7b3d-4e5f-8a9b-0c1d2e3f4a5b",
        "nvmlDeviceGetSerial": f"165012345678{index}",
        "nvmlDeviceGetPciInfo": SimpleNamespace(busId=f"00000000:{0x18 + index:02X}:00.0".encode()),
        "nvmlDeviceGetName": H100,
        "nvmlDeviceGetMemoryInfo": SimpleNamespace(total=85520809984, free=84000000000, used=1520809984),
        "nvmlDeviceGetVbiosVersion": "96.00.74.00.01",
        "nvmlDeviceGetPersistenceMode": 1,
        "nvmlDeviceGetMigMode": [0, 0],
        "nvmlDeviceGetEccMode": [1, 1],
        # keyed by (error type, counter type): uncorrected volatile, uncorrected aggregate
        "nvmlDeviceGetTotalEccErrors": {(1, 0): 0, (1, 1): 0},
        # Hopper repairs memory by remapping rows; page retirement is not supported there
        "nvmlDeviceGetRetiredPagesPendingStatus": UNSUPPORTED,
        "nvmlDeviceGetRemappedRows": (0, 0, 0, 0),
        "nvmlDeviceGetNvLinkState": [1] * 18,
        "nvmlDeviceGetCurrPcieLinkGeneration": 5,
        "nvmlDeviceGetCurrPcieLinkWidth": 16,
        "nvmlDeviceGetMaxPcieLinkGeneration": 5,
        "nvmlDeviceGetMaxPcieLinkWidth": 16,
        "nvmlDeviceGetCurrentClocksEventReasons": 0x1,  # GPU idle: not a slowdown
        "nvmlDeviceGetTemperature": {(0,): 34},
        "nvmlDeviceGetTemperatureThreshold": {(1,): 87},
    }


class RecordedNvml:
    """The pynvml module as seen by the adapter, answering from tables; constants come from pynvml."""

    NVMLError = pynvml.NVMLError

    def __init__(self, gpus: list[dict[str, Any]], driver: str = "550.54.15", init_error: int | None = None) -> None:
        self.gpus, self.driver, self.init_error = gpus, driver, init_error

    def __getattr__(self, name: str) -> Any:
        if name.startswith("nvmlDevice"):
            return lambda handle, *args: self._answer(self.gpus[handle].get(name), args)
        return getattr(pynvml, name)

    @staticmethod
    def _answer(entry: Any, args: tuple[Any, ...]) -> Any:
        if entry is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        if isinstance(entry, dict) and "error" in entry:
            raise pynvml.NVMLError(entry["error"])
        if isinstance(entry, dict):
            return RecordedNvml._answer(entry.get(tuple(args)), ())
        if isinstance(entry, list) and args:  # per link: past the last link NVML answers "invalid argument"
            if args[0] >= len(entry):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            return entry[args[0]]
        return entry

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 12040


T = TypeVar("T")


def answered(answer: T | NotMeasured) -> T:
    """An answer the recorded NVML gives, as its measured type (for the type checker; nothing is checked)."""
    return cast(T, answer)


def node(host: str, gpus: list[dict[str, Any]], **kw: Any) -> NodeHealth:
    return {"host": host, "node_rank": 0, "nvml": nvml.read_node(RecordedNvml(gpus, **kw))}


def figures(nodes: list[NodeHealth], expect: Expect = EXPECT) -> dict[str, Figure]:
    """The rules' figures, each with the bound the judge holds it to: the rules' own (from the run: the GPU
    count, a GPU's slowdown temperature), else its metric's (``Metric.builtin``)."""
    model = ProfileModel.model_validate({"name": "units", "health": {"nvlink_links": expect.nvlink_links}})
    found = gpu_health.evaluate(nodes, expect)
    for fig in found:
        fig.bound = fig.bound or builtin_bound(fig.metric, model)
    return {f.metric: f for f in found}


def with_change(index: int, **answers: Any) -> dict[str, Any]:
    gpu = copy.deepcopy(h100(index))
    gpu.update({f"nvmlDevice{k}": v for k, v in answers.items()})
    return gpu


def passes(fig: Figure) -> bool:
    assert fig.skip is None and fig.bound is not None, f"{fig.metric} was not judged: {fig}"
    return evaluate(fig.bound, fig.value)[0]


def test_adapter_reads_a_healthy_gpu() -> None:
    answers = answered(nvml.read_node(RecordedNvml([h100(0)])))
    gpu = answered(answers["gpus"])[0]
    assert answers["driver_version"] == "550.54.15" and answers["cuda_driver_version"] == "12.4"
    assert gpu["pci_bus_id"] == "00000000:18:00.0" and gpu["name"] == H100
    assert answered(gpu["uuid"]).startswith("GPU-0f2a6c1e") and gpu["memory_total_bytes"] == 85520809984
    assert (gpu["ecc_mode"], gpu["mig_mode"], gpu["persistence_mode"]) == (True, False, True)
    assert gpu["nvlink_active"] == 18 and gpu["clock_event_reasons"] == []
    assert gpu["pcie"] == {"gen": 5, "width": 16, "max_gen": 5, "max_width": 16}
    assert gpu["row_remap"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert gpu["retired_pages_pending"] == {"not_measured": "retired pages pending: Not Supported"}


def test_healthy_node_passes_every_gate() -> None:
    figs = figures([node("gpu-node-0", [h100(0), h100(1)])])
    judged = [f for f in figs.values() if f.skip is None and f.bound is not None]
    assert {f.metric for f in judged} >= {
        "health.gpu_count",
        "health.gpu_model_mismatch",
        "health.driver_too_old",
        "health.ecc_disabled",
        "health.ecc_uncorrectable_volatile",
        "health.row_remap_pending",
        "health.nvlink_links_min",
        "health.pcie_degraded",
        "health.throttled",
        "health.temperature_c_max",
    }
    assert all(passes(f) for f in judged), [f.detail for f in judged if not passes(f)]
    assert figs["health.temperature_c_max"].bound.max == 87  # type: ignore[union-attr]


def test_pending_row_remaps_name_the_gpu() -> None:
    figs = figures([node("gpu-node-1", [h100(0), with_change(1, GetRemappedRows=(3, 1, 1, 0))])])
    pending = figs["health.row_remap_pending"]
    assert pending.value == 1 and not passes(pending)
    assert pending.findings == ["gpu-node-1 GPU 1 (GPU-1f2a...): row remaps pending (needs a GPU reset)"]
    assert figs["health.row_remap_failures"].value == 0


def test_link_stuck_at_gen3_x8_is_degraded() -> None:
    stuck = with_change(1, GetCurrPcieLinkGeneration=3, GetCurrPcieLinkWidth=8)
    nodes = [node("gpu-node-1", [h100(0), stuck])]
    for expect in (EXPECT, Expect(gpus_per_node=2)):  # from the profile, and from the link's own maximum
        pcie = figures(nodes, expect)["health.pcie_degraded"]
        assert pcie.value == 1 and not passes(pcie)
        assert pcie.findings == ["gpu-node-1 GPU 1 (GPU-1f2a...): PCIe Gen3 x8, expected Gen5 x16"]


def test_an_unsupported_query_is_not_measured_never_a_pass() -> None:
    no_nvlink = [with_change(i, GetNvLinkState=UNSUPPORTED) for i in range(2)]
    figs = figures([node("pcie-node", no_nvlink)])
    links = figs["health.nvlink_links_min"]
    assert links.skip == "health.nvlink_links_min not measured: " + "; ".join(links.not_measured)
    assert links.not_measured == [
        "pcie-node GPU 0 (GPU-0f2a...): NVLink state: Not Supported",
        "pcie-node GPU 1 (GPU-1f2a...): NVLink state: Not Supported",
    ]
    pages = figs["health.retired_pages_pending"]
    assert pages.skip is not None and len(pages.not_measured) == 2


def test_a_query_denied_on_one_gpu_is_reported_beside_the_others() -> None:
    figs = figures([node("gpu-node-2", [h100(0), with_change(1, GetTotalEccErrors=NO_PERMISSION)])])
    ecc = figs["health.ecc_uncorrectable_volatile"]
    assert ecc.value == 0
    assert ecc.not_measured == [
        "gpu-node-2 GPU 1 (GPU-1f2a...): volatile uncorrectable ECC errors: Insufficient Permissions"
    ]
    assert "not measured: gpu-node-2 GPU 1" in ecc.detail


def test_uncorrectable_errors_are_summed_and_named() -> None:
    bad = with_change(1, GetTotalEccErrors={(1, 0): 2, (1, 1): 5})
    figs = figures([node("gpu-node-3", [h100(0), bad])])
    assert figs["health.ecc_uncorrectable_volatile"].value == 2
    assert figs["health.ecc_uncorrectable_aggregate"].value == 5
    assert figs["health.ecc_uncorrectable_aggregate"].findings == [
        "gpu-node-3 GPU 1 (GPU-1f2a...): 5 uncorrectable ECC errors"
    ]


def test_throttle_reasons_and_heat() -> None:
    hot = with_change(0, GetCurrentClocksEventReasons=0x40 | 0x4, GetTemperature={(0,): 91})
    figs = figures([node("gpu-node-4", [hot, h100(1)])])
    assert figs["health.throttled"].findings == ["gpu-node-4 GPU 0 (GPU-0f2a...): clocks held back by hw_thermal"]
    temp = figs["health.temperature_c_max"]
    assert temp.value == 91 and not passes(temp)
    assert temp.findings == ["gpu-node-4 GPU 0 (GPU-0f2a...): 91 C"]


def test_older_drivers_answer_the_throttle_query_by_its_old_name() -> None:
    old = with_change(0, GetCurrentClocksEventReasons=None, GetCurrentClocksThrottleReasons=0x8)
    answers = answered(nvml.read_node(RecordedNvml([old])))
    assert answered(answers["gpus"])[0]["clock_event_reasons"] == ["hw_slowdown"]


def test_missing_gpu_wrong_model_old_driver_and_down_link() -> None:
    other = with_change(0, GetName="NVIDIA A100-SXM4-80GB", GetNvLinkState=[1] * 16 + [0, 0])
    figs = figures([node("gpu-node-5", [other], driver="525.85.12")])
    assert figs["health.gpu_count"].value == 1
    assert figs["health.gpu_count"].findings == ["gpu-node-5: 1 GPUs, expected 2"]
    assert figs["health.gpu_model_mismatch"].findings == [
        f"gpu-node-5 GPU 0 (GPU-0f2a...): NVIDIA A100-SXM4-80GB, expected {H100}"
    ]
    assert figs["health.driver_too_old"].findings == ["gpu-node-5: driver 525.85.12, expected >= 535.104.05"]
    assert figs["health.nvlink_links_min"].value == 16 and not passes(figs["health.nvlink_links_min"])


def test_a_node_without_nvml_is_named_and_its_gpus_not_counted_healthy() -> None:
    down = node("gpu-node-6", [h100(0)], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    figs = figures([node("gpu-node-5", [h100(0), h100(1)]), down])
    assert figs["health.nvml_unavailable"].findings == ["gpu-node-6: NVML init: Driver Not Loaded"]
    assert figs["health.ecc_disabled"].not_measured == ["gpu-node-6: NVML init: Driver Not Loaded"]
    assert not passes(figs["health.nvml_unavailable"])


def test_gates_the_profile_does_not_ask_for_are_skipped_with_a_reason() -> None:
    figs = figures([node("gpu-node-7", [h100(0)])], Expect(require_ecc=False, nvlink_links=0))
    assert figs["health.gpu_model_mismatch"].skip == "the profile names no topology.gpu_model"
    assert figs["health.driver_too_old"].skip == "the profile sets no health.min_driver"
    assert figs["health.ecc_disabled"].skip is not None and figs["health.nvlink_links_min"].skip is not None


def test_inventory_keeps_identity_and_reasons() -> None:
    rows = gpu_health.inventory([node("gpu-node-8", [h100(0), with_change(1, GetSerial=NO_PERMISSION)])])
    assert [r["index"] for r in rows] == [0, 1]
    assert rows[0]["serial"] == "1650123456780" and rows[0]["driver_version"] == "550.54.15"
    assert rows[1]["serial"] == {"not_measured": "serial: Insufficient Permissions"}


@pytest.mark.parametrize("metric", gpu_health.METRICS)
def test_every_health_metric_is_a_known_family(metric: str) -> None:
    from acceptance.profile.metrics import metric_problem
    from acceptance.profile.model import ProfileModel

    assert metric_problem(metric, ProfileModel(name="t")) is None


def _allocated_node(host: str, gpus: list[dict[str, Any]], visible: list[str]) -> NodeHealth:
    """A node's record as the health probe keeps it: NVML's answers for the run's GPUs (CUDA's ``visible``
    UUIDs), the node's other GPUs outside the allocation."""
    answers = answered(nvml.read_node(RecordedNvml(gpus)))
    mine, outside = gpu_health.allocated(answers, visible)
    return {"host": host, "node_rank": 0, "nvml": mine, "outside_allocation": outside}


def test_a_job_given_two_of_four_gpus_is_judged_on_its_two() -> None:
    """CUDA_VISIBLE_DEVICES=0,1 on a 4-GPU node (Slurm's GRES, the device plugin): the count is the job's, and
    the other two GPUs, one of them with uncorrectable ECC errors, are recorded outside it, never judged."""
    sick = with_change(3, GetTotalEccErrors={(1, 0): 5, (1, 1): 5})
    gpus = [h100(0), h100(1), h100(2), sick]
    visible = [str(h100(i)["nvmlDeviceGetUUID"]) for i in (0, 1)]
    figs = figures([_allocated_node("gpu-node-0", gpus, visible)])
    count = figs["health.gpu_count"]
    assert count.value == 2 and passes(count)
    assert "not this run's (outside its allocation, not judged): GPU 2" in count.detail
    assert passes(figs["health.ecc_uncorrectable_volatile"])
    # the same node judged whole (no allocation known) fails on both counts
    whole = figures([node("gpu-node-0", gpus)])
    assert not passes(whole["health.gpu_count"]) and not passes(whole["health.ecc_uncorrectable_volatile"])


def test_a_gpu_of_the_allocation_is_judged_and_one_without_a_uuid_is_kept() -> None:
    """The allocation keeps a GPU NVML cannot name: judged, never passed over."""
    sick = with_change(1, GetTotalEccErrors={(1, 0): 5, (1, 1): 5})
    nameless = with_change(2, GetUUID=NO_PERMISSION)
    visible = [str(h100(i)["nvmlDeviceGetUUID"]) for i in (0, 1)]
    record = _allocated_node("gpu-node-0", [h100(0), sick, nameless, h100(3)], visible)
    assert [g["index"] for g in record.get("outside_allocation", [])] == [3]
    assert not passes(figures([record])["health.ecc_uncorrectable_volatile"])


def test_a_gpu_with_a_link_down_is_named_by_the_rules() -> None:
    """health.nvlink_links_min names the GPU below health.nvlink_links in its detail (so the drain list names
    the GPU), the rules holding the same bound the judge does."""
    degraded = with_change(1, GetNvLinkState=[1] * 16 + [0, 0])
    links = gpu_health.evaluate([node("gpu-node-3", [h100(0), degraded])], EXPECT)
    [fig] = [f for f in links if f.metric == "health.nvlink_links_min"]
    assert fig.value == 16 and fig.bound is not None and fig.bound.min == 18
    assert "gpu-node-3 GPU 1" in fig.detail
