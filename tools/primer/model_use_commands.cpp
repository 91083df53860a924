#include "tools/primer/model_use_commands.h"

#include "tools/primer/option_checks.h"

namespace primer::tools {

ModelUseCommands::ModelUseCommands(CLI::App& app) {
  recipes::GenerateOptions& g = generation_;
  generate_ = app.add_subcommand("generate", "continue prompts with a trained model (docs/using.md)");
  generate_->add_option("model", g.model, "run directory, training checkpoint or Hugging Face model directory")
      ->required();
  generate_->add_option("--prompt", g.prompts, "a prompt (repeatable)");
  generate_->add_option("--prompts-file", g.prompts_file, "a file of prompts, one per line");
  generate_->add_flag("--chat", g.chat, "wrap each prompt as a user message in Qwen3's chat format");
  generate_->add_option("--max-new-tokens", g.limits.max_new_tokens, "tokens to generate at most per prompt")
      ->check(positive_number());
  generate_->add_option("--stop", g.limits.stop, "end a completion before this text (repeatable)");
  generate_->add_option("--temperature", g.sampling.temperature, "sampling temperature; 0: greedy");
  generate_->add_option("--top-k", g.sampling.top_k, "sample from the k most likely tokens; 0: all");
  generate_->add_option("--top-p", g.sampling.top_p, "sample from the smallest set of tokens this likely");
  generate_->add_option("--seed", g.sampling.seed, "the sampling seed");
  generate_->add_option("--batch-size", g.batch_size, "prompts decoded together (any lengths)")
      ->check(positive_number());
  generate_->add_option("--tokenizer", g.tokenizer, "tokenizer.json (or its directory) instead of the model's");
  generate_->add_option("--device", g.device, "cpu, cuda or auto")->check(CLI::IsMember({"auto", "cpu", "cuda"}));

  recipes::EvalOptions& e = evaluation_;
  eval_ = app.add_subcommand("eval", "held-out loss and perplexity of a trained model (docs/using.md)");
  eval_->add_option("model", e.model, "run directory, training checkpoint or Hugging Face model directory")->required();
  eval_->add_option(
      "--data", e.data,
      "text file or directory (bytes as tokens) or tokenized data; default: a checkpoint's recipe's data");
  eval_->add_option("--val-size", e.val_size, "held-out fraction of the data (default: the recipe's)")
      ->check(number_in(0, 1));
  eval_->add_option("--cutoff-len", e.cutoff_len, "tokens per row (default: the recipe's)")->check(positive_number());
  eval_->add_option("--batch-size", e.batch_size, "rows per batch (default: the recipe's)")->check(positive_number());
  eval_
      ->add_option("--max-batches", e.max_batches,
                   "held-out batches at most (default: the recipe's eval_batches; "
                   "with --data, all)")
      ->check(positive_number());
  eval_->add_option("--device", e.device, "cpu, cuda or auto")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  eval_->add_flag("--json", eval_json_, "print the result as JSON");
}

int ModelUseCommands::run() const {
  if (generate_->parsed()) return recipes::run_generate(generation_);
  return recipes::run_eval(evaluation_, eval_json_);
}

}  // namespace primer::tools
