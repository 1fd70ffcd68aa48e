# SPDX-License-Identifier: Apache-2.0
"""specdec's Python functions against what a Python user has today on a CPU: PyTorch's argmax, topk,
softmax, multinomial and a PyTorch transcription of FlashInfer's chain verifier, at V 32000 / 128256 /
262144 and rows 1 / 8 / 64; 60-node draft trees verified greedily and stochastically (specdec's
verify_greedy / verify_speculative against torch.argmax / torch.softmax over every node and the walk in
Python) at batch 1 / 8 / 64; plus the binding's own cost per call (a 1 x 1 argmax). Then, on numpy arrays
and without torch (`--only filters,philox,rejection,half` runs them where torch is not installed): FlashInfer's
row filters over the time of `specdec.topk` / `specdec.softmax` on the same rows, nanoseconds per Philox
value, vLLM's `rejection_sample` drawing from a seed over the same call given its draws, and the row
primitives on bf16 / fp16 rows over the same rows in float32.

    python python/bench/bench_torch.py [--threads N] [--csv FILE] [--only argmax,...,filters,philox,rejection,half]

Medians of repeated calls on fresh rows from a pool larger than the last-level cache (the inputs are
read from memory, as a decoding step reads new logits). torch runs with `--threads` threads (default 1:
specdec's functions use one core).
"""
import argparse
import statistics
import time

import numpy as np

import specdec

torch = None  # imported by main() unless only the numpy sections run


def median_us(fn, pool, reps):
    times = []
    for i in range(reps):
        x = pool[i % len(pool)]
        t0 = time.perf_counter_ns()
        fn(x)
        times.append((time.perf_counter_ns() - t0) / 1000.0)
    return statistics.median(times)


def paired_us(fn, fn_out, theirs, op, pool, reps):
    """Medians of the Python call `fn` (allocating its output), of `fn_out` (the same call into a given
    output; None where the function takes none), of PyTorch's `theirs` and of the C++ call `op`
    (specdec._specdec._time_cpp, timed in C++, into a reused output), interleaved call by call over the
    pool (each on another row of it), so that all four see the same machine state: timed in separate
    loops, the VM's drift moved one-row ratios by up to 1.7x."""
    python, given, torch_times, cpp = [], [], [], []
    n = len(pool)

    def timed(f, x, into):
        t0 = time.perf_counter_ns()
        f(x)
        into.append((time.perf_counter_ns() - t0) / 1000.0)

    for i in range(reps):
        timed(fn, pool[i % n], python)
        timed(theirs, pool[(i + n // 4) % n], torch_times)
        if fn_out is not None:
            timed(fn_out, pool[(i + n // 2) % n], given)
        cpp.append(specdec._specdec._time_cpp(op, [pool[(i + 3 * n // 4) % n]], 1))
    return (statistics.median(python), statistics.median(given) if given else float("nan"),
            statistics.median(torch_times), statistics.median(cpp))


def torch_chain(draft, ids, target, u):
    """FlashInfer's chain rule in PyTorch (strict u * q < p; final token from relu(p - q) or the bonus row)."""
    bs, k = ids.shape
    p_at = target[:, :k].gather(2, ids.long().unsqueeze(2)).squeeze(2)
    q_at = draft.gather(2, ids.long().unsqueeze(2)).squeeze(2)
    ok = u[:, :k] * q_at < p_at
    accepted = torch.cumprod(ok.int(), dim=1).sum(dim=1)
    out = torch.full((bs, k + 1), -1, dtype=torch.int32)
    for r in range(bs):
        a = int(accepted[r])
        out[r, :a] = ids[r, :a]
        dist = target[r, a] if a == k else torch.relu(target[r, a] - draft[r, a])
        out[r, a] = int(torch.multinomial(dist, 1))
    return out


def random_tree(rng, n, vocab):
    """A 60-node-style draft tree in specdec's breadth-first order (parents drawn among earlier nodes)."""
    parents = [-1] + [int(rng.integers(max(0, i - 12), i)) for i in range(1, n)]
    depth = [0] * n
    for i in range(1, n):
        depth[i] = depth[parents[i]] + 1
    order = sorted(range(n), key=lambda i: (depth[i], i))
    where = {old: new for new, old in enumerate(order)}
    tokens = rng.integers(0, vocab, size=n)
    return specdec.DraftTree.from_parents([int(tokens[i]) for i in order],
                                          [-1 if parents[i] < 0 else where[parents[i]] for i in order])


def torch_tree_greedy(logits, trees, children):
    """SGLang's greedy tree rule in PyTorch: the argmax of every node row, then the walk."""
    best = torch.argmax(logits, dim=1).tolist()
    out, base = [], 0
    for tree, kids in zip(trees, children):
        node, emitted = 0, []
        while True:
            want = best[base + node]
            nxt = next((c for c in kids[node] if tree.token[c] == want), None)
            emitted.append(want)
            if nxt is None:
                break
            node = nxt
        out.append(emitted)
        base += tree.size
    return out


def torch_tree_sampled(logits, trees, children, u):
    """Lossless multi-draft verification of deterministic drafts in PyTorch (SpecInfer's rule): the
    softmax of every node row, then per node each child tested against the residual of its rejected
    siblings, the final token drawn from what is left."""
    probs = torch.softmax(logits, dim=1)
    out, base = [], 0
    for r, (tree, kids) in enumerate(zip(trees, children)):
        node, emitted, at = 0, [], 0
        while True:
            p = probs[base + node].clone()
            nxt = None
            for c in kids[node]:
                t = int(tree.token[c])
                if p[t] / p.sum() >= u[r, at]:
                    nxt = c
                    at += 1
                    break
                at += 1
                p[t] = 0
            if nxt is None:
                emitted.append(int(torch.multinomial(p, 1)))
                break
            emitted.append(int(tree.token[nxt]))
            node = nxt
        out.append(emitted)
        base += tree.size
    return out


def bench_trees(lines, reps):
    """60-node trees at batch 1 / 8 / 64 and V 32000 / 128256."""
    rng = np.random.default_rng(0)
    for v in (32000, 128256):
        for batch in (1, 8, 64):
            trees = [random_tree(rng, 60, v) for _ in range(batch)]
            children = [[[c for c in range(t.size) if t.parent[c] == i] for i in range(t.size)] for t in trees]
            pool_n = max(2, min(16, int(256e6 // (batch * 60 * v * 4))))
            gen = torch.Generator().manual_seed(1)
            pool = [torch.randn(batch * 60, v, generator=gen) * 3 for _ in range(pool_n)]
            u = torch.rand(batch, 64, generator=gen, dtype=torch.float64)
            cases = [("tree greedy", lambda x: specdec.verify_greedy(x, trees), lambda x: torch_tree_greedy(x, trees, children)),
                     ("tree sampled", lambda x: specdec.verify_speculative(x, trees, logits=True, seed=1),
                      lambda x: torch_tree_sampled(x, trees, children, u))]
            for name, ours, theirs in cases:
                n = max(3, reps // max(1, batch // 4))
                a = median_us(ours, pool, n)
                b = median_us(theirs, pool, max(3, n // 4))
                lines.append(f"{name},{v},{batch},{a:.1f},{b:.1f},{b / a:.2f}")
                print(f"{name:<22}{v:>8}{batch:>6}{a:>12.1f}{b:>12.1f}{b / a:>15.2f}")


def interleaved_us(fns, pools, reps):
    """Medians of each function in `fns`, called in turn on its own pool (each call on another entry, so
    that every function sees the same machine state: the VM's drift moves separate loops apart). Each
    call takes the pool's next entry, never the one the call before it read (which would hand it a row in
    L1 / L2 where the others read theirs from L3 or memory)."""
    times = [[] for _ in fns]
    n = len(pools[0])
    for i in range(reps):
        for j, (f, pool, into) in enumerate(zip(fns, pools, times)):
            x = pool[(i * len(fns) + j) % n]
            t0 = time.perf_counter_ns()
            f(x)
            into.append((time.perf_counter_ns() - t0) / 1000.0)
    return [statistics.median(t) for t in times]


def bench_filters(lines, vocabs, rows_list):
    """FlashInfer's filters on numpy rows, each over one specdec.topk(x, 50) and one specdec.softmax(x) on
    the same rows: top_k_mask_logits(logits, 50), top_k_renorm_probs(probs, 50), top_p_renorm_probs(probs,
    0.9), and top_k_top_p_sampling_from_logits' filtering with k = 50, p = 0.9 in both orders
    ("top_k_first": the two renormalisations, in place; "joint": one pass of both); then the whole
    top_k_top_p_sampling_from_probs / _from_logits calls (filters and draw, seed given)."""
    from specdec.flashinfer import _per_row

    print(f"{'filter (numpy rows)':<26}{'V':>8}{'rows':>6}{'us':>10}{'topk us':>10}{'softmax us':>12}{'/topk':>8}{'/softmax':>10}")
    for v in vocabs:
        for rows in rows_list:
            pool_n = min(32, max(2, int(256e6 // (rows * v * 4 * 2))))
            rng = np.random.default_rng(0)
            logits = [rng.standard_normal((rows, v), dtype=np.float32) * 3 for _ in range(pool_n)]
            probs = [specdec.softmax(x) for x in logits]
            k50, p90 = _per_row("top_k", 50, "int64", probs[0]), _per_row("top_p", 0.9, "float32", probs[0])
            out = np.empty((rows, v), np.float32)

            def top_k_first(x):
                specdec.top_k_renorm_probs(x, 50, out=out)
                specdec.top_p_renorm_probs(out, 0.9, out=out)

            cases = [("top_k_mask_logits k=50", logits, lambda x: specdec.top_k_mask_logits(x, 50, out=out)),
                     ("top_k_renorm_probs k=50", probs, lambda x: specdec.top_k_renorm_probs(x, 50, out=out)),
                     ("top_p_renorm_probs 0.9", probs, lambda x: specdec.top_p_renorm_probs(x, 0.9, out=out)),
                     ("k=50,p=0.9 top_k_first", probs, top_k_first),
                     ("k=50,p=0.9 joint", probs, lambda x: specdec._specdec.filter_rows(x, out, k50, p90, True, 0)),
                     ("sample probs top_k_first", probs, lambda x: specdec.top_k_top_p_sampling_from_probs(x, 50, 0.9, seed=1)),
                     ("sample probs joint", probs,
                      lambda x: specdec.top_k_top_p_sampling_from_probs(x, 50, 0.9, filter_apply_order="joint", seed=1)),
                     ("sample logits top_k_first", logits, lambda x: specdec.top_k_top_p_sampling_from_logits(x, 50, 0.9, seed=1)),
                     ("sample logits joint", logits,
                      lambda x: specdec.top_k_top_p_sampling_from_logits(x, 50, 0.9, filter_apply_order="joint", seed=1))]
            reps = 60 if rows * v <= 8 * 128256 else 20
            topk_out = (np.empty((rows, 50), np.float32), np.empty((rows, 50), np.int32))
            for name, pool, fn in cases:
                a, t, sm = interleaved_us([fn, lambda x: specdec.topk(x, 50, *topk_out), lambda x: specdec.softmax(x, out=out)],
                                          [pool, logits, logits], reps)
                lines.append(f"{name},{v},{rows},{a:.1f},,,{t:.1f},{a / t:.2f},{a / sm:.2f}")
                print(f"{name:<26}{v:>8}{rows:>6}{a:>10.1f}{t:>10.1f}{sm:>12.1f}{a / t:>8.2f}{a / sm:>10.2f}")


def bench_half(lines, vocabs, rows_list):
    """The row primitives on bf16 and fp16 rows (numpy: ml_dtypes.bfloat16, float16) against the same
    rows in float32: the 16-bit rows are read in place, two bytes per entry, so a memory-bound primitive
    should take about half the float32 time on rows that do not fit in the caches."""
    import ml_dtypes

    print(f"{'row primitive (numpy rows)':<26}{'V':>8}{'rows':>6}{'f32 us':>10}{'bf16 us':>10}{'fp16 us':>10}{'bf16/f32':>10}{'fp16/f32':>10}")
    for v in vocabs:
        for rows in rows_list:
            pool_n = min(32, max(2, int(256e6 // (rows * v * 4))))
            rng = np.random.default_rng(0)
            f32 = [rng.standard_normal((rows, v), dtype=np.float32) * 3 for _ in range(pool_n)]
            bf16 = [x.astype(ml_dtypes.bfloat16) for x in f32]
            fp16 = [x.astype(np.float16) for x in f32]
            idx, lse = np.empty(rows, np.int32), np.empty(rows, np.float32)
            vals, ids = np.empty((rows, 50), np.float32), np.empty((rows, 50), np.int32)
            soft = np.empty((rows, v), np.float32)
            outs = {t: np.empty((rows, v), t) for t in (np.float32, ml_dtypes.bfloat16, np.float16)}
            probs = {t: [specdec.softmax(x).astype(t) for x in f32[:4]] for t in outs}
            cases = [("argmax", lambda x: specdec.argmax(x, out=idx)),
                     ("topk k=50", lambda x: specdec.topk(x, 50, vals, ids)),
                     ("logsumexp", lambda x: specdec.logsumexp(x, 1.0, out=lse)),
                     ("softmax (f32 out)", lambda x: specdec.softmax(x, 1.0, out=soft)),
                     ("top_k_mask_logits k=50", lambda x: specdec.top_k_mask_logits(x, 50, out=outs[x.dtype.type])),
                     ("top_k_renorm_probs k=50", lambda x: specdec.top_k_renorm_probs(x, 50, out=outs[x.dtype.type]), probs),
                     ("sampling_from_probs", lambda x: specdec.sampling_from_probs(x, seed=1), probs)]
            reps = 60 if rows * v <= 8 * 128256 else 20
            for name, fn, *pools in cases:
                pool = pools[0] if pools else {np.float32: f32, ml_dtypes.bfloat16: bf16, np.float16: fp16}
                a, b, c = interleaved_us([fn, fn, fn], [pool[np.float32], pool[ml_dtypes.bfloat16], pool[np.float16]], reps)
                lines.append(f"{name} bf16,{v},{rows},{b:.1f},,,{a:.1f},{b / a:.2f},")
                lines.append(f"{name} fp16,{v},{rows},{c:.1f},,,{a:.1f},{c / a:.2f},")
                print(f"{name:<26}{v:>8}{rows:>6}{a:>10.1f}{b:>10.1f}{c:>10.1f}{b / a:>10.2f}{c / a:>10.2f}")


def bench_philox(lines):
    """Nanoseconds per value of the Philox fills at 64 x 128256 (numpy's -log1p(-u) beside them: what
    rejection_sample drew its exponentials with before)."""
    rows, v = 64, 128256
    u = specdec.philox_uniforms(1, 0, rows, v)
    cases = [("philox_uniforms float64", lambda i: specdec.philox_uniforms(i, 3, rows, v)),
             ("philox_uniforms float32", lambda i: specdec.philox_uniforms(i, 3, rows, v, "float32")),
             ("philox_exponentials", lambda i: specdec.philox_exponentials(i, 3, rows, v)),
             ("numpy -log1p(-u) float32", lambda i: (-np.log1p(-u)).astype(np.float32))]
    times = interleaved_us([c[1] for c in cases], [list(range(8))] * len(cases), 11)
    for (name, _), t in zip(cases, times):
        ns = t * 1000.0 / (rows * v)
        lines.append(f"{name},{v},{rows},{t:.1f},,,,{ns:.2f} ns/value,")
        print(f"{name:<26}{v:>8}{rows:>6}{t:>10.1f} us{ns:>8.2f} ns per value")


def bench_rejection(lines, vocabs):
    """vLLM's rejection_sample at batch 64, 4 drafts per request (draft rows given): drawing its uniforms
    and exponentials from a seed over the same call given them (precomputed)."""
    batch, k = 64, 4
    for v in vocabs:
        rng = np.random.default_rng(1)
        tokens = batch * k
        target = [specdec.softmax(rng.standard_normal((tokens, v), dtype=np.float32) * 2) for _ in range(2)]
        draft = [specdec.softmax(rng.standard_normal((tokens, v), dtype=np.float32) * 2) for _ in range(2)]
        ids = rng.integers(0, v, tokens).astype(np.int32)
        cu = np.arange(1, batch + 1, dtype=np.int64) * k
        bonus = rng.integers(0, v, batch).astype(np.int32)
        u = specdec.philox_uniforms(5, 0, batch, k).ravel()
        e = specdec.philox_exponentials(6, 0, batch, v)
        pairs = list(zip(draft, target))
        seeded, given = interleaved_us(
            [lambda dt: specdec.rejection_sample(ids, None, k, cu, dt[0], dt[1], bonus, seed=5, offset=0),
             lambda dt: specdec.rejection_sample(ids, None, k, cu, dt[0], dt[1], bonus, uniform_probs=u, exponentials=e)],
            [pairs, pairs], 9)
        lines.append(f"rejection_sample seed vs given,{v},{batch},{seeded:.1f},,,{given:.1f},{seeded / given:.2f},")
        print(f"{'rejection_sample seed=':<26}{v:>8}{batch:>6}{seeded:>10.1f} us; given its draws {given:.1f} us: "
              f"{seeded / given:.2f}x")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--csv", default=None)
    ap.add_argument("--quick", action="store_true", help="one shape per function (a smoke run)")
    ap.add_argument("--only", default=None, help="comma-separated functions to run (argmax, topk, softmax, sample, chain, tree, "
                                                  "filters, philox, rejection, half)")
    args = ap.parse_args()
    host_sections = {"filters", "philox", "rejection", "half"}
    if args.only is None or set(args.only.split(",")) - host_sections:
        global torch
        import torch as _torch

        torch = _torch
        torch.set_num_threads(args.threads)
    rows_list = [1, 8, 64] if not args.quick else [8]
    vocabs = [32000, 128256, 262144] if not args.quick else [32000]
    lines = ["function,V,rows,specdec_us,torch_us,torch_over_specdec,cpp_us,python_over_cpp,python_out_given_over_cpp"]
    only = None if args.only is None else set(args.only.split(","))
    if torch is not None:
        bench_torch_table(lines, args, only, rows_list, vocabs)
    if only is None or "filters" in only:
        bench_filters(lines, vocabs, rows_list)
    if only is None or "half" in only:
        bench_half(lines, vocabs, rows_list)
    if only is None or "philox" in only:
        bench_philox(lines)
    if only is None or "rejection" in only:
        bench_rejection(lines, vocabs)
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("\n".join(lines) + "\n")


def bench_torch_table(lines, args, only, rows_list, vocabs):
    """The row functions, chains and trees against PyTorch, and the binding's cost per call."""
    print(f"torch {torch.__version__}, {args.threads} thread(s); specdec {specdec.__version__}")
    print(f"{'function':<22}{'V':>8}{'rows':>6}{'specdec us':>12}{'torch us':>12}{'torch/specdec':>15}"
          f"{'C++ us':>10}{'Python/C++':>12}{'(out given)':>12}")
    row_functions = {"argmax", "topk", "softmax", "sample", "chain"}
    for v in vocabs if only is None or only & row_functions else []:
        for rows in rows_list:
            pool_n = max(2, int(256e6 // (rows * v * 4)))  # ~256 MB of rows
            pool_n = min(pool_n, 64)
            gen = torch.Generator().manual_seed(0)
            logits = [torch.randn(rows, v, generator=gen) * 3 for _ in range(pool_n)]
            probs = [torch.softmax(x, dim=1) for x in logits]
            reps = 200 if rows * v <= 8 * 128256 else 60
            index_out = torch.empty(rows, dtype=torch.int32)
            topk_out = (torch.empty(rows, 8), torch.empty(rows, 8, dtype=torch.int32))
            softmax_out = torch.empty(rows, v)
            cases = [
                ("argmax", logits, lambda x: specdec.argmax(x), lambda x: specdec.argmax(x, out=index_out),
                 lambda x: torch.argmax(x, dim=1)),
                ("topk k=8", logits, lambda x: specdec.topk(x, 8), lambda x: specdec.topk(x, 8, *topk_out),
                 lambda x: torch.topk(x, 8, dim=1)),
                ("softmax", logits, lambda x: specdec.softmax(x), lambda x: specdec.softmax(x, out=softmax_out),
                 lambda x: torch.softmax(x, dim=1)),
                ("sample", probs, lambda x: specdec.sampling_from_probs(x, seed=1), None,
                 lambda x: torch.multinomial(x, 1, generator=gen)),
            ]
            for name, pool, ours, ours_out, theirs in cases:
                if only is not None and name.split()[0] not in only:
                    continue
                # PyTorch's call and the same operation called from C++ (the binding's share of a call),
                # interleaved with the Python calls: every call reads a cold row of the pool.
                op = {"argmax": "argmax", "topk k=8": "topk8", "softmax": "softmax", "sample": "sample"}[name]
                a, g, b, c = paired_us(ours, ours_out, theirs, op, pool, reps)
                lines.append(f"{name},{v},{rows},{a:.1f},{b:.1f},{b / a:.2f},{c:.1f},{a / c:.2f},{g / c:.2f}")
                print(f"{name:<22}{v:>8}{rows:>6}{a:>12.1f}{b:>12.1f}{b / a:>15.2f}{c:>10.1f}{a / c:>12.2f}{g / c:>12.2f}")
            # Chains of k = 4 drafts per row (rows = requests).
            if only is not None and "chain" not in only:
                continue
            k = 4
            draft = [torch.softmax(torch.randn(rows, k, v, generator=gen), dim=2) for _ in range(2)]
            target = [torch.softmax(torch.randn(rows, k + 1, v, generator=gen), dim=2) for _ in range(2)]
            ids = torch.randint(0, v, (rows, k), generator=gen, dtype=torch.int32)
            u = torch.rand(rows, 2 * k + 1, generator=gen, dtype=torch.float64).clamp_min(1e-9)
            pairs = list(zip(draft, target))
            a = median_us(lambda dt: specdec.chain_speculative_sampling(dt[0], ids, dt[1], uniforms=u), pairs, 30)
            b = median_us(lambda dt: torch_chain(dt[0], ids, dt[1], u), pairs, 30)
            lines.append(f"chain k=4,{v},{rows},{a:.1f},{b:.1f},{b / a:.2f}")
            print(f"{'chain k=4':<22}{v:>8}{rows:>6}{a:>12.1f}{b:>12.1f}{b / a:>15.2f}")
    if args.only is None or "tree" in args.only.split(","):
        bench_trees(lines, 40 if not args.quick else 3)
    tiny = np.zeros((1, 1), dtype=np.float32)
    out = np.empty(1, dtype=np.int32)
    overhead = median_us(lambda x: specdec.argmax(x, out=out), [tiny], 20000)
    tiny_t, out_t = torch.zeros(1, 1), torch.empty(1, dtype=torch.int32)
    overhead_t = median_us(lambda x: specdec.argmax(x, out=out_t), [tiny_t], 20000)
    allocating_t = median_us(lambda x: specdec.argmax(x), [tiny_t], 20000)
    print(f"binding cost per call (argmax of 1 x 1, output given): numpy {overhead:.2f} us, torch {overhead_t:.2f} us; "
          f"torch output allocated by the call: {allocating_t:.2f} us")
    lines.append(f"call overhead numpy,1,1,{overhead:.2f},,")
    lines.append(f"call overhead torch,1,1,{overhead_t:.2f},,")
    lines.append(f"call overhead torch allocating,1,1,{allocating_t:.2f},,")


if __name__ == "__main__":
    main()
