"""PyTorch (Python, eager) reference for bench/nanogpt_shakespeare.sh.

The same GPT-2 model, data, batch, optimizer and schedule as
`crowdtrain-train` in nanoGPT's shakespeare_char CPU run, written the way
nanoGPT writes it, so both are measured on the same machine in the same run.
Run with any python3 that has torch (bench/nanogpt_shakespeare.sh: PyPI's torch, in a
venv). Prints one JSON line.
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, d, n_head, bias, gelu):
        super().__init__()
        self.n_head = n_head
        self.gelu = gelu
        self.ln_1 = nn.LayerNorm(d, elementwise_affine=True)
        self.c_attn = nn.Linear(d, 3 * d, bias=bias)
        self.c_proj = nn.Linear(d, d, bias=bias)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d, bias=bias)
        self.mlp_proj = nn.Linear(4 * d, d, bias=bias)
        if not bias:  # nanoGPT's bias=False LayerNorm: a weight, no bias
            for ln in (self.ln_1, self.ln_2):
                ln.bias = None

    def attn(self, x):
        b, t, d = x.size()
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (y.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for y in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = F.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
        return self.c_proj(y)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate=self.gelu))


class GPT(nn.Module):
    def __init__(self, vocab, block, n_layer, n_head, d, bias=True, gelu="tanh"):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.h = nn.ModuleList([Block(d, n_head, bias, gelu) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d)
        if not bias:
            self.ln_f.bias = None
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        t = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def char_data(path):
    """The text's characters (sorted) and its token ids split 90/10 into train and validation."""
    text = open(path, encoding="utf-8").read()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n = int(0.9 * len(data))
    return chars, data[:n], data[n:]


def get_lr(it, a):
    if it < a.warmup_iters:
        return a.learning_rate * (it + 1) / (a.warmup_iters + 1)
    if it > a.lr_decay_iters:
        return a.min_lr
    ratio = (it - a.warmup_iters) / (a.lr_decay_iters - a.warmup_iters)
    return a.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.learning_rate - a.min_lr)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--text", required=True)
    for name, default in [("n_layer", 4), ("n_head", 4), ("n_embd", 128), ("block_size", 64), ("batch_size", 12),
                          ("max_iters", 2000), ("warmup_iters", 100), ("lr_decay_iters", 2000), ("eval_iters", 200),
                          ("threads", 0), ("seed", 1337), ("bias", 1), ("decay_embeddings", 1)]:
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=int, default=default)
    for name, default in [("learning_rate", 1e-3), ("min_lr", 1e-4), ("beta1", 0.9), ("beta2", 0.99),
                          ("weight_decay", 0.1), ("grad_clip", 1.0)]:
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=float, default=default)
    # nanoGPT's MLP uses nn.GELU(), the exact erf form; GPT-2 (and crowdtrain) use tanh.
    p.add_argument("--sampling", choices=["random", "tiles"], default="random",
                   help="training windows: random starts (nanoGPT) or shuffled non-overlapping tiles")
    p.add_argument("--gelu", choices=["tanh", "none"], default="tanh",
                   help="'none' is the exact erf GELU (PyTorch's name for it)")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    chars, train, val = char_data(a.text)

    # nanoGPT draws each window's start at random ("random"); "tiles" cuts the
    # training text into non-overlapping windows at a random offset and takes
    # them in a shuffled order, each once per epoch.
    tiles = []

    def train_starts():
        if a.sampling == "random":
            return torch.randint(len(train) - a.block_size, (a.batch_size,))
        while len(tiles) < a.batch_size:
            offset = int(torch.randint(a.block_size, (1,)))
            starts = torch.arange(offset, len(train) - a.block_size, a.block_size)
            tiles.extend(starts[torch.randperm(len(starts))].tolist())
        taken = tiles[:a.batch_size]
        del tiles[:a.batch_size]
        return taken

    def batch(split):
        d = train if split == "train" else val
        ix = train_starts() if split == "train" else torch.randint(len(d) - a.block_size, (a.batch_size,))
        x = torch.stack([d[i:i + a.block_size] for i in ix])
        y = torch.stack([d[i + 1:i + 1 + a.block_size] for i in ix])
        return x, y

    model = GPT(len(chars), a.block_size, a.n_layer, a.n_head, a.n_embd, bool(a.bias), a.gelu)
    # Every 2-D weight decays (today's nanoGPT), or only the matmul weights
    # (minGPT's rule, and nanoGPT's until February 2023: embeddings do not).
    embeddings = {id(model.wte.weight), id(model.wpe.weight)}
    decays = lambda p: p.dim() >= 2 and (a.decay_embeddings or id(p) not in embeddings)
    decay = [p for p in model.parameters() if decays(p)]
    no_decay = [p for p in model.parameters() if not decays(p)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.learning_rate, betas=(a.beta1, a.beta2))

    train_seconds = 0.0
    for it in range(a.max_iters):
        start = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = get_lr(it, a)
        x, y = batch("train")
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        loss.item()
        train_seconds += time.perf_counter() - start

    model.eval()
    with torch.no_grad():
        val_losses = [model(*batch("val")).item() for _ in range(a.eval_iters)]
    val_loss = sum(val_losses) / len(val_losses)
    # nanoGPT's published CPU run estimates with eval_iters=20: the first 20 of the same batches.
    val_loss_20 = sum(val_losses[:20]) / len(val_losses[:20])
    tokens = a.max_iters * a.batch_size * a.block_size
    print(json.dumps({"final_val_loss": val_loss, "val_loss_first_20_batches": val_loss_20,
                      "tokens_per_second": tokens / train_seconds,
                      "steps": a.max_iters, "train_seconds": train_seconds, "torch": torch.__version__,
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
