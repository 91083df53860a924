#include "data/loader.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/check.h"
#include "core/io/json.h"
#include "core/rng.h"

namespace primer::data {
namespace {

// Fisher–Yates driven by the counter RNG: the permutation is a function of the key alone.
void shuffle_with(std::vector<int64_t>& v, uint64_t key) {
  for (size_t i = v.size(); i > 1; --i) {
    const size_t j = std::min(size_t(uniform01(key, i) * double(i)), i - 1);
    std::swap(v[i - 1], v[j]);
  }
}

RowPlan permute_rows(const RowPlan& plan, uint64_t key) {
  std::vector<int64_t> order(size_t(plan.rows()));
  for (size_t r = 0; r < order.size(); ++r) order[r] = int64_t(r);
  shuffle_with(order, key);
  RowPlan out;
  out.pieces.reserve(plan.pieces.size());
  for (int64_t r : order) {
    const auto row = plan.row(r);
    out.pieces.insert(out.pieces.end(), row.begin(), row.end());
    out.row_start.push_back(int64_t(out.pieces.size()));
  }
  return out;
}

}  // namespace

// ---- cursor ----

std::string LoaderCursor::to_json() const {
  json::Array consumed;
  for (int64_t c : source_consumed) consumed.push_back(c);
  json::Value v;
  v["sample"] = sample;
  v["epoch"] = epoch;
  v["epoch_start"] = epoch_start;
  v["source_consumed"] = std::move(consumed);
  v["fingerprint"] = fmt::format("{:016x}", fingerprint);  // a JSON integer holds only 63 bits
  return json::dump(v);
}

LoaderCursor LoaderCursor::parse(const std::string& text, const std::string& where) {
  const json::Value doc = json::parse(text, where);
  const json::Node root(doc, where);
  LoaderCursor c;
  c.sample = root.at("sample").as_int();
  c.epoch = root.at("epoch").as_int();
  c.epoch_start = root.at("epoch_start").as_int();
  const json::Node consumed = root.at("source_consumed");
  for (size_t i = 0; i < consumed.size(); ++i) c.source_consumed.push_back(consumed.at(i).as_int());
  const std::string hex = root.at("fingerprint").as_string();
  char* end = nullptr;
  c.fingerprint = std::strtoull(hex.c_str(), &end, 16);
  if (hex.size() != 16 || end != hex.c_str() + hex.size()) root.at("fingerprint").fail("expected 16 hex digits");
  if (c.sample < c.epoch_start || c.epoch < 0 || c.epoch_start < 0)
    root.fail(fmt::format("inconsistent cursor: sample {} before its epoch's start {}", c.sample, c.epoch_start));
  return c;
}

// ---- loader ----

Loader::Loader(const TokenCorpus& corpus, LoaderOptions options) : corpus_(corpus), options_(std::move(options)) {
  const LoaderOptions& o = options_;
  PRIMER_CHECK(o.seq_len > 0, "loader: rows need a positive length, got {}", o.seq_len);
  PRIMER_CHECK(o.dp_size >= 1 && o.dp_rank >= 0 && o.dp_rank < o.dp_size, "loader: data-parallel rank {} of {}",
               o.dp_rank, o.dp_size);
  sequence_part(o.seq_len, o.sp_size, o.sp_rank, o.sp_layout);  // validates the sequence-parallel split
  PRIMER_CHECK(o.heldout_fraction >= 0 && o.heldout_fraction < 1, "loader: held-out fraction {} is not in [0, 1)",
               o.heldout_fraction);

  const uint64_t heldout_key = key_for(0, "data.heldout");
  train_by_source_.resize(size_t(corpus_.sources()));
  for (int64_t d = 0; d < corpus_.documents(); ++d) {
    const int64_t length = corpus_.document_length(d);
    if (uniform01(heldout_key, uint64_t(d)) < o.heldout_fraction) {
      heldout_docs_.push_back(d);
      heldout_tokens_ += length;
    } else {
      train_docs_.push_back(d);
      train_tokens_ += length;
      train_by_source_[size_t(corpus_.document(d).source)].push_back(d);
    }
  }
  PRIMER_CHECK(!train_docs_.empty(), "loader: all {} documents are held out (held-out fraction {})",
               corpus_.documents(), o.heldout_fraction);

  if (!o.source_weights.empty()) {
    PRIMER_CHECK(int64_t(o.source_weights.size()) == corpus_.sources(), "loader: {} source weights for {} sources",
                 o.source_weights.size(), corpus_.sources());
    double total = 0;
    for (int64_t s = 0; s < corpus_.sources(); ++s) {
      const double p = o.source_weights[size_t(s)];
      PRIMER_CHECK(std::isfinite(p) && p >= 0, "loader: source '{}' has weight {}", corpus_.source(s).name, p);
      PRIMER_CHECK(p == 0 || !train_by_source_[size_t(s)].empty(),
                   "loader: source '{}' has weight {} but no training document", corpus_.source(s).name, p);
      double w = p;
      if (o.length_weighted && p > 0) {  // p_i · L̄_i; normalising below divides by Σ_j p_j · L̄_j
        int64_t tokens = 0;
        for (int64_t d : train_by_source_[size_t(s)]) tokens += corpus_.document_length(d);
        w *= double(tokens) / double(train_by_source_[size_t(s)].size());
      }
      probabilities_.push_back(w);
      total += w;
    }
    PRIMER_CHECK(total > 0, "loader: the source weights sum to 0");
    double running = 0;
    for (double& p : probabilities_) {
      p /= total;
      running += p;
      cumulative_.push_back(running);
    }
    // Draws u < 1 must never fall past the end, nor into a trailing zero-weight source.
    for (size_t s = cumulative_.size(); s-- > 0 && cumulative_[s] >= running - 1e-12;) cumulative_[s] = 1.0;
    cursor_.source_consumed.assign(size_t(corpus_.sources()), 0);
  } else {
    PRIMER_CHECK(!o.length_weighted, "loader: length-weighted sampling needs source weights");
  }

  if (!heldout_docs_.empty()) {
    std::vector<int64_t> lengths;
    for (int64_t d : heldout_docs_) lengths.push_back(corpus_.document_length(d));
    heldout_plan_ = pack(PackingMethod::Concat, heldout_docs_, lengths, o.seq_len);
  }
  cursor_.fingerprint = fingerprint();
  epochs_.push_back(build_epoch(0, cursor_.source_consumed));
}

uint64_t Loader::fingerprint() const {
  const LoaderOptions& o = options_;
  std::string weights;
  for (double w : o.source_weights) weights += fmt::format("{},", w);
  return key_for(corpus_.fingerprint(),
                 fmt::format("seq {} packing {} reset {} drop {} weights {} length {} shuffle {} seed {} heldout {}",
                             o.seq_len, packing_method_name(o.packing), o.reset_at_document_starts,
                             o.drop_long_documents, weights, o.length_weighted, o.shuffle, o.seed, o.heldout_fraction));
}

std::vector<int64_t> Loader::epoch_documents(int64_t epoch, const std::vector<int64_t>& consumed,
                                             std::vector<int64_t>& consumed_after) const {
  consumed_after = consumed;
  if (options_.source_weights.empty()) {
    std::vector<int64_t> docs = train_docs_;
    if (options_.shuffle) shuffle_with(docs, key_for(options_.seed, fmt::format("data.order/{}", epoch)));
    return docs;
  }
  // Source s's stream is its training documents in pass after pass, each pass shuffled by (seed, s, pass).
  struct Pass {
    int64_t index = -1;
    std::vector<int64_t> order;
  };
  std::vector<Pass> passes(train_by_source_.size());
  const uint64_t mix_key = key_for(options_.seed, fmt::format("data.mix/{}", epoch));
  std::vector<int64_t> docs(train_docs_.size());
  for (size_t j = 0; j < docs.size(); ++j) {
    const double u = uniform01(mix_key, j);
    const size_t s = size_t(std::upper_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin());
    const std::vector<int64_t>& pool = train_by_source_[s];
    const int64_t n = consumed_after[s]++;
    const int64_t pass = n / int64_t(pool.size());
    if (passes[s].index != pass) {
      passes[s] = {pass, pool};
      if (options_.shuffle)
        shuffle_with(passes[s].order, key_for(options_.seed, fmt::format("data.source/{}/{}", s, pass)));
    }
    docs[j] = passes[s].order[size_t(n % int64_t(pool.size()))];
  }
  return docs;
}

Loader::Epoch Loader::build_epoch(int64_t epoch, const std::vector<int64_t>& consumed) const {
  Epoch e;
  e.index = epoch;
  e.consumed_before = consumed;
  std::vector<int64_t> docs = epoch_documents(epoch, consumed, e.consumed_after);
  const int64_t T = options_.seq_len;
  std::vector<int64_t> kept, lengths;
  kept.reserve(docs.size());
  lengths.reserve(docs.size());
  for (int64_t d : docs) {
    const int64_t length = corpus_.document_length(d);
    if (options_.packing != PackingMethod::Concat && options_.drop_long_documents && length > T) {
      ++e.dropped;
      continue;
    }
    kept.push_back(d);
    lengths.push_back(length);
  }
  e.plan = pack(options_.packing, kept, lengths, T);
  // Greedy and best-fit emit rows longest-documents-first; the order must not leak into training.
  const bool sorted_rows = options_.packing == PackingMethod::Greedy || options_.packing == PackingMethod::BestFit;
  if (options_.shuffle && sorted_rows)
    e.plan = permute_rows(e.plan, key_for(options_.seed, fmt::format("data.rows/{}", epoch)));
  PRIMER_CHECK(e.plan.rows() > 0,
               "loader: epoch {} fills no row of {} tokens ({} training documents, {} tokens, {} dropped as too long)",
               epoch, T, docs.size(), train_tokens_, e.dropped);
  return e;
}

const Loader::Epoch& Loader::epoch_holding(int64_t row) {
  PRIMER_CHECK(row >= epochs_.front().first_row, "loader: row {} lies before the cursor's epoch", row);
  while (row >= epochs_.back().first_row + epochs_.back().plan.rows()) {
    const Epoch& last = epochs_.back();
    Epoch next = build_epoch(last.index + 1, last.consumed_after);
    next.first_row = last.first_row + last.plan.rows();
    epochs_.push_back(std::move(next));  // deque: references to earlier epochs stay valid
  }
  for (const Epoch& e : epochs_)
    if (row < e.first_row + e.plan.rows()) return e;
  PRIMER_FAIL("loader: row {} not found", row);  // unreachable: the loop above built its epoch
}

void Loader::next(int64_t rows_per_rank, Batch& out) {
  PRIMER_CHECK(rows_per_rank > 0, "loader: a batch needs at least one row per rank, got {}", rows_per_rank);
  const int64_t first = cursor_.sample + options_.dp_rank * rows_per_rank;
  std::vector<std::span<const Piece>> rows;
  for (int64_t r = first; r < first + rows_per_rank; ++r) {
    const Epoch& e = epoch_holding(r);
    rows.push_back(e.plan.row(r - e.first_row));
  }
  emit(rows, out);
  cursor_.sample += rows_per_rank * options_.dp_size;
  epoch_holding(cursor_.sample);
  while (epochs_.front().first_row + epochs_.front().plan.rows() <= cursor_.sample) epochs_.pop_front();
  cursor_.epoch = epochs_.front().index;
  cursor_.epoch_start = epochs_.front().first_row;
  cursor_.source_consumed = epochs_.front().consumed_before;
}

void Loader::restore(const LoaderCursor& c) {
  PRIMER_CHECK(c.fingerprint == cursor_.fingerprint,
               "loader: the data cursor was saved for other data or stream options (fingerprint {:016x}, now {:016x}): "
               "the tokenized shards, cutoff_len, packing, mixing weights, val_size or seed differ",
               c.fingerprint, cursor_.fingerprint);
  PRIMER_CHECK(c.source_consumed.size() == cursor_.source_consumed.size(),
               "loader: the data cursor has {} source counters, the loader {}", c.source_consumed.size(),
               cursor_.source_consumed.size());
  Epoch e = build_epoch(c.epoch, c.source_consumed);
  e.first_row = c.epoch_start;
  PRIMER_CHECK(c.sample >= e.first_row && c.sample < e.first_row + e.plan.rows(),
               "loader: the data cursor's sample {} is not in its epoch {} (rows {} to {})", c.sample, c.epoch,
               e.first_row, e.first_row + e.plan.rows());
  epochs_.clear();
  epochs_.push_back(std::move(e));
  cursor_ = c;
}

int64_t Loader::heldout_batches(int64_t rows_per_rank) const {
  return heldout_plan_.rows() / (rows_per_rank * options_.dp_size);
}

void Loader::heldout_batch(int64_t index, int64_t rows_per_rank, Batch& out) const {
  PRIMER_CHECK(index >= 0 && index < heldout_batches(rows_per_rank), "loader: held-out batch {} of {}", index,
               heldout_batches(rows_per_rank));
  const int64_t first = (index * options_.dp_size + options_.dp_rank) * rows_per_rank;
  std::vector<std::span<const Piece>> rows;
  for (int64_t r = first; r < first + rows_per_rank; ++r) rows.push_back(heldout_plan_.row(r));
  emit(rows, out);
}

void Loader::fill(std::span<const Piece> pieces, int32_t* ids, int32_t* targets, int32_t* positions,
                  int32_t* segments) const {
  const int64_t T = options_.seq_len;
  const bool reset = options_.reset_at_document_starts;
  int64_t t = 0;
  for (size_t k = 0; k < pieces.size(); ++k) {
    const DocumentView doc = corpus_.document(pieces[k].doc);
    for (int64_t i = 0; i < pieces[k].length; ++i, ++t) {
      const size_t at = size_t(pieces[k].begin + i);
      ids[t] = doc.tokens[at];
      segments[t] = int32_t(k);
      positions[t] = int32_t(reset ? i : t);
      // Token t is the target of position t − 1 if its loss mask says so and (with resets) it does not open a
      // piece: a piece's first token is a document start (or the row start, which has no predecessor).
      if (t > 0) targets[t - 1] = doc.loss_mask[at] && !(reset && i == 0) ? ids[t] : kIgnoreIndex;
    }
  }
  PRIMER_CHECK(t <= T, "loader: a row of {} tokens was planned with {}", T, t);
  for (const int64_t end = t; t < T; ++t) {  // padding: never a target, after every real token
    ids[t] = corpus_.tokenizer().eos_id;
    segments[t] = -1;
    positions[t] = int32_t(reset ? t - end : t);
    if (t > 0) targets[t - 1] = kIgnoreIndex;
  }
  targets[T - 1] = kIgnoreIndex;
}

void Loader::emit(const std::vector<std::span<const Piece>>& rows, Batch& out) const {
  const int64_t T = options_.seq_len;
  const auto parts = sequence_part(T, options_.sp_size, options_.sp_rank, options_.sp_layout);
  out.rows = int64_t(rows.size());
  out.seq = T / options_.sp_size;
  for (auto* v : {&out.ids, &out.targets, &out.positions, &out.segments}) v->resize(size_t(out.rows * out.seq));
  // Whole rows are built, then this rank's part of each is copied out.
  const size_t row_len = size_t(T);
  std::vector<int32_t> ids(row_len), targets(row_len), positions(row_len), segments(row_len);
  const std::pair<const std::vector<int32_t>*, std::vector<int32_t>*> fields[] = {
      {&ids, &out.ids}, {&targets, &out.targets}, {&positions, &out.positions}, {&segments, &out.segments}};
  for (int64_t r = 0; r < out.rows; ++r) {
    fill(rows[size_t(r)], ids.data(), targets.data(), positions.data(), segments.data());
    int64_t at = r * out.seq;
    for (const auto& [begin, end] : parts) {
      for (const auto& [row, batch] : fields) std::copy(row->begin() + begin, row->begin() + end, batch->begin() + at);
      at += end - begin;
    }
  }
}

std::string Loader::describe() const {
  std::string text = fmt::format(
      "{} training documents ({} tokens), {} held out ({} tokens); {} packing into rows of {}", train_documents(),
      train_tokens(), heldout_documents(), heldout_tokens(), packing_method_name(options_.packing), options_.seq_len);
  if (!probabilities_.empty()) {
    text += options_.length_weighted ? "; length-weighted source probabilities" : "; source probabilities";
    for (int64_t s = 0; s < corpus_.sources(); ++s)
      text += fmt::format(" {}={:.4f}", corpus_.source(s).name, probabilities_[size_t(s)]);
  }
  return text;
}

}  // namespace primer::data
