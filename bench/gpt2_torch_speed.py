#!/usr/bin/env python3
"""GPT-2 training speed in PyTorch itself, eager or torch.compile: the anchor
crowdtrain-train's speed is read against (issue 41 item 5), on the same card.

The model is crowdtrain's (engine/gpt.cpp; nanoGPT's with biases): learned
token and position embeddings, pre-LayerNorm blocks, causal attention through
F.scaled_dot_product_attention, tanh GELU, the head tied to the token
embedding. The step is crowdtrain-train's: bf16 autocast on CUDA, fp32 weights,
gradient clipping at 1.0, AdamW (fused=True on CUDA, weight decay on 2-D
weights only), one micro-batch a step.

  gpt2_torch_speed.py --mode eager|compile [--device cuda] [--batch 32]
                      [--block 1024] [--steps 30] [--warmup 5] [--tiny]

Prints one JSON line: tokens/s over the timed steps (after the warm-up
steps, which pay for the first launches and, compiled, for the compilation),
the median step, the compile seconds, the peak allocated memory.
--tiny: a 2-layer 64-wide model on 2 x 32 tokens (checks the script on a CPU).
"""

import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.attn_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch 1.x (a CPU dry run): the same math unfused
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            att = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(mask, float("-inf"))
            y = att.softmax(-1) @ v
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(b, t, d))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, layers, heads, d, block, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.h = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["eager", "compile"], required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--block", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--tiny", action="store_true")
    a = ap.parse_args()
    layers, heads, d, vocab = (2, 2, 64, 128) if a.tiny else (12, 12, 768, 50304)
    if a.tiny:
        a.batch, a.block = 2, 32
    if a.mode == "compile" and not hasattr(torch, "compile"):
        print(json.dumps({"mode": a.mode, "torch": torch.__version__, "skipped": "torch.compile needs torch 2"}))
        return
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    torch.manual_seed(1337)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    model = Gpt(layers, heads, d, a.block, vocab).to(device)
    parameters = sum(p.numel() for p in model.parameters())
    decayed = [p for p in model.parameters() if p.dim() >= 2]
    plain = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.1}, {"params": plain, "weight_decay": 0.0}],
                                  lr=6e-4, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if cuda else {}))
    loss_of = torch.compile(model) if a.mode == "compile" else model
    x = torch.randint(0, vocab, (a.batch, a.block), device=device)
    y = torch.randint(0, vocab, (a.batch, a.block), device=device)

    def step():
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=cuda):
            loss = loss_of(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    def sync():
        if cuda:
            torch.cuda.synchronize()

    start = time.perf_counter()
    for _ in range(a.warmup):
        loss = step()
    sync()
    warmup_seconds = time.perf_counter() - start
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        sync()
        times.append(time.perf_counter() - t0)
    tokens = a.batch * a.block
    print(json.dumps({
        "mode": a.mode, "torch": torch.__version__, "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "parameters": parameters, "batch": a.batch, "block": a.block, "steps": a.steps,
        "tokens_per_second": tokens * a.steps / sum(times), "median_step_ms": statistics.median(times) * 1e3,
        "warmup_seconds": warmup_seconds, "final_loss": float(loss),
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(device) if cuda else 0}), flush=True)


if __name__ == "__main__":
    main()
