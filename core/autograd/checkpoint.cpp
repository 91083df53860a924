#include "core/autograd/checkpoint.h"

#include <memory>

#include "core/check.h"

namespace primer::ag {

// The results a checkpointed block's costly ops kept in its first forward, handed back in order in its recompute.
// An entry past the budget holds nothing: the recompute computes it again.
struct KeptResults {
  struct Entry {
    std::string op;
    std::vector<Tensor> results;  // empty when not kept
    size_t bytes = 0;             // taken from the budget
  };
  std::string block;
  std::shared_ptr<KeepBudget> budget;
  std::vector<Entry> entries;  // in forward order
  size_t next = 0;             // the entry the recompute takes next
  bool replaying = false;

  KeptResults(std::string name, std::shared_ptr<KeepBudget> b) : block(std::move(name)), budget(std::move(b)) {}
  ~KeptResults() {  // results never handed back (no backward ran) return their bytes
    for (size_t i = next; budget && i < entries.size(); ++i) budget->give_back(entries[i].bytes);
  }
  KeptResults(const KeptResults&) = delete;
  KeptResults& operator=(const KeptResults&) = delete;
};

bool KeepBudget::take(size_t bytes) {
  if (held_ + bytes > limit_) return false;
  held_ += bytes;
  return true;
}

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
    size_t bytes = 0;
    for (const Tensor& t : results) bytes += t.defined() ? t.nbytes() : 0;
    if (kept->budget && !kept->budget->take(bytes))
      kept->entries.push_back({op, {}, 0});
    else
      kept->entries.push_back({op, results, bytes});
    return results;
  }
  PRIMER_CHECK(kept->next < kept->entries.size() && kept->entries[kept->next].op == op,
               "checkpoint '{}': the recompute asks for {}'s results as its kept result {}, where the first forward "
               "kept {}: the block did not run the same ops twice",
               kept->block, op, kept->next,
               kept->next < kept->entries.size() ? kept->entries[kept->next].op + "'s" : std::string("no more"));
  KeptResults::Entry& entry = kept->entries[kept->next++];
  if (entry.results.empty()) return compute();  // past the budget in the first forward
  if (kept->budget) kept->budget->give_back(entry.bytes);
  return std::move(entry.results);  // the recompute's Vars hold them from here on
}

std::vector<Var> checkpoint(const std::string& name, const BlockFn& fn, const std::vector<Var>& inputs,
                            const KeepPolicy& policy) {
  if (!grad_enabled()) return fn(inputs);
  const auto kept = policy.keep ? std::make_shared<KeptResults>(name, policy.budget) : nullptr;
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
