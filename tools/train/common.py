"""What every drafter's training shares: the cached features, soft-label loss over the target's LM
head, offline top-k accuracy, a cosine schedule, and fp16 safetensors export."""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import time

import torch


def native_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512-BF16 or AMX). There bf16 autocast runs the
    trainers' matmuls ~2x faster than fp32; elsewhere PyTorch emulates bf16, and a matmul of the
    trainers' shape ran 28x slower than in fp32 (AMD EPYC, AVX2), so the trainers run fp32 there. The
    choice changes the rounding, so weights trained on the two kinds of machine differ within noise."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(f.read().split())
    except OSError:
        return False
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def autocast():
    """bf16 autocast for the trainers' forward passes where native_bf16(), else a no-op (fp32)."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=native_bf16())


def load_features(data_dir: str) -> dict:
    return torch.load(os.path.join(data_dir, "features.pt"))


def positions(split: dict, ahead: int) -> torch.Tensor:
    """Rows p whose token p + ahead (the one a drafter predicts from row p's feature) exists and lies in
    the answer: the drafter learns to continue answers; the prompt is context only."""
    offsets, answer = split["offsets"], split["answer"]
    out = []
    for s in range(len(answer)):
        start, end = int(offsets[s]), int(offsets[s + 1])
        first = max(start, start + int(answer[s]) - ahead)
        last = end - 1 - ahead  # p + ahead <= end - 1
        if last >= first:
            out.append(torch.arange(first, last + 1))
    return torch.cat(out)


def draft_vocabulary(split: dict, vocab: int, size: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """The `size` most frequent answer tokens (ties to the lower id), sorted by id; the map from target
    ids to their index (-1 outside); the share of answer tokens they cover."""
    counts = torch.zeros(vocab)
    for s in range(len(split["answer"])):
        a, b = int(split["offsets"][s]), int(split["offsets"][s + 1])
        counts += torch.bincount(split["tokens"][a + int(split["answer"][s]):b].long(), minlength=vocab).float()
    ids = torch.sort(torch.argsort(-counts - torch.arange(vocab) * 1e-9)[:size]).values
    t2d = torch.full((vocab,), -1, dtype=torch.long)
    t2d[ids] = torch.arange(size)
    return ids, t2d, float(counts[ids].sum() / counts.sum())


def soft_cross_entropy(logits: torch.Tensor, top_ids: torch.Tensor, top_lp: torch.Tensor) -> torch.Tensor:
    """Cross-entropy against the target's distribution, its top-K renormalised (the rest of its mass is
    spread over 49k tokens and carries no signal a small drafter can use)."""
    p = torch.softmax(top_lp.float(), -1)
    logq = torch.log_softmax(logits.float(), -1).gather(-1, top_ids.long())
    return -(p * logq).sum(-1).mean()


def cosine_lr(step: int, total: int, peak: float, warmup: int = 50) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def save_fp16(tensors: dict[str, torch.Tensor], path: str, metadata: dict[str, str]):
    from safetensors.torch import save_file

    save_file({k: v.detach().to(torch.float16).contiguous() for k, v in tensors.items()}, path, metadata=metadata)


def parser(*, epochs: float, lr: float, tokens: int | None = None) -> argparse.ArgumentParser:
    """Every trainer's arguments (the drafter-specific ones are added by the trainer); `tokens`, when
    given, is the default batch size in tokens."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="the target's GGUF")
    ap.add_argument("--data", required=True, help="the work directory holding data.pt and features.pt")
    ap.add_argument("--out", required=True, help="the safetensors file to write")
    ap.add_argument("--draft-vocab", type=int, default=8192, help="LM head rows the loss is scored on")
    ap.add_argument("--epochs", type=float, default=epochs)
    ap.add_argument("--lr", type=float, default=lr, help="peak learning rate (cosine schedule)")
    if tokens is not None:
        ap.add_argument("--tokens", type=int, default=tokens, help="tokens per batch")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--train-fraction", type=float, default=1.0,
                    help="train on this share of the training sequences (a fixed random subset): how tau scales with data")
    return ap


@dataclasses.dataclass
class Setup:
    target: object  # target.Target
    train: dict
    held: dict
    draft_ids: torch.Tensor
    t2d: torch.Tensor
    coverage: float
    start: float


def subset(split: dict, fraction: float) -> dict:
    """The sequences of a fixed random subset (seed 0, whatever --seed is, so that every trainer and
    seed sees the same smaller data set) holding `fraction` of them, in their original order."""
    n = len(split["answer"])
    keep = max(1, round(fraction * n))
    seqs = torch.sort(torch.randperm(n, generator=torch.Generator().manual_seed(0))[:keep]).values
    off = split["offsets"]
    rows = torch.cat([torch.arange(int(off[s]), int(off[s + 1])) for s in seqs])
    out = {k: v[rows] for k, v in split.items() if k not in ("offsets", "answer")}
    out["offsets"] = torch.cat([off[:1] * 0, torch.cumsum(off.diff()[seqs], 0)])
    out["answer"] = split["answer"][seqs]
    return out


def setup(a: argparse.Namespace) -> Setup:
    """Seeds torch, loads the target (fp32) and the features, and picks the draft vocabulary."""
    from target import Target

    if not 0 < a.train_fraction <= 1:
        raise SystemExit(f"--train-fraction {a.train_fraction}: expected a share in (0, 1]")
    torch.manual_seed(a.seed)
    start = time.time()
    target = Target(a.model, torch.float32)
    feats = load_features(a.data)
    if a.train_fraction < 1:  # the draft vocabulary below is then counted on the share, as on a smaller set
        feats["train"] = subset(feats["train"], a.train_fraction)
        print(f"training on {len(feats['train']['answer'])} sequences ({a.train_fraction:g} of the set), "
              f"{len(feats['train']['tokens'])} rows")
    draft_ids, t2d, coverage = draft_vocabulary(feats["train"], target.config.vocab, a.draft_vocab)
    return Setup(target, feats["train"], feats["heldout"], draft_ids, t2d, coverage, start)


def optimizer_step(opt, params, loss: torch.Tensor, step: int, steps: int, peak: float, clip: float | None = 1.0):
    """One AdamW step at the cosine schedule's rate, the gradient clipped to norm `clip`."""
    for g in opt.param_groups:
        g["lr"] = cosine_lr(step, steps, peak)
    opt.zero_grad()
    loss.backward()
    if clip is not None:
        torch.nn.utils.clip_grad_norm_(params, clip)
    opt.step()
