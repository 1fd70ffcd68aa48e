// SPDX-License-Identifier: Apache-2.0
// specdec-conformance, block goldens (../shared/goldens/blocks/README.md): ADMG rules and statistic,
// Jakiro's MoE and draft layer, the Llama decoder layer as MoA's self-attention. Values are exact
// float64 math; an fp32 implementation must be within abs 1e-4 + rel 1e-4, integers exact.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <specdec/blocks/amphista.hpp>
#include <specdec/blocks/eagle.hpp>
#include <specdec/blocks/layers.hpp>
#include <specdec/blocks/moa.hpp>
#include <specdec/blocks/moe.hpp>
#include <specdec/policy/admg.hpp>

namespace conformance_blocks {

using json = nlohmann::json;
using specdec::index_t;

struct block_mismatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline std::vector<double> values_of(const json& t) {
  std::vector<double> out;
  const json& data = t.is_object() ? t.at("data") : t;
  for (const auto& v : data) out.push_back(v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>());
  return out;
}
inline std::vector<float> floats_of(const json& t) {
  const auto d = values_of(t);
  return {d.begin(), d.end()};
}

inline void expect_close(const std::string& field, const json& expected, const std::vector<float>& got) {
  const auto want = values_of(expected);
  if (want.size() != got.size())
    throw block_mismatch(field + ", expected " + std::to_string(want.size()) + " values, got " + std::to_string(got.size()));
  for (std::size_t i = 0; i < want.size(); ++i)
    if (!(std::abs(want[i] - static_cast<double>(got[i])) <= 1e-4 + 1e-4 * std::abs(want[i])))
      throw block_mismatch(field + "[" + std::to_string(i) + "], expected " + std::to_string(want[i]) + ", got " +
                           std::to_string(got[i]));
}
template <class T>
void expect_exact(const std::string& field, const json& expected, const std::vector<T>& got) {
  const auto want = values_of(expected);
  bool same = want.size() == got.size();
  for (std::size_t i = 0; same && i < want.size(); ++i) same = want[i] == static_cast<double>(got[i]);
  if (!same) throw block_mismatch(field + ", integer values differ");
}

/// Weights of a case uploaded to the backend, by checkpoint name.
template <class B>
class tensors {
 public:
  using space = typename B::memory_space;
  tensors(B& b, const json& params) : b_(b) {
    for (const auto& [name, t] : params.items()) {
      const auto shape = t.at("shape").template get<std::vector<index_t>>();
      store_.emplace(name, entry{b.upload(std::span<const float>(floats_of(t))), shape});
    }
  }
  specdec::matrix_view<const float, space> matrix(const std::string& name) {
    auto& e = at(name);
    const index_t rows = e.shape.size() == 1 ? 1 : e.shape[0];
    return {e.data.view().data(), rows, e.data.view().rows() / rows};
  }
  specdec::vector_view<const float, space> vector(const std::string& name) {
    auto& e = at(name);
    return {e.data.view().data(), e.data.view().rows()};
  }
  specdec::blocks::linear<space> linear(const std::string& name) {
    specdec::blocks::linear<space> l{matrix(name + ".weight"), {}};
    if (store_.count(name + ".bias")) l.bias = vector(name + ".bias");
    return l;
  }
  specdec::blocks::attention_weights<space> attention(const std::string& prefix) {
    specdec::blocks::attention_weights<space> w{linear(prefix + "q_proj"), linear(prefix + "k_proj"), linear(prefix + "v_proj"),
                                                linear(prefix + "o_proj")};
    if (has(prefix + "q_norm.weight")) w.q_norm = vector(prefix + "q_norm.weight");
    if (has(prefix + "k_norm.weight")) w.k_norm = vector(prefix + "k_norm.weight");
    return w;
  }
  specdec::blocks::mlp_weights<space> mlp(const std::string& prefix) {
    return {linear(prefix + "gate_proj"), linear(prefix + "up_proj"), linear(prefix + "down_proj")};
  }
  specdec::blocks::layer_weights<space> layer(const std::string& prefix, bool input_norm = true, bool with_mlp = true) {
    specdec::blocks::layer_weights<space> w;
    if (input_norm) w.input_norm = vector(prefix + "input_layernorm.weight");
    w.post_norm = vector(prefix + "post_attention_layernorm.weight");
    w.attention = attention(prefix + "self_attn.");
    if (with_mlp) w.mlp = mlp(prefix + "mlp.");
    return w;
  }
  bool has(const std::string& name) const { return store_.count(name) != 0; }

 private:
  struct entry {
    typename B::template buffer<float> data;
    std::vector<index_t> shape;
  };
  entry& at(const std::string& name) {
    auto it = store_.find(name);
    if (it == store_.end()) throw block_mismatch("params, expected a tensor named '" + name + "'");
    return it->second;
  }
  B& b_;
  std::map<std::string, entry> store_;
};

template <class B>
class block_runner {
 public:
  using space = typename B::memory_space;
  explicit block_runner(B& b) : b_(b) {}

  void run(const json& c) {
    const std::string block = c.at("block");
    if (block == "admg.rules") return admg_rules(c.at("inputs"), c.at("inputs").at("cos"), c.at("expected"));
    if (block == "admg.cosine_then_rules") return admg_cosine(c);
    if (block == "jakiro.moe") return jakiro_moe(c, false);
    if (block == "jakiro.moe_topk_generalised") return jakiro_moe(c, true);
    if (block == "jakiro.draft_layer") return jakiro_layer(c);
    if (block == "moa.self_attention") return moa_self_attention(c);
    if (block == "moa.layer_self_attention") return moa_lsa(c);
    if (block == "moa.cross_attention.inference") return moa_cross_attention(c, false);
    if (block == "moa.cross_attention.train_mask") return moa_cross_attention(c, true);
    if (block == "moa.target_layer_inference.train") return moa_tli(c);
    if (block == "moa.pipeline.train_forward") return moa_pipeline(c, true);
    if (block == "moa.pipeline.inference_chain") return moa_pipeline(c, false);
    if (block == "amphista.auto_embedding") return amphista_auto(c);
    if (block == "amphista.staged_adaptation_pipeline") return amphista_staged(c);
    throw block_mismatch("block, expected a supported block kind, got '" + block + "'");
  }

 private:
  template <class T>
  typename B::template buffer<std::remove_const_t<T>> up(const std::vector<T>& v) {
    return b_.upload(std::span<const T>(v));
  }
  std::vector<float> down(const specdec::matrix_view<float, space>& m) {
    return b_.download(specdec::vector_view<const float, space>(m.data(), m.rows() * m.cols()));
  }
  std::vector<float> down(typename B::template buffer<float>& buf) { return b_.download(buf.view()); }

  static void admg_rules(const json& in, const json& cosine, const json& expected) {
    const std::vector<double> cos = values_of(cosine);
    const std::map<std::string, specdec::policy::admg::rule_variant> variants = {
        {"canonical", specdec::policy::admg::rule_variant::paper},
        {"mlp_only_every_m", specdec::policy::admg::rule_variant::mlp_only_every_m},
        {"zero_based_every_m", specdec::policy::admg::rule_variant::zero_based_every_m},
        {"strict_threshold", specdec::policy::admg::rule_variant::strict_threshold},
        {"every_m_of_removed", specdec::policy::admg::rule_variant::every_m_of_removed}};
    for (const auto& [name, want] : expected.items()) {
      const auto v = variants.find(name);
      if (v == variants.end()) throw block_mismatch("expected." + name + ", an ADMG reading specdec does not know");
      const specdec::policy::admg::rules r{in.at("alpha").get<double>(), in.at("m").get<index_t>(), in.at("n").get<index_t>(), v->second};
      const auto plan = specdec::policy::admg::plan_layers(cos, r);
      const auto one_based = [](std::vector<index_t> ids) {
        for (auto& i : ids) ++i;
        return ids;
      };
      expect_exact(name + ".attn_removed_0based", want.at("attn_removed_0based"), plan.attention_removed());
      expect_exact(name + ".mlp_removed_0based", want.at("mlp_removed_0based"), plan.mlp_removed());
      expect_exact(name + ".attn_removed_1based", want.at("attn_removed_1based"), one_based(plan.attention_removed()));
      expect_exact(name + ".mlp_removed_1based", want.at("mlp_removed_1based"), one_based(plan.mlp_removed()));
    }
  }

  void admg_cosine(const json& c) {
    const json& in = c.at("inputs");
    const auto shape = in.at("x_in").at("shape").get<std::vector<index_t>>();  // [L, T, E]
    const index_t layers = shape[0], t = shape[1], e = shape[2];
    const auto x_in = floats_of(in.at("x_in")), x_out = floats_of(in.at("x_out"));
    std::vector<double> mean, mean_skip;
    for (index_t l = 0; l < layers; ++l) {
      auto a = up(std::vector<float>(x_in.begin() + l * t * e, x_in.begin() + (l + 1) * t * e));
      auto o = up(std::vector<float>(x_out.begin() + l * t * e, x_out.begin() + (l + 1) * t * e));
      const specdec::matrix_view<const float, space> av(a.view().data(), t, e), ov(o.view().data(), t, e);
      mean.push_back(specdec::policy::admg::attention_cosine(b_, av, ov));
      if (t > 1) mean_skip.push_back(specdec::policy::admg::attention_cosine(b_, av, ov, true));
    }
    const json& out = c.at("outputs");
    expect_close("cos_mean", out.at("cos_mean"), std::vector<float>(mean.begin(), mean.end()));
    if (t > 1)
      expect_close("cos_mean_excluding_pos0", out.at("cos_mean_excluding_pos0"), std::vector<float>(mean_skip.begin(), mean_skip.end()));
    // Rules on the statistic as computed (double): the thresholds compare exactly.
    admg_rules(in, json(mean), out.at("expected"));
  }

  void jakiro_moe(const json& c, bool generalised) {
    const json& dims = c.at("dims");
    tensors<B> w(b_, c.at("params"));
    const std::string prefix = generalised ? "" : "mlp_moe.";
    specdec::blocks::moe::config cfg{dims.at("E").get<index_t>(), dims.at("num_experts").get<index_t>(),
                                     dims.at("expert_intermediate").get<index_t>(),
                                     generalised ? specdec::blocks::moe::routing::top2
                                                 : specdec::blocks::moe::routing::jakiro_two_experts};
    specdec::blocks::moe::weights<space> mw{w.linear(prefix + "gate"), {}};
    for (index_t i = 0; i < cfg.experts; ++i) mw.experts.push_back(w.mlp(prefix + "experts." + std::to_string(i) + "."));
    mw.validate(cfg, prefix);
    const auto x = floats_of(c.at("inputs").at("x"));
    const index_t t = static_cast<index_t>(x.size()) / cfg.hidden, e = cfg.hidden;
    auto dx = up(x);
    const specdec::matrix_view<const float, space> xv(dx.view().data(), t, e);
    auto r = specdec::blocks::moe::forward(b_, cfg, mw, xv, !generalised);
    const json& out = c.at("outputs");
    expect_close("router_logits", out.at("router_logits"), r.router_logits);
    expect_close("weighted_top1", out.at("weighted_top1"), down(r.weighted_top1));
    expect_close("weighted_top2", out.at("weighted_top2"), down(r.weighted_top2));
    const index_t vocab = dims.at("vocab").get<index_t>();
    const auto lm_head = w.linear("lm_head");
    const auto logits_of = [&](typename B::template buffer<float>& f) {
      auto l = b_.template allocate<float>(t * vocab);
      specdec::blocks::apply(b_, lm_head, specdec::matrix_view<const float, space>(f.view().data(), t, e), l.matrix(t, vocab));
      return down(l);
    };
    expect_close("logits_weighted_top1", out.at("logits_weighted_top1"), logits_of(r.weighted_top1));
    expect_close("logits_weighted_top2", out.at("logits_weighted_top2"), logits_of(r.weighted_top2));
    if (generalised) {
      std::vector<std::int32_t> selected;
      std::vector<float> s;
      for (index_t i = 0; i < t; ++i) {
        selected.push_back(r.top1[static_cast<std::size_t>(i)]);
        selected.push_back(r.top2[static_cast<std::size_t>(i)]);
        s.push_back(r.s_top1[static_cast<std::size_t>(i)]);
        s.push_back(r.s_top2[static_cast<std::size_t>(i)]);
      }
      expect_exact("selected", out.at("selected"), selected);
      expect_close("s", out.at("s"), s);
      expect_close("moe_sum", out.at("moe_sum"), down(r.left));
      expect_close("logits_moe_sum", out.at("logits_moe_sum"), logits_of(r.left));
      return;
    }
    std::vector<int> top1_is_0, const_top1_is_0;
    for (index_t i = 0; i < t; ++i) {
      top1_is_0.push_back(r.top1[static_cast<std::size_t>(i)] == 0);
      const_top1_is_0.push_back(r.contrastive_top1[static_cast<std::size_t>(i)] == 0);
    }
    expect_exact("top1_is_expert0", out.at("top1_is_expert0"), top1_is_0);
    expect_close("s_top1", out.at("s_top1"), r.s_top1);
    expect_close("s_top2", out.at("s_top2"), r.s_top2);
    expect_close("left", out.at("left"), down(r.left));
    expect_exact("const_top1_is_expert0", out.at("const_top1_is_expert0"), const_top1_is_0);
    expect_close("beta", out.at("beta"), r.beta);
    expect_close("alpha", out.at("alpha"), r.alpha);
    expect_close("right", out.at("right"), down(r.right));
    expect_close("logits_left", out.at("logits_left"), logits_of(r.left));
    expect_close("logits_right", out.at("logits_right"), logits_of(r.right));
    // The block's outputs: plain = left; penult = [left, right]; first_forward = the last token only.
    auto stacked = down(r.left);
    const auto right = down(r.right);
    stacked.insert(stacked.end(), right.begin(), right.end());
    expect_close("block_out_plain", out.at("block_out_plain"), down(r.left));
    expect_close("block_out_penult_stacked", out.at("block_out_penult_stacked"), stacked);
    auto last = specdec::blocks::moe::forward(b_, cfg, mw, specdec::matrix_view<const float, space>(dx.view().data() + (t - 1) * e, 1, e), false);
    expect_close("block_out_first_forward", out.at("block_out_first_forward"), down(last.left));
  }

  void jakiro_layer(const json& c) {
    const json& dims = c.at("dims");
    tensors<B> w(b_, c.at("params"));
    const index_t e = dims.at("E").get<index_t>(), vocab = dims.at("vocab").get<index_t>();
    specdec::blocks::layer_config lc{{e, dims.at("num_attention_heads").get<index_t>(), dims.at("num_key_value_heads").get<index_t>(),
                                      dims.at("head_dim").get<index_t>(), dims.at("rope_theta").get<double>(), true},
                                     0, dims.at("rms_norm_eps").get<float>(), false};
    specdec::blocks::eagle::weights<space> ew{w.matrix("embed_tokens.weight"), w.linear("fc"), w.layer("layers.0.", false, false)};
    ew.validate(lc, vocab, false);
    specdec::blocks::moe::config mc{e, dims.at("num_experts").get<index_t>(), dims.at("expert_intermediate").get<index_t>()};
    specdec::blocks::moe::weights<space> mw{w.linear("layers.0.mlp_moe.gate"), {}};
    for (index_t i = 0; i < mc.experts; ++i) mw.experts.push_back(w.mlp("layers.0.mlp_moe.experts." + std::to_string(i) + "."));
    mw.validate(mc, "layers.0.mlp_moe.");
    const json& in = c.at("inputs");
    const auto ids = values_of(in.at("input_ids"));
    const auto t = static_cast<index_t>(ids.size());
    std::vector<std::int32_t> tokens(ids.begin(), ids.end());
    std::vector<std::int64_t> positions(static_cast<std::size_t>(t));
    for (index_t i = 0; i < t; ++i) positions[static_cast<std::size_t>(i)] = i;
    auto dt = up(tokens);
    auto dp = up(positions);
    auto feature = up(floats_of(in.at("target_hidden")));
    const specdec::vector_view<const std::int32_t, space> tv(dt.view().data(), t);
    const specdec::matrix_view<const float, space> fv(feature.view().data(), t, e);
    auto fused = b_.template allocate<float>(t * e);
    specdec::blocks::eagle::fuse(b_, ew, tv, fv, fused.matrix(t, e));
    expect_close("fused", c.at("outputs").at("fused"), down(fused));
    const bool penult = in.at("penult_forward").get<bool>();
    auto left = b_.template allocate<float>(t * e);
    auto right = b_.template allocate<float>(t * e);
    specdec::blocks::moe::draft_layer_forward(b_, lc, ew, mc, mw, tv, fv,
                                              specdec::vector_view<const std::int64_t, space>(dp.view().data(), t), nullptr,
                                              specdec::blocks::attention_mask<space>::causal(), left.matrix(t, e),
                                              penult ? right.matrix(t, e) : specdec::matrix_view<float, space>());
    auto got = down(left);
    if (penult) {
      const auto r = down(right);
      got.insert(got.end(), r.begin(), r.end());
    }
    expect_close("out", c.at("outputs").at("out"), got);
  }

  void moa_self_attention(const json& c) {
    const json& sa = c.at("dims").at("sa");
    const json& target = c.at("dims").at("target");
    tensors<B> w(b_, c.at("params"));
    const index_t e = sa.at("hidden").get<index_t>(), kv = sa.at("num_key_value_heads").get<index_t>(),
                  d = sa.at("head_dim").get<index_t>();
    specdec::blocks::layer_config lc{{e, sa.at("num_attention_heads").get<index_t>(), kv, d,
                                      target.at("rope_theta").get<double>(), true},
                                     sa.at("intermediate_size").get<index_t>(), target.at("rms_norm_eps").get<float>(), true};
    const auto lw = w.layer("self_attention.");
    lw.validate(lc, "self_attention.");
    const json& in = c.at("inputs");
    const auto pos = values_of(in.at("position_ids"));
    const auto t = static_cast<index_t>(pos.size());
    auto dp = up(std::vector<std::int64_t>(pos.begin(), pos.end()));
    auto x = up(floats_of(in.at("x")));
    specdec::blocks::kv_cache<B> cache(b_, t, kv * d);
    specdec::blocks::decoder_layer_forward(b_, lc, lw, x.matrix(t, e), specdec::vector_view<const std::int64_t, space>(dp.view().data(), t),
                                           &cache);
    expect_close("y", c.at("outputs").at("y"), down(x));
    // The cache is token-major [T x kv d]; the golden's present K/V are [1, kv, T, d].
    const auto heads_major = [&](specdec::matrix_view<const float, space> m) {
      const auto flat = b_.download(specdec::vector_view<const float, space>(m.data(), m.rows() * m.cols()));
      std::vector<float> out;
      for (index_t h = 0; h < kv; ++h)
        for (index_t i = 0; i < t; ++i)
          for (index_t j = 0; j < d; ++j) out.push_back(flat[static_cast<std::size_t>(i * kv * d + h * d + j)]);
      return out;
    };
    expect_close("present_k", c.at("outputs").at("present_k"), heads_major(cache.keys()));
    expect_close("present_v", c.at("outputs").at("present_v"), heads_major(cache.values()));
  }


  static specdec::blocks::layer_config layer_of(const json& d, const json& target, bool rope = true) {
    const index_t e = d.contains("hidden") ? d.at("hidden").get<index_t>() : d.at("E").get<index_t>();
    const index_t heads = d.at("num_attention_heads").get<index_t>();
    const index_t head_dim = d.contains("head_dim") ? d.at("head_dim").get<index_t>() : e / heads;
    const double theta = d.contains("rope_theta") ? d.at("rope_theta").get<double>()
                         : target.contains("rope_theta") ? target.at("rope_theta").get<double>() : 10000.0;
    const float eps = d.contains("rms_norm_eps") ? d.at("rms_norm_eps").get<float>() : target.at("rms_norm_eps").get<float>();
    return {{e, heads, d.at("num_key_value_heads").get<index_t>(), head_dim, theta, rope},
            d.at("intermediate_size").get<index_t>(), eps, true};
  }
  specdec::vector_view<const std::int64_t, space> positions(std::vector<typename B::template buffer<std::int64_t>>& keep,
                                                              const std::vector<std::int64_t>& p) {
    keep.push_back(up(p));
    return {keep.back().view().data(), static_cast<index_t>(p.size())};
  }
  static std::vector<std::int64_t> range(index_t first, index_t n) {
    std::vector<std::int64_t> p(static_cast<std::size_t>(n));
    for (index_t i = 0; i < n; ++i) p[static_cast<std::size_t>(i)] = first + i;
    return p;
  }
  /// [1, heads, T, d] (heads-major) -> [T x heads d] (token-major).
  static std::vector<float> token_major(const json& t) {
    const auto shape = t.at("shape").get<std::vector<index_t>>();
    const index_t h = shape[1], n = shape[2], d = shape[3];
    const auto v = floats_of(t);
    std::vector<float> out(v.size());
    for (index_t a = 0; a < h; ++a)
      for (index_t i = 0; i < n; ++i)
        for (index_t j = 0; j < d; ++j) out[static_cast<std::size_t>(i * h * d + a * d + j)] = v[static_cast<std::size_t>((a * n + i) * d + j)];
    return out;
  }
  static std::vector<float> heads_major(const std::vector<float>& v, index_t n, index_t h, index_t d) {
    std::vector<float> out(v.size());
    for (index_t a = 0; a < h; ++a)
      for (index_t i = 0; i < n; ++i)
        for (index_t j = 0; j < d; ++j) out[static_cast<std::size_t>((a * n + i) * d + j)] = v[static_cast<std::size_t>(i * h * d + a * d + j)];
    return out;
  }

  void moa_lsa(const json& c) {
    const json& dims = c.at("dims");
    tensors<B> w(b_, c.at("params"));
    const auto lc = layer_of(dims.at("lsa"), dims.at("target"));
    const auto lw = w.layer("layer_self_attention.");
    lw.validate(lc, "layer_self_attention.");
    const auto ekv2e = w.linear("Ekv2E");
    const index_t e_kv = dims.at("E_kv").get<index_t>(), e = dims.at("ekv2e").at("out").get<index_t>();
    ekv2e.validate("Ekv2E", e, e_kv, true);
    const json& in = c.at("inputs");
    const auto layers = static_cast<index_t>(in.at("k").size());
    const auto shape = in.at("k")[0].at("shape").get<std::vector<index_t>>();
    const index_t t = shape[2], d = shape[3];
    std::vector<typename B::template buffer<float>> store;
    std::vector<specdec::matrix_view<const float, space>> keys, values;
    for (index_t l = 0; l < layers; ++l) {
      store.push_back(up(token_major(in.at("k")[static_cast<std::size_t>(l)])));
      keys.emplace_back(store.back().view().data(), t, shape[1] * d);
      store.push_back(up(token_major(in.at("v")[static_cast<std::size_t>(l)])));
      values.emplace_back(store.back().view().data(), t, shape[1] * d);
    }
    auto packed = b_.template allocate<float>(t * layers * e_kv);
    specdec::blocks::moa::pack_kv<B>(b_, keys, values, d, 0, t, packed.matrix(t * layers, e_kv));
    const json& out = c.at("outputs");
    expect_close("KV_packed", out.at("KV_packed"), down(packed));
    auto mean = b_.template allocate<float>(t * e_kv);
    auto projected = b_.template allocate<float>(t * e);
    specdec::blocks::moa::layer_self_attention(b_, lc, lw, ekv2e, layers, packed.matrix(t * layers, e_kv), mean.matrix(t, e_kv),
                                               projected.matrix(t, e));
    expect_close("lsa_layer_out", out.at("lsa_layer_out"), down(packed));
    expect_close("lsa_mean_over_layers", out.at("lsa_mean_over_layers"), down(mean));
    expect_close("ekv2e_out", out.at("ekv2e_out"), down(projected));
  }

  void moa_cross_attention(const json& c, bool training) {
    const json& dims = c.at("dims");
    tensors<B> w(b_, c.at("params"));
    const auto lc = layer_of(dims.at("ca"), dims.at("target"));
    const auto lw = w.layer("cross_attention.");
    lw.validate(lc, "cross_attention.");
    const json& in = c.at("inputs");
    const json& out = c.at("outputs");
    const index_t e = lc.attention.hidden;
    auto query = up(floats_of(in.at("q_in")));
    auto source = up(floats_of(in.at("kv_in")));
    const index_t tq = query.view().rows() / e, tk = source.view().rows() / e;
    std::vector<typename B::template buffer<std::int64_t>> keep;
    const specdec::matrix_view<const float, space> src(source.view().data(), tk, e);
    if (!training) {
      const auto qp = values_of(in.at("q_position_ids"));
      specdec::blocks::kv_cache<B> cache(b_, tk + tq, lc.attention.kv_heads * lc.attention.head_dim);
      specdec::blocks::moa::cross_attention(b_, lc, lw, query.matrix(tq, e), positions(keep, std::vector<std::int64_t>(qp.begin(), qp.end())),
                                            src, positions(keep, range(0, tk)), &cache, specdec::blocks::attention_mask<space>::none());
      const index_t kv = lc.attention.kv_heads, d = lc.attention.head_dim;
      const auto cache_rows = [&](specdec::matrix_view<const float, space> m) {
        return heads_major(b_.download(specdec::vector_view<const float, space>(m.data(), m.rows() * m.cols())), tk, kv, d);
      };
      expect_close("cache_k", out.at("cache_k"), cache_rows(cache.keys()));
      expect_close("cache_v", out.at("cache_v"), cache_rows(cache.values()));
      expect_close("y", out.at("y"), down(query));
      return;
    }
    const auto rm = values_of(in.at("response_mask"));
    const auto masks = specdec::blocks::moa::make_training_masks(std::vector<std::int32_t>(rm.begin(), rm.end()));
    expect_exact("start_positions", out.at("start_positions"), masks.start_positions);
    expect_exact("mask_allowed", out.at("mask_allowed"), masks.cross_attention);
    expect_exact("staircase_sa_mask_allowed", out.at("staircase_sa_mask_allowed"), masks.staircase);
    auto allowed = up(masks.cross_attention);
    const auto pp = values_of(in.at("position_ids"));
    const auto pos = positions(keep, std::vector<std::int64_t>(pp.begin(), pp.end()));
    specdec::blocks::moa::cross_attention(b_, lc, lw, query.matrix(tq, e), pos, src, pos, nullptr,
                                          specdec::blocks::attention_mask<space>::from(
                                              specdec::matrix_view<const std::uint8_t, space>(allowed.view().data(), tq, tk)));
    expect_close("y", out.at("y"), down(query));
  }

  /// The whole drafter: train_forward, or the inference drafter generating `steps` greedy tokens.
  void moa_pipeline(const json& c, bool training) {
    const json& dims = c.at("dims");
    const json& target = dims.at("target");
    tensors<B> w(b_, c.at("params"));
    specdec::blocks::moa::config mc{layer_of(dims.at("lsa"), target), layer_of(dims.at("sa"), target),
                                    layer_of(dims.at("ca"), target), target.at("num_layers").get<index_t>(),
                                    target.at("head_dim").get<index_t>()};
    const specdec::blocks::moa::weights<space> mw{w.layer("layer_self_attention."), w.linear("Ekv2E"),
                                                  w.layer("self_attention."), w.layer("cross_attention.")};
    mw.validate(mc);
    const index_t e = mc.hidden(), vocab = target.at("vocab").get<index_t>();
    const json& in = c.at("inputs");
    const json& out = c.at("outputs");
    const auto shape = in.at("k")[0].at("shape").get<std::vector<index_t>>();
    const index_t cached = shape[2], width = shape[1] * shape[3];
    std::vector<typename B::template buffer<float>> store;
    std::vector<specdec::matrix_view<const float, space>> keys, values;
    for (index_t l = 0; l < mc.target_layers; ++l) {
      store.push_back(up(token_major(in.at("k")[static_cast<std::size_t>(l)])));
      keys.emplace_back(store.back().view().data(), cached, width);
      store.push_back(up(token_major(in.at("v")[static_cast<std::size_t>(l)])));
      values.emplace_back(store.back().view().data(), cached, width);
    }
    const auto token_values = values_of(in.at("tokens"));
    const std::vector<std::int32_t> tokens(token_values.begin(), token_values.end());
    const auto embed = w.matrix("model.embed_tokens.weight");
    const auto lm_head = w.linear("lm_head");
    const auto embeddings = [&](const std::vector<std::int32_t>& ids) {
      auto d = up(ids);
      auto x = b_.template allocate<float>(static_cast<index_t>(ids.size()) * e);
      b_.gather_rows(embed, specdec::vector_view<const std::int32_t, space>(d.view().data(), static_cast<index_t>(ids.size())),
                     x.matrix(static_cast<index_t>(ids.size()), e));
      return x;
    };
    const auto logits_of = [&](specdec::matrix_view<const float, space> features) {
      auto logits = b_.template allocate<float>(features.rows() * vocab);
      specdec::blocks::apply(b_, lm_head, features, logits.matrix(features.rows(), vocab));
      return down(logits);
    };
    if (training) {
      const index_t t = static_cast<index_t>(tokens.size());
      const auto rm = values_of(in.at("response_mask"));
      auto x = embeddings(tokens);
      auto stream = b_.template allocate<float>(t * e), sa = b_.template allocate<float>(t * e),
           ca = b_.template allocate<float>(t * e);
      specdec::blocks::moa::train_forward<B>(b_, mc, mw, keys, values, specdec::matrix_view<const float, space>(x.view().data(), t, e),
                                             std::vector<std::int32_t>(rm.begin(), rm.end()), in.at("staircase").get<bool>(),
                                             stream.matrix(t, e), sa.matrix(t, e), ca.matrix(t, e));
      expect_exact("start_positions", out.at("start_positions"),
                   specdec::blocks::moa::make_training_masks(std::vector<std::int32_t>(rm.begin(), rm.end())).start_positions);
      expect_close("ekv2e_out", out.at("ekv2e_out"), down(stream));
      expect_close("sa_out", out.at("sa_out"), down(sa));
      expect_close("ca_out", out.at("ca_out"), down(ca));
      expect_close("logits", out.at("logits"), logits_of(specdec::matrix_view<const float, space>(ca.view().data(), t, e)));
      return;
    }
    // Inference: the prompt's K/V are verified, then the prompt and the bonus token go through the
    // self-attention, and each step drafts greedily from the last feature.
    const index_t steps = in.at("steps").get<index_t>(), n = cached;
    auto stream = b_.template allocate<float>(n * e);
    specdec::blocks::moa::key_value_stream<B>(b_, mc, mw, keys, values, 0, n, stream.matrix(n, e));
    expect_close("ekv2e_out", out.at("ekv2e_out"), down(stream));
    specdec::blocks::moa::drafter<B> drafter(b_, mc, mw, n + 1 + steps);
    drafter.add_verified(keys, values, 0, n);
    std::vector<typename B::template buffer<std::int64_t>> keep;
    auto feature = b_.template allocate<float>(e);
    std::vector<std::int32_t> drafted, feed = tokens;
    for (index_t s = 0; s < steps; ++s) {
      auto x = embeddings(feed);
      const auto rows = static_cast<index_t>(feed.size());
      drafter.forward(x.matrix(rows, e), positions(keep, range(n + 1 + s - rows, rows)), feature.matrix(1, e));
      if (s == 0) {
        const index_t kv = mc.cross_attention.attention.kv_heads, d = mc.cross_attention.attention.head_dim;
        const auto cache_rows = [&](specdec::matrix_view<const float, space> m) {
          return heads_major(b_.download(specdec::vector_view<const float, space>(m.data(), m.rows() * m.cols())), n, kv, d);
        };
        expect_close("ca_cache_k", out.at("ca_cache_k"), cache_rows(drafter.cross_attention_cache().keys()));
        expect_close("ca_cache_v", out.at("ca_cache_v"), cache_rows(drafter.cross_attention_cache().values()));
      }
      const auto logits = logits_of(specdec::matrix_view<const float, space>(feature.view().data(), 1, e));
      expect_close("step_logits[" + std::to_string(s) + "]", out.at("step_logits")[static_cast<std::size_t>(s)], logits);
      drafted.push_back(static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
      feed = {drafted.back()};
    }
    expect_exact("draft_tokens", out.at("draft_tokens"), drafted);
  }

  void moa_tli(const json& c) {
    const json& dims = c.at("dims");
    tensors<B> w(b_, c.at("params"));
    auto lc = layer_of(dims, dims);
    const index_t e = lc.attention.hidden, layers = dims.at("num_layers").get<index_t>(), n = dims.at("tli_N").get<index_t>(),
                  vocab = dims.at("vocab").get<index_t>();
    lc.attention.head_dim = e / lc.attention.heads;
    const json& in = c.at("inputs");
    const json& out = c.at("outputs");
    auto x = up(floats_of(in.at("x")));
    auto hidden = up(floats_of(in.at("target_hidden_in")));
    const index_t t = x.view().rows() / e;
    const auto rm = values_of(in.at("response_mask"));
    const auto pp = values_of(in.at("position_ids"));
    std::vector<typename B::template buffer<std::int64_t>> keep;
    const auto pos = positions(keep, std::vector<std::int64_t>(pp.begin(), pp.end()));
    std::vector<float> teacher, after, normed_host, logits_host;
    specdec::blocks::moa::target_layer_inference<B>(
        b_, x.matrix(t, e), specdec::matrix_view<const float, space>(hidden.view().data(), t, e),
        std::vector<std::int32_t>(rm.begin(), rm.end()), [&](specdec::matrix_view<float, space> f) {
          teacher = down(f);
          for (index_t l = layers - n; l < layers; ++l) {
            const std::string prefix = "model.layers." + std::to_string(l) + ".";
            const auto lw = w.layer(prefix);
            lw.validate(lc, prefix);
            specdec::blocks::decoder_layer_forward(b_, lc, lw, f, pos, nullptr);
          }
          after = down(f);
          auto normed = b_.template allocate<float>(t * e);
          b_.rms_norm(specdec::matrix_view<const float, space>(f.data(), t, e), w.vector("model.norm.weight"), lc.rms_eps,
                      normed.matrix(t, e));
          normed_host = down(normed);
          auto logits = b_.template allocate<float>(t * vocab);
          specdec::blocks::apply(b_, w.linear("lm_head"), specdec::matrix_view<const float, space>(normed.view().data(), t, e),
                                 logits.matrix(t, vocab));
          logits_host = down(logits);
        });
    expect_close("teacher_forced_input", out.at("teacher_forced_input"), teacher);
    expect_close("after_layers", out.at("after_layers"), after);
    expect_close("normed", out.at("normed"), normed_host);
    expect_close("logits", out.at("logits"), logits_host);
  }

  specdec::blocks::amphista::weights<space> amphista_weights(tensors<B>& w, const std::string& prefix, index_t k) {
    specdec::blocks::amphista::weights<space> aw;
    aw.position_embedding = w.matrix(prefix + "pos_emb");
    aw.auto_embedding.input_norm = w.vector(prefix + "layer.input_layernorm.weight");
    aw.auto_embedding.post_norm = w.vector(prefix + "layer.post_attention_layernorm.weight");
    aw.auto_embedding.attention = w.attention(prefix + "layer.");
    aw.auto_embedding.mlp = w.mlp(prefix + "layer.mlp.");
    for (index_t h = 0; h < k; ++h) aw.heads.push_back(w.matrix(prefix + "heads." + std::to_string(h) + ".weight"));
    return aw;
  }

  void amphista_auto(const json& c) {
    const json& dims = c.at("dims");
    tensors<B> w(b_, c.at("params"));
    const index_t k = dims.at("K_heads").get<index_t>(), e = dims.at("E").get<index_t>(), vocab = dims.at("vocab").get<index_t>();
    specdec::blocks::amphista::config cfg{{}, layer_of(dims, dims, false), k, 0, vocab};
    auto aw = amphista_weights(w, "", k);
    aw.auto_embedding.validate(cfg.auto_embedding, "layer.");
    auto z = up(floats_of(c.at("inputs").at("z")));
    auto u = b_.template allocate<float>(k * e);
    auto o = b_.template allocate<float>(k * e);
    auto logits = b_.template allocate<float>(k * vocab);
    specdec::blocks::amphista::auto_embedding(b_, cfg, aw, specdec::matrix_view<const float, space>(z.view().data(), k, e),
                                              logits.matrix(k, vocab), u.matrix(k, e), o.matrix(k, e));
    const json& out = c.at("outputs");
    expect_close("u", out.at("u"), down(u));
    expect_close("o", out.at("o"), down(o));
    expect_close("logits", out.at("logits"), down(logits));
  }

  void amphista_staged(const json& c) {
    const json& dims = c.at("dims");
    tensors<B> w(b_, c.at("params"));
    const index_t k = dims.at("K_heads").get<index_t>(), e = dims.at("E").get<index_t>(), vocab = dims.at("vocab").get<index_t>();
    auto slot = layer_of(dims, dims, false);
    slot.attention.kv_heads = dims.at("num_key_value_heads").get<index_t>();
    // The goldens' reconstruction feeds ceil(K/2) heads from stage 1 (the paper: floor(K/2)).
    specdec::blocks::amphista::config cfg{layer_of(dims, dims), slot, k, (k + 1) / 2, vocab};
    auto aw = amphista_weights(w, "auto.", k);
    for (const char* s : {"stage1", "stage2"}) {
      auto& st = std::string(s) == "stage1" ? aw.stage1 : aw.stage2;
      st.fuse = w.linear(std::string(s) + ".fuse");
      st.layer = w.layer(std::string(s) + ".layer.");
      st.layer.validate(cfg.stage, std::string(s) + ".layer.");
    }
    const json& in = c.at("inputs");
    const json& out = c.at("outputs");
    auto h = up(floats_of(in.at("h")));
    auto emb = up(floats_of(in.at("e")));
    const index_t t = h.view().rows() / e;
    const auto pp = values_of(in.at("position_ids"));
    std::vector<typename B::template buffer<std::int64_t>> keep;
    const auto pos = positions(keep, std::vector<std::int64_t>(pp.begin(), pp.end()));
    auto s1 = b_.template allocate<float>(t * e);
    auto s2 = b_.template allocate<float>(t * e);
    const specdec::matrix_view<const float, space> ev(emb.view().data(), t, e);
    specdec::blocks::amphista::stage_forward(b_, cfg.stage, aw.stage1, specdec::matrix_view<const float, space>(h.view().data(), t, e), ev,
                                             pos, nullptr, s1.matrix(t, e));
    expect_close("stage1_out", out.at("stage1_out"), down(s1));
    specdec::blocks::amphista::stage_forward(b_, cfg.stage, aw.stage2, specdec::matrix_view<const float, space>(s1.view().data(), t, e), ev,
                                             pos, nullptr, s2.matrix(t, e));
    expect_close("stage2_out", out.at("stage2_out"), down(s2));
    auto z = b_.template allocate<float>(k * e);
    specdec::blocks::amphista::head_inputs(b_, cfg, aw, specdec::matrix_view<const float, space>(s1.view().data() + (t - 1) * e, 1, e),
                                           specdec::matrix_view<const float, space>(s2.view().data() + (t - 1) * e, 1, e), z.matrix(k, e));
    expect_close("z", out.at("z"), down(z));
    auto logits = b_.template allocate<float>(k * vocab);
    auto u = b_.template allocate<float>(k * e);
    auto o = b_.template allocate<float>(k * e);
    specdec::blocks::amphista::auto_embedding(b_, cfg, aw, specdec::matrix_view<const float, space>(z.view().data(), k, e),
                                              logits.matrix(k, vocab), u.matrix(k, e), o.matrix(k, e));
    expect_close("u", out.at("u"), down(u));
    expect_close("o", out.at("o"), down(o));
    expect_close("logits", out.at("logits"), down(logits));
  }

  B& b_;
};

}  // namespace conformance_blocks
