"""A ZeRO-3 engine is freed by the training probe's teardown, so the next strategy in the job starts clean."""

from __future__ import annotations

import functools
import gc
import weakref
from pathlib import Path
from typing import Any, cast

import pytest
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import FileStore  # typed here; torch.distributed re-exports it

from acceptance.families.training import Training
from acceptance.families.training.figures import TrainingConfig
from acceptance.probes import train_ds, train_model, train_strategies


def test_clear_method_caches_reaches_a_cache_under_a_wrapper() -> None:
    def wrap(func: Any) -> Any:  # like DeepSpeed's instrument_w_nvtx: the cache lives in the closure
        def wrapped(*args: Any) -> Any:
            return func(*args)

        return wrapped

    class Holder:
        @wrap
        @functools.lru_cache(maxsize=None)  # noqa: B019, UP033 - the leak under test, as DeepSpeed writes it
        def cached(self, x: int) -> int:
            return x

    holder = Holder()
    holder.cached(1)
    alive = weakref.ref(holder)
    del holder
    gc.collect()
    assert alive() is not None  # the class-level cache holds it
    assert train_strategies.clear_method_caches(Holder) == 1
    gc.collect()
    assert alive() is None


@pytest.mark.e2e
def test_zero3_engine_model_and_optimizer_freed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(name, value)  # as torchrun sets them for its ranks
    import deepspeed

    dist.init_process_group("gloo", store=FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        # the profile's training section as plain data, as the probe's spec carries it
        training = cast(
            TrainingConfig,
            Training(micro_batch=2, grad_accum=1, precision="fp32", grad_clip=1.0).model_dump(mode="json"),
        )
        model = train_model.build_model("tiny", 64, torch.device("cpu"), seed=0)
        shape = train_strategies.model_shape(model)
        config, _ = train_ds.build("zero3", training, None, 1, shape, on_gpu=False)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config, dist_init_required=False)
        tokens = torch.randint(0, 512, (2, 64))
        for _ in range(2):  # the second step runs on the first one's trace, through the cached method
            engine.backward(engine(input_ids=tokens, labels=tokens).loss)
            engine.step()
        refs = [weakref.ref(x) for x in (engine, engine.optimizer, model)]
        train_strategies.close_deepspeed(engine)
        del engine, model, optimizer, _
        gc.collect()
        assert [r() is None for r in refs] == [True, True, True]
    finally:
        dist.destroy_process_group()
