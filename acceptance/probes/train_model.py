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
}


def build_config(name: str, seq_len: int) -> Any:
    from transformers import GPT2Config, LlamaConfig

    family, shape = SHAPES[name]
    if family == "gpt2":
        # no dropout: pre-training practice (nanoGPT), and the strategies then see the same numerics
        return GPT2Config(
            **shape, n_positions=max(seq_len, 1024), resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False
        )
    return LlamaConfig(**shape, max_position_embeddings=max(seq_len, 2048), use_cache=False)


def build_model(name: str, seq_len: int, device: torch.device, seed: int) -> nn.Module:
    """Random weights from ``seed``, built on ``device`` directly (no host copy of a large model)."""
    from transformers import AutoModelForCausalLM

    config = build_config(name, seq_len)
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
