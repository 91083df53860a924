#include "tools/bench/common/bench_args.h"

#include <cstdlib>
#include <fmt/format.h>

namespace primer::bench {

std::string LayerShape::core() const { return fmt::format("B={} T={} H={} K=V={}", batch, seq, heads, head_dim); }

std::string LayerShape::layer() const {
  return fmt::format("B={} T={} d={} Hq={} Hk={} D={}", batch, seq, hidden, heads, kv_heads, head_dim);
}

ModelConfig LayerShape::layer_config() const {
  ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 1024;
  c.hidden_size = hidden;
  c.intermediate_size = 3 * hidden;
  c.num_hidden_layers = 1;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = head_dim;
  c.max_position_embeddings = seq;
  return c;
}

void add_layer_shape(CLI::App& app, LayerShape& shape) {
  app.add_option("--batch", shape.batch, "sequences")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--seq", shape.seq, "tokens per sequence")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--heads", shape.heads, "heads of the core (the layer's query heads)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--head-dim", shape.head_dim, "key and value head dimension")
      ->capture_default_str()
      ->check(CLI::IsMember({64, 128}));
  app.add_option("--hidden", shape.hidden, "the layer's hidden size")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--kv-heads", shape.kv_heads, "the layer's key/value heads")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}

void parse_or_exit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
}

}  // namespace primer::bench
