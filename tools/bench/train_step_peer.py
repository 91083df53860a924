"""The peer of bench_train_step: one training step of a Qwen3-0.6B-shaped model with PyTorch + transformers
(bf16 parameters, SDPA attention, fused AdamW), B=4, T=4096, random init (no download). Prints tokens/s, MFU
(same FLOP count as primer: 6 x dense parameters incl. the LM head + causal attention) and peak memory.
    python3 tools/bench/train_step_peer.py"""
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from torch_timing import H100_BF16_PEAK, flops_per_token, median_step_ms

B, T = 4, 4096
cfg = Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
                  max_position_embeddings=40960, attn_implementation="sdpa")
torch.manual_seed(0)
model = Qwen3ForCausalLM(cfg).to("cuda", torch.bfloat16).train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
ids = torch.randint(0, cfg.vocab_size, (B, T), device="cuda")


def step():
    opt.zero_grad(set_to_none=True)
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()


for _ in range(2):
    step()
ms = median_step_ms(step, 8)
tok_s = B * T / (ms / 1e3)
mfu = tok_s * flops_per_token(cfg, T) / H100_BF16_PEAK
print(f"# train_step_peer — torch {torch.__version__}, {torch.cuda.get_device_name()}")
print("| run | B x T | step ms | tokens/s | MFU | peak memory |")
print("|---|---|---|---|---|---|")
print(f"| PyTorch + transformers (SDPA, fused AdamW, bf16 params) | {B}x{T} | {ms:.1f} | {tok_s / 1e3:.1f}K | "
      f"{100 * mfu:.1f}% | {torch.cuda.max_memory_allocated() / 1e9:.1f} GB |")
