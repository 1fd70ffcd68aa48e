#!/usr/bin/env python3
"""Tree goldens at the peers' smallest sizes, computed by running the peers' own code.

Writes tests/data/trees/degenerate_*.json: EAGLE-2 / EAGLE-3 (depth 0, one expansion, top-k 1,
total_token 2), Jakiro's dynamic tree at its minimum depth 2 and at top-k 1, Medusa / EAGLE-1 / TensorRT-LLM
static trees from one choice and from chains, and SGLang's EAGLE pipeline with one step (empty
parent_list), top-k 1, two and one draft tokens, one request, and a request whose committed prefix
is empty. Each file records in `source` the repository, commit, function and how it was run.

How the peers run (never copied into specdec; this script reads them from local clones):
- EAGLE (`--eagle`, a clone of SafeAILab/EAGLE): Model.topK_genrate at main (cb7e0841) and the v1
  branch's generate_tree_buffers / utils_c.generate_tree_buffers / static topK_genrate /
  generate_candidates (4a9cf3a1), each extracted from the file by its AST and executed verbatim with
  a scripted fake draft model whose forwards return the logits stored in the golden (head / lm_head /
  norm are the identity).
- Jakiro (`--jakiro`, haiduo/Jakiro at f8b018d3): Model.topK_genrate the same way; the penultimate
  forward returns the left and right logit sets stacked, as Jakiro's MoE layer does.
- Medusa (`--medusa`, FasterDecoding/Medusa at e2a5d20c): generate_medusa_buffers, generate_candidates.
- TensorRT-LLM (`--trtllm`, the file tensorrt_llm/runtime/medusa_utils.py at 249d93d5):
  _medusa_setup and its helpers.
- SGLang: select_top_k_tokens and organize_draft_results are transcribed below (a few tensor lines,
  as the existing sglang_pipeline goldens were made), and build_tree_efficient is emulated serially
  following sgl-kernel `csrc/speculative/eagle_utils.cu` (build_tree_efficient) at 29bd4e85.

Every torch.topk call goes through a guard that requires a gap of at least 2e-4 between consecutive
values up to rank k (+1 when it exists), so no result depends on tie order; logits are multiples of
1/1024 (exact in float32 and JSON). A seed whose inputs violate the guard is skipped for the next.

Needs PyTorch (CPU is enough): pip install torch. Usage:
  tools/goldens/degenerate_trees.py --eagle DIR --jakiro DIR --medusa DIR --trtllm FILE [--out tests/data/trees]
"""
import argparse
import ast
import copy
import json
import os
import subprocess
import sys
import textwrap
import types
from argparse import Namespace
from functools import cmp_to_key

import numpy as np
import torch

EAGLE_MAIN = "cb7e0841fe0c206c6ed74a197ad5e2a1f13f5a2b"
EAGLE_V1 = "4a9cf3a1f6cd4a294e6d30a4e7c77cba246d7ca5"
JAKIRO = "f8b018d307b827ed186ddb4e83cfd9d861f91c69"
MEDUSA = "e2a5d20c048a9b0a4092e6933c34313687422518"
TRTLLM = "249d93d551e8ec11d6d62aabfc9ca8df41ead84c"

# CPU stand-in for the peers' .cuda() calls.
torch.Tensor.cuda = lambda self, *a, **k: self


class TieError(Exception):
    pass


def guarded_topk(x, k, dim=-1, relative=False, **kwargs):
    """torch.topk, refusing inputs whose ranks up to k (+1) are closer than 2e-4 (log-probabilities,
    logits) or 1e-4 relative (SGLang's probabilities)."""
    values = torch.sort(x.detach().double(), dim=dim, descending=True).values
    n = values.shape[dim]
    upto = min(int(k) + 1, n)
    if upto >= 2:
        v = values.narrow(dim, 0, upto)
        gaps = v.narrow(dim, 0, upto - 1) - v.narrow(dim, 1, upto - 1)
        bound = 1e-4 * v.narrow(dim, 0, upto - 1).abs() if relative else 2e-4
        if bool((gaps < bound).any()):
            raise TieError()
    return torch.topk(x, k, dim=dim, **kwargs)


class GuardedTorch(types.ModuleType):
    """`torch` as the peers' functions see it: topk guarded against ties."""

    def __init__(self):
        super().__init__("torch")

    def __getattr__(self, name):
        return getattr(torch, name)

    topk = staticmethod(guarded_topk)


def git_show(repo, commit, path):
    return subprocess.check_output(["git", "-C", repo, "show", f"{commit}:{path}"], text=True)


def extract(source, name, cls=None, extra_globals=None):
    """The function `name` (a method of class `cls` when given) from `source`, compiled alone."""
    tree = ast.parse(source)
    scope = tree.body
    if cls is not None:
        scope = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    node = next(n for n in scope if isinstance(n, ast.FunctionDef) and n.name == name)
    lines = source.splitlines()[node.lineno - 1:node.end_lineno]
    code = textwrap.dedent("\n".join(lines))
    env = {"torch": GuardedTorch(), "np": np, "copy": copy, "cmp_to_key": cmp_to_key, "Namespace": Namespace,
           "List": list, "Tuple": tuple, "TOPK": 10}
    env.update(extra_globals or {})
    exec(compile(code, f"<{name}>", "exec"), env)
    return env[name]


def capture_locals(fn, *args, **kwargs):
    """Runs fn and returns (result, the last value each of its locals held): traced line by line,
    since the peers `del` their intermediates before returning."""
    seen = {}
    code = fn.__code__ if hasattr(fn, "__code__") else fn.__func__.__code__

    def local_trace(frame, event, arg):
        seen.update(frame.f_locals)
        return local_trace

    def trace(frame, event, arg):
        return local_trace if frame.f_code is code else None

    sys.settrace(trace)
    try:
        result = fn(*args, **kwargs)
    finally:
        sys.settrace(None)
    return result, seen


def tolist(x):
    if isinstance(x, torch.Tensor):
        return x.tolist()
    return x


def logits(rng, *shape):
    """Float32 logits that are multiples of 1/1024 in about [-4, 4]."""
    return (np.round(rng.normal(0.0, 1.6, size=shape) * 1024) / 1024).astype(np.float32)


# ---------------------------------------------------------------- EAGLE-2 / EAGLE-3 / Jakiro dynamic
class FakeDynamicDraft:
    """The attributes topK_genrate reads, and forwards that return scripted logits."""

    def __init__(self, total_token, depth, top_k, root, steps, d2t=None, vocab=None, penult=None):
        self.total_tokens = total_token - 1
        self.depth, self.top_k = depth, top_k
        self.embed_tokens = Namespace(weight=torch.zeros(1))
        draft_vocab = root.shape[-1]
        self.config = Namespace(vocab_size=vocab or draft_vocab, draft_vocab_size=draft_vocab)
        self.d2t = None if d2t is None else torch.tensor(d2t, dtype=torch.long)
        self.lm_head = self.norm = lambda x: x
        self.logsoftmax = torch.nn.LogSoftmax(dim=-1)
        self.stable_kv = None
        self.tree_mask_init = torch.eye(top_k)[None, None]
        self.position_ids = torch.zeros(top_k, dtype=torch.long)
        self.root, self.steps, self.penult = torch.tensor(root), [torch.tensor(s) for s in steps], penult
        self.calls, self.forwards = 0, []

    def reset(self):
        self.tree_mask = None

    def __call__(self, hidden, input_ids=None, past_key_values=None, position_ids=None, use_cache=True, **kwargs):
        call = self.calls
        self.calls += 1
        if call == 0:
            return self.root[None, None, :], "kv"
        self.forwards.append({"frontier_input_ids": input_ids.view(-1).tolist(), "position_ids": position_ids.view(-1).tolist(),
                              "draft_tree_mask": self.tree_mask[0, 0].int().tolist()})
        if kwargs.get("penult_forward"):
            left, right = (torch.tensor(x) for x in self.penult)
            return torch.stack([left, right])[:, None], "kv"
        return self.steps[call - 1][None], "kv"


def run_dynamic(fn, total_token, depth, top_k, root, steps, sample_token, d2t=None, vocab=None, penult=None, jakiro=False):
    prefix = torch.tensor([[11, 12, 13, 14, 15, sample_token]])
    outs = {}
    for mode, processor in (("greedy", None), ("sampling", object())):
        fake = FakeDynamicDraft(total_token, depth, top_k, root, steps, d2t, vocab, penult)
        head = (lambda x: x) if jakiro else None
        (draft_tokens, retrieve, mask, positions), seen = capture_locals(
            fn.__get__(fake), torch.zeros(1, 6, 1), prefix, head, processor)
        outs[mode] = (draft_tokens, retrieve, mask, positions, seen, fake.forwards)
    draft_tokens, retrieve, mask, positions, seen, forwards = outs["greedy"]
    intermediates = {
        "flat_scores": tolist(seen["scores_list"]),
        "flat_tokens": tolist(seen["ss_token_list"]),
        "top_scores_index_sorted": tolist(seen["top_scores_index"]),
        "draft_parents": tolist(seen["draft_parents"]),
        "parent_node_index": [-1] + list(seen["mask_index_list"]),
        "draft_steps": forwards,
    }
    outputs = {"draft_tokens": tolist(draft_tokens[0]), "retrieve_indices": tolist(retrieve),
               "tree_mask": tolist(mask[0, 0].int()), "tree_position_ids": tolist(positions)}
    return outputs, {"retrieve_indices": tolist(outs["sampling"][1])}, intermediates


def dynamic_case(args, name, note, total_token, depth, top_k, vocab, seed, d2t_vocab=None, jakiro=False, recorded=None):
    """A dynamic-tree golden; with `recorded` (a golden's params and inputs) the peer is run on those
    inputs instead of fresh ones (validation)."""
    source = git_show(args.jakiro if jakiro else args.eagle, JAKIRO if jakiro else EAGLE_MAIN,
                      "jakiro/model/cnets.py" if jakiro else "eagle/model/cnets.py")
    fn = extract(source, "topK_genrate", cls="Model")
    for s in range(seed, seed + 500):
        rng = np.random.default_rng(s)
        root = logits(rng, vocab)
        forwards = depth - 1 if jakiro else depth
        steps = [logits(rng, top_k, vocab) for _ in range(max(forwards - (1 if jakiro else 0), 0))]
        penult = (logits(rng, top_k, vocab), logits(rng, top_k, vocab)) if jakiro else None
        d2t = None
        if d2t_vocab:
            targets = np.sort(rng.choice(d2t_vocab, size=vocab, replace=False))
            d2t = (targets - np.arange(vocab)).astype(np.int64).tolist()
        sample_token = int(rng.integers(0, d2t_vocab or vocab))
        if recorded is not None:
            inputs = recorded["inputs"]
            root = np.array(inputs["root_logits"], dtype=np.float32)
            steps = [np.array(x, dtype=np.float32) for x in inputs["step_logits"]]
            if jakiro:
                penult = (np.array(inputs["penult_left_logits"], dtype=np.float32),
                          np.array(inputs["penult_right_logits"], dtype=np.float32))
            d2t = inputs.get("d2t")
            sample_token = recorded["params"]["sample_token"]
        try:
            outputs, sampling, inter = run_dynamic(fn, total_token, depth, top_k, root, steps, sample_token, d2t, d2t_vocab,
                                                   penult, jakiro)
        except TieError:
            continue
        inputs = {"root_logits": root.tolist(), "step_logits": [x.tolist() for x in steps]}
        if d2t is not None:
            inputs["d2t"] = d2t
        if jakiro:
            inputs["penult_left_logits"], inputs["penult_right_logits"] = penult[0].tolist(), penult[1].tolist()
        return {
            "kind": "jakiro_dynamic_tree" if jakiro else "eagle2_dynamic_tree",
            "source": {"repo": "haiduo/Jakiro" if jakiro else "SafeAILab/EAGLE",
                       "path": "jakiro/model/cnets.py" if jakiro else "eagle/model/cnets.py",
                       "commit": JAKIRO if jakiro else EAGLE_MAIN, "function": "Model.topK_genrate",
                       "how": "tools/goldens/degenerate_trees.py: the method extracted by its AST and executed verbatim with a "
                              "scripted fake draft model (lm_head / norm / head are the identity, each forward returns the "
                              "logits below" + ("; the penultimate forward returns the left and right logit sets" if jakiro else "")
                              + "); logits_processor None for outputs, non-None for outputs_sampling; every topk tie-guarded"},
            "note": note,
            "params": {"total_token": total_token, "depth": depth, "top_k": top_k, "vocab_size": d2t_vocab or vocab,
                       "draft_vocab_size": vocab, "sample_token": sample_token, "dtype": "float32", "seed_used": s},
            "inputs": inputs, "outputs": outputs, "outputs_sampling": sampling, "intermediates": inter,
        }
    raise RuntimeError(f"{name}: no tie-free seed")


# ---------------------------------------------------------------- static trees
def medusa_case(args, note, choices, heads, vocab, seed):
    source = git_show(args.medusa, MEDUSA, "medusa/model/utils.py")
    pad_path = extract(source, "pad_path")
    buffers_fn = extract(source, "generate_medusa_buffers", extra_globals={"pad_path": pad_path})
    candidates_fn = extract(source, "generate_candidates")
    buffers = buffers_fn(choices, device="cpu")
    for s in range(seed, seed + 500):
        rng = np.random.default_rng(s)
        head_logits, base = logits(rng, heads, vocab), logits(rng, vocab)
        try:
            cart, tree = candidates_fn(torch.tensor(head_logits)[:, None, None, :], torch.tensor(base)[None, None, :],
                                       buffers["tree_indices"], buffers["retrieve_indices"])
        except TieError:
            continue
        top10 = torch.topk(torch.tensor(head_logits), 10, dim=-1).indices
        return {
            "kind": "medusa_buffers",
            "source": {"repo": "FasterDecoding/Medusa", "path": "medusa/model/utils.py", "commit": MEDUSA,
                       "function": "generate_medusa_buffers (TOPK=10), generate_candidates (temperature 0)",
                       "how": "tools/goldens/degenerate_trees.py: functions extracted by their AST and executed verbatim, device=cpu"},
            "note": note,
            "params": {"TOPK": 10, "num_heads": heads, "vocab_size": vocab, "seed_used": s},
            "inputs": {"medusa_choices": choices,
                       "candidates_inputs": {"medusa_last_logits": head_logits.tolist(), "base_last_logits": base.tolist()}},
            "outputs": {"medusa_attn_mask": tolist(buffers["medusa_attn_mask"][0, 0].int()),
                        "tree_indices": tolist(buffers["tree_indices"]),
                        "medusa_position_ids": tolist(buffers["medusa_position_ids"]),
                        "retrieve_indices": tolist(buffers["retrieve_indices"])},
            "candidates_outputs": {"head_top10": top10.tolist(), "root_token": int(torch.argmax(torch.tensor(base))),
                                   "tree_candidates": tolist(tree[0]), "cart_candidates": tolist(cart)},
        }
    raise RuntimeError("medusa: no tie-free seed")


class FakeStaticDraft:
    def __init__(self, tree_buffer, root, levels):
        self.tree_buffer, self.diff_device, self.stable_kv = tree_buffer, False, None
        self.root, self.levels = torch.tensor(root), [torch.tensor(x) for x in levels]
        self.calls, self.trace = 0, []

    def reset(self):
        self.tree_mask = None

    def repeat_hidden(self, hidden_state, repeat_num):
        return torch.cat([hidden_state[:, i:i + 1].repeat(1, n, 1) for i, n in enumerate(repeat_num)], dim=1)

    def __call__(self, hidden, input_ids=None, past_key_values=None, position_ids=None, use_cache=True):
        call = self.calls
        self.calls += 1
        if call == 0:
            return self.root[None, None, :], "kv"
        self.trace.append({"input_ids": input_ids.view(-1).tolist(), "position_ids": position_ids.view(-1).tolist(),
                           "draft_tree_mask": self.tree_mask[0, 0].int().tolist()})
        return self.levels[call - 1][None], "kv"


def eagle1_case(args, note, choices, vocab, seed):
    utils = git_show(args.eagle, EAGLE_V1, "eagle/model/utils.py")
    utils_c = git_show(args.eagle, EAGLE_V1, "eagle/model/utils_c.py")
    cnets = git_show(args.eagle, EAGLE_V1, "eagle/model/cnets.py")
    pad = extract(utils, "pad_path")
    target_fn = extract(utils, "generate_tree_buffers", extra_globals={"pad_path": pad})
    module_c = types.ModuleType("utils_c")
    exec(compile(utils_c, "<utils_c>", "exec"), module_c.__dict__)
    module_c.torch = GuardedTorch()
    draft_fn = module_c.generate_tree_buffers
    static_fn = extract(cnets, "topK_genrate", cls="Model", extra_globals={"top_k": 10})
    candidates_fn = extract(utils, "generate_candidates")
    target = target_fn(choices, device="cpu")
    try:
        draft = draft_fn(choices, device="cpu")
    except IndexError:
        # A depth-1 list expands no level: utils_c computes empty per-level lists, then its device-move
        # comprehension reads v[0] of an empty list. The golden records the lists it computed.
        note += " (EAGLE-1's utils_c.generate_tree_buffers raises IndexError here after computing empty per-level " \
                "lists, in its device-move step; recorded as those empty lists)"
        draft = {"attn_mask": [], "tree_indices": [], "position_ids": [], "repeat_nums": []}
    levels = len(draft["tree_indices"])
    for s in range(seed, seed + 500):
        rng = np.random.default_rng(s)
        root = logits(rng, vocab)
        level_logits = [logits(rng, len(draft["repeat_nums"][l]) and sum(draft["repeat_nums"][l]), vocab) for l in range(levels)]
        sample_token = int(rng.integers(0, vocab))
        fake = FakeStaticDraft(draft, root, level_logits)
        try:
            ss_token, _, _ = static_fn.__get__(fake)(torch.zeros(1, 6, 1), torch.tensor([[11, 12, 13, 14, 15, sample_token]]),
                                                     lambda x: x, None)
        except TieError:
            continue
        cart, _, tree = candidates_fn((ss_token[None], None), target["tree_indices"], target["retrieve_indices"],
                                      torch.tensor([[sample_token]]), None)
        to_list = lambda key: [tolist(x) for x in draft[key]]
        return {
            "kind": "eagle1_static_tree",
            "source": {"repo": "SafeAILab/EAGLE", "branch": "v1", "commit": EAGLE_V1,
                       "functions": {"target_side_buffers": "eagle/model/utils.py generate_tree_buffers (TOPK=10)",
                                     "draft_side_buffers": "eagle/model/utils_c.py generate_tree_buffers",
                                     "static_draft": "eagle/model/cnets.py Model.topK_genrate (module top_k=10, logits_processor=None)",
                                     "candidates": "eagle/model/utils.py generate_candidates"},
                       "how": "tools/goldens/degenerate_trees.py: extracted by their AST (utils_c imported whole) and executed "
                              "verbatim on cpu with a scripted fake draft model (head = identity)"},
            "note": note,
            "params": {"TOPK": 10, "vocab_size": vocab, "sample_token": sample_token, "seed_used": s},
            "inputs": {"tree_choices": choices, "root_logits": root.tolist(), "level_logits": [x.tolist() for x in level_logits]},
            "outputs": {"tree_attn_mask": tolist(target["tree_attn_mask"][0, 0].int()), "tree_indices": tolist(target["tree_indices"]),
                        "tree_position_ids": tolist(target["tree_position_ids"]),
                        "retrieve_indices": tolist(target["retrieve_indices"]),
                        "p_indices": tolist(target["p_indices"]), "b_indices": [[tolist(c) for c in row] for row in target["b_indices"]]},
            "draft_side_buffers": {"attn_mask": [tolist(m[0, 0].int()) for m in draft["attn_mask"]],
                                   "tree_indices": to_list("tree_indices"), "position_ids": to_list("position_ids"),
                                   "repeat_nums": [list(r) for r in draft["repeat_nums"]]},
            "static_draft_trace": fake.trace,
            "static_draft_outputs": {"ss_token": tolist(ss_token), "tree_candidates": tolist(tree[0]), "cart_candidates": tolist(cart)},
        }
    raise RuntimeError("eagle1: no tie-free seed")


def trtllm_case(args, note, choices):
    source = open(args.trtllm).read()
    names = ["path_sorter", "choices_2_paths", "get_medusa_topks", "get_medusa_tree", "get_medusa_mask", "get_packed_mask",
             "_medusa_setup"]
    env = {}
    for name in names:
        env[name] = extract(source, name, extra_globals=env)
    env["path_sorting_key"] = cmp_to_key(env["path_sorter"])
    setup = extract(source, "_medusa_setup", extra_globals=env)
    r = setup(copy.deepcopy(choices))
    return {
        "kind": "trtllm_medusa_setup",
        "source": {"repo": "NVIDIA/TensorRT-LLM", "path": "tensorrt_llm/runtime/medusa_utils.py", "commit": TRTLLM,
                   "function": "_medusa_setup", "how": "tools/goldens/degenerate_trees.py: extracted by their AST and executed "
                                                      "verbatim on cpu (.cuda() is the identity)"},
        "note": note,
        "inputs": {"choices": choices},
        "outputs": {"medusa_mask": tolist(r.medusa_mask.int()), "medusa_packed_mask": tolist(r.medusa_packed_mask),
                    "medusa_topks": tolist(r.medusa_topks), "medusa_paths": tolist(r.medusa_paths),
                    "medusa_tree_ids": tolist(r.medusa_tree_ids), "medusa_position_offsets": tolist(r.medusa_position_offsets)},
    }


# ---------------------------------------------------------------- SGLang
def fast_topk(values, topk, dim):
    if topk == 1:  # SGLang's fast_topk: max with keepdim for k = 1
        v, i = torch.max(values, dim=dim, keepdim=True)
        return v, i
    return guarded_topk(values, topk, dim=dim, relative=True)


def build_tree_serial(parent_list, selected, seq_lens, topk, depth, n, mode):
    """build_tree_efficient, one thread at a time (trees.md 3.2): links by head insertion from the last
    node, positions by the walk to the root, the mask in the requested layout."""
    bs = len(seq_lens)
    retrieve = [[-1] * n for _ in range(bs)]
    next_token = [[-1] * n for _ in range(bs)]
    next_sibling = [[-1] * n for _ in range(bs)]
    positions = [0] * (bs * n)
    if mode == 0:
        mask = [True] * (sum(seq_lens) * n + n * n * bs)
    elif mode == 1:
        mask = [True] * (n * n * bs)
    else:
        mask = [0] * (n * bs)

    def parent_of(b, i):
        group = selected[b][i - 1] // topk
        if group == 0:
            return 0
        flat = parent_list[b][group]
        for j in range(n - 1):
            if selected[b][j] == flat:
                return j + 1
        raise RuntimeError("malformed tree")

    offset = 0
    for b in range(bs):
        seq_len = seq_lens[b]
        row_len = seq_len + n if mode == 0 else n
        for i in range(n):
            retrieve[b][i] = b * n + i
        for i in range(n - 1, 0, -1):
            p = parent_of(b, i)
            next_sibling[b][i] = next_token[b][p]
            next_token[b][p] = i

        def set_cell(row, col, value):
            if mode == 2:
                if value:
                    mask[b * n + row] |= 1 << col
                else:
                    mask[b * n + row] &= ~(1 << col)
            else:
                mask[offset + row * row_len + (seq_len if mode == 0 else 0) + col] = value

        for i in range(n):
            for j in range(n):
                set_cell(i, j, False)
            set_cell(i, 0, True)
            set_cell(i, i, True)
            depth_i, cur = 0, i
            while cur != 0:
                cur = parent_of(b, cur)
                depth_i += 1
                set_cell(i, cur, True)
            positions[b * n + i] = seq_len + depth_i
        offset += n * row_len
    return mask, positions, retrieve, next_token, next_sibling


def sglang_case(note, bs, topk, steps, n, vocab, seq_lens, seed, recorded=None):
    for s in range(seed, seed + 500):
        rng = np.random.default_rng(s)
        root = logits(rng, bs, vocab)
        step_logits = [logits(rng, bs * topk, vocab) for _ in range(steps - 1)]
        verified = [int(x) for x in rng.integers(0, vocab, size=bs)]
        if recorded is not None:
            root = np.array(recorded["root_logits"], dtype=np.float32)
            step_logits = [np.array(x, dtype=np.float32) for x in recorded["step_logits"]]
            verified = recorded["verified_id"]
        try:
            # select_top_k_tokens (first step from the draft-extend output, then one per draft forward)
            probs = torch.softmax(torch.tensor(root), dim=-1)
            topk_p, topk_index = fast_topk(probs, topk, dim=-1)
            score_list, token_list = [topk_p[:, None, :]], [topk_index]
            parents_list = [torch.arange(-1, topk, dtype=torch.long).expand(bs, -1)]
            scores, frontier = topk_p, [topk_index.flatten().tolist()]
            for i in range(1, steps):
                probs = torch.softmax(torch.tensor(step_logits[i - 1]), dim=-1)
                topk_p, topk_index = fast_topk(probs, topk, dim=-1)
                expand_scores = scores[:, :, None] * topk_p.view(-1, topk, topk)
                topk_cs_p, topk_cs_index = fast_topk(expand_scores.flatten(start_dim=1), topk, dim=-1)
                scores = topk_cs_p
                topk_index = topk_index.reshape(-1, topk * topk)
                frontier.append(torch.gather(topk_index, index=topk_cs_index, dim=1).flatten().tolist())
                score_list.append(expand_scores)
                token_list.append(topk_index)
                parents_list.append(topk_cs_index + (topk * topk * (i - 1) + topk))
            # organize_draft_results
            flat_scores = torch.cat(score_list, dim=1).flatten(1)
            flat_tokens = torch.cat(token_list, dim=1)
            top_scores_index = torch.sort(guarded_topk(flat_scores, n - 1, dim=-1, relative=True).indices).values
            draft_tokens = torch.gather(flat_tokens, index=top_scores_index, dim=1)
            parent_list = (torch.cat(parents_list[:-1], dim=1) if len(parents_list) > 1
                           else torch.empty(bs, 0, dtype=torch.long))
        except TieError:
            continue
        full, positions, retrieve, next_token, next_sibling = build_tree_serial(
            parent_list.tolist(), top_scores_index.tolist(), seq_lens, topk, steps, n, 0)
        qlen, _, _, _, _ = build_tree_serial(parent_list.tolist(), top_scores_index.tolist(), seq_lens, topk, steps, n, 1)
        masks = {"FULL_MASK": [int(x) for x in full], "QLEN_ONLY": [int(x) for x in qlen]}
        if n <= 32:
            masks["QLEN_ONLY_BITPACKING"] = build_tree_serial(parent_list.tolist(), top_scores_index.tolist(), seq_lens, topk,
                                                              steps, n, 2)[0]
        all_tokens = torch.cat((torch.tensor(verified)[:, None], draft_tokens), dim=1).flatten().tolist()
        return {
            "kind": "sglang_eagle_pipeline",
            "source": {"repo": "sgl-project/sglang",
                       "kernel": {"path": "sgl-kernel/csrc/speculative/eagle_utils.cu", "commit": "29bd4e859f6ef92f5248fd8c3d4ba681f8d19028"},
                       "python": [{"path": "python/sglang/srt/speculative/eagle_utils.py", "commit": "003ddbce039cd49b05c84568b7b357031366abf7",
                                   "function": "organize_draft_results (parent_list is (bs, 0) when num_steps = 1)"},
                                  {"path": "python/sglang/srt/speculative/spec_utils.py", "function": "select_top_k_tokens"}],
                       "how": "tools/goldens/degenerate_trees.py: select_top_k_tokens / organize_draft_results transcribed "
                              "(fast_topk = max for topk 1), build_tree_efficient emulated serially; probs = softmax(logits) float32"},
            "note": note,
            "params": {"bs": bs, "topk": topk, "num_steps": steps, "num_draft_tokens": n, "vocab_size": vocab, "seed_used": s},
            "inputs": {"root_logits": root.tolist(), "step_logits": [x.tolist() for x in step_logits], "seq_lens": seq_lens,
                       "verified_id": verified},
            "intermediates": {"score_list": [x.tolist() for x in score_list], "token_list": [x.tolist() for x in token_list],
                              "parents_list": [x.tolist() for x in parents_list], "frontier_input_ids": frontier},
            "outputs": {"parent_list": parent_list.tolist(), "top_scores_index": top_scores_index.tolist(),
                        "draft_tokens": all_tokens, "positions": positions, "retrive_index": retrieve,
                        "retrive_next_token": next_token, "retrive_next_sibling": next_sibling, "tree_mask": masks,
                        "tree_mask_qlen_matrix": [[[int(qlen[b * n * n + i * n + j]) for j in range(n)] for i in range(n)]
                                                  for b in range(bs)]},
        }
    raise RuntimeError("sglang: no tie-free seed")


def validate(args):
    """The harness first reproduces the public goldens it shares a kind with (made by running the
    same peers earlier), from their recorded inputs: every output must be identical."""
    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "trees")
    checked = 0
    for name in sorted(os.listdir(data)):
        if name.startswith("degenerate_") or not name.endswith(".json"):
            continue
        g = json.load(open(os.path.join(data, name)))
        p = g.get("params", {})
        if g["kind"] in ("eagle2_dynamic_tree", "jakiro_dynamic_tree"):
            jakiro = g["kind"] == "jakiro_dynamic_tree"
            got = dynamic_case(args, name, "", p["total_token"], p["depth"], p["top_k"], len(g["inputs"]["root_logits"]), 0,
                               p["vocab_size"] if "d2t" in g["inputs"] else None, jakiro, recorded=g)
            same = got["outputs"] == g["outputs"] and got["outputs_sampling"] == g["outputs_sampling"]
        elif g["kind"] == "sglang_eagle_pipeline":
            got = sglang_case("", p["bs"], p["topk"], p["num_steps"], p["num_draft_tokens"], p["vocab_size"],
                              g["inputs"]["seq_lens"], 0, recorded=g["inputs"])
            same = all(got["outputs"][k] == g["outputs"][k] for k in g["outputs"])
        elif g["kind"] == "trtllm_medusa_setup":
            same = trtllm_case(args, "", g["inputs"]["choices"])["outputs"] == g["outputs"]
        else:
            continue
        if not same:
            raise SystemExit(f"validation failed: the harness does not reproduce {name}")
        checked += 1
    print(f"validated: the harness reproduces {checked} public goldens exactly")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--eagle", required=True)
    ap.add_argument("--jakiro", required=True)
    ap.add_argument("--medusa", required=True)
    ap.add_argument("--trtllm", required=True)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "trees"))
    args = ap.parse_args()
    cases = {
        "degenerate_eagle2_depth0_t5_k4_v16": lambda: dynamic_case(
            args, "depth0", "depth 0: no expansion forward; the tree is the root and all of its top-k children", 5, 0, 4, 16, 100),
        "degenerate_eagle2_depth0_t3_k4_v16": lambda: dynamic_case(
            args, "depth0b", "depth 0: the root's two best children of four", 3, 0, 4, 16, 200),
        "degenerate_eagle2_depth1_t6_k3_v16": lambda: dynamic_case(
            args, "depth1", "one expansion forward (SGLang's num_steps = 2)", 6, 1, 3, 16, 300),
        "degenerate_eagle2_topk1_d3_t3_v16": lambda: dynamic_case(
            args, "topk1", "top-k 1: a chain, cut to total_token - 1 = 2 of its 4 candidates", 3, 3, 1, 16, 400),
        "degenerate_eagle2_t2_d2_k3_v16": lambda: dynamic_case(
            args, "t2", "total_token 2: one draft token (EAGLE crashes at total_token 1)", 2, 2, 3, 16, 500),
        "degenerate_eagle3_d2t_depth0_t3_k3": lambda: dynamic_case(
            args, "e3d0", "EAGLE-3 reduced vocabulary (d2t), depth 0", 3, 0, 3, 12, 600, d2t_vocab=40),
        "degenerate_eagle3_d2t_topk1_d2_t4": lambda: dynamic_case(
            args, "e3k1", "EAGLE-3 reduced vocabulary (d2t), top-k 1 chain over every candidate", 4, 2, 1, 12, 700, d2t_vocab=40),
        "degenerate_jakiro_d2_t6_k2_v16": lambda: dynamic_case(
            args, "jd2", "Jakiro's minimum depth 2: the only forward is the dual-head one", 6, 2, 2, 16, 800, jakiro=True),
        "degenerate_jakiro_d2_k1_t3_v16": lambda: dynamic_case(
            args, "jk1", "Jakiro at top-k 1: a chain of the left head's child and the right head's", 3, 2, 1, 16, 900, jakiro=True),
        "degenerate_medusa_one_choice": lambda: medusa_case(args, "one choice: the root and its top-1 child (total tokens 2)",
                                                            [[0]], 1, 24, 1000),
        "degenerate_medusa_chain": lambda: medusa_case(args, "a chain of three: top-1 of each head", [[0], [0, 0], [0, 0, 0]], 3, 24, 1100),
        "degenerate_medusa_depth1_topk": lambda: medusa_case(args, "depth 1 only: the top-3 of head 0", [[2], [0], [1]], 2, 24, 1200),
        "degenerate_eagle1_one_choice": lambda: eagle1_case(args, "one choice: no draft level is expanded", [[0]], 24, 1300),
        "degenerate_eagle1_chain": lambda: eagle1_case(args, "a chain of three", [[0], [0, 0], [0, 0, 0]], 24, 1400),
        "degenerate_trtllm_one_choice": lambda: trtllm_case(args, "one choice", [[0]]),
        "degenerate_trtllm_chain": lambda: trtllm_case(args, "a chain of three", [[0], [0, 0], [0, 0, 0]]),
        "degenerate_sglang_bs2_topk3_steps1_n4": lambda: sglang_case(
            "num_steps 1: no draft forward, parent_list of shape (bs, 0); one request has an empty prefix (seq_len 0)",
            2, 3, 1, 4, 16, [0, 5], 1500),
        "degenerate_sglang_bs1_topk1_steps3_n3": lambda: sglang_case(
            "top-k 1 (fast_topk is a max): a chain of two of the three candidates, one request", 1, 1, 3, 3, 16, [4], 1600),
        "degenerate_sglang_bs2_topk2_steps2_n2": lambda: sglang_case(
            "two draft tokens (root and one candidate) in a batch of two", 2, 2, 2, 2, 16, [3, 0], 1700),
        "degenerate_sglang_bs2_topk2_steps2_n1": lambda: sglang_case(
            "one draft token: the root alone (nothing selected)", 2, 2, 2, 1, 16, [2, 6], 1800),
    }
    validate(args)
    os.makedirs(args.out, exist_ok=True)
    for name, make in cases.items():
        case = make()
        case["id"] = name
        with open(os.path.join(args.out, name + ".json"), "w") as f:
            json.dump(case, f, separators=(",", ":"))
        print("wrote", name)


if __name__ == "__main__":
    main()
