#!/usr/bin/python3
"""The parallel-modes comparison table (issue 27): one model, one global
batch, each layout run by crowdtrain-train as a user launches it (--nproc N
plus the mode's flags), and the on-paper projection for GPT-2 on 8 GPUs.

  bench/parallel_table.py BUILD_DIR [--device cpu|cuda] [--steps N]
  bench/parallel_table.py --project

Measured per row (from crowdtrain-train's summary line, rank 0):
  state bytes   parameters + gradients + AdamW moments this rank holds at
                its peak, counted where the parallel code allocates them
                (activations and the process groups' buffers not counted)
  B/param       state bytes / the whole model's parameter count
  tok/s         tokens of the global batch per second of step time
  comm          bytes rank 0 sends per step (ring-algorithm accounting:
                all-reduce 2(n-1)/n of the buffer, all-gather (n-1) shards)
  val loss      after the run, 10 batches
"""
import json
import os
import subprocess
import sys
import tempfile

SHAKESPEARE = os.environ.get("CROWDTRAIN_CORPUS") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "tinyshakespeare.txt")
MODEL = ["--n-layer", "4", "--n-head", "4", "--n-embd", "128", "--block-size", "64", "--vocab-size", "128"]
# Global batch 8 sequences of 64 tokens in every row.
ROWS = [
    ("single", 1, ["--batch-size", "8", "--zero", "0"]),
    ("DDP", 2, ["--batch-size", "4", "--zero", "0"]),
    ("ZeRO-1", 2, ["--batch-size", "4", "--zero", "1"]),
    ("ZeRO-2", 2, ["--batch-size", "4", "--zero", "2"]),
    ("ZeRO-3", 2, ["--batch-size", "4", "--zero", "3"]),
    ("ZeRO-3, 4 ranks", 4, ["--batch-size", "2", "--zero", "3"]),
    ("TP 2", 2, ["--batch-size", "8", "--tensor-parallel", "2"]),
    ("PP 2 (1F1B, 4 micro-batches)", 2, ["--batch-size", "2", "--gradient-accumulation-steps", "4",
                                        "--pipeline-parallel", "2"]),
    ("ZeRO-1 over DP 2 x TP 2", 4, ["--batch-size", "4", "--zero", "1", "--tensor-parallel", "2"]),
    ("single, activation checkpointing", 1, ["--batch-size", "8", "--activation-checkpointing"]),
    ("single, bf16 autocast", 1, ["--batch-size", "8", "--dtype", "bf16"]),
]


def parameters(layers=4, d=128, t=64, v=128):
    return v * d + t * d + 2 * d + layers * (12 * d * d + 13 * d)


def measure(build, device, steps):
    work = tempfile.mkdtemp()
    data = os.path.join(work, "data")
    subprocess.run([os.path.join(build, "bin", "crowdtrain-prepare"), SHAKESPEARE, "--out", data, "--tokenizer",
                    "char", "--val-fraction", "0.1"], check=True, stdout=subprocess.DEVNULL)
    total = parameters()
    print(f"model: {total} parameters (4 layers, d 128, context 64, vocab 128); global batch 8 x 64 tokens; "
          f"{steps} steps; device {device}, one thread per rank\n")
    print("| layout | ranks | state bytes/rank (peak) | bytes/param | tok/s | comm/step (rank 0) | val loss |")
    print("|---|---|---|---|---|---|---|")
    gpus = None
    if device.startswith("cuda"):
        import torch
        gpus = torch.cuda.device_count()
    for name, ranks, flags in ROWS:
        if gpus is not None and ranks > gpus:  # NCCL takes one GPU per rank
            print(f"| {name} | {ranks} | not run: needs {ranks} GPUs, this machine has {gpus} | | | | |")
            continue
        command = [os.path.join(build, "bin", "crowdtrain-train"), "--data", data, "--device", device,
                   "--nproc", str(ranks), "--max-iters", str(steps), "--eval-interval", "0", "--eval-iters", "10",
                   "--log-interval", "1000", "--warmup-iters", "2", "--lr-decay-iters", str(steps),
                   "--master-port", str(29600 + ranks), "--threads", "1"] + MODEL + flags
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"| {name} | {ranks} | failed: {done.stderr.strip().splitlines()[-1]} | | | | |")
            continue
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        state = summary["state_bytes_peak_rank0"]
        comm = summary["bytes_sent_per_step_rank0"]
        extra = ""
        if summary["pipeline_bubble_on_paper"] > 0:
            extra = (f" (bubble {summary['pipeline_bubble_on_paper']:.2f} on paper, rank 0 waited "
                     f"{summary['pipeline_wait_ms_per_step_rank0']:.0f} of {summary['step_ms']:.0f} ms)")
        print(f"| {name}{extra} | {ranks} | {state / 1e6:.2f} MB | {state / total:.1f} | "
              f"{summary['tokens_per_second']:.0f} | {comm / 1e6:.2f} MB | {summary['final_val_loss']:.4f} |")


GPT2 = [("GPT-2 124M", 124e6, 12, 768, 12), ("GPT-2 350M", 355e6, 24, 1024, 16),
        ("GPT-2 774M", 774e6, 36, 1280, 20), ("GPT-2 1.5B", 1558e6, 48, 1600, 25)]


def project():
    """Per-GPU memory and traffic on 8 x 24 GB, bf16 mixed precision with fp32
    AdamW (the ZeRO paper's K = 12: 2 + 2 + 12 = 16 bytes per parameter).
    Activations: Korthikanti et al. 2022, s*b*h*(34 + 5*a*s/h) bytes per layer,
    s*b*h*(10 + 24/t + 5*a*s/(h*t)) under tensor parallel t; micro-batch 1,
    sequence 1024."""
    n = 8
    s, b = 1024, 1
    print("| model | layout | state GB/GPU | activations GB/GPU | fits 24 GB | comm GB/step/GPU |")
    print("|---|---|---|---|---|---|")
    for name, psi, layers, h, a in GPT2:
        act_layer = s * b * h * (34 + 5 * a * s / h)
        grad_bytes = 2 * psi  # bf16 gradients
        rows = [
            ("DDP", 16 * psi, layers * act_layer, 2 * (n - 1) / n * grad_bytes),
            ("ZeRO-1", 4 * psi + 12 * psi / n, layers * act_layer, 2 * (n - 1) / n * grad_bytes),
            ("ZeRO-2", 2 * psi + 14 * psi / n, layers * act_layer, 2 * (n - 1) / n * grad_bytes),
            ("ZeRO-3", 16 * psi / n, layers * act_layer, 3 * (n - 1) / n * grad_bytes),
            # 4 all-reduces of s*b*h bf16 values per layer (2 forward, 2 backward)
            ("TP 8", 16 * psi / n, layers * s * b * h * (10 + 24 / n + 5 * a * s / (h * n)), layers * 4 * 2 * (n - 1) / n * s * b * h * 2),
            # 1F1B keeps up to p micro-batches of the first stage's layers in flight
            ("PP 8", 16 * psi / n, layers / n * act_layer * n, 2 * s * b * h * 2 * 8),
        ]
        for layout, state, act, comm in rows:
            fits = "yes" if state + act < 24e9 else "no"
            print(f"| {name} | {layout} | {state / 1e9:.1f} | {act / 1e9:.1f} | {fits} | {comm / 1e9:.2f} |")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--project":
        project()
        sys.exit(0)
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    device = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cpu"
    steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 20
    measure(sys.argv[1], device, steps)
