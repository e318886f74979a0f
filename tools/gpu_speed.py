#!/usr/bin/env python3
"""GPT-2 speed on one GPU (issue 41 items 5 and 6): crowdtrain-train beside
PyTorch eager and torch.compile of the same model on the same card, then the
1.5B rows under memory caps. Each row prints its own seconds and the total.

Usage: gpu_speed.py DEVICE BIN_DIR DATA_DIR [--tiny]

Run by `tools/gpu-check.sh speed` (which builds BIN_DIR and prepares
DATA_DIR); --tiny (with DEVICE cpu) runs every row at toy sizes, to check the
script itself on a machine without a GPU.

MFU, as llm.c counts it (train_gpt2.cu, gpt2_estimate_mfu): FLOPs per token
= 6 N + 6 L C T, N the parameters (embeddings included), L layers, C the
width, T the context: 6 N for every weight's multiply-add, forward (2) and
backward (4); 6 L C T for attention's two products (QK^T and AV), each 2 C T
per token forward and twice that backward, halved for the causal mask. GPT-2
124M at T = 1024, vocabulary 50304: 6 x 124.48M + 6 x 12 x 768 x 1024 =
8.03e8 FLOPs per token. Peak: the card's dense bf16 rate (H100/H200 SXM
989.4 TFLOPS; PEAK_TFLOPS overrides; other cards: no MFU).
"""

import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEAKS = [("H200", 989.4e12), ("H100", 989.4e12), ("A100", 312e12), ("L40S", 362e12), ("4090", 165.2e12)]
LLM_C = 468e3  # llm.c's GPT-2 124M tokens/s on one H100 (issue 41)

START = time.monotonic()


def row(name, ok, detail, began):
    status = {True: "pass", False: "FAIL", None: "skipped"}[ok]
    now = time.monotonic()
    print(f"| {name} | {status} | {detail} | {now - began:.0f} s (total {now - START:.0f} s) |", flush=True)
    return ok


def flops_per_token(parameters, layers, width, context):
    return 6 * parameters + 6 * layers * width * context


def peak_flops(device):
    if "PEAK_TFLOPS" in os.environ:
        return float(os.environ["PEAK_TFLOPS"]) * 1e12
    if not device.startswith("cuda"):
        return None
    import torch
    name = torch.cuda.get_device_name(torch.device(device))
    return next((peak for key, peak in PEAKS if key in name), None)


def mfu_text(tokens_per_second, flops, peak):
    return f"MFU {tokens_per_second * flops / peak:.1%}" if peak else "MFU n/a (unknown peak)"


def run(args, timeout):
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return done


def ours(bin_dir, data, device, shape, peak, tiny):
    """crowdtrain-train, bf16 autocast, one micro-batch of shape a step;
    the median step over the steps after the first five. Then 4 steps with
    --count-ops (its callbacks cost host time, so not in the timed run)."""
    began = time.monotonic()
    batch, block, steps = shape
    model = ["--n-layer", "2", "--n-head", "2", "--n-embd", "64"] if tiny else ["--model", "gpt2"]

    def train(iters, extra):
        return run([os.path.join(bin_dir, "crowdtrain-train"), "--data", data, "--device", device] + model
                   + ["--vocab-size", "50304", "--block-size", str(block), "--batch-size", str(batch),
                      "--max-iters", str(iters), "--warmup-iters", "2", "--lr-decay-iters", str(iters),
                      "--eval-interval", "0", "--eval-iters", "1", "--log-interval", "1", "--learning-rate",
                      "6e-4", "--min-lr", "6e-5", "--beta2", "0.95"] + extra, timeout=300)

    done = train(steps, [])
    counted = json.loads(train(4, ["--count-ops"]).stdout.strip().splitlines()[-1])
    times = sorted(float(line.rsplit("|", 1)[1].split()[0]) for line in done.stdout.splitlines()
                   if line.startswith("step ") and int(line.split()[1]) > 5)
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    kernels = next((line for line in done.stderr.splitlines() if line.startswith("attention:")), "attention: ?")
    parameters = int(re.search(r"model: (\d+) parameters", done.stderr).group(1))
    layers, width = (2, 64) if tiny else (12, 768)
    flops = flops_per_token(parameters, layers, width, block)
    median = times[len(times) // 2]
    tps = batch * block / median * 1e3
    counts = counted.get("per_step", {})
    # Mid-step host reads stall the device; the end-of-step read is the one allowed.
    ok = counts.get("mid_step_host_reads", 1) == 0 and counts.get("end_of_step_reads") == 1
    ok = row("crowdtrain-train", ok,
        f"{summary['device']}, {batch} x {block} tokens a step, median {median:.1f} ms over steps 6-{steps}: "
        f"{tps:,.0f} tok/s, {mfu_text(tps, flops, peak)} ({flops:.3g} FLOPs/token, N = {parameters:,}), "
        f"{tps / LLM_C:.2f}x llm.c's 468k; {kernels}; per step: {counts.get('aten_ops', 0):.0f} ATen ops, "
        f"{counts.get('mid_step_host_reads', '?')} mid-step host reads, "
        f"{counts.get('end_of_step_reads', '?')} end-of-step read", began)
    return tps, ok


def pytorch(device, mode, shape, peak, tiny, ours_tps):
    began = time.monotonic()
    batch, block, steps = shape
    python = os.environ.get("PYTHON", sys.executable)
    args = [python, os.path.join(ROOT, "bench", "gpt2_torch_speed.py"), "--mode", mode, "--device", device,
            "--batch", str(batch), "--block", str(block), "--steps", str(steps - 5)]
    r = json.loads(run(args + (["--tiny"] if tiny else []), timeout=400).stdout.strip().splitlines()[-1])
    if "skipped" in r:
        row(f"PyTorch {r['torch']} {mode}", None, r["skipped"], began)
        return
    layers, width = (2, 64) if tiny else (12, 768)
    flops = flops_per_token(r["parameters"], layers, width, r["block"])
    tps = r["tokens_per_second"]
    row(f"PyTorch {r['torch']} {mode}", True,
        f"{r['device']}, {r['batch']} x {r['block']}, median {r['median_step_ms']:.1f} ms: {tps:,.0f} tok/s, "
        f"{mfu_text(tps, flops, peak)}; warm-up (compile) {r['warmup_seconds']:.0f} s; peak "
        f"{r['peak_allocated_bytes'] / 2**30:.1f} GiB; crowdtrain-train / this = {ours_tps / tps:.2f}", began)


def capped_1_5b(bin_dir, data, device, tiny):
    """GPT-2 1.5B under 24 and 12 GiB caps (issue 41 item 4): crowdtrain-train's
    --memory-plan auto picks the mode for the cap (it logs the plan and why),
    the summary's device_memory gives the allocator's peak."""
    began = time.monotonic()
    usage = subprocess.run([os.path.join(bin_dir, "crowdtrain-train"), "--help"], capture_output=True,
                           text=True).stdout
    if "--memory-cap-gib" not in usage:
        row("gpt2-xl capped", None, "crowdtrain-train has no --memory-cap-gib yet (issue 41 item 4)", began)
        return True
    ok = True
    for cap in (24, 12):
        began = time.monotonic()
        model = ["--n-layer", "2", "--n-head", "2", "--n-embd", "64"] if tiny else ["--model", "gpt2-xl"]
        try:
            done = run([os.path.join(bin_dir, "crowdtrain-train"), "--data", data, "--device", device] + model
                       + ["--vocab-size", "50304", "--block-size", "32" if tiny else "1024", "--batch-size", "1",
                          "--max-iters", "6", "--warmup-iters", "2", "--lr-decay-iters", "6", "--eval-interval",
                          "0", "--eval-iters", "1", "--log-interval", "1"]
                       # A CPU has no allocator to cap (auto plans under a cap): its dry
                       # run takes the mode a GPU of that size gets for 1.5B.
                       + (["--memory-cap-gib", str(cap), "--memory-plan", "auto"] if device != "cpu"
                          else ["--memory-plan", "int8-checkpointed" if cap == 24 else "bf16-host-master"]),
                       timeout=150)
            summary = json.loads(done.stdout.strip().splitlines()[-1])
            row(f"gpt2-xl under {cap} GiB", True,
                f"{summary['tokens_per_second']:,.0f} tok/s; device memory {summary.get('device_memory')}; "
                + " / ".join(line for line in done.stderr.splitlines() if "plan" in line), began)
        except (RuntimeError, ValueError, KeyError, IndexError, subprocess.TimeoutExpired) as e:
            ok = row(f"gpt2-xl under {cap} GiB", False, str(e).replace("\n", " / "), began) and ok
    return ok


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    device, bin_dir, data = sys.argv[1:4]
    tiny = "--tiny" in sys.argv[4:]
    shape = (2, 32, 8) if tiny else (int(os.environ.get("BATCH", "32")), 1024, 30)
    peak = peak_flops(device)
    print("| row | result | detail | time |\n| --- | --- | --- | --- |", flush=True)
    failures = 0
    began = time.monotonic()
    try:
        tps, ok = ours(bin_dir, data, device, shape, peak, tiny)
        failures += not ok
    except (RuntimeError, ValueError, KeyError, IndexError, AttributeError, subprocess.TimeoutExpired) as e:
        row("crowdtrain-train", False, str(e).replace("\n", " / "), began)
        tps, failures = 1.0, failures + 1
    for mode in ("eager", "compile"):
        began = time.monotonic()
        try:
            pytorch(device, mode, shape, peak, tiny, tps)
        except (RuntimeError, ValueError, KeyError, IndexError, subprocess.TimeoutExpired) as e:
            row(f"PyTorch {mode}", False, str(e).replace("\n", " / "), began)
            failures += 1
    failures += not capped_1_5b(bin_dir, data, device, tiny)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
