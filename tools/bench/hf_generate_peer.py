"""The peer of bench_generate: Hugging Face transformers' greedy `generate` (Qwen3ForCausalLM, bf16, SDPA, its
default dynamic key/value cache) on the weights bench_generate exported with --weights-out, at the same batch,
context and number of new tokens (min_new_tokens = max_new_tokens: no early stop). Prefill is the median time of a
generate of one new token; decode is the median time per step of a longer generate, each step's end taken (after a
CUDA synchronisation) where generate asks its stopping criteria, the first two steps left out as warm-up, as
bench_generate leaves out two. Prints the same Markdown table row as bench_generate; a configuration whose cache and
weights exceed --memory-gib prints the estimate instead.
    python3 tools/bench/hf_generate_peer.py --model DIR [--batch B] [--context T] [--new-tokens N]"""
import argparse
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="a Hugging Face directory (bench_generate --weights-out)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--context", type=int, default=1024, help="prompt tokens per row")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--memory-gib", type=float, default=79, help="the GPU memory a configuration may use")
    p.add_argument("--label", default="transformers Qwen3 (sdpa)", help="the table's model cell")
    a = p.parse_args(argv)
    if a.batch < 1 or a.context < 1 or a.new_tokens < 4:
        p.error("expected --batch >= 1, --context >= 1 and --new-tokens >= 4 (two warm-up steps, one timed)")
    return a


def row(a, cells):
    print("| model | batch | context | prefill ms | decode ms/token | tokens/s | peak memory |")
    print("|---|---|---|---|---|---|---|")
    print("| " + " | ".join([a.label, str(a.batch), str(a.context)] + cells) + " |")


def main(a):
    import torch
    from transformers import AutoConfig, Qwen3ForCausalLM, StoppingCriteria, StoppingCriteriaList

    from torch_timing import median_step_ms

    gib = float(1 << 30)
    cfg = AutoConfig.from_pretrained(a.model)
    # The dynamic cache holds every layer's keys and values of all tokens; the weights are bf16.
    kv = cfg.num_hidden_layers * a.batch * (a.context + a.new_tokens) * 2 * cfg.num_key_value_heads * cfg.head_dim * 2
    weights = 2 * (cfg.vocab_size * cfg.hidden_size * (1 if cfg.tie_word_embeddings else 2) + cfg.num_hidden_layers *
                   (3 * cfg.hidden_size * cfg.intermediate_size + 2 * cfg.hidden_size * cfg.head_dim *
                    (cfg.num_attention_heads + cfg.num_key_value_heads)))
    print(f"# hf_generate_peer — {a.label}, bf16, torch {torch.__version__}, {torch.cuda.get_device_name()}, "
          f"{a.new_tokens} new tokens")
    if kv + weights > a.memory_gib * gib:
        row(a, ["-", "-", "-", f"does not fit: {(kv + weights) / gib:.0f} GiB > {a.memory_gib:.0f} GiB "
                               f"(KV cache {kv / gib:.0f} GiB, weights {weights / gib:.1f})"])
        return 0
    model = Qwen3ForCausalLM.from_pretrained(a.model, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    model = model.to("cuda").eval()
    torch.manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (a.batch, a.context), device="cuda")
    mask = torch.ones_like(ids)

    class StepClock(StoppingCriteria):
        """Records the end of every step (generate asks after each new token); never stops."""

        def __init__(self):
            self.ends = []

        def __call__(self, input_ids, scores, **kwargs):
            torch.cuda.synchronize()
            self.ends.append(time.perf_counter())
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def generate(n, clock=None):
        with torch.no_grad():
            return model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=n,
                                  min_new_tokens=n, pad_token_id=0,
                                  stopping_criteria=StoppingCriteriaList([clock] if clock else []))

    try:
        generate(4)  # warm-up
        prefill_ms = median_step_ms(lambda: generate(1), 3)
        clock = StepClock()
        out = generate(a.new_tokens, clock)
        assert out.shape[1] == a.context + a.new_tokens, out.shape
        steps = sorted(1e3 * (b - e) for e, b in zip(clock.ends[2:], clock.ends[3:]))
        decode_ms = steps[len(steps) // 2]
    except torch.cuda.OutOfMemoryError as e:
        row(a, ["-", "-", "-", f"out of memory: {str(e).splitlines()[0]}"])
        return 1
    row(a, [f"{prefill_ms:.1f}", f"{decode_ms:.2f}", f"{a.batch / (decode_ms * 1e-3):.0f}",
            f"{torch.cuda.max_memory_allocated() / gib:.1f} GiB"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(parse_args()))
