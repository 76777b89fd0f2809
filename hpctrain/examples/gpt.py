"""A GPT-style decoder LM on a synthetic Markov corpus, with hooks for FSDP, tensor and pipeline parallel.

Select it with ``train.entrypoint: hpctrain.examples.gpt:build``. ``train.options`` sizes it:
``size: tiny|small|1b`` picks a preset and any of ``vocab, d_model, n_layers, n_heads, seq_len,
tied, samples, eval_samples`` overrides it. The corpus is a fixed random first-order Markov chain
(every token has four successors with skewed probabilities), so the loss falls from ln(vocab) towards
the chain's entropy (about 1.1 nats) and runs are repeatable without downloading anything.

Parameter names are layout-independent (blocks live in a ``ModuleDict`` keyed by their index, and
pipeline stages keep the names of the blocks they hold), so a checkpoint saved under one layout loads
under any other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from hpctrain.runtime.task import Task

SUCCESSOR_PROBS = (0.55, 0.25, 0.15, 0.05)
"""Chance of each of a token's four successors; entropy ≈ 1.14 nats, the loss floor."""


@dataclass(frozen=True)
class GPTConfig:
    vocab: int
    d_model: int
    n_layers: int
    n_heads: int
    seq_len: int
    tied: bool = False
    samples: int = 1024
    eval_samples: int = 128

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"gpt: d_model={self.d_model} is not divisible by n_heads={self.n_heads}")


PRESETS: dict[str, GPTConfig] = {
    # CI: trains in seconds on one core; 4 layers and 4 heads so pp=4, tp=4 and 2x2 virtual stages split.
    "tiny": GPTConfig(vocab=64, d_model=32, n_layers=4, n_heads=4, seq_len=32),
    "small": GPTConfig(vocab=4096, d_model=512, n_layers=8, n_heads=8, seq_len=256, samples=8192),
    # About 1.05B parameters (untied); fits FSDP on 8 GPUs of 80 GB with room for activations.
    "1b": GPTConfig(vocab=32768, d_model=2048, n_layers=18, n_heads=16, seq_len=2048, samples=16384),
}


def config_from_options(options: dict[str, Any]) -> GPTConfig:
    """The preset named by ``options['size']`` (default tiny) with the other options overriding it."""
    options = dict(options)
    size = options.pop("size", "tiny")
    if size not in PRESETS:
        raise ValueError(f"gpt: size {size!r} is not one of {', '.join(PRESETS)}")
    known = {f.name for f in fields(GPTConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(
            f"gpt: unknown options {', '.join(unknown)} (known: size, {', '.join(sorted(known))})"
        )
    return replace(PRESETS[size], **options)


# ----------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.head_dim = cfg.d_model // cfg.n_heads
        # Separate q/k/v projections: a column split of each gives every TP rank whole heads,
        # which a fused qkv weight would not.
        self.q = nn.Linear(cfg.d_model, cfg.d_model)
        self.k = nn.Linear(cfg.d_model, cfg.d_model)
        self.v = nn.Linear(cfg.d_model, cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, time, _ = x.shape

        # -1 heads: under tensor parallel each rank holds n_heads / tp of them.
        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, time, -1, self.head_dim).transpose(1, 2)

        out = F.scaled_dot_product_attention(
            heads(self.q(x)), heads(self.k(x)), heads(self.v(x)), is_causal=True
        )
        return self.proj(out.transpose(1, 2).reshape(batch, time, -1))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    """Pre-LN transformer block."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token + position embedding, blocks, final LayerNorm, LM head.

    Any of the embeddings, norm and head may be ``None`` (a pipeline stage without them): the
    forward then takes or returns hidden states instead of token ids or logits.
    """

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb: nn.Embedding | None = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos_emb: nn.Embedding | None = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleDict({str(i): Block(cfg) for i in range(cfg.n_layers)})
        self.norm: nn.LayerNorm | None = nn.LayerNorm(cfg.d_model)
        self.head: nn.Linear | None = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        self._init_weights()
        if cfg.tied:
            self.head.weight = self.tok_emb.weight

    def _init_weights(self) -> None:
        # GPT-2 init: N(0, 0.02), residual projections scaled down by depth so the stream's
        # variance does not grow with the number of blocks.
        for name, param in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(param)
            elif ".ln" in name or name.startswith("norm"):
                nn.init.ones_(param)
            elif name.endswith("proj.weight"):
                nn.init.normal_(param, std=0.02 / math.sqrt(2 * self.cfg.n_layers))
            else:
                nn.init.normal_(param, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tok_emb is not None:
            positions = torch.arange(x.shape[1], device=x.device)
            assert self.pos_emb is not None
            x = self.tok_emb(x) + self.pos_emb(positions)
        for block in self.blocks.values():
            x = block(x)
        if self.norm is not None:
            x = self.norm(x)
        if self.head is not None:
            x = self.head(x)
        return x


def param_count(cfg: GPTConfig) -> int:
    """Parameters of the full model (a tied head counted once)."""
    d, ff = cfg.d_model, 4 * cfg.d_model
    block = 4 * (d * d + d) + (d * ff + ff) + (ff * d + d) + 4 * d
    head = 0 if cfg.tied else cfg.vocab * d
    return cfg.vocab * d + cfg.seq_len * d + cfg.n_layers * block + 2 * d + head


def flops_per_token(cfg: GPTConfig) -> float:
    """Training FLOPs per token: 6 x matmul parameters + 12 x layers x d_model x seq_len (attention).

    Matmul parameters exclude the embedding tables (lookups, not matmuls) but include the head;
    the attention term counts QK^T and AV without the causal halving (the PaLM convention for MFU).
    """
    d = cfg.d_model
    matmul = cfg.n_layers * 12 * d * d + cfg.vocab * d
    return 6.0 * matmul + 12.0 * cfg.n_layers * d * cfg.seq_len


# ----------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------


def markov_corpus(cfg: GPTConfig, samples: int, seed: int) -> Dataset[tuple[torch.Tensor, torch.Tensor]]:
    """``samples`` sequences of the fixed chain: inputs are tokens 0..T-1, targets tokens 1..T.

    The chain (successor table) depends only on the vocabulary, so train and eval sets (different
    ``seed``) come from the same distribution; sampling is vectorised over sequences so the 1b
    preset's corpus builds in about a second.
    """
    chain = torch.Generator().manual_seed(1234)
    # Token v's k-th successor at 4 * v + k (a repeat among the four just merges their odds).
    successors = torch.randint(cfg.vocab, (4 * cfg.vocab,), generator=chain)
    gen = torch.Generator().manual_seed(seed)
    # Time-major so each step reads and writes one contiguous row.
    tokens = torch.empty(cfg.seq_len + 1, samples, dtype=torch.long)
    tokens[0] = torch.randint(cfg.vocab, (samples,), generator=gen)
    choices = torch.multinomial(
        torch.tensor(SUCCESSOR_PROBS), samples * cfg.seq_len, replacement=True, generator=gen
    ).view(cfg.seq_len, samples)
    for t in range(cfg.seq_len):
        tokens[t + 1] = successors[tokens[t] * 4 + choices[t]]
    tokens = tokens.t()
    return TensorDataset(tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy; works on vocab-sharded DTensor logits under ``loss_parallel``."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))


# ----------------------------------------------------------------------------------------------
# Parallelism hooks
# ----------------------------------------------------------------------------------------------


def shard_units(model: nn.Module) -> list[nn.Module]:
    """FSDP units: one per transformer block (embeddings, norm and head stay with the root)."""
    return list(model.blocks.values())


def stage_blocks(n_layers: int, stage: int, stages: int) -> range:
    """The block indices of ``stage``: an even split, earlier stages taking the remainder."""
    if stages > n_layers:
        raise ValueError(f"gpt: {stages} pipeline stages but only {n_layers} blocks (n_layers)")
    per, extra = divmod(n_layers, stages)
    start = stage * per + min(stage, extra)
    return range(start, start + per + (1 if stage < extra else 0))


def pipeline_split(model: nn.Module, stage: int, stages: int) -> nn.Module:
    """This stage's view of ``model``: embeddings on the first, norm and head on the last.

    The view shares the model's submodules (no copy) and keeps their names, so a stage's state-dict
    keys are a subset of the full model's.
    """
    assert isinstance(model, GPT)
    if model.cfg.tied and stages > 1:
        raise ValueError("gpt: a tied head cannot be pipelined (embedding and head on different stages)")
    part = GPT.__new__(GPT)
    nn.Module.__init__(part)
    part.cfg = model.cfg
    first, last = stage == 0, stage == stages - 1
    part.tok_emb = model.tok_emb if first else None
    part.pos_emb = model.pos_emb if first else None
    part.blocks = nn.ModuleDict(
        {str(i): model.blocks[str(i)] for i in stage_blocks(len(model.blocks), stage, stages)}
    )
    part.norm = model.norm if last else None
    part.head = model.head if last else None
    return part


def tensor_parallel_plan(model: nn.Module, tp_mesh: Any) -> None:
    """Megatron-style TP in place: heads and MLP columns split per rank, vocab-sharded logits.

    q/k/v and fc are column-parallel, the two output projections row-parallel (one all-reduce per
    sub-layer). The head is column-parallel with its output left as a vocab-sharded DTensor, so the
    loss runs under ``loss_parallel`` without gathering the full logits. Works on a pipeline stage
    (absent parts are skipped).
    """
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    assert isinstance(model, GPT)
    cfg, size = model.cfg, tp_mesh.size()
    for what, value in (("n_heads", cfg.n_heads), ("vocab", cfg.vocab)):
        if value % size:
            raise ValueError(f"gpt: tp={size} does not divide {what}={value}")
    plan: dict[str, Any] = {}
    if model.tok_emb is not None:
        plan["tok_emb"] = RowwiseParallel(input_layouts=Replicate())
    if model.head is not None:
        plan["head"] = ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)
    for key in model.blocks:
        for name in ("attn.q", "attn.k", "attn.v", "mlp.fc"):
            plan[f"blocks.{key}.{name}"] = ColwiseParallel()
        for name in ("attn.proj", "mlp.proj"):
            plan[f"blocks.{key}.{name}"] = RowwiseParallel()
    parallelize_module(model, tp_mesh, plan)
    if cfg.tied and model.head is not None and model.tok_emb is not None:
        # Both are Shard(0) over the vocab: re-tie the two separately distributed copies.
        model.head.weight = model.tok_emb.weight


def build(train: Any) -> Task:
    """The entrypoint: ``train.options`` sizes the model; ``train.seed`` fixes init and data."""
    cfg = config_from_options(train.options)
    model = GPT(cfg)
    return Task(
        model=model,
        train_data=markov_corpus(cfg, cfg.samples, seed=train.seed),
        eval_data=markov_corpus(cfg, cfg.eval_samples, seed=train.seed + 1_000_003),
        loss=lm_loss,
        tokens_per_sample=cfg.seq_len,
        flops_per_token=flops_per_token(cfg),
        pipeline_split=pipeline_split,
        tensor_parallel_plan=tensor_parallel_plan,
        shard_units=shard_units,
    )
