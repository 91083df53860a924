#include "core/autograd/checkpoint.h"

#include <memory>

#include "core/check.h"

namespace primer::ag {

// The results a checkpointed block's costly ops kept in its first forward, handed back in order in its recompute.
struct KeptResults {
  std::string block;
  std::vector<std::pair<std::string, std::vector<Tensor>>> entries;  // (op, results) in forward order
  size_t next = 0;                                                   // the entry the recompute takes next
  bool replaying = false;
};

namespace {

thread_local KeptResults* current_kept = nullptr;

// Makes `kept` the store of the ops run in this scope (null: none), and restores the enclosing one after.
class KeptScope {
 public:
  explicit KeptScope(KeptResults* kept) : previous_(current_kept) { current_kept = kept; }
  ~KeptScope() { current_kept = previous_; }
  KeptScope(const KeptScope&) = delete;
  KeptScope& operator=(const KeptScope&) = delete;

 private:
  KeptResults* previous_;
};

// Fresh Vars over the same values, cut off from the outer graph.
std::vector<Var> detach(const std::vector<Var>& vs, bool keep_requires_grad) {
  std::vector<Var> out;
  for (const Var& v : vs) {
    Var d = constant(v->value, v->name);
    d->requires_grad = keep_requires_grad && v->requires_grad;
    out.push_back(d);
  }
  return out;
}

}  // namespace

NothingKept::NothingKept() : previous_(current_kept) { current_kept = nullptr; }
NothingKept::~NothingKept() { current_kept = previous_; }

std::vector<Tensor> kept_across_recompute(const char* op, const std::function<std::vector<Tensor>()>& compute) {
  KeptResults* kept = current_kept;
  if (!kept) return compute();
  if (!kept->replaying) {
    std::vector<Tensor> results = compute();
    kept->entries.emplace_back(op, results);
    return results;
  }
  PRIMER_CHECK(kept->next < kept->entries.size() && kept->entries[kept->next].first == op,
               "checkpoint '{}': the recompute asks for {}'s results as its kept result {}, where the first forward "
               "kept {}: the block did not run the same ops twice",
               kept->block, op, kept->next,
               kept->next < kept->entries.size() ? kept->entries[kept->next].first + "'s" : std::string("no more"));
  return std::move(kept->entries[kept->next++].second);  // the recompute's Vars hold them from here on
}

std::vector<Var> checkpoint(const std::string& name, const BlockFn& fn, const std::vector<Var>& inputs,
                            bool keep_costly) {
  if (!grad_enabled()) return fn(inputs);
  const auto kept = keep_costly ? std::make_shared<KeptResults>(KeptResults{name}) : nullptr;
  std::vector<Var> outputs;
  {
    NoGrad no_grad;
    KeptScope scope(kept.get());
    for (const Var& o : fn(detach(inputs, false))) outputs.push_back(constant(o->value, o->name));
  }
  record(name, outputs, [fn, inputs, outputs, kept] {
    Tape private_tape;
    std::vector<Var> ins = detach(inputs, true);
    std::vector<Var> outs;
    {
      TapeScope scope(private_tape);
      if (kept) kept->replaying = true, kept->next = 0;
      KeptScope kept_scope(kept.get());
      outs = fn(ins);
      if (kept)
        PRIMER_CHECK(kept->next == kept->entries.size(),
                     "checkpoint '{}': the recompute took {} of the {} results its first forward kept: the block did "
                     "not run the same ops twice",
                     kept->block, kept->next, kept->entries.size());
    }
    if (kept) kept->entries.clear();
    for (size_t i = 0; i < outs.size(); ++i) {
      if (outputs[i]->grad.defined()) outs[i]->grad = outputs[i]->grad;
    }
    private_tape.backward();
    for (size_t i = 0; i < ins.size(); ++i) accumulate_grad(inputs[i], ins[i]->grad);
  });
  return outputs;
}

}  // namespace primer::ag
