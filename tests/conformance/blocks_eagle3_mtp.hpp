// SPDX-License-Identifier: Apache-2.0
// specdec-conformance, EAGLE-3's draft layer and the MTP module (tools/goldens/eagle3_mtp.py): every
// recorded forward of the reference replayed through specdec::blocks::eagle3 / mtp, chaining specdec's
// own states (the fed-back rows are specdec's outputs, not the golden's). Values within abs 1e-5 +
// rel 1e-5 of the float64 reference; argmax ids exact.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <specdec/blocks/eagle3.hpp>
#include <specdec/blocks/mtp.hpp>

namespace conformance_blocks {

inline void expect_close_tight(const std::string& field, const json& expected, const std::vector<float>& got) {
  const auto want = values_of(expected);
  if (want.size() != got.size())
    throw block_mismatch(field + ", expected " + std::to_string(want.size()) + " values, got " + std::to_string(got.size()));
  for (std::size_t i = 0; i < want.size(); ++i)
    if (!(std::abs(want[i] - static_cast<double>(got[i])) <= 1e-5 + 1e-5 * std::abs(want[i])))
      throw block_mismatch(field + "[" + std::to_string(i) + "], expected " + std::to_string(want[i]) + ", got " +
                           std::to_string(got[i]));
}

/// Row-wise argmax (lowest index among ties) of a host `[rows x cols]` matrix.
inline std::vector<std::int64_t> row_argmax(const std::vector<float>& m, index_t cols) {
  std::vector<std::int64_t> out;
  for (std::size_t r = 0; r * static_cast<std::size_t>(cols) < m.size(); ++r) {
    std::size_t best = 0;
    for (std::size_t j = 1; j < static_cast<std::size_t>(cols); ++j)
      if (m[r * static_cast<std::size_t>(cols) + j] > m[r * static_cast<std::size_t>(cols) + best]) best = j;
    out.push_back(static_cast<std::int64_t>(best));
  }
  return out;
}

template <class B>
class drafter_block_runner {
 public:
  using space = typename B::memory_space;
  template <class T>
  using vview = specdec::vector_view<const T, space>;
  explicit drafter_block_runner(B& b) : b_(b) {}

  void eagle3(const json& c) {
    const json& d = c.at("dims");
    tensors<B> w(b_, c.at("params"));
    const index_t e = d.at("E"), heads = d.at("num_attention_heads"), vd = d.at("draft_vocab");
    specdec::blocks::eagle3::config cfg{
        {{e, heads, d.at("num_key_value_heads").get<index_t>(), e / heads, d.at("rope_theta").get<double>(), true},
         d.at("intermediate").get<index_t>(), d.at("rms_norm_eps").get<float>(), true},
        d.at("E_t").get<index_t>(), d.at("vocab").get<index_t>(), vd};
    specdec::blocks::eagle3::weights<space> ew{w.matrix("embed_tokens.weight"), w.linear("fc"),
                                                w.vector("midlayer.hidden_norm.weight"), w.layer("midlayer."),
                                                w.vector("norm.weight"), w.linear("lm_head")};
    ew.validate(cfg);
    const auto d2t = values_of(c.at("params").at("d2t"));
    const json& steps = c.at("outputs").at("steps");
    const auto taps = floats_of(c.at("inputs").at("taps"));
    const index_t t = static_cast<index_t>(taps.size()) / (3 * cfg.target_hidden);
    specdec::blocks::kv_cache<B> cache(b_, 256, cfg.layer.attention.kv_heads * cfg.layer.attention.head_dim);
    std::vector<float> previous;  // specdec's h2 of the previous step, host
    for (std::size_t s = 0; s < steps.size(); ++s) {
      const json& st = steps[s];
      const std::string f = "steps[" + std::to_string(s) + "].";
      const auto ids = values_of(st.at("input_ids"));
      const auto rows = static_cast<index_t>(ids.size());
      auto tokens = up(std::vector<std::int32_t>(ids.begin(), ids.end()));
      const auto pos = values_of(st.at("position_ids"));
      auto positions = up(std::vector<std::int64_t>(pos.begin(), pos.end()));
      const auto allowed_values = values_of(st.at("allowed"));
      auto allowed = up(std::vector<std::uint8_t>(allowed_values.begin(), allowed_values.end()));
      auto hidden = b_.template allocate<float>(rows * e);
      if (s == 0) {
        if (rows != t) throw block_mismatch(f + "input_ids, expected one per tap row");
        auto dt = up(taps);
        specdec::blocks::eagle3::fuse(b_, ew, specdec::matrix_view<const float, space>(dt.view().data(), t, 3 * cfg.target_hidden),
                                      hidden.matrix(t, e));
        expect_close_tight(f + "fused", st.at("fused"), down(hidden));
      } else {
        std::vector<float> fed;
        for (const double r : values_of(st.at("hidden_from_rows")))
          fed.insert(fed.end(), previous.begin() + static_cast<std::ptrdiff_t>(r) * e,
                     previous.begin() + static_cast<std::ptrdiff_t>(r + 1) * e);
        hidden = up(fed);
      }
      const index_t keys = static_cast<index_t>(allowed_values.size()) / rows;
      if (keys != cache.size() + rows) throw block_mismatch(f + "allowed, expected a column per cached and new row");
      // In place: h2 overwrites the fed state, as an engine's step does.
      specdec::blocks::eagle3::forward(
          b_, cfg, ew, vview<std::int32_t>(tokens.view().data(), rows),
          specdec::matrix_view<const float, space>(hidden.view().data(), rows, e), vview<std::int64_t>(positions.view().data(), rows),
          &cache, specdec::blocks::attention_mask<space>::from(specdec::matrix_view<const std::uint8_t, space>(allowed.view().data(), rows, keys)),
          hidden.matrix(rows, e));
      previous = down(hidden);
      expect_close_tight(f + "h2", st.at("h2"), previous);
      // The prefill's logits are the last row's (topK_genrate's); a tree step's every row's.
      const index_t from = s == 0 ? rows - 1 : 0, n = rows - from;
      auto logits = b_.template allocate<float>(n * vd);
      specdec::blocks::eagle3::logits(b_, cfg, ew, specdec::matrix_view<const float, space>(hidden.view().data() + from * e, n, e),
                                      logits.matrix(n, vd));
      const auto got = down(logits);
      expect_close_tight(f + "logits", st.at("logits"), got);
      std::vector<std::int64_t> mapped;
      for (const std::int64_t a : row_argmax(got, vd)) mapped.push_back(a + static_cast<std::int64_t>(d2t.at(static_cast<std::size_t>(a))));
      expect_exact(f + "argmax_target_ids", st.at("argmax_target_ids"), mapped);
    }
  }

  void mtp(const json& c) {
    const json& d = c.at("dims");
    tensors<B> w(b_, c.at("params"));
    const index_t e = d.at("E"), v = d.at("vocab"), modules = d.at("modules");
    specdec::blocks::mtp::config cfg{
        {{e, d.at("num_attention_heads").get<index_t>(), d.at("num_key_value_heads").get<index_t>(), d.at("head_dim").get<index_t>(),
          d.at("rope_theta").get<double>(), true},
         d.at("intermediate").get<index_t>(), d.at("rms_norm_eps").get<float>(), true},
        v, d.at("zero_embedding_at_position_0").get<bool>()};
    std::vector<specdec::blocks::mtp::weights<space>> mw;
    std::vector<std::unique_ptr<specdec::blocks::kv_cache<B>>> caches;
    for (index_t m = 0; m < modules; ++m) {
      const std::string p = "layers." + std::to_string(m) + ".";
      specdec::blocks::mtp::weights<space> one{w.matrix("embed_tokens.weight"), w.vector(p + "enorm.weight"),
                                               w.vector(p + "hnorm.weight"), w.linear(p + "eh_proj"), w.layer(p + "mtp_block."),
                                               w.vector(p + "shared_head.norm.weight"), w.linear(p + "shared_head.head")};
      one.validate(cfg);
      mw.push_back(one);
      caches.push_back(std::make_unique<specdec::blocks::kv_cache<B>>(b_, 64, cfg.layer.attention.kv_heads * cfg.layer.attention.head_dim));
    }
    const json& steps = c.at("outputs").at("steps");
    std::vector<float> hidden_in = floats_of(steps.at(0).at("hidden_in"));  // the target's states; later: specdec's o
    for (std::size_t s = 0; s < steps.size(); ++s) {
      const json& st = steps[s];
      const std::string f = "steps[" + std::to_string(s) + "].";
      const auto m = static_cast<std::size_t>(s % static_cast<std::size_t>(modules));
      if (st.at("module").get<std::size_t>() != m) throw block_mismatch(f + "module, expected step mod modules");
      const auto ids = values_of(st.at("input_ids"));
      const auto rows = static_cast<index_t>(ids.size());
      auto tokens = up(std::vector<std::int32_t>(ids.begin(), ids.end()));
      const auto pos = values_of(st.at("position_ids"));
      auto positions = up(std::vector<std::int64_t>(pos.begin(), pos.end()));
      auto hidden = up(hidden_in);
      const vview<std::int32_t> tv(tokens.view().data(), rows);
      const vview<std::int64_t> pv(positions.view().data(), rows);
      const specdec::matrix_view<const float, space> hv(hidden.view().data(), rows, e);
      auto x = b_.template allocate<float>(rows * e);
      specdec::blocks::mtp::project(b_, cfg, mw[m], tv, hv, pv, x.matrix(rows, e));
      expect_close_tight(f + "x", st.at("x"), down(x));
      auto o = b_.template allocate<float>(rows * e);
      specdec::blocks::mtp::forward(b_, cfg, mw[m], tv, hv, pv, caches[m].get(), specdec::blocks::attention_mask<space>::causal(),
                                    o.matrix(rows, e));
      const auto got_o = down(o);
      expect_close_tight(f + "o", st.at("o"), got_o);
      auto logits = b_.template allocate<float>(rows * v);
      specdec::blocks::mtp::logits(b_, cfg, mw[m], specdec::matrix_view<const float, space>(o.view().data(), rows, e), logits.matrix(rows, v));
      const auto got = down(logits);
      expect_close_tight(f + "logits", st.at("logits"), got);
      expect_exact(f + "argmax", st.at("argmax"), row_argmax(got, v));
      hidden_in.assign(got_o.end() - e, got_o.end());  // the next step feeds back the last row's o
    }
  }

 private:
  template <class T>
  typename B::template buffer<std::remove_const_t<T>> up(const std::vector<T>& v) {
    return b_.upload(std::span<const T>(v));
  }
  std::vector<float> down(typename B::template buffer<float>& buf) { return b_.download(buf.view()); }
  B& b_;
};

}  // namespace conformance_blocks
