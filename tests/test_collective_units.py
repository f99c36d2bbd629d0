"""The collectives' units and the dtype table: both halves list the same ops, sizing and busbw factors are
nccl-tests', and the torch-free dtype table agrees with torch."""

from __future__ import annotations

import gc
import statistics
import weakref
from typing import get_args

import pytest
import torch
import torch.distributed as dist

from acceptance.families.collectives import Collectives, figures
from acceptance.families.compute import Compute
from acceptance.families.internode import Internode
from acceptance.probes import nccl_loop
from acceptance.probes.ops import Op
from acceptance.probes.rank import TORCH_DTYPES
from acceptance.schema.collectives import COLLECTIVE_OPS, OPS
from acceptance.schema.dtypes import DTYPE_NAMES, DTYPES


def test_each_op_is_defined_once_with_a_torch_call_and_an_nccl_call_the_c_loop_binds() -> None:
    assert list(OPS) == list(COLLECTIVE_OPS)
    for c in OPS.values():
        assert callable(getattr(dist, c.torch.function)), c.name
        # an entry point the C loop calls through its own prototype, or a group of sends and receives
        assert c.nccl.entry is None or nccl_loop.SHAPES[c.nccl.entry] is c.nccl.prototype, c.name
        assert c.nccl.entry is not None or c.nccl.grouped is not None, c.name


@pytest.mark.parametrize("section", [Collectives, Internode])
def test_the_profile_accepts_exactly_the_units_ops(section: type[Collectives] | type[Internode]) -> None:
    (choices,) = get_args(section.model_fields["ops"].annotation)
    assert get_args(choices) == COLLECTIVE_OPS
    assert section.model_validate({"ops": list(COLLECTIVE_OPS)}).ops == list(COLLECTIVE_OPS)
    with pytest.raises(ValueError, match="all_reduce"):
        section.model_validate({"ops": ["allreduce"]})


# nccl-tests src/*.cu, GetBw(): all_reduce 2(n-1)/n; all_gather, reduce_scatter, alltoall (n-1)/n;
# broadcast, reduce, sendrecv 1. Written out per world size, not recomputed from the same formula.
NCCL_TESTS_FACTORS = {
    "all_reduce": {2: 1.0, 4: 1.5, 8: 1.75, 16: 1.875},
    "all_gather": {2: 0.5, 4: 0.75, 8: 0.875, 16: 0.9375},
    "reduce_scatter": {2: 0.5, 4: 0.75, 8: 0.875, 16: 0.9375},
    "all_to_all": {2: 0.5, 4: 0.75, 8: 0.875, 16: 0.9375},
    "broadcast": {2: 1.0, 4: 1.0, 8: 1.0, 16: 1.0},
    "reduce": {2: 1.0, 4: 1.0, 8: 1.0, 16: 1.0},
    "sendrecv": {2: 1.0, 4: 1.0, 8: 1.0, 16: 1.0},
}


@pytest.mark.parametrize(
    ("op", "n", "factor"), [(op, n, f) for op, table in NCCL_TESTS_FACTORS.items() for n, f in table.items()]
)
def test_busbw_factor(op: str, n: int, factor: float) -> None:
    assert OPS[op].busbw_factor(n) == pytest.approx(factor)


def test_each_op_names_its_nccl_tests_program() -> None:
    # NVIDIA/nccl-tests src/<name>.cu, each built as <name>_perf
    names = {"all_to_all": "alltoall"}
    assert {op: c.nccl_tests for op, c in OPS.items()} == {op: names.get(op, op) for op in COLLECTIVE_OPS}


def test_every_op_has_a_factor() -> None:
    assert set(OPS) == set(NCCL_TESTS_FACTORS)


# (op, requested bytes, ranks, bytes per element) -> (send, recv, part, bytes moved), worked out by hand
# from nccl-tests' GetCollByteCount: a rank's part is (count / nranks) rounded down to 16 bytes
SIZINGS = [
    (("all_reduce", 2**20, 3, 4), (262144, 262144, 262144, 2**20)),
    (("broadcast", 2**20, 3, 2), (524288, 524288, 524288, 2**20)),
    (("sendrecv", 1000, 2, 4), (250, 250, 250, 1000)),
    (("all_gather", 2**20, 2, 2), (262144, 524288, 262144, 2**20)),
    (("all_gather", 2**20, 3, 2), (174760, 524280, 174760, 1048560)),  # 524288 / 3 = 174762.7 -> 174760
    (("reduce_scatter", 2**20, 3, 2), (524280, 174760, 174760, 1048560)),
    (("all_to_all", 2**20, 3, 4), (262140, 262140, 87380, 1048560)),  # 262144 / 3 = 87381.3 -> 87380
    (("all_gather", 64, 8, 4), (4, 32, 4, 128)),  # 2 elements a rank, raised to one 16-byte grain
    (("reduce_scatter", 2**30, 1000, 2), (536864000, 536864, 536864, 1073728000)),  # 536870.9 -> 536864
]


@pytest.mark.parametrize(("args", "want"), SIZINGS)
def test_sizing_is_nccl_tests(args: tuple[str, int, int, int], want: tuple[int, int, int, int]) -> None:
    op, nbytes, ranks, elem = args
    sizing = OPS[op].sizing(nbytes, ranks, elem)
    assert (sizing.send, sizing.recv, sizing.part, sizing.nbytes) == want
    assert sizing.count * elem == sizing.nbytes


def test_figures_use_the_bytes_moved_and_the_mean_over_ranks() -> None:
    found = figures("all_gather", 1048560, [[1e-3], [3e-3]], 3)
    assert found["time_us"] == pytest.approx(2000)
    assert found["time_us_max"] == pytest.approx(3000)
    assert found["slowest_rank"] == 1
    assert found["algbw_gbps"] == pytest.approx(1048560 / 2e-3 / 1e9)
    assert found["busbw_gbps"] == pytest.approx(1048560 / 2e-3 / 1e9 * 2 / 3)
    assert found["window_spread"] == 0


def test_a_ranks_time_is_its_median_window() -> None:
    # rank 0: one window disturbed (9 ms); rank 1 steady: neither time moves with the disturbed window
    found = figures("all_reduce", 4_000_000, [[1e-3, 9e-3, 1e-3, 1.1e-3, 1e-3], [1e-3, 1e-3, 1.2e-3, 1e-3, 1e-3]], 2)
    assert found["time_us"] == pytest.approx(1000)
    assert found["busbw_gbps"] == pytest.approx(4_000_000 / 1e-3 / 1e9)  # all_reduce on 2 ranks: factor 1
    windows = found["busbw_windows_gbps"]
    assert len(windows) == 5
    assert windows[1] == pytest.approx(4_000_000 / 5e-3 / 1e9)  # a window's time: the mean over ranks
    assert min(windows) == windows[1]
    assert found["window_spread"] == pytest.approx((max(windows) - min(windows)) / statistics.median(windows))


def test_one_stall_moves_nccl_tests_time_but_not_the_latency() -> None:
    # all_to_all at 64 B on a healthy 4x H200 (docs/measurements.md): five timed windows whose times per call,
    # from the evidence's window busbw, were 68.3 (a stall of the host), 13.9, 13.9, 14.0 and 13.3 us; the
    # whole loop read 28.6 us a call (nccl-tests' time)
    windows = [68.3e-6, 13.9e-6, 13.9e-6, 14.0e-6, 13.3e-6]
    found = figures("all_to_all", 64, [windows] * 4, 4, [28.6e-6] * 4)
    assert found["time_us"] == pytest.approx(28.6)
    assert found["latency_us"] == pytest.approx(13.9)  # the median window
    assert found["latency_us"] < found["time_us"] / 2  # a bound between them fails the stall alone


def test_a_slow_path_moves_the_latency() -> None:
    # every window twice as slow (a node whose small messages take a slower path): the latency moves with it
    fast = figures("all_reduce", 64, [[10e-6] * 5, [10.2e-6] * 5], 2)
    slow = figures("all_reduce", 64, [[20e-6] * 5, [20.4e-6] * 5], 2)
    assert fast["latency_us"] == pytest.approx(10.1)
    assert slow["latency_us"] == pytest.approx(20.2)


def test_figures_need_every_rank_to_time_the_same_windows() -> None:
    with pytest.raises(ValueError):
        figures("all_reduce", 1000, [[1e-3, 1e-3], [1e-3]], 2)


def test_one_dtype_table() -> None:
    assert list(TORCH_DTYPES) == list(DTYPES) == list(DTYPE_NAMES)
    assert get_args(Collectives.model_fields["dtype"].annotation) == DTYPE_NAMES
    assert get_args(Compute.model_fields["matmul_dtype"].annotation) == DTYPE_NAMES
    for name in DTYPE_NAMES:
        assert Collectives.model_validate({"dtype": name}).dtype == name
        assert Compute.model_validate({"matmul_dtype": name}).matmul_dtype == name


@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_dtype_table_agrees_with_torch(name: str) -> None:
    spec, dtype = DTYPES[name], TORCH_DTYPES[name]
    assert torch.tensor([], dtype=dtype).element_size() == spec.nbytes
    assert torch.finfo(dtype).eps == 2.0 ** (1 - spec.significand_bits)  # eps = 2**-(p-1)
    # every integer up to 2**p survives the type; the next one does not
    top = spec.exact_integers
    assert int(torch.tensor(float(top), dtype=torch.float64).to(dtype).item()) == top
    assert int(torch.tensor(float(top + 1), dtype=torch.float64).to(dtype).item()) != top + 1


def test_the_data_check_counts_nan_and_a_changed_element_as_wrong() -> None:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
    try:
        op = Op("all_reduce", 256, "float32", torch.device("cpu"))
        op.fill()
        assert op.wrong() == 0
        op.out[3] = float("nan")
        op.out[5] += 1
        assert op.wrong() == 2
    finally:
        dist.destroy_process_group()


def test_each_op_s_torch_call_gives_its_result_and_a_dropped_op_frees_its_buffers_at_once() -> None:
    """One rank: every op's call through its definition leaves what the data check expects; the call holds the
    op's tensors, not the op, so dropping the op frees it (and its hold on the buffers) without the cycle
    collector (a sweep frees one size's buffers before it makes the next's)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
    collecting = gc.isenabled()
    gc.disable()
    try:
        for name in OPS:
            op = Op(name, 4096, "float32", torch.device("cpu"))
            op.fill()
            called = name != "sendrecv"  # gloo makes no pair from a rank to itself; two ranks: the local-cpu suite
            if called:
                op()
            # the op itself, not its tensors: torch.distributed may keep a finished call's tensors a while
            # (its logger, a work object), which is no reference of the suite's
            wrong, held = op.wrong(), weakref.ref(op)
            del op  # (pytest's rewritten assert would hold a bound method of it: the figures are read first)
            assert wrong == 0 or not called, name
            assert held() is None, name  # no cycle through its bound call: freed with no collector
    finally:
        if collecting:
            gc.enable()
        dist.destroy_process_group()
