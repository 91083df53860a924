#!/usr/bin/env python3
"""Tiny random Qwen3 and Llama checkpoints with reference outputs, for primer's parity tests against
Hugging Face transformers. CPU and fp32 only; needs torch, transformers (5.x, 4.x also works) and
safetensors; no network.

    python3 tools/hf/make_tiny_models.py OUT_DIR [--seed 0]

writes
    OUT_DIR/qwen3-tiny/           config.json, model.safetensors (tied embeddings: no lm_head.weight)
    OUT_DIR/llama-tiny/           config.json, model.safetensors (untied, llama3 RoPE scaling)
    OUT_DIR/llama-tiny-sharded/   the same Llama weights as model-0000k-of-0000n.safetensors + index
and in each, reference.safetensors with
    input_ids I64 [2, 17]   fixed token ids (the same in every model)
    logits    F32 [2, 17, 512]
    loss      F32 []        mean next-token cross-entropy over the 2 x 16 predicted positions
"""
import argparse
import pathlib

import torch
import transformers
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

# head_dim 64: the smallest head size primer's CUDA attention kernels take, so the GPU path is checked too.
SHAPE = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=3,
             num_attention_heads=4, num_key_value_heads=2, head_dim=64, rms_norm_eps=1e-6,
             bos_token_id=1, eos_token_id=2, attention_bias=False)


def rope(theta, rope_type="default", **scaling):
    """RoPE settings in the spelling of the installed transformers (5: rope_parameters; 4: rope_theta/rope_scaling)."""
    params = dict(rope_type=rope_type, rope_theta=theta, **scaling)
    if int(transformers.__version__.split(".")[0]) >= 5:
        return dict(rope_parameters=params)
    return dict(rope_theta=theta, rope_scaling=None if rope_type == "default" else params)


def build(model_class, config, seed):
    torch.manual_seed(seed)
    model = model_class(config).to(torch.float32).eval()
    with torch.no_grad():  # norms start at 1: perturb them so that a missed norm weight shows in the logits
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(1.0, 0.1)
    return model


def save(model, directory, input_ids, **save_kwargs):
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True, **save_kwargs)
    with torch.no_grad():
        out = model(input_ids=input_ids, labels=input_ids)  # transformers shifts the labels itself
    save_file({"input_ids": input_ids.contiguous(), "logits": out.logits.float().contiguous(),
               "loss": out.loss.float().reshape(())}, str(directory / "reference.safetensors"),
              metadata={"format": "pt"})
    print(f"{directory}: loss {out.loss.item():.6f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=pathlib.Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    generator = torch.Generator().manual_seed(1234)
    input_ids = torch.randint(3, SHAPE["vocab_size"], (2, 17), generator=generator, dtype=torch.int64)

    qwen3 = Qwen3Config(**SHAPE, **rope(1e6), max_position_embeddings=512, tie_word_embeddings=True,
                        attn_implementation="eager")
    save(build(Qwen3ForCausalLM, qwen3, args.seed), args.out_dir / "qwen3-tiny", input_ids)

    # original context 256 puts the 32 frequencies of head_dim 64 (theta 1e4) on both sides of the llama3
    # thresholds (wavelengths 64 and 256): some kept, some blended, the rest divided by the factor.
    llama = LlamaConfig(**SHAPE, **rope(1e4, "llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                       original_max_position_embeddings=256),
                        max_position_embeddings=2048, tie_word_embeddings=False, attn_implementation="eager")
    llama_model = build(LlamaForCausalLM, llama, args.seed + 1)
    save(llama_model, args.out_dir / "llama-tiny", input_ids)
    save(llama_model, args.out_dir / "llama-tiny-sharded", input_ids, max_shard_size="100KB")


if __name__ == "__main__":
    main()
