#include "recipes/train_loop.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/autograd/variable.h"
#include "core/check.h"
#include "core/console.h"
#include "core/cuda_runtime.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "recipes/fault_injection.h"
#include "recipes/stop_request.h"

namespace primer::recipes {

namespace {

// Sums host numbers over the data-parallel ranks (f64, exact for counts below 2^53).
std::vector<double> sum_over_ranks(parallel::Communicator* host, std::vector<double> values) {
  if (!host || host->size() == 1) return values;
  Tensor t = Tensor::from_vector(values, {int64_t(values.size())}, DType::F64);
  host->all_reduce(t, parallel::ReduceOp::Sum, "metrics");
  return t.to_vector<double>();
}

double max_over_ranks(parallel::Communicator* host, double value) {
  if (!host || host->size() == 1) return value;
  Tensor t = Tensor::full({1}, value, DType::F64);
  host->all_reduce(t, parallel::ReduceOp::Max, "metrics");
  return t.item();
}

// Rows the interrupted run wrote after the checkpoint a run resumes from (`step`), dropped so that every step appears
// once (plots, and readers that take the first row): every row after it and the evaluation at it (the resumed run
// evaluates again where it starts), and a torn line (a kill mid-write). Rewritten through a temporary file, so a
// crash here leaves the old file whole.
void drop_superseded_metrics(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::vector<std::string> kept;
  bool dropped = false;
  for (std::string line; std::getline(in, line);) {
    try {
      const json::Value row = json::parse(line, path);
      const json::Node n(row, path);
      const int64_t at = n.at("step").as_int();
      if (at < step || (at == step && !n.has("eval_loss"))) {
        kept.push_back(line);
        continue;
      }
    } catch (const std::exception&) {}
    dropped = true;
  }
  in.close();
  if (!dropped) return;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const std::string& line : kept) out << line << "\n";
    out.flush();
    PRIMER_CHECK(out.good(), "cannot rewrite metrics file '{}' (through '{}')", path, tmp);
  }
  std::filesystem::rename(tmp, path);
}

// A fresh run's metrics file starts empty: a previous run's (an overwritten run, or one that left no checkpoint to
// resume) is kept as <file>.previous, replacing an older one, and said so.
void set_previous_metrics_aside(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec) || std::filesystem::file_size(path, ec) == 0) return;
  const std::string previous = path + ".previous";
  std::filesystem::rename(path, previous, ec);
  PRIMER_CHECK(!ec, "cannot move the previous run's metrics file '{}' to '{}': {}", path, previous, ec.message());
  console::warn("this run starts afresh: its metrics go to a new '{}'; the previous run's are now in '{}'", path,
                previous);
}

}  // namespace

HeldoutScore heldout_score(layers::DecoderLM& model, const TrainData& source, int64_t batches, Device device,
                           parallel::Communicator* host, HeldoutSplit split) {
  ag::NoGrad no_grad;
  data::Batch batch;
  const int64_t n = std::min(batches, source.heldout_batches());
  PRIMER_CHECK(n > 0, "{}", source.heldout_too_small());
  Tensor sum = Tensor::zeros({1}, DType::F32, device);
  int64_t targets = 0;
  const bool whole = host && split == HeldoutSplit::WholeBatches;
  const int64_t first = whole ? host->rank() : 0, stride = whole ? host->size() : 1;
  for (int64_t i = first; i < n; i += stride) {
    source.heldout_batch(i, batch);
    targets += count_targets(batch);
    ops::add_(sum, model.loss(ids_of(batch, device), targets_of(batch, device), 1.0, positions_of(batch, device))
                       ->value.to(DType::F32));
  }
  const std::vector<double> total = sum_over_ranks(host, {sum.item(), double(targets)});
  PRIMER_CHECK(total[1] > 0, "the held-out batches hold no target token (every loss mask is 0)");
  return {total[0] / total[1], int64_t(total[1])};
}

TrainLoop::TrainLoop(TrainSetup& setup)
    : s_(setup), divergence_(divergence_policy(setup.cfg), setup.state.nan_skipped_steps) {
  metrics_path_ = s_.cfg.has("metrics_file") ? s_.cfg.get_string("metrics_file") : s_.out_dir + "/metrics.jsonl";
  if (s_.ranks.host->rank() == 0) {  // one writer; every number it writes is global
    if (s_.state.step > 0)
      drop_superseded_metrics(metrics_path_, s_.state.step);
    else
      set_previous_metrics_aside(metrics_path_);
    metrics_.open(metrics_path_, std::ios::app);
    PRIMER_CHECK(metrics_.good(), "cannot write metrics file '{}'", metrics_path_);
  }
  flops_per_token_ = s_.model->flops_per_token(s_.seq);
  peak_flops_ = s_.device.is_cuda() ? cuda::peak_bf16_flops() : 0;
  loss_sum_ = Tensor::zeros({1}, DType::F32, s_.device);
  step_loss_ = Tensor::zeros({1}, DType::F32, s_.device);
}

void TrainLoop::write_metrics(const json::Value& record) {
  if (!metrics_.is_open()) return;
  metrics_ << json::dump(record) << "\n";
  metrics_.flush();
  // A log that silently stops is a run nobody can read back: a full disk ends the run here, naming the file.
  PRIMER_CHECK(metrics_.good(), "cannot write metrics file '{}' (disk full, or the file went away?)", metrics_path_);
}

double TrainLoop::evaluate() {
  const int64_t batches = s_.cfg.get_int("eval_batches");
  const double loss = heldout_loss(*s_.model, *s_.data, batches, s_.device, s_.ranks.host);
  json::Value r;
  r["step"] = s_.state.step;
  r["eval_loss"] = loss;
  r["eval_perplexity"] = std::exp(loss);
  r["tokens"] = s_.state.step * tokens_per_step();
  std::string extra_text;
  const Objective::Extra extra = s_.objective->evaluate_extra(*s_.model, *s_.data, batches, s_.device);
  if (!extra.name.empty()) {
    const std::vector<double> total = sum_over_ranks(s_.ranks.host, {extra.sum.item(), double(extra.count)});
    const double mean = total[0] / std::max(total[1], 1.0);
    r["eval_" + extra.name] = mean;
    extra_text = fmt::format(" | {} {:.5f}", extra.name, mean);
  }
  fmt::print("eval  step {:6d} | held-out loss {:.4f} | perplexity {:.3f}{}\n", s_.state.step, loss, std::exp(loss),
             extra_text);
  write_metrics(r);
  return loss;
}

void TrainLoop::step() {
  const std::string context = fmt::format("step {}", s_.state.step + 1);
  s_.ranks.tensors->set_context(context);
  s_.ranks.host->set_context(context);
  s_.fsdp->zero_grads();
  step_loss_.zero_();
  std::vector<data::Batch> micro_batches(static_cast<size_t>(s_.accumulation));
  bool inject_nan = false;
  int64_t local_targets = 0;
  for (data::Batch& b : micro_batches) {
    s_.data->next(b);
    local_targets += count_targets(b);
  }
  // The step's gradient is that of the mean loss over every rank's target tokens: gradients are summed over ranks.
  const int64_t step_targets = int64_t(sum_over_ranks(s_.ranks.host, {double(local_targets)})[0]);
  const int64_t micro_batches_total = s_.accumulation * s_.ranks.tensors->size();
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    s_.fsdp->begin_micro_batch(i + 1 == micro_batches.size());
    const Objective::MicroBatchLoss loss =
        s_.objective->micro_batch_loss(*s_.model, micro_batches[i], s_.device, step_targets, micro_batches_total);
    ag::backward(loss.objective);
    ops::add_(step_loss_, loss.logged);
    if (i == 0) inject_nan = fault_here_if_asked("step", s_.state.step + 1, s_.ranks.host->rank());
  }
  s_.fsdp->finish_backward();
  if (inject_nan) inject_nan_gradient();
  const int64_t logged_count = s_.objective->logged_count(step_targets, micro_batches_total);
  if (gradients_finite_on_every_rank()) {
    ops::add_(loss_sum_, step_loss_);
    window_count_ += logged_count;
    s_.optimizer->step(s_.schedule.lr(s_.state.step));
    s_.fsdp->after_optimizer_step();
  } else {  // stops the run, or skips the update: the step counts, its data is consumed, nothing is applied
    divergence_.nonfinite_gradient(
        s_.state.step + 1, first_nonfinite_parameter(),
        sum_over_ranks(s_.ranks.host, {step_loss_.item()})[0] / double(std::max<int64_t>(logged_count, 1)));
    s_.state.nan_skipped_steps = divergence_.skipped();  // checkpointed: a resumed run's limit counts it
  }
  ++s_.state.step;
  ++window_steps_;
  s_.state.data_cursor = s_.data->cursor();
}

bool TrainLoop::gradients_finite_on_every_rank() {
  const bool finite = s_.optimizer->gradient_norm_finite();
  // Sharded norms are global already; replicated ranks hold equal gradients. The vote keeps every rank's decision
  // the same even where they are not (a NaN injected on one rank after the reduction).
  if (s_.ranks.host->size() == 1) return finite;
  return sum_over_ranks(s_.ranks.host, {finite ? 0.0 : 1.0})[0] == 0;
}

std::string TrainLoop::first_nonfinite_parameter() {
  const std::vector<Parameter*> all = s_.params->all();
  double first = double(all.size());  // registry (model) order, the least over the ranks' shards
  for (const parallel::ParameterChunk& c : s_.fsdp->chunks(false)) {
    if (!c.param->trainable) continue;
    const Tensor grad = s_.fsdp->shards().get(c.group).var->grad.slice(0, c.group_offset, c.group_offset + c.count);
    if (!std::isfinite(ops::sumsq_all(grad).item()))
      first = std::min(first, double(std::find(all.begin(), all.end(), c.param) - all.begin()));
  }
  first = -max_over_ranks(s_.ranks.host, -first);
  return first < double(all.size()) ? all[size_t(first)]->name : "";
}

void TrainLoop::inject_nan_gradient() {
  const std::vector<parallel::ParameterChunk> chunks = s_.fsdp->chunks(false);
  for (auto c = chunks.rbegin(); c != chunks.rend(); ++c)
    if (c->param->trainable) {
      s_.fsdp->shards().get(c->group).var->grad.slice(0, c->group_offset, c->group_offset + 1).fill_(std::nan(""));
      fmt::print(stderr, "[rank {}] PRIMER_FAULT: a NaN in the gradient of '{}' at step {}\n", s_.ranks.host->rank(),
                 c->param->name, s_.state.step + 1);
      return;
    }
}

void TrainLoop::log_window() {
  // Host syncs at log points only. Loss, tokens/s and MFU are global; peak memory is the largest rank's.
  const int64_t world = s_.ranks.host->size();
  // A window whose every step was skipped (nan_policy: skip) has no loss; a skipped last step, no gradient norm.
  const double loss_sum = sum_over_ranks(s_.ranks.host, {loss_sum_.item()})[0];
  const double loss = window_count_ > 0 ? loss_sum / double(window_count_) : std::nan("");
  const double secs =
      max_over_ranks(s_.ranks.host, std::chrono::duration<double>(Clock::now() - window_start_).count());
  const double tok_s = double(tokens_per_step() * window_steps_) / secs;
  const double mfu = peak_flops_ > 0 ? tok_s * flops_per_token_ / (peak_flops_ * double(world)) : 0;
  const double peak_gb = max_over_ranks(s_.ranks.host, double(memory_stats(s_.device).peak)) / 1e9;
  const double lr = s_.schedule.lr(s_.state.step - 1);
  const double grad_norm = s_.optimizer->grad_norm();
  const double elapsed = std::chrono::duration<double>(Clock::now() - run_start_).count();
  fmt::print(
      "train step {:6d} | loss {:.4f} | lr {:.3e} | grad norm {:.3f} | {:.0f} tok/s | MFU {} | peak mem {:.2f} GB "
      "| elapsed {}, ETA {}\n",
      s_.state.step, loss, lr, grad_norm, tok_s, peak_flops_ > 0 ? fmt::format("{:.1f}%", 100 * mfu) : "n/a", peak_gb,
      format_duration(elapsed), format_duration(step_times_.remaining(double(s_.max_steps - s_.state.step))));
  if (std::isfinite(loss)) divergence_.logged_loss(s_.state.step, loss);
  json::Value r;
  r["step"] = s_.state.step;
  for (const auto& [key, value] : {std::pair{"loss", loss}, std::pair{"lr", lr}, std::pair{"grad_norm", grad_norm}})
    if (std::isfinite(value)) r[key] = value;  // JSON has no NaN
  r["tokens"] = s_.state.step * tokens_per_step();
  r["tokens_per_s"] = tok_s;
  r["mfu"] = mfu;
  r["peak_memory_gb"] = peak_gb;
  write_metrics(r);
  loss_sum_.zero_();
  window_steps_ = 0;
  window_count_ = 0;
  window_start_ = Clock::now();
}

int64_t TrainLoop::tokens_per_step() const { return s_.batch * s_.seq * s_.accumulation * s_.shard.size; }

std::string TrainLoop::save() { return s_.checkpoints->save(s_.state, checkpoint_content(s_)); }

double TrainLoop::run() {
  const int64_t eval_steps = s_.cfg.get_int("eval_steps"), log_steps = s_.cfg.get_int("logging_steps");
  const int64_t save_steps = s_.cfg.get_int("save_steps");
  const StopRequest stop;
  const double initial = evaluate();
  reset_peak_memory(s_.device);
  window_start_ = Clock::now();
  run_start_ = Clock::now();
  while (s_.state.step < s_.max_steps) {
    const auto step_start = Clock::now();
    step();
    step_times_.add(std::chrono::duration<double>(Clock::now() - step_start).count());
    const int64_t at = s_.state.step;
    // Every rank stops at the same step: the largest signal number any rank received.
    const int signal = int(max_over_ranks(s_.ranks.host, double(StopRequest::signal())));
    if (at % log_steps == 0 || at == s_.max_steps || signal) log_window();
    const auto pause = Clock::now();  // evaluation and saving stay out of the throughput window
    if (signal) {
      const std::string saved = save();
      fmt::print(
          "interrupted by {} at step {}: checkpoint {} committed; `primer train {}` continues from it "
          "(resume_from_checkpoint: auto)\n",
          signal_name(signal), at, saved, s_.recipe);
      interrupted_by_ = signal;
      return std::nan("");
    }
    if (eval_steps > 0 && at % eval_steps == 0 && at != s_.max_steps) evaluate();
    if ((save_steps > 0 && at % save_steps == 0) || at == s_.max_steps) fmt::print("saved {}\n", save());
    window_start_ += Clock::now() - pause;
  }
  const double final_loss = evaluate();
  fmt::print("held-out loss {:.4f} → {:.4f}; run directory {}\n", initial, final_loss, s_.out_dir);
  return final_loss;
}

}  // namespace primer::recipes
