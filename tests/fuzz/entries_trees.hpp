// SPDX-License-Identifier: Apache-2.0
// Entry points of the fuzz_views / fuzz_sizes list (entry_points.hpp): tree-attention masks, tree
// buffers, packbits, grammar trees, the batch EAGLE-2 builder and SGLang's tree kernels.
#pragma once

#include "entry_plan.hpp"

namespace fuzz::entry {

struct fill_tree_bitmasks {
  static constexpr const char* name = "fill_tree_bitmasks";
  static void plan(call_plan& p) {
    add<std::int32_t>(p, "bitmask", 2, 4, 2, role::out, {});
    add_tree(p, 4, 40);
    p.size(40);  // vocab
    p.size(0);   // first_row
  }
  template <class B>
  static digest call(B&, const context& c) {
    specdec::any_token_matcher matcher{40};
    const auto flags = specdec::fill_tree_bitmasks(tree_of(c, {1, 2, 3}), c.sizes[0], matcher, c.m<std::int32_t>(0), c.sizes[1]);
    return digest(flags.begin(), flags.end());
  }
};

struct host_tree_mask_dense {
  static constexpr const char* name = "tree_mask_dense (host)";
  static void plan(call_plan& p) {
    add<std::uint8_t>(p, "out", 2, 4, 6, role::out, {});
    add_tree(p, 4, 10);
    p.size(2);  // prefix_length
  }
  template <class B>
  static digest call(B&, const context& c) {
    specdec::tree_mask_dense(tree_of(c, {1, 2, 3}), c.sizes[0], c.m<std::uint8_t>(0));
    return {};
  }
};

struct host_tree_mask_packed {
  static constexpr const char* name = "tree_mask_packed_int32 / _bitpacked_rows (host)";
  static void plan(call_plan& p) {
    add<std::int32_t>(p, "out", 2, 4, 1, role::out, {});
    add_tree(p, 4, 10);
  }
  template <class B>
  static digest call(B&, const context& c) {
    specdec::tree_mask_packed_int32(tree_of(c, {1, 2, 3}), c.m<std::int32_t>(0));
    return {};
  }
};

struct host_tree_positions {
  static constexpr const char* name = "tree_positions";
  static void plan(call_plan& p) {
    add<std::int32_t>(p, "positions", 1, 4, 1, role::out, {});
    add_tree(p, 4, 10);
    p.size(3);  // prefix_length
  }
  template <class B>
  static digest call(B&, const context& c) {
    specdec::tree_positions(tree_of(c, {1, 2, 3}), c.sizes[0], c.v<std::int32_t>(0));
    return {};
  }
};

struct host_child_links {
  static constexpr const char* name = "child_links";
  static void plan(call_plan& p) {
    add<std::int32_t>(p, "first_child", 1, 4, 1, role::out, {});
    add<std::int32_t>(p, "next_sibling", 1, 4, 1, role::out, {});
    add_tree(p, 4, 10);
  }
  template <class B>
  static digest call(B&, const context& c) {
    specdec::child_links(tree_of(c, {2, 3, 4}), c.v<std::int32_t>(0), c.v<std::int32_t>(1));
    return {};
  }
};

struct batch_tree_mask_dense {
  static constexpr const char* name = "tree_mask_dense (batch)";
  static void plan(call_plan& p) {
    std::vector<double> par = parents(p.input(), 3), par2 = parents(p.input(), 3);
    par.insert(par.end(), par2.begin(), par2.end());
    add<std::int32_t>(p, "parents", 2, 2, 3, role::in, par);
    add<std::int32_t>(p, "node_counts", 1, 2, 1, role::in, {3, 2});
    add<std::uint8_t>(p, "out", 2, 6, 5, role::out, {});
    p.size(2);  // prefix_length
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::tree_mask_dense(b, c.m<const std::int32_t>(0), c.v<const std::int32_t>(1), c.sizes[0], c.m<std::uint8_t>(2));
    return {};
  }
};

struct segment_packbits_host {
  static constexpr const char* name = "segment_packbits (host)";
  static void plan(call_plan& p) {
    add<std::uint8_t>(p, "x", 1, 11, 1, role::in, ints(p.input(), 11, 0, 1), true);
    add<std::int32_t>(p, "indptr", 1, 3, 1, role::in, {0, 9, 11}, true);
    add<std::uint8_t>(p, "out", 1, 3, 1, role::out, {}, true);
  }
  template <class B>
  static digest call(B&, const context& c) {
    specdec::segment_packbits(c.s<const std::uint8_t>(0), c.s<const std::int32_t>(1), specdec::bit_order::little, c.s<std::uint8_t>(2));
    return {};
  }
};

struct segment_packbits_backend {
  static constexpr const char* name = "segment_packbits (backend)";
  static void plan(call_plan& p) {
    add<std::uint8_t>(p, "x", 1, 11, 1, role::in, ints(p.input(), 11, 0, 1));
    add<std::int32_t>(p, "indptr", 1, 3, 1, role::in, {0, 9, 11});
    add<std::int32_t>(p, "offsets", 1, 3, 1, role::in, {0, 2, 3});
    add<std::uint8_t>(p, "out", 1, 3, 1, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::segment_packbits(b, c.v<const std::uint8_t>(0), c.v<const std::int32_t>(1), c.v<const std::int32_t>(2),
                              specdec::bit_order::little, c.v<std::uint8_t>(3));
    return {};
  }
};

struct flashinfer_batch_masks {
  static constexpr const char* name = "tree_mask_flashinfer_offsets / _packed (batch)";
  static void plan(call_plan& p) {
    std::vector<double> par = parents(p.input(), 3), par2 = parents(p.input(), 3);
    par.insert(par.end(), par2.begin(), par2.end());
    add<std::int32_t>(p, "parents", 2, 2, 3, role::in, par);
    add<std::int32_t>(p, "node_counts", 1, 2, 1, role::in, {3, 2});
    add<std::int64_t>(p, "prefix_lengths", 1, 2, 1, role::in, {2, 5});
    add<std::int32_t>(p, "indptr", 1, 3, 1, role::out, {});
    add<std::uint8_t>(p, "out", 1, 4, 1, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::tree_mask_flashinfer_offsets(b, c.m<const std::int32_t>(0), c.v<const std::int32_t>(1), c.v<const std::int64_t>(2),
                                          c.v<std::int32_t>(3));
    specdec::tree_mask_flashinfer_packed(b, c.m<const std::int32_t>(0), c.v<const std::int32_t>(1), c.v<const std::int64_t>(2),
                                         vector_view<const std::int32_t>(c.v<std::int32_t>(3)), c.v<std::uint8_t>(4));
    return {};
  }
};

struct sglang_greedy {
  static constexpr const char* name = "sglang::verify_tree_greedy (backend)";
  static void plan(call_plan& p) {
    // One request, a root with two children (node 2 under node 1): SGLang's link layout.
    add<std::int64_t>(p, "candidates", 2, 1, 3, role::in, {9, 4, 6});
    add<std::int64_t>(p, "retrive_index", 2, 1, 3, role::in, {0, 1, 2});
    add<std::int64_t>(p, "next_token", 2, 1, 3, role::in, {1, 2, -1});
    add<std::int64_t>(p, "next_sibling", 2, 1, 3, role::in, {-1, -1, -1});
    add<std::int64_t>(p, "target_predict", 1, 3, 1, role::in, ints(p.input(), 3, 3, 7));
    add<std::int32_t>(p, "predicts", 1, 3, 1, role::out, {});
    add<std::int32_t>(p, "accept_index", 2, 1, 3, role::out, {});
    add<std::int32_t>(p, "accept_token_num", 1, 1, 1, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sglang::verify_tree_greedy(b, c.m<const std::int64_t>(0), c.m<const std::int64_t>(1), c.m<const std::int64_t>(2),
                                        c.m<const std::int64_t>(3), c.v<const std::int64_t>(4), c.v<std::int32_t>(5),
                                        c.m<std::int32_t>(6), c.v<std::int32_t>(7));
    return {};
  }
};

struct eagle2_batch_finish {
  static constexpr const char* name = "eagle2_batch_builder::finish";
  static void plan(call_plan& p) {
    add<std::int32_t>(p, "out.tokens", 2, 2, 4, role::out, {});
    add<std::int32_t>(p, "out.parents", 2, 2, 4, role::out, {});
    add<std::int32_t>(p, "out.depths", 2, 2, 4, role::out, {});
    add<float>(p, "out.scores", 2, 2, 4, role::out, {});
    add<std::int32_t>(p, "out.selected", 2, 2, 3, role::out, {});
    add<float>(p, "root_logits", 2, 2, 8, role::in, logits(p.input(), 16));
    add<float>(p, "frontier_logits", 2, 4, 8, role::in, logits(p.input(), 32));
    add<std::int32_t>(p, "root_tokens", 1, 2, 1, role::in, {3, 5});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::eagle2_batch_builder<B> builder(b, specdec::dynamic_tree_config{2, 1, 4}, 2);
    (void)builder.begin(c.m<const float>(5), c.v<const std::int32_t>(7));
    (void)builder.expand(c.m<const float>(6));
    builder.finish({c.m<std::int32_t>(0), c.m<std::int32_t>(1), c.m<std::int32_t>(2), c.m<float>(3), c.m<std::int32_t>(4)});
    return {};
  }
};

struct prune_tree_bitmask {
  static constexpr const char* name = "prune_tree (bitmask)";
  static void plan(call_plan& p) {
    add<std::int32_t>(p, "bitmask", 2, 4, 2, role::in, ints(p.input(), 8, -3, 3));
    p.size(40);  // vocab
    p.size(0);   // first_row
  }
  template <class B>
  static digest call(B&, const context& c) {
    const specdec::draft_tree tree = specdec::make_tree({0, 3, 33, 7}, {-1, 0, 0, 1});
    const specdec::pruned_tree kept = specdec::prune_tree(tree, c.sizes[0], c.m<const std::int32_t>(0), c.sizes[1]);
    return digest(kept.tree.token.begin(), kept.tree.token.end());
  }
};

struct batch_tree_mask_packed {
  static constexpr const char* name = "tree_mask_packed_int32 (batch)";
  static void plan(call_plan& p) {
    std::vector<double> par = parents(p.input(), 3), par2 = parents(p.input(), 3);
    par.insert(par.end(), par2.begin(), par2.end());
    add<std::int32_t>(p, "parents", 2, 2, 3, role::in, par);
    add<std::int32_t>(p, "node_counts", 1, 2, 1, role::in, {3, 2});
    add<std::int32_t>(p, "out", 2, 6, 1, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::tree_mask_packed_int32(b, c.m<const std::int32_t>(0), c.v<const std::int32_t>(1), c.m<std::int32_t>(2));
    return {};
  }
};

struct sglang_build_tree {
  static constexpr const char* name = "sglang::build_tree (backend)";
  static void plan(call_plan& p) {
    // One request, top_k 2, 2 steps, 3 nodes (QLEN_ONLY masks: 3 x 3 bools).
    add<std::int64_t>(p, "parent_list", 2, 1, 3, role::in, {-1, 0, 1});
    add<std::int64_t>(p, "selected_index", 2, 1, 2, role::in, ints(p.input(), 2, 0, 5));
    add<std::int64_t>(p, "verified_seq_len", 1, 1, 1, role::in, {5});
    add<std::uint8_t>(p, "tree_mask", 1, 9, 1, role::out, {});
    add<std::int64_t>(p, "positions", 1, 3, 1, role::out, {});
    add<std::int64_t>(p, "retrive_index", 2, 1, 3, role::out, {});
    add<std::int64_t>(p, "retrive_next_token", 2, 1, 3, role::out, {});
    add<std::int64_t>(p, "retrive_next_sibling", 2, 1, 3, role::out, {});
    p.size(2);  // top_k
    p.size(2);  // num_steps
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sglang::build_tree(b, c.m<const std::int64_t>(0), c.m<const std::int64_t>(1), c.v<const std::int64_t>(2),
                                c.v<std::uint8_t>(3), c.v<std::int64_t>(4), c.m<std::int64_t>(5), c.m<std::int64_t>(6),
                                c.m<std::int64_t>(7), c.sizes[0], c.sizes[1], specdec::sglang::tree_mask_mode::qlen_only);
    return {};
  }
};

struct sglang_reconstruct {
  static constexpr const char* name = "sglang::reconstruct_indices_from_tree_mask";
  static void plan(call_plan& p) {
    // Two requests of 3 nodes: 2 x 3 x 3 mask bytes.
    add<std::uint8_t>(p, "tree_mask", 1, 18, 1, role::in, {1, 0, 0, 1, 1, 0, 1, 0, 1, 1, 0, 0, 1, 1, 0, 1, 1, 1});
    add<std::int64_t>(p, "verified_seq_len", 1, 2, 1, role::in, {5, 0});
    add<std::int64_t>(p, "positions", 1, 6, 1, role::out, {});
    add<std::int64_t>(p, "retrive_index", 2, 2, 3, role::out, {});
    add<std::int64_t>(p, "retrive_next_token", 2, 2, 3, role::out, {});
    add<std::int64_t>(p, "retrive_next_sibling", 2, 2, 3, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sglang::reconstruct_indices_from_tree_mask(b, c.v<const std::uint8_t>(0), c.v<const std::int64_t>(1), c.v<std::int64_t>(2),
                                                        c.m<std::int64_t>(3), c.m<std::int64_t>(4), c.m<std::int64_t>(5));
    return {};
  }
};

}  // namespace fuzz::entry
