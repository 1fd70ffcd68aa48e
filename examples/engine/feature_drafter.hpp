// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief What the methods that read the target's hidden states share (EAGLE, MTP, Medusa, Jakiro, Amphista):
/// the target's final hidden state (after its final norm) of every committed token, collected by hooks
/// on the prefill and on every verify forward.
#pragma once

#include <span>
#include <vector>

#include "decoding.hpp"

namespace engine {

class feature_drafter : public method {
 public:
  explicit feature_drafter(const llama_model& model) : model_(&model) {
    hooks_.after_layer = [this](index_t layer, host_matrix x) {
      if (layer + 1 != model_->config().layers) return;
      last_rows_.resize(static_cast<std::size_t>(x.rows() * x.cols()));
      backend_.rms_norm(x, model_->final_norm(), model_->config().rms_eps, specdec::matrix_view<float>(last_rows_.data(), x.rows(), x.cols()));
    };
  }
  const forward_hooks* prefill_hooks() override { return &hooks_; }
  const forward_hooks* target_hooks() override { return &hooks_; }
  void after_prefill() override { features_ = last_rows_; }
  /// The root and the accepted nodes are committed: their rows of the verify forward extend the features.
  void committed(const specdec::draft_tree&, std::span<const std::int32_t> nodes) override {
    const index_t e = model_->config().hidden;
    std::vector<std::int32_t> rows = {0};
    rows.insert(rows.end(), nodes.begin(), nodes.end());
    for (auto r : rows) features_.insert(features_.end(), last_rows_.begin() + r * e, last_rows_.begin() + (r + 1) * e);
  }

 protected:
  /// `[committed x E]`: row p is the target's final hidden state at position p (the one that predicted
  /// token p + 1); the prompt's last token, which the prefill does not run, has none until verified.
  const std::vector<float>& features() const noexcept { return features_; }
  index_t committed_features() const { return static_cast<index_t>(features_.size()) / model_->config().hidden; }

  const llama_model* model_;
  specdec::eigen backend_;

 private:
  forward_hooks hooks_;
  std::vector<float> last_rows_, features_;
};

}  // namespace engine
