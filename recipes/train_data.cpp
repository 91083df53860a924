#include "recipes/train_data.h"

#include <charconv>

#include "core/check.h"
#include "core/io/json.h"
#include "data/byte_corpus.h"
#include "data/token_corpus.h"

namespace primer::recipes {
namespace {

constexpr const char* kHeldoutRemedy =
    "raise val_size, lower per_device_train_batch_size or cutoff_len, or train on more data";

// Bytes as tokens (vocabulary 256), or a tokenizer's ids of the text (`primer eval`). Window i of the stream is drawn
// by (seed, i); the cursor counts the windows all ranks consumed, so a resume continues the same stream on any rank
// count (with the same global batch).
class ByteData : public TrainData {
 public:
  ByteData(const std::string& path, double heldout, uint64_t seed, int64_t batch, int64_t seq, DataShard shard,
           const data::Tokenizer* tokenizer)
      : corpus_(path, heldout, tokenizer),
        path_(path),
        tokenized_(tokenizer != nullptr),
        vocab_(tokenizer ? tokenizer->vocab_size() : 256),
        seed_(seed),
        batch_(batch),
        seq_(seq),
        shard_(shard) {}

  void next(data::Batch& out) override {
    corpus_.train_rows(seed_, rows_ + shard_.rank * batch_, batch_, seq_, out.ids, out.targets);
    rows_ += batch_ * shard_.size;
    keep_sequence_part(out);
  }
  int64_t heldout_batches() const override { return corpus_.heldout_batches(batch_ * shard_.size, seq_); }
  void heldout_batch(int64_t index, data::Batch& out) const override {
    corpus_.heldout_batch(index * shard_.size + shard_.rank, batch_, seq_, out.ids, out.targets);
    keep_sequence_part(out);
  }
  std::string cursor() const override {
    json::Value v;
    v["byte_corpus_rows"] = rows_;
    return json::dump(v);
  }
  void restore(const std::string& cursor, const std::string& where) override {
    const json::Value v = json::parse(cursor, where);
    const json::Node node(v, where);
    // Format-1 checkpoints counted one rank's micro-batches of this batch size.
    rows_ = node.has("byte_corpus_rows") ? node.at("byte_corpus_rows").as_int()
                                         : node.at("byte_corpus_micro_batches").as_int() * batch_;
  }
  int64_t vocab_size() const override { return vocab_; }
  std::string describe() const override {
    if (tokenized_)
      return fmt::format("{} through the model's tokenizer ({} training tokens, {} held out)", path_,
                         corpus_.train_bytes(), corpus_.heldout_bytes());
    return fmt::format("{} as bytes ({} training bytes, {} held out)", path_, corpus_.train_bytes(),
                       corpus_.heldout_bytes());
  }
  std::string heldout_too_small() const override {
    const int64_t rows = batch_ * shard_.size;
    const char* unit = tokenized_ ? "tokens" : "bytes";
    return fmt::format(
        "the held-out part of {} ({} {}: val_size of its {} {}) is smaller than one evaluation "
        "batch ({} rows of {} tokens over the ranks: {} {}); {}",
        path_, corpus_.heldout_bytes(), unit, corpus_.train_bytes() + corpus_.heldout_bytes(), unit, rows, seq_,
        rows * seq_ + 1, unit, kHeldoutRemedy);
  }

 private:
  // Whole rows [B, T] of ids and targets → this rank's part of each (everything without sequence parallelism), with
  // the tokens' positions in the row.
  void keep_sequence_part(data::Batch& b) const {
    const auto parts = sequence_part(seq_, shard_.sp_size, shard_.sp_rank, shard_.sp_layout);
    const int64_t local = seq_ / shard_.sp_size;
    std::vector<int32_t> ids(size_t(batch_ * local)), targets(ids.size()), positions(ids.size());
    for (int64_t r = 0; r < batch_; ++r) {
      int64_t at = r * local;
      for (const auto& [begin, end] : parts)
        for (int64_t t = begin; t < end; ++t, ++at) {
          ids[size_t(at)] = b.ids[size_t(r * seq_ + t)];
          targets[size_t(at)] = b.targets[size_t(r * seq_ + t)];
          positions[size_t(at)] = int32_t(t);
        }
    }
    b.ids = std::move(ids);
    b.targets = std::move(targets);
    b.positions = std::move(positions);
    b.rows = batch_;
    b.seq = local;
  }

  data::ByteCorpus corpus_;
  std::string path_;
  bool tokenized_;  // through a tokenizer, else bytes
  int64_t vocab_;
  uint64_t seed_;
  int64_t batch_, seq_, rows_ = 0;
  DataShard shard_;
};

class TokenData : public TrainData {
 public:
  TokenData(const config::Config& cfg, int64_t batch, int64_t seq, DataShard shard)
      : corpus_(data::TokenCorpus::open(cfg.get_list("tokenized_path"), true)),
        loader_(corpus_, loader_options(cfg, seq, corpus_.sources(), shard)),
        batch_(batch),
        seq_(seq),
        shard_(shard) {}

  void next(data::Batch& out) override { loader_.next(batch_, out); }
  int64_t heldout_batches() const override { return loader_.heldout_batches(batch_); }
  void heldout_batch(int64_t index, data::Batch& out) const override { loader_.heldout_batch(index, batch_, out); }
  std::string cursor() const override { return loader_.cursor().to_json(); }
  void restore(const std::string& cursor, const std::string& where) override {
    loader_.restore(data::LoaderCursor::parse(cursor, where));
  }
  int64_t vocab_size() const override { return corpus_.tokenizer().vocab_size; }
  std::string describe() const override {
    std::string dirs;
    for (const std::string& d : corpus_.dirs()) dirs += (dirs.empty() ? "" : ", ") + d;
    return fmt::format("{} (tokenizer {}): {}", dirs, corpus_.tokenizer().name, loader_.describe());
  }
  std::string heldout_too_small() const override {
    return fmt::format(
        "the held-out part of the data ({} documents, {} tokens) packs into fewer rows than one "
        "evaluation batch ({} rows of {} tokens over the ranks); {}",
        loader_.heldout_documents(), loader_.heldout_tokens(), batch_ * shard_.size, seq_, kHeldoutRemedy);
  }

 private:
  data::TokenCorpus corpus_;
  data::Loader loader_;
  int64_t batch_, seq_;
  DataShard shard_;
};

std::vector<double> parse_probabilities(const config::Config& cfg, const std::string& key) {
  std::vector<double> out;
  for (const std::string& item : cfg.get_list(key)) {
    double v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    PRIMER_CHECK(ec == std::errc() && end == item.data() + item.size() && v >= 0,
                 "{}: '{}' holds '{}', expected non-negative numbers", cfg.where(key), key, item);
    out.push_back(v);
  }
  return out;
}

}  // namespace

data::LoaderOptions loader_options(const config::Config& cfg, int64_t seq, int64_t sources, DataShard shard) {
  data::LoaderOptions o;
  o.seq_len = seq;
  o.dp_rank = shard.rank;
  o.dp_size = shard.size;
  o.sp_rank = shard.sp_rank;
  o.sp_size = shard.sp_size;
  o.sp_layout = shard.sp_layout;
  o.seed = uint64_t(cfg.get_int("seed"));
  o.heldout_fraction = cfg.get_float("val_size");
  // The reference: pre-training text is always concatenated and cut; SFT samples are padded one per row,
  // or packed whole when `packing` is on.
  if (cfg.get_string("stage") == "pt")
    o.packing = data::PackingMethod::Concat;
  else
    o.packing = cfg.get_bool("packing") ? data::parse_packing_method(cfg.get_string("packing_method"))
                                        : data::PackingMethod::None;
  o.drop_long_documents = cfg.get_bool("drop_exceed_length_data");
  o.reset_at_document_starts = cfg.get_bool("neat_packing");
  if (cfg.get_string("mix_strategy") == "interleave_over") {
    o.source_weights = parse_probabilities(cfg, "interleave_probs");
    PRIMER_CHECK(int64_t(o.source_weights.size()) == sources,
                 "{}: interleave_probs has {} entries, the tokenized data has {} sources",
                 cfg.where("interleave_probs"), o.source_weights.size(), sources);
    o.length_weighted = cfg.get_bool("length_weighted_sampling");
  }
  return o;
}

std::unique_ptr<TrainData> make_train_data(const config::Config& cfg, int64_t batch, int64_t seq, DataShard shard,
                                           const data::Tokenizer* text_tokenizer) {
  if (cfg.has("tokenized_path")) return std::make_unique<TokenData>(cfg, batch, seq, shard);
  const std::vector<std::string> datasets = cfg.get_list("dataset");
  PRIMER_CHECK(
      datasets.size() == 1,
      "{}: dataset lists {} entries, but byte-level training reads one text file or directory (put the files in "
      "one directory, or tokenize them into shards with `primer tokenize` and set tokenized_path)",
      cfg.where("dataset"), datasets.size());
  return std::make_unique<ByteData>(datasets.at(0), cfg.get_float("val_size"), uint64_t(cfg.get_int("seed")), batch,
                                    seq, shard, text_tokenizer);
}

}  // namespace primer::recipes
