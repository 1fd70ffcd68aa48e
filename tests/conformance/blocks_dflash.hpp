// SPDX-License-Identifier: Apache-2.0
// specdec-conformance, DFlash's block drafter (tools/goldens/dflash.py): every recorded drafter call of
// z-lab/dflash's reference replayed through specdec::blocks::dflash with one context cache across the
// calls (append_context, then forward; the cache's length checked against the reference's before each
// call), the context, the output and the draft logits within abs 1e-5 + rel 1e-5 of the float64
// reference, the drafts (argmax) and build_target_layer_ids exactly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <specdec/blocks/dflash.hpp>

namespace conformance_blocks {

template <class B>
class dflash_runner {
 public:
  using space = typename B::memory_space;
  explicit dflash_runner(B& b) : b_(b) {}

  void run(const json& c) {
    namespace dflash = specdec::blocks::dflash;
    for (const json& r : c.at("outputs").at("target_layer_ids")) {
      const auto got = dflash::target_layer_ids(r.at("target_layers").get<index_t>(), r.at("draft_layers").get<index_t>());
      expect_exact("target_layer_ids(" + r.at("target_layers").dump() + ", " + r.at("draft_layers").dump() + ")", r.at("ids"),
                   std::vector<std::int64_t>(got.begin(), got.end()));
    }
    const json& d = c.at("dims");
    tensors<B> w(b_, c.at("params"));
    const index_t e = d.at("E"), v = d.at("vocab"), bs = d.at("block_size");
    const auto ids = d.at("target_layer_ids").get<std::vector<index_t>>();
    dflash::config cfg;
    cfg.layer.attention = {e, d.at("heads").get<index_t>(), d.at("kv_heads").get<index_t>(), d.at("head_dim").get<index_t>(),
                           d.at("rope_theta").get<double>(), true};
    cfg.layer.attention.qk_norm = true;
    cfg.layer.attention.qk_norm_eps = d.at("rms_norm_eps").get<float>();
    cfg.layer.intermediate = d.at("intermediate");
    cfg.layer.rms_eps = d.at("rms_norm_eps").get<float>();
    cfg.layers = d.at("draft_layers");
    cfg.feature_layers = static_cast<index_t>(ids.size());
    cfg.vocab = v;
    cfg.block_size = bs;
    cfg.mask_token = d.at("mask_token").get<std::int32_t>();
    dflash::weights<space> dw;
    dw.fc = w.linear("fc");
    dw.hidden_norm = w.vector("hidden_norm.weight");
    for (index_t l = 0; l < cfg.layers; ++l) dw.layers.push_back(w.layer("layers." + std::to_string(l) + "."));
    dw.norm = w.vector("norm.weight");
    dw.embed = w.matrix("embed_tokens.weight");
    dw.lm_head = w.linear("lm_head");
    dw.validate(cfg);
    dflash::context_cache<B> cache(b_, cfg, 256);
    const json& steps = c.at("outputs").at("steps");
    for (std::size_t s = 0; s < steps.size(); ++s) {
      const json& st = steps[s];
      const std::string f = "steps[" + std::to_string(s) + "].";
      if (st.at("cached_before").get<index_t>() != cache.size())
        throw block_mismatch(f + "cached_before, expected " + st.at("cached_before").dump() + " context rows, the cache holds " +
                             std::to_string(cache.size()));
      const auto features = floats_of(st.at("context_features"));
      const auto n = static_cast<index_t>(features.size()) / (cfg.feature_layers * e);
      const auto pos = values_of(st.at("position_ids"));
      if (static_cast<index_t>(pos.size()) != n + bs) throw block_mismatch(f + "position_ids, expected n + block_size");
      auto positions = up(std::vector<std::int64_t>(pos.begin(), pos.end()));
      auto feats = up(features);
      const specdec::vector_view<const std::int64_t, space> context_positions(positions.view().data(), n);
      const specdec::vector_view<const std::int64_t, space> block_positions(positions.view().data() + n, bs);
      // The context as the reference computes it, checked apart so that a mismatch names its stage.
      auto fused = b_.template allocate<float>(n * e);
      auto ctx = b_.template allocate<float>(n * e);
      const specdec::matrix_view<const float, space> fv(feats.view().data(), n, cfg.feature_layers * e);
      specdec::blocks::apply(b_, dw.fc, fv, fused.matrix(n, e));
      b_.rms_norm(specdec::matrix_view<const float, space>(fused.view().data(), n, e), dw.hidden_norm, cfg.layer.rms_eps,
                  ctx.matrix(n, e));
      expect_close_tight(f + "context", st.at("context"), b_.download(ctx.view()));
      dflash::append_context(b_, cfg, dw, fv, context_positions, cache);
      const auto block = values_of(st.at("block_ids"));
      auto tokens = up(std::vector<std::int32_t>(block.begin(), block.end()));
      auto out = b_.template allocate<float>(bs * e);
      const index_t before = cache.size();
      dflash::forward(b_, cfg, dw, specdec::vector_view<const std::int32_t, space>(tokens.view().data(), bs), block_positions,
                      cache, out.matrix(bs, e));
      if (cache.size() != before) throw block_mismatch(f + "forward left " + std::to_string(cache.size() - before) + " block rows in the cache");
      expect_close_tight(f + "out", st.at("out"), b_.download(out.view()));
      auto logits = b_.template allocate<float>((bs - 1) * v);
      dflash::logits(b_, dw, specdec::matrix_view<const float, space>(out.view().data() + e, bs - 1, e), logits.matrix(bs - 1, v));
      const auto got = b_.download(logits.view());
      expect_close_tight(f + "logits", st.at("logits"), got);
      expect_exact(f + "draft", st.at("draft"), row_argmax(got, v));
    }
  }

 private:
  template <class T>
  typename B::template buffer<std::remove_const_t<T>> up(const std::vector<T>& v) {
    return b_.upload(std::span<const T>(v));
  }
  B& b_;
};

}  // namespace conformance_blocks
