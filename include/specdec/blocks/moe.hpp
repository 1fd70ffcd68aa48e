// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Jakiro's MoE draft layer: a router over N SwiGLU experts (intermediate size E), the "left"
/// output (the router-weighted sum of the top-2 experts, autoregressive) and, for the penultimate
/// forward of a tree, the contrastive "right" output `beta f_top1 - alpha f_top2` decided by a second
/// pair of router logits (haiduo/Jakiro `jakiro/model/cnets.py`, `MixtralSparseMoeBlock`). The
/// decoupled features `s_top1 f_top1` and `s_top2 f_top2` are returned too: the paper feeds them to
/// separate LM-head passes. The decoder layer around the MoE is eagle::forward with the MLP replaced.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include <specdec/blocks/eagle.hpp>
#include <specdec/blocks/layers.hpp>

namespace specdec::blocks::moe {

/// How the router picks and weights the two experts of a token.
enum class routing {
  /// Jakiro's released code for N = 2: top-1 = expert 0 iff r0 > r1 (a tie goes to expert 1), weights
  /// softmax(r0, r1); the contrastive pair (r2, r3) decides its own top-1 the same way.
  jakiro_two_experts,
  /// The paper's top-2 for any N (Mixtral): the two largest logits, ties to the lower index, weights
  /// the softmax over the two selected logits. No contrastive branch.
  top2,
};

struct config {
  index_t hidden = 0;
  index_t experts = 2;
  index_t expert_intermediate = 0;  ///< Jakiro: E
  routing rule = routing::jakiro_two_experts;
  /// Router outputs: N + 2 with the contrastive pair (Jakiro), N otherwise.
  index_t router_outputs() const { return rule == routing::jakiro_two_experts ? experts + 2 : experts; }
};

template <class Space = host_space>
struct weights {
  linear<Space> gate = {};                       ///< router [router_outputs x E], no bias
  std::vector<mlp_weights<Space>> experts = {};  ///< N SwiGLU experts

  /// \param prefix e.g. "layers.0.mlp_moe." (names gate.weight, experts.i.{gate,up,down}_proj.weight).
  void validate(const config& c, const std::string& prefix) const {
    SPECDEC_EXPECTS(c.experts >= 2 && c.experts <= 4096 && (c.rule != routing::jakiro_two_experts || c.experts == 2),
                    "specdec::blocks::moe", "experts = ", c.experts,
                    "; expected 2 for Jakiro's routing, 2 to 4096 for top-2");
    gate.validate(prefix + "gate", c.router_outputs(), c.hidden);
    SPECDEC_EXPECTS(static_cast<index_t>(experts.size()) == c.experts, "specdec::blocks::moe", prefix, "experts has ",
                    experts.size(), " experts; expected ", c.experts);
    for (std::size_t i = 0; i < experts.size(); ++i)
      experts[i].validate(c.hidden, c.expert_intermediate, prefix + "experts." + std::to_string(i) + ".");
  }
};

/// Per-token routing decisions (host) and the mixed features (backend `[T x E]` each).
template <dense_backend B>
struct result {
  std::vector<float> router_logits = {};            ///< [T x router_outputs]
  std::vector<std::int32_t> top1 = {}, top2 = {};   ///< experts picked per token
  std::vector<float> s_top1 = {}, s_top2 = {};      ///< their weights
  std::vector<std::int32_t> contrastive_top1 = {};  ///< expert decided by the contrastive pair (Jakiro)
  std::vector<float> beta = {}, alpha = {};         ///< contrastive weights of contrastive_top1 and the other expert
  typename B::template buffer<float> left, right, weighted_top1, weighted_top2;
};

namespace detail {
inline void softmax2(float a, float b, float& pa, float& pb) {
  const float m = a > b ? a : b;
  const float ea = std::exp(a - m), eb = std::exp(b - m);
  pa = ea / (ea + eb);
  pb = eb / (ea + eb);
}
}  // namespace detail

/// The MoE block on `x` `[T x E]` (the post-attention-normalised stream). `contrastive` computes the
/// right output too (Jakiro's penultimate forward; needs routing::jakiro_two_experts).
/// Cost: every expert runs on every token (N is 2 in every released config).
/// \throws invalid_argument on shapes, a contrastive request under top-2 routing, NaN router logits.
template <dense_backend B>
result<B> forward(B& b, const config& c, const weights<typename B::memory_space>& w,
                  matrix_view<const float, typename B::memory_space> x, bool contrastive) {
  constexpr const char* where = "specdec::blocks::moe::forward";
  using space = typename B::memory_space;
  SPECDEC_EXPECTS(!contrastive || c.rule == routing::jakiro_two_experts, where,
                  "the contrastive branch is defined for Jakiro's two-expert routing only");
  w.validate(c, "");  // the routing below reads g router outputs per token and c.experts experts
  const index_t t = x.rows(), e = c.hidden, g = c.router_outputs();
  SPECDEC_EXPECTS(x.cols() == e, where, "x has ", x.cols(), " columns; expected hidden = ", e);
  result<B> out;
  auto logits = b.template allocate<float>(t * g);
  apply(b, w.gate, x, logits.matrix(t, g));
  out.router_logits = b.download(logits.view());
  std::vector<std::vector<float>> weight_left(static_cast<std::size_t>(c.experts), std::vector<float>(static_cast<std::size_t>(t), 0.0f));
  auto weight_right = weight_left, weight_top1 = weight_left, weight_top2 = weight_left;
  for (index_t r = 0; r < t; ++r) {
    const float* l = out.router_logits.data() + r * g;
    for (index_t i = 0; i < g; ++i)
      SPECDEC_EXPECTS(std::isfinite(l[i]), where, "router logit ", i, " of token ", r, " is ", l[i],
                      "; expected finite values (two equal infinities have no softmax)");
    std::int32_t a = 0, bb = 1;
    float sa = 0, sb = 0;
    if (c.rule == routing::jakiro_two_experts) {
      float p0, p1;
      detail::softmax2(l[0], l[1], p0, p1);
      a = l[0] > l[1] ? 0 : 1;
      bb = 1 - a;
      sa = a == 0 ? p0 : p1;
      sb = a == 0 ? p1 : p0;
    } else {
      a = 0;
      for (index_t i = 1; i < c.experts; ++i)
        if (l[i] > l[a]) a = static_cast<std::int32_t>(i);
      bb = a == 0 ? 1 : 0;
      for (index_t i = 0; i < c.experts; ++i)
        if (i != a && l[i] > l[bb]) bb = static_cast<std::int32_t>(i);
      detail::softmax2(l[a], l[bb], sa, sb);
    }
    out.top1.push_back(a);
    out.top2.push_back(bb);
    out.s_top1.push_back(sa);
    out.s_top2.push_back(sb);
    const auto ri = static_cast<std::size_t>(r);
    weight_top1[static_cast<std::size_t>(a)][ri] = sa;
    weight_top2[static_cast<std::size_t>(bb)][ri] = sb;
    weight_left[static_cast<std::size_t>(a)][ri] += sa;
    weight_left[static_cast<std::size_t>(bb)][ri] += sb;
    if (contrastive) {
      float q2, q3;
      detail::softmax2(l[2], l[3], q2, q3);
      const std::int32_t ca = l[2] > l[3] ? 0 : 1;
      const float beta = ca == 0 ? q2 : q3, alpha = ca == 0 ? q3 : q2;
      out.contrastive_top1.push_back(ca);
      out.beta.push_back(beta);
      out.alpha.push_back(alpha);
      weight_right[static_cast<std::size_t>(ca)][ri] += beta;
      weight_right[static_cast<std::size_t>(1 - ca)][ri] -= alpha;
    }
  }
  const auto zeros = [&] {
    std::vector<float> z(static_cast<std::size_t>(t * e), 0.0f);
    return b.upload(std::span<const float>(z));
  };
  out.left = zeros();
  out.weighted_top1 = zeros();
  out.weighted_top2 = zeros();
  if (contrastive) out.right = zeros();
  auto feature = b.template allocate<float>(t * e);
  for (index_t n = 0; n < c.experts; ++n) {
    mlp_forward(b, w.experts[static_cast<std::size_t>(n)], x, feature.matrix(t, e));
    const matrix_view<const float, space> f(feature.view().data(), t, e);
    const auto mix = [&](typename B::template buffer<float>& into, const std::vector<float>& weight) {
      auto wv = b.upload(std::span<const float>(weight));
      b.add_rows(into.matrix(t, e), f, vector_view<const float, space>(wv.view().data(), t));
    };
    mix(out.left, weight_left[static_cast<std::size_t>(n)]);
    mix(out.weighted_top1, weight_top1[static_cast<std::size_t>(n)]);
    mix(out.weighted_top2, weight_top2[static_cast<std::size_t>(n)]);
    if (contrastive) mix(out.right, weight_right[static_cast<std::size_t>(n)]);
  }
  return out;
}

/// Jakiro's draft layer: eagle::fuse, the decoder layer's attention (layer 0: no input norm), then the
/// MoE on post_attention_layernorm(h) instead of the MLP. `left_out` = h + left; with `right_out` given
/// (the penultimate forward), right_out = h + right. Backend `[T x E]` each.
template <dense_backend B>
result<B> draft_layer_forward(B& b, const layer_config& c, const eagle::weights<typename B::memory_space>& w,
                              const config& moe_config, const weights<typename B::memory_space>& moe_weights,
                              vector_view<const std::int32_t, typename B::memory_space> tokens,
                              matrix_view<const float, typename B::memory_space> feature,
                              vector_view<const std::int64_t, typename B::memory_space> positions, std::type_identity_t<kv_cache<B>>* cache,
                              const attention_mask<typename B::memory_space>& mask,
                              matrix_view<float, typename B::memory_space> left_out,
                              matrix_view<float, typename B::memory_space> right_out = {}) {
  using space = typename B::memory_space;
  constexpr const char* where = "specdec::blocks::moe::draft_layer_forward";
  const index_t t = tokens.rows(), e = c.attention.hidden;
  // Both outputs are checked before any work, and read back with their own strides.
  SPECDEC_EXPECTS(left_out.rows() == t && left_out.cols() == e, where, "left_out has shape [", left_out.rows(), " x ",
                  left_out.cols(), "]; expected [", t, " x ", e, "]");
  specdec::detail::check_view(where, "left_out", left_out, specdec::detail::packed);
  const bool contrastive = !specdec::detail::has_zero_extent(right_out);
  if (contrastive) {
    SPECDEC_EXPECTS(right_out.rows() == t && right_out.cols() == e, where, "right_out has shape [", right_out.rows(), " x ",
                    right_out.cols(), "]; expected [", t, " x ", e, "]");
    specdec::detail::check_view(where, "right_out", right_out, specdec::detail::packed);
    specdec::detail::check_disjoint(where, specdec::detail::extent_of(where, "right_out", right_out),
                                    specdec::detail::extent_of(where, "left_out", left_out));
  }
  blocks::detail::arguments args(where);
  eagle::detail::add_inputs(args, w);
  args.add(specdec::detail::input("moe.gate.weight", moe_weights.gate.weight));
  args.add(specdec::detail::input("moe.gate.bias", moe_weights.gate.bias));
  for (const auto& expert : moe_weights.experts) blocks::detail::add_inputs(args, expert);
  blocks::detail::add_inputs(args, mask);
  args.add(specdec::detail::input("tokens", tokens)).add(specdec::detail::input("feature", feature));
  args.add(specdec::detail::input("positions", positions));
  args.add(specdec::detail::output("left_out", left_out)).add(specdec::detail::output("right_out", right_out)).check();
  const matrix_view<const float, space> left(left_out.data(), t, e, left_out.stride(0), 1);
  const cache_rollback<B> rollback(cache);  // the MoE's checks run after the attention appended
  eagle::fuse(b, w, tokens, feature, left_out);
  decoder_layer_forward(b, c, w.layer, left_out, positions, cache, mask, layer_skip{false, true});
  auto normed = b.template allocate<float>(t * e);
  b.rms_norm(left, w.layer.post_norm, c.rms_eps, normed.matrix(t, e));
  auto r = forward(b, moe_config, moe_weights, matrix_view<const float, space>(normed.view().data(), t, e), contrastive);
  if (contrastive) {
    copy_rows(b, left, right_out);
    b.add_rows(right_out, matrix_view<const float, space>(r.right.view().data(), t, e));
  }
  b.add_rows(left_out, matrix_view<const float, space>(r.left.view().data(), t, e));
  return r;
}

}  // namespace specdec::blocks::moe
