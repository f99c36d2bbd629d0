"""DeepSpeed configs for the ZeRO strategies: the built-in one, a user's JSON merged on top, ``"auto"`` resolved.

DeepSpeed rejects the string ``"auto"`` (a transformers Trainer convention); the run resolves each one to the
integer or flag it actually uses, with the rules of transformers' ``HfTrainerDeepSpeedConfig``
(integrations/deepspeed.py), and keeps the resolved config in the evidence. A user's value that contradicts the
run (another micro-batch, stage or precision) is an error rather than a silent change of what is measured.
No ``optimizer`` section: the probe hands DeepSpeed a torch AdamW, so no JIT-built op is needed.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

from acceptance.families.training.figures import TrainingConfig
from acceptance.json_types import JSONObject, JSONValue

# (hidden size, fully qualified class of the decoder layer): what the built-in configs are sized from
Shape = tuple[int, str]
STAGE = {"zero1": 1, "zero2": 2, "zero3": 3, "zero3_offload": 3}
BUCKET = 500_000_000  # elements; DeepSpeed's own default for reduce/allgather buckets (runtime/zero/config.py)


class DeepSpeedConfigError(ValueError):
    """A user's DeepSpeed config that the run cannot honour; the message names the key and what was expected."""


def base_strategy(name: str, training: TrainingConfig) -> str:
    if name in STAGE:
        return name
    return str(training["deepspeed"][name]["base"])


def builtin(base: str, training: TrainingConfig, world_size: int, shape: Shape, on_gpu: bool) -> JSONObject:
    """What the probe runs when the profile names a ZeRO strategy and gives no config of its own."""
    zero: JSONObject = {
        "stage": STAGE[base],
        "contiguous_gradients": True,
        "reduce_bucket_size": BUCKET,
        "allgather_bucket_size": BUCKET,
        # overlap needs a side stream; the CPU accelerator has none to overlap with
        "overlap_comm": on_gpu,
    }
    if STAGE[base] == 3:
        zero.update(_stage3(shape, on_gpu))
    if base == "zero3_offload":
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": on_gpu}
        zero["offload_param"] = {"device": "cpu", "pin_memory": on_gpu}
    mb, ga = int(training["micro_batch"]), int(training["grad_accum"])
    config: JSONObject = {
        "train_micro_batch_size_per_gpu": mb,
        "gradient_accumulation_steps": ga,
        "train_batch_size": mb * ga * world_size,
        "gradient_clipping": float(training["grad_clip"]),
        "zero_optimization": zero,
        "bf16": {"enabled": training["precision"] == "bf16"},
        "fp16": {"enabled": training["precision"] == "fp16", "loss_scale": 0, "initial_scale_power": 16},
        # a torch optimizer as the client optimizer, on the GPU or (offload) on the host
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 1_000_000_000,
        "wall_clock_breakdown": False,
    }
    return config


def _stage3(shape: Shape, on_gpu: bool) -> JSONObject:
    hidden, layer_class = shape
    # transformers' "auto" rules for stage 3 (integrations/deepspeed.py), sized from the model's width
    out: JSONObject = {
        "stage3_prefetch_bucket_size": int(0.9 * hidden * hidden),
        "stage3_param_persistence_threshold": 10 * hidden,
        "stage3_max_live_parameters": 1_000_000_000,
        "stage3_max_reuse_distance": 1_000_000_000,
    }
    if on_gpu:
        # Each decoder layer gathered and released whole (DeepSpeed's leaf modules): hooks on 16 layers rather
        # than on every linear and norm inside them. With a hook per submodule the GPU waits on Python:
        # llama-1b on one H100 ran at 52-58% GPU utilisation and 26,495-29,029 tokens/s over three jobs, with
        # leaf layers at 88-92% and 42,685-44,999 (docs/measurements.md, findings). Not on the CPU accelerator:
        # DeepSpeed 0.19's zero_grad calls record_stream on a leaf layer's gradient, which a CPU tensor lacks.
        out["leaf_module"] = {"classes": [layer_class]}
    return out


def _auto_values(training: TrainingConfig, world_size: int, hidden: int, stage: int) -> JSONObject:
    mb, ga = int(training["micro_batch"]), int(training["grad_accum"])
    return {
        "train_micro_batch_size_per_gpu": mb,
        "gradient_accumulation_steps": ga,
        "train_batch_size": mb * ga * world_size,
        "gradient_clipping": float(training["grad_clip"]),
        "bf16.enabled": training["precision"] == "bf16",
        "fp16.enabled": training["precision"] == "fp16",
        "zero_optimization.stage": stage,
        "zero_optimization.reduce_bucket_size": hidden * hidden,
        "zero_optimization.stage3_prefetch_bucket_size": int(0.9 * hidden * hidden),
        "zero_optimization.stage3_param_persistence_threshold": 10 * hidden,
    }


def resolve_auto(config: JSONObject, values: Mapping[str, JSONValue], where: str) -> tuple[JSONObject, JSONObject]:
    """Replace every ``"auto"`` by its value; returns the new config and what was resolved (dotted key -> value)."""
    out = copy.deepcopy(config)
    resolved: JSONObject = {}

    def walk(node: JSONObject, prefix: str) -> None:
        for key, value in node.items():
            dotted = f"{prefix}{key}"
            if isinstance(value, dict):
                walk(value, f"{dotted}.")
            elif value == "auto":
                if dotted not in values:
                    known = ", ".join(sorted(values))
                    raise DeepSpeedConfigError(
                        f'{where}: {dotted} = "auto", but the run has no value for it ("auto" works for: {known})'
                    )
                node[key] = resolved[dotted] = values[dotted]

    walk(out, "")
    return out, resolved


def merge(base: JSONObject, over: JSONObject) -> JSONObject:
    out = copy.deepcopy(base)
    for key, value in over.items():
        mine = out.get(key)
        if isinstance(value, dict) and isinstance(mine, dict):
            out[key] = merge(mine, value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _get(config: JSONObject, dotted: str) -> JSONValue:
    node: JSONValue = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _check(config: JSONObject, values: Mapping[str, JSONValue], where: str) -> None:
    if "optimizer" in config:
        raise DeepSpeedConfigError(
            f"{where}: an optimizer section makes DeepSpeed build its own (JIT-compiled) optimizer; the run hands it "
            "a torch AdamW. Remove the optimizer section"
        )
    must_match = (
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
        "train_batch_size",
        "zero_optimization.stage",
        "bf16.enabled",
        "fp16.enabled",
    )
    for key in must_match:
        got = _get(config, key)
        if got is not None and got != values[key]:
            raise DeepSpeedConfigError(
                f"{where}: {key} = {got!r}, but this run uses {values[key]!r} (from the profile's training section "
                'and the world size); set it to "auto" or to that value'
            )


def build(
    name: str, training: TrainingConfig, user: JSONObject | None, world_size: int, shape: Shape, on_gpu: bool
) -> tuple[JSONObject, JSONObject]:
    """The config DeepSpeed gets for strategy ``name``, and the ``"auto"`` keys resolved on the way."""
    base, hidden = base_strategy(name, training), shape[0]
    config = builtin(base, training, world_size, shape, on_gpu)
    if not user:
        return config, {}
    where = f"training.deepspeed.{name}.config"
    values = _auto_values(training, world_size, hidden, STAGE[base])
    resolved_user, resolved = resolve_auto(user, values, where)
    _check(resolved_user, values, where)
    return merge(config, resolved_user), resolved
