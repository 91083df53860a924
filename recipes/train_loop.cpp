#include "recipes/train_loop.h"

#include <algorithm>
#include <cmath>

#include "core/autograd/variable.h"
#include "core/check.h"
#include "core/cuda_runtime.h"
#include "core/ops/elementwise.h"

namespace primer::recipes {

double heldout_loss(layers::DecoderLM& model, const TrainData& source, int64_t batches, Device device) {
  ag::NoGrad no_grad;
  data::Batch batch;
  const int64_t n = std::min(batches, source.heldout_batches());
  PRIMER_CHECK(n > 0, "the held-out part of the data is smaller than one batch (raise val_size or lower the batch)");
  Tensor sum = Tensor::zeros({1}, DType::F32, device);
  int64_t targets = 0;
  for (int64_t i = 0; i < n; ++i) {
    source.heldout_batch(i, batch);
    targets += count_targets(batch);
    ops::add_(sum, model.loss(ids_of(batch, device), targets_of(batch, device), 1.0)->value.to(DType::F32));
  }
  PRIMER_CHECK(targets > 0, "the held-out batches hold no target token (every loss mask is 0)");
  return sum.item() / double(targets);
}

TrainLoop::TrainLoop(TrainSetup& setup) : s_(setup) {
  metrics_path_ = s_.cfg.has("metrics_file") ? s_.cfg.get_string("metrics_file") : s_.out_dir + "/metrics.jsonl";
  metrics_.open(metrics_path_, std::ios::app);
  PRIMER_CHECK(metrics_.good(), "cannot write metrics file '{}'", metrics_path_);
  flops_per_token_ = s_.model->flops_per_token(s_.seq);
  peak_flops_ = s_.device.is_cuda() ? cuda::peak_bf16_flops() : 0;
  loss_sum_ = Tensor::zeros({1}, DType::F32, s_.device);
}

void TrainLoop::write_metrics(const json::Value& record) {
  metrics_ << json::dump(record) << "\n";
  metrics_.flush();
}

double TrainLoop::evaluate() {
  const int64_t batches = s_.cfg.get_int("eval_batches");
  const double loss = heldout_loss(*s_.model, *s_.data, batches, s_.device);
  json::Value r;
  r["step"] = s_.state.step;
  r["eval_loss"] = loss;
  r["eval_perplexity"] = std::exp(loss);
  std::string extra_text;
  const Objective::Extra extra = s_.objective->evaluate_extra(*s_.model, *s_.data, batches, s_.device);
  if (!extra.name.empty()) {
    const double mean = extra.sum.item() / double(std::max<int64_t>(extra.count, 1));
    r["eval_" + extra.name] = mean;
    extra_text = fmt::format(" | {} {:.5f}", extra.name, mean);
  }
  fmt::print("eval  step {:6d} | held-out loss {:.4f} | perplexity {:.3f}{}\n", s_.state.step, loss, std::exp(loss),
             extra_text);
  write_metrics(r);
  return loss;
}

void TrainLoop::step() {
  s_.params->zero_grads();
  std::vector<data::Batch> micro_batches(static_cast<size_t>(s_.accumulation));
  int64_t step_targets = 0;
  for (data::Batch& b : micro_batches) {
    s_.data->next(b);
    step_targets += count_targets(b);
  }
  for (const data::Batch& b : micro_batches) {
    const Objective::MicroBatchLoss loss =
        s_.objective->micro_batch_loss(*s_.model, b, s_.device, step_targets, s_.accumulation);
    ag::backward(loss.objective);
    ops::add_(loss_sum_, loss.logged);
  }
  window_count_ += s_.objective->logged_count(step_targets, s_.accumulation);
  s_.optimizer->step(s_.schedule.lr(s_.state.step));
  ++s_.state.step;
  ++window_steps_;
  s_.state.data_cursor = s_.data->cursor();
}

void TrainLoop::log_window() {
  const double loss = loss_sum_.item() / double(std::max<int64_t>(window_count_, 1));  // host sync at log points only
  const double secs = std::chrono::duration<double>(Clock::now() - window_start_).count();
  const double tok_s = double(s_.batch * s_.seq * s_.accumulation * window_steps_) / secs;
  const double mfu = peak_flops_ > 0 ? tok_s * flops_per_token_ / peak_flops_ : 0;
  const double peak_gb = double(memory_stats(s_.device).peak) / 1e9;
  const double lr = s_.schedule.lr(s_.state.step - 1);
  const double grad_norm = s_.optimizer->grad_norm();
  fmt::print("train step {:6d} | loss {:.4f} | lr {:.3e} | grad norm {:.3f} | {:.0f} tok/s | MFU {} | peak mem {:.2f} GB\n",
             s_.state.step, loss, lr, grad_norm, tok_s, peak_flops_ > 0 ? fmt::format("{:.1f}%", 100 * mfu) : "n/a",
             peak_gb);
  json::Value r;
  r["step"] = s_.state.step;
  r["loss"] = loss;
  r["lr"] = lr;
  r["grad_norm"] = grad_norm;
  r["tokens_per_s"] = tok_s;
  r["mfu"] = mfu;
  r["peak_memory_gb"] = peak_gb;
  write_metrics(r);
  loss_sum_.zero_();
  window_steps_ = 0;
  window_count_ = 0;
  window_start_ = Clock::now();
}

std::string TrainLoop::save() { return s_.checkpoints->save(s_.state, *s_.params, *s_.optimizer); }

double TrainLoop::run() {
  const int64_t eval_steps = s_.cfg.get_int("eval_steps"), log_steps = s_.cfg.get_int("logging_steps");
  const int64_t save_steps = s_.cfg.get_int("save_steps");
  const double initial = evaluate();
  reset_peak_memory(s_.device);
  window_start_ = Clock::now();
  while (s_.state.step < s_.max_steps) {
    step();
    const int64_t at = s_.state.step;
    if (at % log_steps == 0 || at == s_.max_steps) log_window();
    const auto pause = Clock::now();  // evaluation and saving stay out of the throughput window
    if (eval_steps > 0 && at % eval_steps == 0 && at != s_.max_steps) evaluate();
    if ((save_steps > 0 && at % save_steps == 0) || at == s_.max_steps) fmt::print("saved {}\n", save());
    window_start_ += Clock::now() - pause;
  }
  const double final_loss = evaluate();
  fmt::print("held-out loss {:.4f} → {:.4f}; run directory {}\n", initial, final_loss, s_.out_dir);
  return final_loss;
}

}  // namespace primer::recipes
