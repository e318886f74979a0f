"""An in-process model of a DiLoCo swarm's codecs, for choosing settings.

Not the product: the product's numbers come from bench/diloco_swarm.sh (real
coordinator, real volunteers over ZeroMQ). This file replays the same
algorithm in one process, in lock step, with the same model, data, inner
optimizer and schedule, so that codec settings (k, decay, outer rate, the
coordinator's re-sparsification) can be compared in minutes before the real
swarm confirms the chosen ones, and so that a model too big for this
machine's swarm can be compared on a GPU (--device cuda). Run with Debian's
/usr/bin/python3 (torch 1.13), or any later PyTorch:

    /usr/bin/python3 bench/codec_sim.py --text ../shared/data/tinyshakespeare.txt \
        --codec sparse --k 256 --down-k 256 --outer-lr 1 --outer-momentum 0.9

Prints one JSON line: validation loss by round, payload bytes per round.
"""
import argparse
import json
import math
import sys
import time

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from train_reference import GPT, char_data  # noqa: E402


def lr_at(a, own_step, global_step):
    total = a.rounds * a.H
    ratio = min(1.0, global_step / total)
    scheduled = a.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.lr - a.min_lr)
    if own_step < a.warmup:
        return min(scheduled, a.lr * (own_step + 1) / (a.warmup + 1))
    return scheduled


def tensor_chunks(sizes, chunk):
    """(start, length) of every chunk, chunks never straddle tensors."""
    out, offset = [], 0
    for n in sizes:
        for s in range(0, n, chunk):
            out.append((offset + s, min(chunk, n - s)))
        offset += n
    return out


def topk_mask(e, sizes, chunk, k):
    """A boolean mask of the k largest |e| of each chunk (k scaled for a short chunk)."""
    mask = torch.zeros_like(e, dtype=torch.bool)
    offset = 0
    for n in sizes:
        full = n // chunk
        if full:
            block = e[offset:offset + full * chunk].view(full, chunk).abs()
            idx = block.topk(k, dim=1).indices
            m = torch.zeros_like(block, dtype=torch.bool)
            m.scatter_(1, idx, True)
            mask[offset:offset + full * chunk] = m.view(-1)
        rest = n - full * chunk
        if rest:
            kk = (k * rest + chunk - 1) // chunk
            tail = e[offset + full * chunk:offset + n].abs()
            idx = tail.topk(kk).indices
            mask[offset + full * chunk + idx] = True
        offset += n
    return mask


def quantise_2bit(values, sizes, mask):
    """Per tensor: [-hi, -lo, lo, hi], lo/hi the means of the lower/upper half of the kept magnitudes."""
    out = torch.zeros_like(values)
    offset = 0
    for n in sizes:
        m = mask[offset:offset + n]
        v = values[offset:offset + n][m]
        if v.numel():
            mag = v.abs().sort().values
            half = mag.numel() // 2
            hi = mag[half:].mean()
            lo = mag[:half].mean() if half else hi
            q = torch.where(v.abs() > (lo + hi) / 2, hi, lo) * v.sign()
            seg = out[offset:offset + n]
            seg[m] = q
        offset += n
    return out


def quantise_int8_chunks(values, mask, chunks, bits=8):
    """Per chunk, the masked values as signed `bits`-bit integers under one scale max / (2^(bits-1) - 1)."""
    out = torch.zeros_like(values)
    top = 2 ** (bits - 1) - 1
    for start, length in chunks:
        seg = values[start:start + length] * mask[start:start + length]
        s = seg.abs().max() / top
        if s > 0:
            out[start:start + length] = torch.round(seg / s) * s
    return out


def union_index_bits(mask, chunks):
    """Elias-Fano index bits of a support (docs/protocol.md §7 "Indices"): per chunk of L with n kept,
    r = floor(log2(L / n)) low bits each plus a bit vector of n + ((L - 1) >> r) bits; plus a 2-byte count."""
    sums = torch.cat([torch.zeros(1, dtype=torch.long), mask.to("cpu", torch.long).cumsum(0)])
    total = 0
    for start, length in chunks:
        n = int(sums[start + length] - sums[start])
        total += 16
        if n:
            r = int(math.floor(math.log2(length // n))) if length // n else 0
            total += n * r + n + ((length - 1) >> r)
    return total


def index_bits(k, chunk, coding):
    if coding == "fixed":
        return math.log2(chunk)
    # Elias-Fano: low bits floor(log2(C/k)) + about 2 upper bits per value
    return max(0, math.floor(math.log2(chunk / k))) + 2


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--text", required=True)
    p.add_argument("--codec", choices=["dense", "int8", "sparse"], default="sparse")
    for name, default in [("volunteers", 4), ("rounds", 60), ("H", 100), ("batch", 8), ("block", 64), ("layers", 2),
                          ("heads", 2), ("embd", 64), ("warmup", 20), ("chunk", 4096), ("k", 64), ("down_k", 0),
                          ("seed", 1337), ("val_batches", 100), ("threads", 1), ("sync", 0)]:
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=int, default=default)
    for name, default in [("lr", 3e-3), ("min_lr", 3e-4), ("decay", 0.95), ("outer_lr", 1.0),
                          ("outer_momentum", 0.0), ("server_decay", 1.0)]:
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=float, default=default)
    p.add_argument("--down-values", choices=["int8", "2bit"], default="int8")
    # The union update's values (no --down-k): 4 or 8 bits, with the coordinator's residual, as the
    # product's sparse.update_bits; 0 = int8 with no residual (what this file did before session 17).
    p.add_argument("--update-bits", type=int, choices=[0, 4, 8], default=4)
    p.add_argument("--device", default="cpu")
    p.add_argument("--index-coding", choices=["fixed", "ef"], default="fixed")
    # Overlap: each volunteer trains round r+1's task while round r closes, so
    # it starts from a guess at theta_{r+1} and its progress is moved onto the
    # true theta_{r+1} afterwards (the outer step one round late). "own": the
    # guess is theta_r minus its own last Delta (what the worker does today);
    # "eager": theta_r minus the outer step its own Delta would make
    # (lr (1 + mu) Delta + mu^2 times the last published step); "global":
    # theta_r itself (the last version it holds, a pure one-round delay).
    p.add_argument("--overlap", choices=["off", "own", "eager", "global"], default="off")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)

    chars, train, val = char_data(a.text)
    train, val = train.to(dev), val.to(dev)
    window = torch.arange(a.block, device=dev)
    gen = torch.Generator().manual_seed(a.seed + 1)
    vgen = torch.Generator().manual_seed(7)
    val_starts = [torch.randint(len(val) - a.block, (16,), generator=vgen) for _ in range(a.val_batches)]

    def batch(d, starts):
        rows = starts.to(dev)[:, None] + window
        return d[rows], d[rows + 1]

    global_model = GPT(len(chars), a.block, a.layers, a.heads, a.embd).to(dev)
    params = list(global_model.parameters())
    sizes = [q.numel() for q in params]
    P = sum(sizes)

    def flat(model):
        return torch.cat([q.detach().reshape(-1) for q in model.parameters()])

    def assign(model, vec):
        off = 0
        with torch.no_grad():
            for q in model.parameters():
                q.copy_(vec[off:off + q.numel()].view_as(q))
                off += q.numel()

    def make_opt(model):
        decay = [q for q in model.parameters() if q.dim() >= 2]
        no_decay = [q for q in model.parameters() if q.dim() < 2]
        return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                 lr=a.lr, betas=(0.9, 0.99))

    def evaluate(vec):
        assign(global_model, vec)
        with torch.no_grad():
            return sum(global_model(*batch(val, s)).item() for s in val_starts) / len(val_starts)

    theta = flat(global_model).clone()
    start = time.time()
    if a.sync:
        opt = make_opt(global_model)
        steps = a.rounds * a.H
        for it in range(steps):
            for g in opt.param_groups:
                g["lr"] = lr_at(a, it, it)
            x, y = batch(train, torch.randint(len(train) - a.block, (a.batch * a.volunteers,), generator=gen))
            loss = global_model(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(global_model.parameters(), 1.0)
            opt.step()
            if (it + 1) % (10 * a.H) == 0 and it + 1 < steps:
                print(json.dumps({"round": (it + 1) // a.H, "val": round(evaluate(flat(global_model)), 4),
                                  "s": round(time.time() - start)}), file=sys.stderr, flush=True)
        print(json.dumps({"sync": True, "val": evaluate(flat(global_model)), "seconds": time.time() - start}))
        return

    workers = []
    for _ in range(a.volunteers):
        m = GPT(len(chars), a.block, a.layers, a.heads, a.embd).to(dev)
        workers.append({"model": m, "opt": make_opt(m), "steps": 0, "ef": torch.zeros(P, device=dev), "start": None})
    chunks = tensor_chunks(sizes, a.chunk)
    momentum = torch.zeros(P, device=dev)
    server_ef = torch.zeros(P, device=dev)
    up_bytes = down_bytes = 0.0
    history = []
    last_step = torch.zeros(P, device=dev)
    for r in range(a.rounds):
        messages = []
        for w in workers:
            origin = theta if w["start"] is None else w["start"]
            assign(w["model"], origin)
            for i in range(a.H):
                for g in w["opt"].param_groups:
                    g["lr"] = lr_at(a, w["steps"], r * a.H + i)
                x, y = batch(train, torch.randint(len(train) - a.block, (a.batch,), generator=gen))
                loss = w["model"](x, y)
                w["opt"].zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(w["model"].parameters(), 1.0)
                w["opt"].step()
                w["steps"] += 1
            delta = origin - flat(w["model"])  # the pseudo-gradient (moved onto theta: the same)
            if a.overlap == "own":
                w["start"] = theta - delta
            elif a.overlap == "global":
                w["start"] = theta
            elif a.overlap == "eager":
                w["start"] = theta - a.outer_lr * (1 + a.outer_momentum) * delta - a.outer_momentum ** 2 * last_step
            if a.codec == "dense":
                messages.append(delta)
                up_bytes += 4 * P
            elif a.codec == "int8":
                w["ef"] += delta
                q = quantise_int8_chunks(w["ef"], torch.ones(P, dtype=torch.bool, device=dev), chunks)
                w["ef"] -= q
                messages.append(q)
                up_bytes += P + 4 * len(chunks)
            else:
                w["ef"].mul_(a.decay).add_(delta)
                mask = topk_mask(w["ef"], sizes, a.chunk, a.k)
                q = quantise_2bit(w["ef"], sizes, mask)
                w["ef"] -= q
                messages.append(q)
                kept = int(mask.sum())
                up_bytes += kept * (2 + index_bits(a.k, a.chunk, a.index_coding)) / 8 + 16 * len(sizes)
        norms = torch.stack([m.norm() for m in messages])
        median = norms.median() if a.codec == "sparse" else None
        if a.codec == "sparse":
            avg = sum(m * (median / nm) for m, nm in zip(messages, norms)) / len(messages)
        else:
            avg = sum(messages) / len(messages)
        momentum.mul_(a.outer_momentum).add_(avg)
        step = a.outer_lr * (avg + a.outer_momentum * momentum) if a.outer_momentum else a.outer_lr * avg
        if a.codec == "sparse" and a.down_k:
            server_ef.mul_(a.server_decay).add_(step)
            mask = topk_mask(server_ef, sizes, a.chunk, a.down_k)
            if a.down_values == "2bit":
                sent = quantise_2bit(server_ef, sizes, mask)
                bits = 2
            else:
                sent = quantise_int8_chunks(server_ef, mask, chunks)
                bits = 8
            server_ef -= sent
            kept = int(mask.sum())
            down_bytes += kept * (bits + index_bits(a.down_k, a.chunk, a.index_coding)) / 8 + 4 * len(chunks)
            step = sent
        elif a.codec == "sparse" and a.update_bits:
            # The product's union update: the residual on u's support, int4/int8 per chunk; the
            # residual keeps what rounding leaves out.
            support = step != 0
            server_ef.add_(step)
            sent = quantise_int8_chunks(server_ef, support, chunks, a.update_bits)
            server_ef -= sent
            down_bytes += (int(support.sum()) * a.update_bits + union_index_bits(support, chunks)) / 8 + 4 * len(chunks)
            step = sent
        elif a.codec == "sparse":
            support = int((step != 0).sum())
            down_bytes += support * (8 + math.log2(a.chunk)) / 8 + 4 * len(chunks)
        else:
            down_bytes += P + 4 * len(chunks)
        theta = theta - step
        last_step = step
        if (r + 1) % 10 == 0 or r + 1 == a.rounds:
            history.append((r + 1, round(evaluate(theta), 4)))
            print(json.dumps({"round": r + 1, "val": history[-1][1], "s": round(time.time() - start)}),
                  file=sys.stderr, flush=True)
    tokens_per_round = a.H * a.batch * a.block
    dp = 2 * 2 * (a.volunteers - 1) / a.volunteers * 4 * P / (a.batch * a.block)
    per_token = (up_bytes / a.volunteers + down_bytes) / (a.rounds * tokens_per_round)
    print(json.dumps({"args": vars(a), "P": P, "val": history[-1][1], "history": history,
                      "up_bytes_per_round": up_bytes / a.volunteers / a.rounds, "down_bytes_per_round":
                      down_bytes / a.rounds, "payload_ratio": dp / per_token, "seconds": time.time() - start}))


if __name__ == "__main__":
    main()
