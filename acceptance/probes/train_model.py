"""The models the training probe runs: transformers configs (never downloaded), random weights, their FLOPs.

FLOPs per token follow nanoGPT's ``estimate_mfu`` (after the PaLM paper, appendix B):
``6 N + 12 L H Q T``, where N counts the parameters that take part in a matrix product (every parameter but
the embedding lookups; an input embedding tied to the output layer counts once, as the output layer), L
the layers, H the heads, Q the head size and T the sequence length. Models are transformers
``PreTrainedModel`` objects, typed ``Any`` here.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from acceptance.families.training.figures import ModelShape

# GPT-2 vocabulary padded from 50,257 to 50,304 (a multiple of 64), as nanoGPT does: the output layer's
# matrix product runs on friendlier shapes, and the synthetic tokens never use the padding.
GPT2_VOCAB = 50304
SHAPES: dict[str, tuple[str, dict[str, Any]]] = {
    "tiny": (
        "gpt2",
        {"n_layer": 2, "n_head": 4, "n_embd": 128, "vocab_size": 512, "bos_token_id": 0, "eos_token_id": 0},
    ),
    # GPT-2 small and medium (Radford et al. 2019, table 2)
    "gpt2-124m": ("gpt2", {"n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": GPT2_VOCAB}),
    "gpt2-355m": ("gpt2", {"n_layer": 24, "n_head": 16, "n_embd": 1024, "vocab_size": GPT2_VOCAB}),
    # Llama-3.2-1B's layer shape (hidden 2048, MLP 8192, 16 layers, grouped-query attention) with 128-wide
    # heads, which flash attention runs best, and the Llama-2 vocabulary size: about 1.1 B parameters
    "llama-1b": (
        "llama",
        {
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_hidden_layers": 16,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "vocab_size": 32000,
            "tie_word_embeddings": False,
        },
    ),
    # Llama-3.1-8B as Meta publishes it (meta-llama/Llama-3.1-8B, config.json): hidden 4096, MLP 14336, 32
    # layers, 32 heads, 8 KV heads, vocabulary 128,256, RoPE theta 500,000, untied embeddings. Its "llama3"
    # RoPE scaling is left out: it moves the rotary frequencies only (no FLOP, no memory), and transformers
    # spells it differently across releases.
    "llama-3.1-8b": (
        "llama",
        {
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "vocab_size": 128256,
            "rope_theta": 500000.0,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": False,
        },
    ),
    # the same config at toy width (heads to KV heads 4:1, as the 8B's), for the CPU path
    "llama-3.1-8b-tiny": (
        "llama",
        {
            "hidden_size": 64,
            "intermediate_size": 224,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "vocab_size": 512,
            "rope_theta": 500000.0,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": False,
        },
    ),
}


def build_config(name: str, seq_len: int, layers: int | None = None) -> Any:
    """The transformers config of the shape ``name``; ``layers``: that many of its decoder layers (a model
    cut to what fits), else all of them."""
    from transformers import GPT2Config, LlamaConfig

    family, shape = SHAPES[name]
    if layers is not None:
        shape = {**shape, "n_layer" if family == "gpt2" else "num_hidden_layers": layers}
    if family == "gpt2":
        # no dropout: pre-training practice (nanoGPT), and the strategies then see the same numerics
        return GPT2Config(
            **shape, n_positions=max(seq_len, 1024), resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False
        )
    return LlamaConfig(**shape, max_position_embeddings=max(seq_len, 2048), use_cache=False)


def build_model(name: str, seq_len: int, device: torch.device, seed: int, layers: int | None = None) -> nn.Module:
    """Random weights from ``seed``, built on ``device`` directly (no host copy of a large model); ``layers``:
    that many decoder layers of the shape (``build_config``)."""
    from transformers import AutoModelForCausalLM

    config = build_config(name, seq_len, layers)
    torch.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.manual_seed(seed)
    with device:
        # sdpa dispatches to flash or memory-efficient attention kernels where they apply
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")  # fp32 weights
    model.loss_type = "ForCausalLM"  # transformers' token-level cross-entropy, named to skip its fallback warning
    model.train()
    return model  # type: ignore[no-any-return]


def decoder_layers(model: Any) -> nn.ModuleList:
    """The repeated transformer blocks (GPT-2: ``transformer.h``, Llama: ``model.layers``)."""
    count = model.config.num_hidden_layers
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) == count:
            return module
    raise ValueError(f"{type(model).__name__} has no list of {count} decoder layers")


def matmul_params(model: Any) -> int:
    """Parameters in matrix products: all of them but embedding lookups not tied to the output layer."""
    output = model.get_output_embeddings()
    tied = {id(output.weight)} if output is not None else set()
    total = sum(p.numel() for p in model.parameters())  # parameters() yields a tied weight once
    lookups = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Embedding) and id(m.weight) not in tied)
    return total - lookups


def attention_shape(config: Any) -> tuple[int, int, int]:
    """(layers, heads, head size) from a transformers config."""
    heads = int(config.num_attention_heads)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return int(config.num_hidden_layers), heads, int(head_dim)


def flops_per_token(n_params: int, layers: int, heads: int, head_dim: int, seq_len: int) -> int:
    """Training FLOPs per token, forward and backward: 6N + 12·L·H·Q·T (nanoGPT ``estimate_mfu``, PaLM app. B)."""
    return 6 * n_params + 12 * layers * heads * head_dim * seq_len


def describe(model: Any, seq_len: int) -> ModelShape:
    layers, heads, head_dim = attention_shape(model.config)
    n = matmul_params(model)
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "matmul_params": n,
        "layers": layers,
        "heads": heads,
        "head_dim": head_dim,
        "vocab_size": int(model.config.vocab_size),
        "flops_per_token": flops_per_token(n, layers, heads, head_dim, seq_len),
        "flops_formula": "6N + 12*L*H*Q*T (nanoGPT estimate_mfu; PaLM appendix B)",
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
    }


# What one parameter costs in training state, over the ranks that shard it. FSDP2 under its bf16
# MixedPrecisionPolicy keeps fp32 parameters and gradients and AdamW's two fp32 moments: 16 bytes. DeepSpeed's
# bf16 ZeRO keeps bf16 weights and gradients beside fp32 master weights, gradients and the two moments: 20.
FSDP_STATE_BYTES = 16
ZERO_STATE_BYTES = 20
# The share of a GPU's memory the estimate may fill: the rest for what it leaves out (the caching allocator's
# fragmentation, NCCL's and cuBLAS's workspaces, compiled graphs' buffers). Eight layers of the 8B shape on
# one 80 GB H100 are estimated at 64 GB and measured at 53.8 GiB peak (/work/shared/REFERENCE.md, 2026-12-06);
# the whole model over 4x H200 at 84 GB, measured at 82-86 GiB (2026-11-27): the estimate is within about 10%.
MEMORY_SHARE = 0.8


def layer_params(config: Any) -> int:
    """Parameters of one Llama decoder layer: attention (q, k, v, o), the gated MLP, two RMSNorm weights."""
    hidden, inter = int(config.hidden_size), int(config.intermediate_size)
    head_dim = getattr(config, "head_dim", None) or hidden // int(config.num_attention_heads)
    q = int(config.num_attention_heads) * head_dim
    kv = int(config.num_key_value_heads) * head_dim
    return 2 * hidden * q + 2 * hidden * kv + 3 * hidden * inter + 2 * hidden


def training_bytes(config: Any, layers: int, world: int, tokens: int, state_bytes: int = FSDP_STATE_BYTES) -> int:
    """Peak memory per GPU of a Llama shape with ``layers`` decoder layers trained over ``world`` sharded ranks
    on ``tokens`` tokens per step and GPU, in bf16 with AdamW, no activation checkpointing:

    - the sharded training state (``state_bytes`` per parameter, over ``world``);
    - each layer's activations kept for the backward, in bf16: its input and the tensors around attention
      (about 6 hidden widths per token) and the MLP's gate, up, SiLU and product (4 MLP widths per token);
    - the logits, in bf16 and in fp32 for the loss (6 bytes per token and vocabulary entry);
    - two layers gathered whole at a time (the one running and the one prefetched): bf16 weights and fp32
      gradients before they are reduced."""
    hidden, inter, vocab = int(config.hidden_size), int(config.intermediate_size), int(config.vocab_size)
    per_layer = layer_params(config)
    outside = 2 * vocab * hidden + hidden  # untied embedding and output layer, the final norm
    state = state_bytes * (outside + layers * per_layer) // world
    activations = layers * tokens * (6 * hidden + 4 * inter) * 2
    logits = tokens * vocab * 6
    gathered = 2 * per_layer * (2 + 4)
    return state + activations + logits + gathered


def layers_that_fit(
    config: Any, world: int, memory_bytes: int, tokens: int, state_bytes: int = FSDP_STATE_BYTES
) -> int:
    """The most decoder layers of ``config`` (at most all of them, at least one) whose training estimate
    (``training_bytes``) stays within ``MEMORY_SHARE`` of ``memory_bytes``."""
    budget = MEMORY_SHARE * memory_bytes
    counts = range(1, int(config.num_hidden_layers) + 1)
    fitting = [n for n in counts if training_bytes(config, n, world, tokens, state_bytes) <= budget]
    return fitting[-1] if fitting else 1
