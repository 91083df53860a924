"""What the PyTorch peers of primer's benchmarks (train_step_peer.py, fsdp2_peer.py) share: the median time of a
training step over CUDA events, with the peak memory counted over the timed steps, and primer's FLOP count per token
for a Qwen3-shaped model (6 x dense parameters incl. the LM head + causal attention), so that their MFU is primer's."""
import torch

H100_BF16_PEAK = 989e12  # dense, as primer's cuda::peak_bf16_flops() for an H100


def median_step_ms(step, steps):
    """After the warm-up: resets the peak memory statistics, runs step() `steps` times and returns the median
    milliseconds (CUDA events around each step)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def flops_per_token(cfg, seq):
    """Forward + backward FLOPs per token of a Qwen3Config at sequence length `seq`, counted as primer counts them."""
    d, f, v, layers = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_hidden_layers
    q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    forward = 2 * d * v + layers * (2 * 3 * d * f + 2 * d * (2 * q + 2 * kv) + 4 * q * seq / 2)
    return 3 * forward
