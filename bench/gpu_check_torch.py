#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch's own row operations at gpu_check's shapes: the baseline a PyTorch user has on the GPU.

Times torch.argmax, torch.max, torch.logsumexp, torch.topk (k = 8, 64, 256), torch.softmax,
torch.log_softmax (out of place) and torch.multinomial (one draw per row) on float32 rows {1, 8, 64} x
V {32000, 128256, 151936, 262144}, with CUDA events around each call and inputs rotated through a
pool larger than four times the L2 cache, as gpu_check times specdec. Writes gpu_check's CSV columns.
"""
import argparse
import statistics

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", required=True)
    ap.add_argument("--read-gbps", type=float, default=0.0, help="gpu_check's measured read bandwidth")
    ap.add_argument("--reps", type=int, default=60)
    args = ap.parse_args()
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    print(f"torch {torch.__version__} on {props.name}")
    ops = [
        ("argmax", 1, 4, lambda x: torch.argmax(x, dim=-1)),
        ("max", 1, 4, lambda x: torch.max(x, dim=-1).values),
        ("logsumexp", 1, 4, lambda x: torch.logsumexp(x, dim=-1)),
        ("topk8", 8, 4, lambda x: torch.topk(x, 8, dim=-1)),
        ("topk64", 64, 4, lambda x: torch.topk(x, 64, dim=-1)),
        ("topk256", 256, 4, lambda x: torch.topk(x, 256, dim=-1)),
        ("softmax", 1, 8, lambda x: torch.softmax(x, dim=-1)),
        ("log_softmax", 1, 8, lambda x: torch.log_softmax(x, dim=-1)),
        ("sample", 1, 4, lambda x: torch.multinomial(x, 1)),
    ]
    stream = torch.cuda.current_stream()
    with open(args.csv, "w") as f:
        f.write("impl,op,rows,V,median_us,p90_us,GBps,pct_read_bw,launches,syncs\n")
        print(f"{'op':18s} {'rows':>5s} {'V':>7s} {'median_us':>10s} {'p90_us':>10s} {'GB/s':>8s} {'%bw':>7s}")
        for cols in (32000, 128256, 151936, 262144):
            for rows in (1, 8, 64):
                n = rows * cols
                pool_count = max(3, (4 * l2) // (n * 4) + 1)
                g = torch.Generator(device=dev).manual_seed(rows + cols)
                base = torch.rand(rows, cols, device=dev, generator=g) + 0.5
                base = base / base.sum(dim=-1, keepdim=True)
                pool = [base.clone() for _ in range(min(pool_count, 4096))]
                for name, k, bpe, fn in ops:
                    for i in range(3):
                        fn(pool[i % len(pool)])
                    starts = [torch.cuda.Event(enable_timing=True) for _ in range(args.reps)]
                    ends = [torch.cuda.Event(enable_timing=True) for _ in range(args.reps)]
                    for i in range(args.reps):
                        starts[i].record(stream)
                        fn(pool[(i + 3) % len(pool)])
                        ends[i].record(stream)
                    torch.cuda.synchronize()
                    us = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))
                    med = statistics.median(us)
                    p90 = us[min(len(us) - 1, len(us) * 9 // 10)]
                    gbps = n * bpe / (med * 1e-6) / 1e9
                    pct = 100.0 * gbps / args.read_gbps if args.read_gbps > 0 else 0.0
                    print(f"{name:18s} {rows:5d} {cols:7d} {med:10.2f} {p90:10.2f} {gbps:8.0f} {pct:6.1f}%")
                    f.write(f"torch,{name},{rows},{cols},{med:.3f},{p90:.3f},{gbps:.1f},{pct:.2f},,\n")
                del pool


if __name__ == "__main__":
    main()
