"""The peer of bench_fsdp: a training step of transformers' Qwen3ForCausalLM sharded by PyTorch FSDP2
(torch.distributed.fsdp.fully_shard) over one GPU per rank, on the shapes bench_fsdp takes, set up as primer trains:
fp32 sharded parameters (the masters) with bf16 compute (MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)),
every decoder layer its own FSDP unit, activation checkpointing per layer (non-reentrant), SDPA attention, AdamW
(fused where it runs on DTensors), random init on the GPU (no download). ZeRO-3 is reshard_after_forward=True;
"ZeRO-2" is FSDP2's nearest, reshard_after_forward=False (gathered weights kept from forward to backward,
gradients and optimizer states sharded). Prints the rows of bench_fsdp's table: step ms (largest rank), tokens/s
per GPU, MFU (primer's FLOP count: 6 x dense parameters incl. the LM head + causal attention) and peak memory
(torch.cuda.max_memory_allocated, largest rank).
    python3 -m torch.distributed.run --standalone --nproc_per_node N tools/bench/fsdp2_peer.py \
        [--shape 0.6b|1.7b|4b|8b] [--modes 2,3] [--batch 4] [--seq 4096] [--steps 6]"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from transformers import Qwen3Config, Qwen3ForCausalLM

from torch_timing import H100_BF16_PEAK, flops_per_token, median_step_ms

# name: hidden, q heads, kv heads, FFN, layers, tied embeddings (the released Qwen3 config.json files)
SHAPES = {"0.6b": (1024, 16, 8, 3072, 28, True), "1.7b": (2048, 16, 8, 6144, 28, True),
          "4b": (2560, 32, 8, 9728, 36, True), "8b": (4096, 32, 8, 12288, 36, False)}


def config_of(shape, seq):
    d, hq, hkv, f, layers, tied = SHAPES[shape]
    return Qwen3Config(vocab_size=151936, hidden_size=d, intermediate_size=f, num_hidden_layers=layers,
                       num_attention_heads=hq, num_key_value_heads=hkv, head_dim=128, tie_word_embeddings=tied,
                       rope_theta=1e6, max_position_embeddings=max(40960, seq), use_cache=False,
                       attn_implementation="sdpa")


def progress(message, started=time.time()):
    """A timestamped line on stderr from rank 0, so a slow phase shows where it is."""
    if dist.is_initialized() and dist.get_rank() == 0:
        print(f"[fsdp2_peer {time.time() - started:7.1f} s] {message}", file=sys.stderr, flush=True)


def build(cfg, zero_stage):
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(cfg)  # fp32, every rank the same weights; fully_shard keeps each rank's shard
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    reshard = zero_stage == 3
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=policy, reshard_after_forward=reshard)
    fully_shard(model, mp_policy=policy, reshard_after_forward=reshard)
    torch.cuda.empty_cache()
    progress(f"built and sharded the model (ZeRO-{zero_stage})")
    return model


def max_over_ranks(value):
    t = torch.tensor([float(value)], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def measure(args, zero_stage, world):
    cfg = config_of(args.shape, args.seq)
    model = build(cfg, zero_stage)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    gen = torch.Generator(device="cuda").manual_seed(7 + dist.get_rank())
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device="cuda", generator=gen)

    def step():
        opt.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()

    try:
        step()
    except RuntimeError as e:  # a torch whose fused AdamW does not take DTensors
        if "fused" not in str(e).lower():
            raise
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        step()
    step()
    torch.cuda.synchronize()
    progress("two warm-up steps done")
    ms = max_over_ranks(median_step_ms(step, args.steps))
    peak = max_over_ranks(torch.cuda.max_memory_allocated())
    tok_s = args.batch * args.seq / (ms / 1e3)
    mfu = tok_s * flops_per_token(cfg, args.seq) / H100_BF16_PEAK
    del opt, model
    torch.cuda.empty_cache()
    label = "PyTorch FSDP2 " + ("ZeRO-3 (reshard_after_forward)" if zero_stage == 3 else "ZeRO-2 (no reshard after forward)")
    return (f"| {label} | Qwen3-{args.shape} | {world} (nccl) | {args.batch}x{args.seq} | {ms:.1f} | "
            f"{tok_s / 1e3:.1f}K | {100 * mfu:.1f}% | {peak / 1e9:.2f} GB |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="0.6b", choices=sorted(SHAPES))
    parser.add_argument("--modes", default="2,3", help="ZeRO stages: 2, 3")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                       ("MASTER_PORT", "29517")):
        os.environ.setdefault(key, value)  # run without a launcher: one rank
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    world = dist.get_world_size()
    rows = []
    for mode in args.modes.split(","):
        if dist.get_rank() == 0:
            print(f"measuring PyTorch FSDP2 ZeRO-{mode} on {world} rank(s) ...", flush=True)
        rows.append(measure(args, int(mode), world))
    if dist.get_rank() == 0:
        print(f"# fsdp2_peer — torch {torch.__version__}, {torch.cuda.get_device_name()}, Qwen3-{args.shape}")
        print("| run | model | GPUs | B x T per data rank | step ms | tokens/s per GPU | MFU | peak memory (max rank) |")
        print("|---|---|---|---|---|---|---|---|")
        print("\n".join(rows), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
