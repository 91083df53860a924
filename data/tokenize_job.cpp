#include "data/tokenize_job.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "core/check.h"
#include "core/eta.h"
#include "core/io/mapped_file.h"
#include "data/text_inputs.h"
#include "data/token_shards.h"
#include "data/tokenizer_encoder.h"
#include "data/unicode.h"

namespace primer::data {
namespace {

using config::Config;
using config::Schema;
using Clock = std::chrono::steady_clock;

double process_cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto secs = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  return secs(usage.ru_utime) + secs(usage.ru_stime);
}

Schema build_tokenize_schema() {
  Schema s;
  s.add_string("tokenizer", "Hugging Face tokenizer directory or tokenizer.json (e.g. data-cache/qwen3-tokenizer)")
      .required();
  s.add_string("output_dir", "Tokenized-data directory to write (replaced atomically if it holds tokenized data)")
      .required();
  s.add_map("sources", "Sources by name, in order (their ids); each a mapping of the source keys").required();
  s.add_int("shard_tokens", "Tokens per shard: a shard is closed once it holds at least this many")
      .at_least(1)
      .defaults(int64_t(1) << 24);
  s.add_int("workers", "Tokenizing threads; 0: one per hardware thread").at_least(0).defaults(0);
  s.add_int("chunk_bytes", "JSONL files are shared among workers in line-aligned pieces of about this many bytes")
      .at_least(1)
      .defaults(int64_t(4) << 20);
  s.add_enum("on_error", {"fail", "skip"},
             "A malformed record (bad JSON, missing or non-string field, bad messages, empty text): stop with its "
             "file:line, or report it and leave it out")
      .defaults("fail");
  s.add_int("max_error_reports", "Malformed records listed one by one under on_error: skip (all are counted)")
      .at_least(0)
      .defaults(20);
  return s;
}

Schema build_source_schema() {
  Schema s;
  s.add_string_list("files", "Files, directories (all regular files below, recursively) and glob patterns; path order")
      .required();
  s.add_enum("format", {"text", "jsonl", "chat"},
             "text: each file is one document; jsonl: one JSON object per line, text in text_field; chat: one JSON "
             "object per line, a conversation in messages_field, loss on assistant tokens only")
      .required();
  s.add_string("text_field", "jsonl: the field holding a document's text").defaults("text");
  s.add_string("messages_field", "chat: the field holding the list of {role, content} messages").defaults("messages");
  s.add_bool("append_eos",
             "text and jsonl: end each document with eos_token (the reference's pre-training format); "
             "chat conversations end as the chat format ends them")
      .defaults(true);
  s.add_string("eos_token",
               "The token append_eos adds; unset: the tokenizer's EOS (Qwen3's pre-training delimiter is "
               "<|endoftext|>, its EOS <|im_end|>)")
      .optional();
  s.add_check([](const Config& c) {
    PRIMER_CHECK(c.get_string("format") != "chat" || !c.has("eos_token"),
                 "{}: eos_token does not apply to chat sources (the chat format ends its turns)", c.where("eos_token"));
  });
  return s;
}

struct Source {
  std::string name, format, text_field, messages_field;
  bool append_eos = true;
  int32_t eos = 0;
  std::vector<std::string> files;
};

std::vector<Source> read_sources(const Config& job, const TextEncoder& encoder) {
  const std::string where = job.where("sources") + " sources";
  const json::Value doc = json::parse(job.get_map_json("sources"), where);
  std::vector<Source> sources;
  for (const auto& [name, value] : doc.as_object()) {
    const std::string at = fmt::format("{}.{}", where, name);
    PRIMER_CHECK(value.is_object(), "{}: expected a mapping of source keys (files, format, ...), got {}", at,
                 json::type_name(value.type()));
    const Config c = config::load_config_mapping(json::dump(value), tokenize_source_schema(), at);
    int32_t eos = encoder.identity().eos_id;
    if (c.has("eos_token")) {
      const auto id = encoder.token_id(c.get_string("eos_token"));
      PRIMER_CHECK(id, "{}: eos_token '{}' is not a token of the tokenizer", c.where("eos_token"),
                   c.get_string("eos_token"));
      eos = *id;
    }
    sources.push_back({name, c.get_string("format"), c.get_string("text_field"), c.get_string("messages_field"),
                       c.get_bool("append_eos"), eos, expand_inputs(c.get_list("files"), at)});
  }
  PRIMER_CHECK(!sources.empty(), "{}: no source given", where);
  return sources;
}

// One unit of work: a whole text file, or a line-aligned byte range of a JSONL file.
struct Task {
  int32_t source = 0;
  const std::string* path = nullptr;
  size_t begin = 0, end = 0;
  int64_t first_line = 1;
};

// What a task produced, consumed in task order.
struct Output {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;              // empty: all ones
  std::vector<int64_t> offsets{0};        // CSR over tokens, one entry per document
  std::vector<std::string> problems;      // "file:line: what is wrong", one per malformed record
  std::vector<std::string> invalid_utf8;  // "file[:line]: ...", one per document tokenized from ill-formed UTF-8
  std::exception_ptr failure;             // an error that is not about one record (e.g. an unreadable file)
};

class TaskRunner {
 public:
  TaskRunner(const std::vector<Source>& sources, const TextEncoder& encoder) : sources_(sources), encoder_(encoder) {}

  Output run(const Task& task) const {
    Output out;
    try {
      const io::MappedFile file(*task.path);
      const std::string_view text = file.text().substr(task.begin, task.end - task.begin);
      const Source& source = sources_[size_t(task.source)];
      if (source.format == "text")
        add_text(out, text, source, *task.path);
      else
        run_lines(out, text, source, task);
    } catch (...) {
      out.failure = std::current_exception();
    }
    return out;
  }

 private:
  void add_text(Output& out, std::string_view text, const Source& source, const std::string& where) const {
    if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
      out.problems.push_back(fmt::format("{}: empty text", where));
      return;
    }
    // Byte-level BPE takes any bytes, so text in another encoding (Latin-1, a binary file) would train silently.
    if (const size_t bad = unicode::first_invalid_utf8(text); bad != std::string_view::npos)
      out.invalid_utf8.push_back(fmt::format("{}: not valid UTF-8 (the first ill-formed byte at offset {}, 0x{:02x})",
                                             where, bad, static_cast<unsigned char>(text[bad])));
    std::vector<int32_t> ids = encoder_.encode(text);
    if (source.append_eos) ids.push_back(source.eos);
    out.tokens.insert(out.tokens.end(), ids.begin(), ids.end());
    out.offsets.push_back(int64_t(out.tokens.size()));
  }

  void run_lines(Output& out, std::string_view text, const Source& source, const Task& task) const {
    int64_t line = task.first_line;
    for (size_t at = 0; at < text.size(); ++line) {
      size_t end = text.find('\n', at);
      if (end == std::string_view::npos) end = text.size();
      std::string_view record = text.substr(at, end - at);
      at = end + 1;
      if (!record.empty() && record.back() == '\r') record.remove_suffix(1);
      if (record.find_first_not_of(" \t") == std::string_view::npos) continue;  // blank lines are not records
      const std::string where = fmt::format("{}:{}", *task.path, line);
      json::Value value;
      try {
        value = json::parse(record, *task.path, line);
      } catch (const Error& e) {  // the message names file:line:column
        out.problems.push_back(e.what());
        continue;
      }
      if (!value.is_object())
        out.problems.push_back(fmt::format("{}: expected a JSON object, got {}", where, json::type_name(value.type())));
      else if (source.format == "jsonl")
        add_field_text(out, value, source, where);
      else
        add_chat(out, value, source, where);
    }
  }

  void add_field_text(Output& out, const json::Value& record, const Source& source, const std::string& where) const {
    const json::Value* field = record.as_object().find(source.text_field);
    if (!field) return out.problems.push_back(fmt::format("{}: no \"{}\" field", where, source.text_field));
    if (!field->is_string())
      return out.problems.push_back(
          fmt::format("{}: \"{}\" is {}, expected a string", where, source.text_field, json::type_name(field->type())));
    add_text(out, field->as_string(), source, where);
  }

  void add_chat(Output& out, const json::Value& record, const Source& source, const std::string& where) const {
    const json::Value* messages = record.as_object().find(source.messages_field);
    if (!messages) return out.problems.push_back(fmt::format("{}: no \"{}\" field", where, source.messages_field));
    if (!messages->is_array() || messages->as_array().empty())
      return out.problems.push_back(fmt::format("{}: \"{}\" is {}, expected a non-empty list of messages", where,
                                                source.messages_field,
                                                messages->is_array() ? "empty" : json::type_name(messages->type())));
    std::vector<int32_t> ids;
    std::vector<uint8_t> mask;
    try {
      encoder_.encode_chat(*messages, ids, mask);
    } catch (const Error& e) {  // e.g. a message without a role
      return out.problems.push_back(fmt::format("{}: {}", where, e.what()));
    }
    PRIMER_CHECK(ids.size() == mask.size() && !ids.empty(), "{}: the chat format gave {} ids with {} mask values",
                 where, ids.size(), mask.size());
    out.tokens.insert(out.tokens.end(), ids.begin(), ids.end());
    out.mask.insert(out.mask.end(), mask.begin(), mask.end());
    out.offsets.push_back(int64_t(out.tokens.size()));
  }

  const std::vector<Source>& sources_;
  const TextEncoder& encoder_;
};

// Runs tasks on `workers` threads and hands their outputs to `consume` in task order. At most `window` tasks
// are ahead of the consumer, which bounds memory. An exception from `consume` stops the workers and propagates.
template <class Consume>
void run_ordered(const std::vector<Task>& tasks, const TaskRunner& runner, int workers, Consume consume) {
  const size_t window = size_t(4 * workers);
  std::mutex mutex;
  std::condition_variable work_ready, output_ready;
  std::vector<std::optional<Output>> outputs(tasks.size());
  size_t next = 0, consumed = 0;
  bool stop = false;
  auto work = [&] {
    for (;;) {
      size_t i;
      {
        std::unique_lock lock(mutex);
        work_ready.wait(lock, [&] { return stop || next >= tasks.size() || next < consumed + window; });
        if (stop || next >= tasks.size()) return;
        i = next++;
      }
      Output out = runner.run(tasks[i]);
      std::lock_guard lock(mutex);
      outputs[i] = std::move(out);
      output_ready.notify_all();
    }
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) threads.emplace_back(work);
  auto shutdown = [&] {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    work_ready.notify_all();
    for (auto& t : threads) t.join();
  };
  try {
    for (size_t i = 0; i < tasks.size(); ++i) {
      Output out;
      {
        std::unique_lock lock(mutex);
        output_ready.wait(lock, [&] { return outputs[i].has_value(); });
        out = std::move(*outputs[i]);
        outputs[i].reset();
        consumed = i + 1;
      }
      work_ready.notify_all();
      consume(tasks[i], out);
    }
  } catch (...) {
    shutdown();
    throw;
  }
  shutdown();
}

// A progress line on a terminal (redrawn in place) or, in a log, a line every 10 seconds.
class Progress {
 public:
  Progress(std::FILE* out, int64_t total_bytes)
      : out_(out), total_(total_bytes), tty_(out && ::isatty(::fileno(out))), start_(Clock::now()), last_(start_) {}

  void update(int64_t bytes, int64_t documents, int64_t tokens, bool final = false) {
    if (!out_) return;
    const auto now = Clock::now();
    const double since = std::chrono::duration<double>(now - last_).count();
    if (!final && since < (tty_ ? 0.25 : 10.0)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double fraction = total_ > 0 ? double(bytes) / double(total_) : 1.0;
    const int filled = int(fraction * 30);
    const double rate = secs > 0 ? double(bytes) / secs : 0.0;
    // The rate so far, over the bytes left (the workers keep a steady pace after the first shard).
    const std::string timing = final ? "in " + format_duration(secs)
                                     : "ETA " + format_duration(rate > 0 ? double(total_ - bytes) / rate : NAN);
    fmt::print(out_, "{}tokenize [{}{}] {:3.0f}%  {:.1f}/{:.1f} MB  {} documents  {} tokens  {:.1f} MB/s  {}{}",
               tty_ ? "\r" : "", std::string(size_t(filled), '#'), std::string(size_t(30 - filled), '.'),
               100 * fraction, double(bytes) / 1e6, double(total_) / 1e6, documents, tokens, rate / 1e6, timing,
               tty_ && !final ? "   " : "\n");
    std::fflush(out_);
  }

 private:
  std::FILE* out_;
  int64_t total_;
  bool tty_;
  Clock::time_point start_, last_;
};

}  // namespace

const Schema& tokenize_schema() {
  static const Schema schema = build_tokenize_schema();
  return schema;
}

const Schema& tokenize_source_schema() {
  static const Schema schema = build_source_schema();
  return schema;
}

TokenizeSummary run_tokenize_job(const Config& job, const TextEncoder& encoder, std::FILE* progress_out) {
  const auto start = Clock::now();
  const double cpu_start = process_cpu_seconds();
  const std::vector<Source> sources = read_sources(job, encoder);
  TokenizeSummary summary;
  summary.workers = int(job.get_int("workers") > 0 ? job.get_int("workers")
                                                   : std::max<int64_t>(1, std::thread::hardware_concurrency()));

  // Tasks in input order: sources, their files, and each JSONL file's line-aligned chunks.
  std::vector<Task> tasks;
  std::vector<int64_t> task_bytes;
  std::vector<SourceInfo> infos;
  for (size_t s = 0; s < sources.size(); ++s) {
    infos.push_back({sources[s].name, sources[s].format, int64_t(sources[s].files.size())});
    for (const std::string& path : sources[s].files) {
      const io::MappedFile file(path);
      summary.files += 1;
      summary.input_bytes += int64_t(file.size());
      if (sources[s].format == "text") {
        tasks.push_back({int32_t(s), &path, 0, file.size(), 1});
        continue;
      }
      int64_t line = 1;
      for (const auto& [begin, end] : line_aligned_chunks(file.text(), size_t(job.get_int("chunk_bytes")))) {
        tasks.push_back({int32_t(s), &path, begin, end, line});
        line += std::count(file.text().begin() + int64_t(begin), file.text().begin() + int64_t(end), '\n');
      }
    }
  }

  const bool skip = job.get_string("on_error") == "skip";
  const int64_t max_reports = job.get_int("max_error_reports");
  TokenDatasetWriter writer(job.get_string("output_dir"), encoder.identity(), infos, job.get_int("shard_tokens"));
  Progress progress(progress_out, summary.input_bytes);
  int64_t done_bytes = 0;
  run_ordered(tasks, TaskRunner(sources, encoder), summary.workers, [&](const Task& task, const Output& out) {
    if (out.failure) std::rethrow_exception(out.failure);
    for (const std::string& problem : out.problems) {
      PRIMER_CHECK(skip, "{} (on_error is fail; set on_error: skip to leave malformed records out)", problem);
      if (progress_out && summary.skipped < max_reports) fmt::print(progress_out, "skipped {}\n", problem);
      ++summary.skipped;
    }
    writer.count_skipped(task.source, int64_t(out.problems.size()));
    for (const std::string& problem : out.invalid_utf8) {
      if (progress_out && summary.invalid_utf8 < max_reports)
        fmt::print(progress_out, "warning: {}; tokenized byte for byte\n", problem);
      ++summary.invalid_utf8;
    }
    for (size_t d = 0; d + 1 < out.offsets.size(); ++d) {
      const size_t begin = size_t(out.offsets[d]), length = size_t(out.offsets[d + 1]) - begin;
      const std::span<const uint8_t> mask =
          out.mask.empty() ? std::span<const uint8_t>() : std::span<const uint8_t>(out.mask).subspan(begin, length);
      const auto write_start = Clock::now();  // add() commits a shard when it is full
      writer.add(std::span<const int32_t>(out.tokens).subspan(begin, length), mask, task.source);
      summary.write_seconds += std::chrono::duration<double>(Clock::now() - write_start).count();
      summary.documents += 1;
      summary.tokens += int64_t(length);
    }
    done_bytes += int64_t(task.end - task.begin);
    progress.update(done_bytes, summary.documents, summary.tokens);
  });
  if (progress_out && summary.skipped > max_reports)
    fmt::print(progress_out, "... and {} more malformed records skipped\n", summary.skipped - max_reports);
  if (progress_out && summary.invalid_utf8 > max_reports)
    fmt::print(progress_out, "... and {} more documents not valid UTF-8\n", summary.invalid_utf8 - max_reports);
  const auto finish_start = Clock::now();
  const TokenManifest manifest = writer.finish();
  summary.write_seconds += std::chrono::duration<double>(Clock::now() - finish_start).count();
  progress.update(done_bytes, summary.documents, summary.tokens, true);
  summary.shards = int64_t(manifest.shards.size());
  for (const ShardInfo& s : manifest.shards) summary.output_bytes += int64_t(s.bytes);
  summary.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  summary.cpu_seconds = process_cpu_seconds() - cpu_start;
  return summary;
}

int run_tokenize(const std::string& job_path, const std::vector<std::string>& overrides) {
  const Config job = config::load_config(job_path, tokenize_schema(), overrides);
  const auto load_start = Clock::now();
  const TokenizerEncoder encoder(job.get_string("tokenizer"));
  const TokenizerIdentity tok = encoder.identity();
  fmt::print("tokenizer {}: vocabulary {}, EOS id {}, CRC32C {:08x} (loaded in {:.1f} s)\n", tok.name, tok.vocab_size,
             tok.eos_id, tok.crc32c, std::chrono::duration<double>(Clock::now() - load_start).count());
  std::fflush(stdout);  // before the progress line on stderr
  const TokenizeSummary s = run_tokenize_job(job, encoder, stderr);
  const double mb = double(s.input_bytes) / 1e6;
  fmt::print(
      "tokenized {} documents, {} tokens from {} files ({:.1f} MB) in {:.2f} s ({:.2f} s writing shards): "
      "{:.2f} MB/s with {} workers, {:.2f} MB per CPU-second; skipped {} malformed records; {} documents "
      "not valid UTF-8\n",
      s.documents, s.tokens, s.files, mb, s.seconds, s.write_seconds, mb / s.seconds, s.workers, mb / s.cpu_seconds,
      s.skipped, s.invalid_utf8);
  const TokenManifest m = TokenManifest::read(job.get_string("output_dir"));
  for (const SourceInfo& src : m.sources)
    fmt::print("  source {} ({}): {} files, {} documents, {} tokens, {} skipped\n", src.name, src.format, src.files,
               src.documents, src.tokens, src.skipped);
  fmt::print("wrote {} shard{} ({:.1f} MB) and {} to {}\n", s.shards, s.shards == 1 ? "" : "s",
             double(s.output_bytes) / 1e6, kTokenManifestName, job.get_string("output_dir"));
  return 0;
}

}  // namespace primer::data
