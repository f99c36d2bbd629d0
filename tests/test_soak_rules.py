"""The soak family: its rules on crafted records (each gate), its fault knob, its memory patterns and GEMM
checks on the CPU, its NVML watch on a recorded NVML, and the selection of an opt-in family."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pynvml
import pytest
import torch

from acceptance.families import soak as rules
from acceptance.families.answers import not_measured
from acceptance.families.compute import COMPUTE
from acceptance.families.soak import SOAK
from acceptance.plugin.opt_in import named_by_argument, named_by_markexpr
from acceptance.probes import soak as probe
from acceptance.probes.memory_patterns import PATTERNS, MemoryPatterns
from acceptance.probes.soak_watch import SoakWatch, read_counters
from acceptance.profile.registry import FAMILIES
from acceptance.schema.figure import Figure
from acceptance.schema.rounding import U_FP8_ACCUMULATE, U_FP32
from tests.harness import doc
from tests.test_profile import BASE, error_of, write

CONFIG: rules.SoakConfig = {
    "duration_s": 120.0,
    "matmul_size": 8192,
    "fp8": True,
    "round_s": 0.5,
    "window_s": 5.0,
    "memory_fraction": 0.8,
    "memory_coverage_min": 0.5,
    "host_memory_size": "64M",
    "allreduce_size": "64M",
    "spot_rows": 2,
    "sample_s": 1.0,
    "tolerance": 0.1,
    "median_of": "cluster",
    "slowdown_reasons": ["hw_slowdown", "hw_thermal", "hw_power_brake", "sw_thermal"],
    "seed": 1234,
    "checkpoint_s": 300.0,
}
COUNTERS: rules.Counters = {
    "ecc_corrected": 3,
    "ecc_uncorrected": 0,
    "remapped_rows": 1,
    "remap_pending": False,
    "remap_failure": False,
}


def windows(tflops: float, seconds: float = 120.0, last: float | None = None) -> list[rules.Window]:
    """A window every 5 s at ``tflops``; from the soak's second half at ``last`` where given."""
    return [
        {"t": t, "tflops": last if last is not None and t >= seconds / 2 else tflops} for t in range(0, int(seconds), 5)
    ]


def gemm(dtype: rules.GemmDtype = "bfloat16", tflops: float = 650.0, **changes: Any) -> rules.GemmRecord:
    record: rules.GemmRecord = {
        "dtype": dtype,
        "not_measured": None,
        "calls": 1000,
        "wrong_calls": 0,
        "wrong_elements": 0,
        "first_bad": None,
        "digest": "ab" * 32,
        "reference_checked": 16384,
        "reference_errors": 0,
        "reference_worst": 0.02,
        "reference_first_bad": None,
        "reference_not_measured": None,
        "windows": windows(tflops),
    }
    record.update(changes)  # type: ignore[typeddict-item]
    return record


def samples(events: dict[float, list[str]] | None = None, seconds: int = 120) -> list[rules.Sample]:
    return [
        {
            "t": float(t),
            "sm_mhz": 1755,
            "power_w": 690.0,
            "temp_c": 60 if t < seconds / 2 else 70,
            "mem_temp_c": 65,
            "events": (events or {}).get(float(t), ["sw_power_cap"]),
        }
        for t in range(seconds)
    ]


def rank(r: int, per_node: int = 2, gpu: bool = True, **changes: Any) -> rules.RankSoak:
    record: rules.RankSoak = {
        "host": f"gpu-{r // per_node}",
        "node_rank": r // per_node,
        "rank": r,
        "local_rank": r % per_node,
        "gpu": r % per_node if gpu else None,
        "uuid": f"GPU-{r:08d}-0000" if gpu else None,
        "model": "NVIDIA H100 80GB HBM3" if gpu else "cpu",
        "seconds": 120.0,
        "rounds": 240,
        "gemm": [gemm(), gemm("float8_e4m3fn", 1200.0)],
        "memory": {
            "bytes": 60 * 2**30,
            "passes": 240,
            "patterns": {"walking_ones": 80, "random": 80, "address": 80},
            "bad_words": 0,
            "first_bad": None,
            "asked_bytes": 0,
        },
        "allreduce": {"elements": 16 << 20, "iterations": 240, "wrong": 0, "first_bad": None},
        "nvml": (
            {
                "samples": samples(),
                "samples_reason": None,
                "before": dict(COUNTERS),  # type: ignore[typeddict-item]
                "after": dict(COUNTERS),  # type: ignore[typeddict-item]
                "xids": [],
            }
            if gpu
            else None
        ),
    }
    record.update(changes)  # type: ignore[typeddict-item]
    return record


def result(ranks: list[rules.RankSoak], **config: Any) -> rules.SoakResult:
    return {
        "ranks": ranks,
        "config": {**CONFIG, **config},  # type: ignore[typeddict-item]
        "device": "cuda" if ranks[0]["gpu"] is not None else "cpu",
        "injected": [],
        "software": {"torch": "2.11.0", "cuda": "13.0"},
    }


def counts(found: rules.SoakResult) -> dict[str, Figure]:
    return {f.metric: f for f in rules.counts(found)}


def healthy(n: int = 4) -> list[rules.RankSoak]:
    return [rank(r) for r in range(n)]


# ---- the correctness counts --------------------------------------------------------------------------------


def test_a_healthy_soak_counts_nothing() -> None:
    found = counts(result(healthy()))
    assert {m: f.value for m, f in found.items()} == dict.fromkeys(found, 0)
    assert not any(f.skip for f in found.values())


def test_a_wrong_gemm_result_is_counted_and_named_with_its_first_bad_value() -> None:
    bad: rules.Bad = {"where": "element 8,199 (row 1, column 7)", "got": "-3.8e+20", "want": "-20.75"}
    ranks = healthy()
    ranks[3]["gemm"][0] = gemm(wrong_calls=1, wrong_elements=2, first_bad=bad)
    fig = counts(result(ranks))["soak.gemm_wrong_elements"]
    assert fig.value == 2
    assert fig.findings == [
        "node 1 (gpu-1) GPU 1 (GPU-00000003-0000) rank 3: bfloat16: 2 wrong element(s) in 1 of 1000 results; "
        "first at element 8,199 (row 1, column 7): got -3.8e+20, expected -20.75"
    ]


def test_a_gpu_whose_first_result_differs_from_its_model_s_majority_is_named() -> None:
    ranks = healthy()
    ranks[2]["gemm"][1] = gemm("float8_e4m3fn", 1200.0, digest="cd" * 32)
    fig = counts(result(ranks))["soak.gemm_disagreeing_gpus"]
    assert fig.value == 1
    assert fig.findings == [
        "node 1 (gpu-1) GPU 0 (GPU-00000002-0000) rank 2: float8_e4m3fn result digest cdcdcdcdcdcd differs from "
        "abababababab, that of 3 of the 4 NVIDIA H100 80GB HBM3 ranks"
    ]


def test_gpus_of_another_model_are_compared_among_themselves_only() -> None:
    ranks = healthy()
    for r in ranks[2:]:
        r["model"] = "NVIDIA H200"
        r["gemm"] = [gemm(digest="ef" * 32)]
    assert counts(result(ranks))["soak.gemm_disagreeing_gpus"].value == 0


def test_two_gpus_that_differ_take_the_lowest_rank_s_digest_as_the_reference() -> None:
    ranks = healthy(2)
    ranks[1]["gemm"][0] = gemm(digest="cd" * 32)
    fig = counts(result(ranks))["soak.gemm_disagreeing_gpus"]
    assert fig.value == 1 and "rank 1: bfloat16 result digest cdcdcdcdcdcd" in fig.findings[0]


def test_one_gpu_has_nothing_to_compare_its_result_with() -> None:
    assert counts(result(healthy(1)))["soak.gemm_disagreeing_gpus"].skip


def test_an_element_outside_the_fp64_bound_is_counted_and_named() -> None:
    bad: rules.Bad = {"where": "element 7 (row 0, column 7)", "got": "nan", "want": "12.5 (fp64, bound 0.3)"}
    ranks = healthy()
    ranks[0]["gemm"][0] = gemm(reference_errors=1, reference_first_bad=bad, reference_worst=float("inf"))
    fig = counts(result(ranks))["soak.gemm_reference_errors"]
    assert fig.value == 1
    assert (
        "rank 0: bfloat16: 1 of 16384 elements checked against fp64 are outside the bound; first at "
        in (fig.findings[0])
    )
    assert "got nan, expected 12.5 (fp64, bound 0.3)" in fig.findings[0]


def test_bad_memory_words_are_counted_and_the_first_address_named() -> None:
    bad: rules.Bad = {
        "where": "random pass, word 12 (byte offset 0x60, address 0x7f0000000060)",
        "got": "0x1",
        "want": "0x3",
    }
    ranks = healthy()
    ranks[1]["memory"] = {**ranks[1]["memory"], "bad_words": 3, "first_bad": bad}
    fig = counts(result(ranks))["soak.memory_bad_words"]
    assert fig.value == 3
    assert fig.findings == [
        "node 0 (gpu-0) GPU 1 (GPU-00000001-0000) rank 1: 3 bad 64-bit word(s) in 240 passes over 60.00 GiB; "
        "first at random pass, word 12 (byte offset 0x60, address 0x7f0000000060): got 0x1, expected 0x3"
    ]


def test_wrong_all_reduce_elements_are_counted_and_named() -> None:
    ranks = healthy()
    ranks[2]["allreduce"] = {
        **ranks[2]["allreduce"],
        "wrong": 5,
        "first_bad": {"where": "element 3", "got": "4", "want": "5"},
    }
    fig = counts(result(ranks))["soak.allreduce_wrong"]
    assert fig.value == 5 and "rank 2: 5 wrong element(s) in 240 all_reduces of 16,777,216 elements" in fig.findings[0]


def _nvml(r: rules.RankSoak) -> rules.NvmlRecord:
    assert r["nvml"] is not None
    return r["nvml"]


def test_new_uncorrectable_ecc_errors_count_and_correctable_ones_are_listed() -> None:
    ranks = healthy()
    _nvml(ranks[1])["after"] = {**COUNTERS, "ecc_uncorrected": 2, "ecc_corrected": 10}
    fig = counts(result(ranks))["soak.ecc_new_errors"]
    assert fig.value == 2
    assert fig.findings == [
        "node 0 (gpu-0) GPU 1 (GPU-00000001-0000) rank 1: 2 new uncorrectable ECC error(s) during the soak"
    ]
    assert "rank 1: 7 new correctable ECC error(s) (corrected; not counted)" in fig.detail


def test_an_ecc_counter_nvml_would_not_read_is_said_never_zero() -> None:
    ranks = healthy(2)
    _nvml(ranks[0])["before"] = not_measured("NVML: Not Supported")
    fig = counts(result(ranks))["soak.ecc_new_errors"]
    assert fig.value == 0 and not fig.skip
    assert fig.unmeasured == [
        "node 0 (gpu-0) GPU 0 (GPU-00000000-0000) rank 0: uncorrectable ECC not measured: before: NVML: Not Supported"
    ]


def test_xids_no_gpu_could_watch_fail_a_gpu_run_as_unmeasured_with_the_reasons() -> None:
    ranks = healthy(2)
    for r in ranks:
        _nvml(r)["xids"] = not_measured("XID events: Insufficient Permissions")
    fig = counts(result(ranks))["soak.xid_new"]
    assert fig.skip is None and fig.unmeasured[0] == "not measured on any GPU of this GPU run:"
    assert sum("XIDs not watched: XID events: Insufficient Permissions" in u for u in fig.unmeasured) == 2


def test_nvml_failing_on_every_gpu_of_a_gpu_run_fails_each_count_never_skips_it() -> None:
    """NVML that no GPU could read: ECC, remapped rows, XIDs and slowdowns unmeasured (their tests fail,
    naming why); on the CPU they do not apply (``test_the_nvml_figures_do_not_apply_on_the_cpu``)."""
    ranks = healthy(2)
    for r in ranks:
        n = _nvml(r)
        n["before"] = n["after"] = not_measured("NVML: Driver Not Loaded")  # type: ignore[typeddict-item]
        n["xids"] = not_measured("NVML: Driver Not Loaded")
        n["samples"], n["samples_reason"] = [], "NVML: Driver Not Loaded"
    found = counts(result(ranks))
    for metric in ("soak.ecc_new_errors", "soak.remapped_rows_new", "soak.xid_new", "soak.slowdown_gpus"):
        fig = found[metric]
        assert fig.skip is None and len(fig.unmeasured) == 3, metric
        assert all("NVML: Driver Not Loaded" in u for u in fig.unmeasured[1:]), metric
    no_record = counts(result([rank(r, nvml=None) for r in range(2)]))  # a GPU run whose ranks kept no NVML
    assert no_record["soak.xid_new"].skip is None and no_record["soak.xid_new"].unmeasured


def test_the_memory_the_patterns_covered_is_a_figure_of_the_least_covered_rank() -> None:
    ranks = healthy(2)
    for r, got in zip(ranks, (64 * 2**30, 8), strict=True):
        r["memory"]["bytes"], r["memory"]["asked_bytes"] = got, 64 * 2**30
    fig = rules.memory_coverage(result(ranks))
    assert fig.metric == "soak.memory_coverage" and fig.value == 8 / (64 * 2**30) and not fig.skip
    assert "GPU 1 (GPU-00000001-0000) rank 1: patterns over " in fig.findings[0]
    assert rules.memory_coverage(result(healthy(2))).skip  # records without it: nothing to judge


def test_a_gpu_without_samples_is_unmeasured_never_a_pass() -> None:
    ranks = healthy(2)
    _nvml(ranks[1])["samples"], _nvml(ranks[1])["samples_reason"] = [], "NVML: GPU is lost"
    fig = counts(result(ranks))["soak.slowdown_gpus"]
    assert fig.value == 0 and not fig.skip
    assert fig.unmeasured == ["node 0 (gpu-0) GPU 1 (GPU-00000001-0000) rank 1: no NVML sample: NVML: GPU is lost"]


def test_new_remapped_rows_and_a_pending_remap_count() -> None:
    ranks = healthy()
    _nvml(ranks[0])["after"] = {**COUNTERS, "remapped_rows": 3, "remap_pending": True}
    fig = counts(result(ranks))["soak.remapped_rows_new"]
    assert fig.value == 3
    assert fig.findings[0].endswith("rank 0: 2 row(s) remapped during the soak")
    assert fig.findings[1].endswith("rank 0: after the soak: remap_pending")


def test_an_xid_during_the_soak_is_counted_and_named() -> None:
    ranks = healthy()
    _nvml(ranks[3])["xids"] = [{"t": 42.0, "xid": 79}, {"t": 43.0, "xid": 79}]
    fig = counts(result(ranks))["soak.xid_new"]
    assert fig.value == 2 and fig.findings == [
        "node 1 (gpu-1) GPU 1 (GPU-00000003-0000) rank 3: 2 XID event(s); first XID 79 at 42 s"
    ]


def test_a_thermal_slowdown_fails_the_gpu_and_the_power_cap_does_not() -> None:
    ranks = healthy()
    _nvml(ranks[1])["samples"] = samples({90.0: ["hw_thermal", "sw_power_cap"]})
    found = result(ranks)
    fig = counts(found)["soak.slowdown_gpus"]
    assert fig.value == 1
    assert fig.findings[0].startswith("node 0 (gpu-0) GPU 1 (GPU-00000001-0000) rank 1: hw_thermal from 90 s")
    line = rules.table(found)[1]
    assert line["first_slowdown_s"] == 90.0 and line["first_power_cap_s"] == 0.0
    assert rules.table(found)[0]["first_slowdown_s"] is None


def test_the_nvml_figures_do_not_apply_on_the_cpu() -> None:
    found = counts(result([rank(r, gpu=False) for r in range(2)]))
    for metric in ("soak.ecc_new_errors", "soak.remapped_rows_new", "soak.xid_new", "soak.slowdown_gpus"):
        assert "NVML" in (found[metric].skip or "")
    assert not found["soak.gemm_wrong_elements"].skip


# ---- speed -------------------------------------------------------------------------------------------------


def test_a_gpu_under_the_median_is_named_with_its_shortfall() -> None:
    ranks = healthy()
    ranks[2]["gemm"][0] = gemm(tflops=520.0)
    low, median, below, _ = rules.speed_figures(result(ranks), "bfloat16")
    assert (low.metric, low.value, median.metric, median.value) == (
        "soak.bf16_tflops_min",
        520.0,
        "soak.bf16_tflops_median",
        650.0,
    )
    assert below.metric == "soak.bf16_tflops_below_median" and abs(below.value - 0.2) < 1e-9
    assert below.findings == ["node 1 (gpu-1) GPU 0 (GPU-00000002-0000) rank 2 520 TFLOP/s, 20% under the median 650"]


def test_the_median_of_each_node_when_the_profile_asks() -> None:
    ranks = healthy()
    for r in ranks[2:]:
        r["gemm"][0] = gemm(tflops=520.0)  # a slower node: each GPU at its node's median
    assert rules.speed_figures(result(ranks, median_of="node"), "bfloat16")[2].value == 0
    assert abs(rules.speed_figures(result(ranks), "bfloat16")[2].value - (585 - 520) / 585) < 1e-9
    line = rules.table(result(ranks, median_of="node"))[3]
    assert line["below_node_median"]["bfloat16"] == 0 and line["below_cluster_median"]["bfloat16"] > 0.1


def test_a_gpu_that_sags_from_the_first_minute_to_the_last_is_named() -> None:
    ranks = healthy()
    ranks[1]["gemm"][0] = gemm()
    ranks[1]["gemm"][0]["windows"] = windows(650.0, last=520.0)
    sag = rules.speed_figures(result(ranks), "bfloat16")[3]
    assert sag.metric == "soak.bf16_tflops_sag" and abs(sag.value - 0.2) < 1e-9
    assert sag.findings == ["node 0 (gpu-0) GPU 1 (GPU-00000001-0000) rank 1: 650 TFLOP/s at the start, 520 at the end"]


def test_first_and_last_minute_are_each_half_of_a_short_soak() -> None:
    short = [{"t": float(t), "tflops": float(t)} for t in range(0, 60, 5)]
    first, last = rules.early_late(short, 60.0)  # type: ignore[arg-type]
    assert (first, last) == (12.5, 42.5)  # medians of 0..25 and 30..55


def test_a_gpu_that_could_not_run_a_gemm_its_peers_ran_is_unmeasured() -> None:
    ranks = healthy(2)
    ranks[1]["gemm"][1] = probe.unmeasured("float8_e4m3fn", "fp8 GEMM: torch._scaled_mm failed")
    low = rules.speed_figures(result(ranks), "float8_e4m3fn")[0]
    assert not low.skip and low.value == 1200.0
    assert low.unmeasured == ["node 0 (gpu-0) GPU 1 (GPU-00000001-0000) rank 1: fp8 GEMM: torch._scaled_mm failed"]


def test_a_dtype_no_rank_ran_skips_with_its_reason() -> None:
    ranks = [
        rank(r, gpu=False, gemm=[gemm(), probe.unmeasured("float8_e4m3fn", "fp8 GEMM: not applicable on the CPU")])
        for r in range(2)
    ]
    figs = rules.speed_figures(result(ranks), "float8_e4m3fn")
    assert all(f.skip == "fp8 GEMM: not applicable on the CPU" for f in figs)


def test_steady_state_is_the_second_half_s_median() -> None:
    figs = {f.metric: f for f in rules.steady_figures(result(healthy()))}
    assert figs["soak.temperature_c_max"].value == 70 and figs["soak.power_w_max"].value == 690
    assert figs["soak.memory_temperature_c_max"].value == 65


def test_the_probe_s_limit_covers_the_soak_s_duration() -> None:
    assert rules.parts(60, 240) == 2  # 480 s: the 60 s soak and 240 s for the rest
    assert rules.parts(3600, 240) == 16  # an hour's burn-in needs no timeout of its own


# ---- the fault knob ----------------------------------------------------------------------------------------


def test_the_fault_knob_is_parsed_or_refused() -> None:
    assert probe.parse_faults("gemm@1; slow@2:0.25;memory@0;allreduce@3") == [
        probe.Fault("gemm", 1, 0.5),
        probe.Fault("slow", 2, 0.25),
        probe.Fault("memory", 0, 0.5),
        probe.Fault("allreduce", 3, 0.5),
    ]
    for bad in ("gemm", "gemm@x", "flip@1", "slow@1:2", "slow@1:x", "gemm@1:0.5"):
        with pytest.raises(ValueError, match=probe.FAULT_ENV):
            probe.parse_faults(bad)


# ---- the checks themselves, on the CPU ---------------------------------------------------------------------


def test_every_pattern_reads_back_and_a_flipped_word_is_found() -> None:
    memory = MemoryPatterns.allocate(1 << 16, torch.device("cpu"), seed=7)
    memory.chunk = 1000  # several chunks, one of them short
    for _ in PATTERNS:
        memory.run_pass()
        assert memory.bad_words() == 0
    memory.run_pass(corrupt=True)
    assert memory.bad_words() == 1
    record = memory.record()
    assert record["patterns"] == {"walking_ones": 2, "random": 1, "address": 1}
    assert record["first_bad"] is not None
    assert record["first_bad"]["where"].startswith("walking_ones pass, word 4,096 (byte offset 0x8000, address 0x")
    assert int(record["first_bad"]["got"], 16) ^ int(record["first_bad"]["want"], 16) == 1 << 20


def test_a_second_pass_of_the_same_pattern_writes_other_words() -> None:
    memory = MemoryPatterns.allocate(1 << 12, torch.device("cpu"), seed=7)
    memory.run_pass()
    first = memory.buffer.clone()
    for _ in PATTERNS:
        memory.run_pass()
    assert not torch.equal(first, memory.buffer)  # walking ones: the next bit


def _gemm(n: int = 64) -> probe.Gemm:
    a, b = probe._inputs(n, seed=3)
    g = probe.Gemm("bfloat16", lambda out: torch.mm(a, b) if out is None else torch.mm(a, b, out=out), a, b, U_FP32, n)
    g.start()
    return g


def test_a_gemm_result_that_changes_is_counted_with_its_first_element() -> None:
    g = _gemm()
    for i in range(4):
        g.once(corrupt=i == 2)
    record = g.record(spot_rows=2, window_s=5.0)
    assert (record["calls"], record["wrong_calls"], record["wrong_elements"]) == (4, 1, 1)
    assert record["first_bad"] is not None and record["first_bad"]["where"] == "element 71 (row 1, column 7)"
    assert record["first_bad"]["got"] != record["first_bad"]["want"]
    assert record["reference_errors"] == 0 and 0 < record["reference_worst"] <= 1


def test_the_fp64_reference_catches_a_first_result_that_is_wrong() -> None:
    g = _gemm()
    g.ref[0, 37] += 1.0  # row 0 is one of the two rows checked (0 and n/2)
    record = g.record(spot_rows=2, window_s=5.0)
    assert record["reference_errors"] == 1 and record["reference_checked"] == 128
    assert record["reference_first_bad"] is not None
    assert record["reference_first_bad"]["where"] == "element 37 (row 0, column 37)"


def test_batches_become_windows_of_their_operations_over_their_seconds() -> None:
    found = probe.windowed([(0.0, 2e12, 1.0), (2.0, 2e12, 1.0), (5.5, 3e12, 1.0)], 5.0)
    assert found == [{"t": 0.0, "tflops": 2.0}, {"t": 5.5, "tflops": 3.0}]


# ---- NVML, recorded ----------------------------------------------------------------------------------------


class Nvml:
    """pynvml as the watch sees it, answering from fields; constants and errors are pynvml's."""

    NVMLError = pynvml.NVMLError
    NVMLError_Timeout = pynvml.NVMLError_Timeout

    def __init__(self, events_error: int | None = None) -> None:
        self.ecc = {pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED: 4, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED: 0}
        self.events_error = events_error
        self.xids = [79]

    def __getattr__(self, name: str) -> Any:
        return getattr(pynvml, name)

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        return uuid

    def nvmlDeviceGetTotalEccErrors(self, handle: str, kind: int, counter: int) -> int:
        return self.ecc[kind]

    def nvmlDeviceGetRemappedRows(self, handle: str) -> tuple[int, int, int, int]:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        return 612_345  # milliwatts

    def nvmlDeviceGetClockInfo(self, handle: str, clock: int) -> int:
        return 1755

    def nvmlDeviceGetTemperature(self, handle: str, sensor: int) -> int:
        return 61

    def nvmlDeviceGetFieldValues(self, handle: str, fields: list[int]) -> list[Any]:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: str) -> int:
        return 0x4 | 0x40  # sw_power_cap, hw_thermal (nvml.h)

    def nvmlEventSetCreate(self) -> str:
        return "set"

    def nvmlDeviceRegisterEvents(self, handle: str, kinds: int, events: str) -> None:
        if self.events_error is not None:
            raise pynvml.NVMLError(self.events_error)

    def nvmlEventSetWait_v2(self, events: str, timeout_ms: int) -> Any:
        if self.xids:
            return type("Event", (), {"eventData": self.xids.pop()})()
        raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, events: str) -> None:
        pass


def test_a_sample_reads_clock_power_temperatures_and_clock_events() -> None:
    watch = SoakWatch("GPU-1", 0.01, Nvml())
    assert watch.sample(1.5) == {
        "t": 1.5,
        "sm_mhz": 1755,
        "power_w": 612.345,
        "temp_c": 61,
        "mem_temp_c": None,  # not on this board
        "events": ["hw_thermal", "sw_power_cap"],
    }


def test_counters_keep_what_nvml_would_not_answer() -> None:
    found = read_counters(Nvml(), "GPU-1")
    assert found["ecc_corrected"] == 4 and found["ecc_uncorrected"] == 0
    assert found["remapped_rows"] == not_measured("remapped rows: Not Supported")


def test_the_watch_records_samples_and_xids_between_start_and_stop() -> None:
    watch = SoakWatch("GPU-1", 0.01, Nvml())
    watch.start(0.0)
    while not (watch.xids and len(watch.samples) >= 3):
        watch._stop.wait(0.01)
    record = watch.stop()
    assert record["samples_reason"] is None and len(record["samples"]) >= 3
    assert isinstance(record["xids"], list) and record["xids"][0]["xid"] == 79
    assert record["before"] == record["after"]


def test_xids_not_watched_are_said_so() -> None:
    watch = SoakWatch("GPU-1", 0.01, Nvml(events_error=pynvml.NVML_ERROR_NO_PERMISSION))
    watch.start(0.0)
    record = watch.stop()
    assert record["xids"] == not_measured("XID events: Insufficient Permissions")


# ---- the registry and the profile --------------------------------------------------------------------------


def test_the_soak_and_the_reference_workload_are_the_opt_in_families() -> None:
    # each takes minutes of full load: the burn-in tier's, never the standard suite's
    assert [f.name for f in FAMILIES if f.opt_in] == ["llama8b", "soak"]
    # after every family timed on the GPU: minutes of full load would heat the GPUs before their figures
    timed = [i for i, f in enumerate(FAMILIES) if f.gpu_timed or f.name == "training"]
    assert FAMILIES.index(SOAK) > max(timed)


@pytest.mark.parametrize(
    ("markexpr", "named"),
    [
        ("soak", True),
        ("soak or compute", True),
        ("cluster and soak", True),
        ("soak and not slow", True),
        ("", False),
        ("cluster", False),
        ("not compute", False),
        ("compute", False),
        ("not soak", False),
        ("soak and (", False),  # pytest's own -m reports the expression
    ],
)
def test_a_mark_expression_asks_for_the_soak_only_by_naming_it(markexpr: str, named: bool) -> None:
    assert named_by_markexpr(markexpr, SOAK) is named


def test_giving_the_soak_s_module_asks_for_it() -> None:
    assert named_by_argument(["tests_cluster/test_soak.py::test_memory_patterns"], SOAK)
    assert named_by_argument(["tests_cluster/test_soak.py"], SOAK)
    assert not named_by_argument(["tests_cluster/"], SOAK)
    assert not named_by_argument(["tests_cluster/test_soak.py"], COMPUTE)


def test_the_soak_section_loads_and_its_duration_is_bounded(here: Path) -> None:
    write(here, "p", f"name: p\n{BASE}soak:\n  duration_s: 0\n")
    assert "soak.duration_s" in error_of("p") and "greater than 0" in error_of("p")
    write(here, "q", f"name: q\n{BASE}soak:\n  slowdown_reasons: [hw_thermal, too_hot]\n")
    assert "soak.slowdown_reasons" in error_of("q")


def test_the_soak_section_refuses_a_matmul_size_fp8_s_reference_cannot_bound(here: Path) -> None:
    write(here, "p", f"name: p\n{BASE}soak:\n  matmul_size: 32768\n")
    error = error_of("p")
    assert "soak: matmul_size: 32768 is too large for the fp8 GEMM's reference check" in error
    assert "set soak.fp8: false" in error
    write(here, "q", f"name: q\n{BASE}soak:\n  matmul_size: 32768\n  fp8: false\n")
    write(here, "r", f"name: r\n{BASE}soak:\n  memory_coverage_min: 0\n")
    assert "soak.memory_coverage_min" in error_of("r")
    from acceptance.profile.loader import load

    loaded = rules.section(load("q").model)
    assert loaded.matmul_size == 32768 and loaded.memory_coverage_min == 0.5


@pytest.mark.parametrize("k", [8192, 16384, 20000, 1 << 30])
def test_fp8_s_error_bound_is_meaningful_or_absent_never_a_division_by_zero(k: int) -> None:
    from acceptance.schema.rounding import GAMMA_MAX, accumulation_gamma

    found = accumulation_gamma(k, U_FP8_ACCUMULATE)
    assert found is None if k == 1 << 30 else 0 < found[0] <= GAMMA_MAX  # type: ignore[index]
    bf16 = accumulation_gamma(8192, U_FP32)
    assert bf16 is not None and bf16[0] == 8192 * U_FP32 / (1 - 8192 * U_FP32)  # bf16's as it was


def _fp8_gemm(k: int, result: float) -> probe.Gemm:
    """An fp8-accumulated GEMM of ones (each element k) whose result is ``result`` everywhere."""
    a, b = torch.ones((2, k)), torch.ones((k, 2))
    g = probe.Gemm(
        "float8_e4m3fn", lambda out: torch.full((2, 2), result, dtype=torch.bfloat16), a, b, U_FP8_ACCUMULATE, 2
    )
    g.start()
    return g


def test_fp8_s_reference_check_fails_a_zero_where_k_was_wanted() -> None:
    """At the default k = 8192 Higham's gamma_k is 1 for fp8's accumulator: a 0 passed where 8192 was
    wanted. The probabilistic bound (0.057 of it) fails it, and passes the right result."""
    assert _fp8_gemm(8192, 0.0).record(spot_rows=2, window_s=5.0)["reference_errors"] == 4
    right = _fp8_gemm(8192, 8192.0).record(spot_rows=2, window_s=5.0)
    assert right["reference_errors"] == 0 and right["reference_checked"] == 4
    assert _fp8_gemm(16384, 0.0).record(spot_rows=2, window_s=5.0)["reference_errors"] == 4  # no ZeroDivisionError


def test_fp8_s_reference_check_past_any_bound_is_not_measured_never_a_pass() -> None:
    record = _fp8_gemm(1 << 15, 0.0).record(spot_rows=2, window_s=5.0)
    assert record["reference_checked"] == 0 and "no meaningful error bound for k = 32768" in str(
        record.get("reference_not_measured")
    )
    ranks = healthy(2)
    ranks[1]["gemm"][1] = gemm("float8_e4m3fn", 1200.0, reference_not_measured=record.get("reference_not_measured"))
    fig = counts(result(ranks))["soak.gemm_reference_errors"]
    assert fig.value == 0 and len(fig.unmeasured) == 1 and "rank 1: float8_e4m3fn: no meaningful" in fig.unmeasured[0]


def test_a_gpu_only_soak_bound_is_refused_on_a_cpu_profile() -> None:
    from acceptance.profile.metrics import device_problem

    assert device_problem("soak.xid_new", "cpu") is not None
    assert device_problem("soak.gemm_wrong_elements", "cpu") is None
    assert device_problem("soak.fp8_tflops_min", "cpu") is not None


def test_a_record_is_not_changed_by_the_rules() -> None:
    found = result(healthy())
    before = copy.deepcopy(found)
    rules.counts(found), rules.table(found), rules.speed_figures(found, "bfloat16")
    assert found == before


# ---- the report --------------------------------------------------------------------------------------------


def test_the_report_draws_each_quantity_against_time_a_line_per_gpu() -> None:
    from acceptance.families.soak import SOAK
    from acceptance.families.soak import report as page
    from acceptance.reports import plots, sections
    from acceptance.reports.blocks import Heading, Image, Table

    found = result(healthy(2))
    charts = page.charts(found)
    assert [c.title for c in charts] == [
        "bfloat16 GEMM (with its checks)",
        "float8_e4m3fn GEMM (with its checks)",
        "SM clock",
        "power",
        "GPU temperature",
        "memory temperature",
    ]
    assert [line.label for line in charts[3].lines] == ["gpu-0 GPU 0", "gpu-0 GPU 1"]
    assert charts[3].lines[0].y[0] == 690.0 and len(charts[3].lines[0].x) == 120
    blocks = sections.section(SOAK, doc(probes=[{"name": "soak", "key": "soak", "status": "ok", "result": found}]))
    assert blocks[0] == Heading("Soak")
    assert any(isinstance(b, Image) for b in blocks) is plots.available()
    table = next(b for b in blocks if isinstance(b, Table))
    assert [row[0] for row in table.rows] == [rules.label(r) for r in found["ranks"]]


def test_a_cpu_soak_draws_its_tflops_alone() -> None:
    from acceptance.families.soak import report as page

    found = result([rank(r, gpu=False, gemm=[gemm()]) for r in range(2)])
    assert [c.title for c in page.charts(found)] == ["bfloat16 GEMM (with its checks)"]


@pytest.mark.e2e
def test_the_device_soak_script_ends_its_matmul_loop_when_it_is_killed(tmp_path: Path) -> None:
    """benchmarks/soak.sh killed during the slowed step: its trap ends the matmul loop it started (here
    stand-ins for python3, nvidia-smi, timeout and the delay's sleep record the loop's and pytest's pids)."""
    import contextlib
    import os
    import shutil
    import signal
    import subprocess
    import time

    real_sleep = shutil.which("sleep")
    if shutil.which("bash") is None or real_sleep is None:
        pytest.skip("no bash or sleep")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    stubs = {
        "python3": f"""case "$*" in
  *matmul_loop.py*) echo $$ > "$MARK/loop.pid"; exec {real_sleep} 60 ;;
  *pytest*) echo $$ > "$MARK/pytest.pid"; exec {real_sleep} 60 ;;
esac""",
        "nvidia-smi": "exit 0",
        "timeout": 'shift; exec "$@"',
        "sleep": f"exec {real_sleep} 0.1",
    }
    for name, body in stubs.items():
        (bin_ / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_ / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "OUT": str(tmp_path), "MARK": str(tmp_path)}
    root = Path(__file__).resolve().parent.parent
    script = subprocess.Popen(["bash", "benchmarks/soak.sh", "p", "0", "slowed"], cwd=root, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    loop = pytest_ = 0
    try:
        for _ in range(200):
            if (tmp_path / "loop.pid").exists() and (tmp_path / "pytest.pid").exists():
                loop = int((tmp_path / "loop.pid").read_text())
                pytest_ = int((tmp_path / "pytest.pid").read_text())
                break
            time.sleep(0.05)
        assert loop and pytest_, "the stand-ins did not start"
        script.send_signal(signal.SIGTERM)  # the script alone: bash runs its trap once pytest ends
        os.kill(pytest_, signal.SIGTERM)
        assert script.wait(timeout=10) != 0
        time.sleep(0.2)
        assert not Path(f"/proc/{loop}").exists() or "Z" in Path(f"/proc/{loop}/stat").read_text().split()[2]
    finally:
        for pid in (loop, pytest_):
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if script.poll() is None:
            script.kill()
