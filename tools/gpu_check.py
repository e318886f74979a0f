#!/usr/bin/env python3
"""The engine end to end on one device, through its programs.

Usage: gpu_check.py DEVICE BIN_DIR CORPUS WORK_DIR

Run by tools/gpu-check.sh (which builds BIN_DIR); DEVICE is cuda, cuda:N or
cpu. Each check prints one row; the exit status is 1 if any failed.

  train      nanoGPT's shakespeare_char model and recipe for 300 steps on
             DEVICE (bf16 autocast on CUDA): the program reports DEVICE and
             the validation loss falls far below the uniform guess (ln 65)
  resume     150 steps, stop, resume to 300: the same final validation loss
             (bit-exact on CPU; within 0.05 on CUDA, whose kernels are not
             deterministic)
  parallel   --nproc 2 (Gloo on CPU, NCCL on CUDA with two GPUs; skipped with
             one GPU: NCCL refuses two ranks on one device)
  gpt2-124m  (GPU only) GPT-2 124M on 16 x 1024 tokens a step, 30 steps:
             the median step time, which bench/homelink.sh's stand-in assumes
             (0.16 s on a consumer GPU); loss falls and stays finite
  export     the exported folder loads in transformers' GPT2LMHeadModel (or,
             where transformers is missing, tests/hf_gpt2_reference.py) and
             its argmax agrees with every token crowdtrain-train sample
             picked greedily from it
"""

import json
import math
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPE = ["--n-layer", "4", "--n-head", "4", "--n-embd", "128", "--block-size", "64", "--batch-size", "12",
          "--learning-rate", "1e-3", "--min-lr", "1e-4", "--warmup-iters", "100", "--lr-decay-iters", "2000",
          "--beta1", "0.9", "--beta2", "0.99", "--weight-decay", "0.1", "--grad-clip", "1.0", "--dropout", "0",
          "--eval-interval", "150", "--eval-iters", "50", "--log-interval", "100"]


class Checks:
    def __init__(self):
        self.rows = []

    def add(self, name, ok, detail):
        self.rows.append((name, ok, detail))
        status = {True: "pass", False: "FAIL", None: "skipped"}[ok]
        print(f"| {name} | {status} | {detail} |", flush=True)

    def failed(self):
        return any(ok is False for _, ok, _ in self.rows)


def run(args, **kwargs):
    done = subprocess.run(args, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return done


def train(bin_dir, data, device, extra):
    done = run([os.path.join(bin_dir, "crowdtrain-train"), "--data", data, "--device", device] + RECIPE + extra)
    return json.loads(done.stdout.strip().splitlines()[-1])


def greedy_agrees(export, ids, prompt_length):
    """Counts tokens whose reference argmax differs from the sampled one by
    more than a float tie (1e-4 in logit)."""
    import torch
    try:
        from transformers import GPT2LMHeadModel
        import transformers
        model = GPT2LMHeadModel.from_pretrained(export).eval()
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].float()
        source = f"transformers {transformers.__version__}"
    except ImportError:
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        import hf_gpt2_reference as reference
        config, weights = reference.load(export)
        with torch.no_grad():
            logits = reference.forward(config, weights, ids)
        source = "tests/hf_gpt2_reference.py (no transformers here)"
    mismatches = 0
    for i in range(prompt_length, len(ids)):
        row = logits[i - 1]
        if int(row.argmax()) != ids[i] and float(row.max() - row[ids[i]]) > 1e-4:
            mismatches += 1
    return mismatches, source


def gpt2_step(bin_dir, data, device):
    """GPT-2 124M (--model gpt2) on 16 x 1024-token sequences a step: the
    step time the home-link bench (bench/homelink.sh) stands a volunteer's
    GPU in for. The median over the steps after the first five (those pay for
    the kernels' first launches)."""
    done = run([os.path.join(bin_dir, "crowdtrain-train"), "--data", data, "--device", device, "--model", "gpt2",
                "--vocab-size", "50304", "--block-size", "1024", "--batch-size", "16", "--max-iters", "30", "--warmup-iters", "2",
                "--lr-decay-iters", "30", "--eval-interval", "0", "--eval-iters", "1", "--log-interval", "1",
                "--learning-rate", "6e-4", "--min-lr", "6e-5"])
    times = sorted(float(line.rsplit("|", 1)[1].split()[0]) for line in done.stdout.splitlines()
                   if line.startswith("step ") and int(line.split()[1]) > 5)
    losses = [float(line.split("|")[1].split()[1]) for line in done.stdout.splitlines() if line.startswith("step ")]
    if not times:
        return "gpt2-124m", False, "no step lines"
    median = times[len(times) // 2]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    return ("gpt2-124m", all(math.isfinite(x) for x in losses) and losses[-1] < losses[0],
            f"device {summary['device']}, 16 x 1024 tokens a step: median {median:.1f} ms over steps 6-30 "
            f"({16384 / median * 1e3:.0f} tok/s), loss {losses[0]:.3f} -> {losses[-1]:.3f}, "
            f"host peak RSS {summary['peak_rss_bytes'] / 1e9:.1f} GB")


def main():
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    device, bin_dir, corpus, work = sys.argv[1:]
    shutil.rmtree(work, ignore_errors=True)  # crowdtrain-prepare wants a new folder
    os.makedirs(work)
    data = os.path.join(work, "data")
    checks = Checks()
    print(f"| check ({device}) | result | detail |\n| --- | --- | --- |", flush=True)
    try:
        run([os.path.join(bin_dir, "crowdtrain-prepare"), corpus, "--out", data, "--tokenizer", "char",
             "--val-fraction", "0.1"])
        export = os.path.join(work, "hf")
        straight = train(bin_dir, data, device, ["--max-iters", "300", "--export", export])
        loss = straight["final_val_loss"]
        checks.add("train", straight["device"].startswith(device.split(":")[0]) and loss < 0.65 * math.log(65),
                   f"device {straight['device']}, val loss {loss:.4f} after 300 steps (uniform: {math.log(65):.4f}), "
                   f"{straight['tokens_per_second']:.0f} tok/s")

        state = os.path.join(work, "state.ckpt")
        train(bin_dir, data, device, ["--max-iters", "150", "--checkpoint", state])
        resumed = train(bin_dir, data, device, ["--max-iters", "300", "--resume", state])
        gap = abs(resumed["final_val_loss"] - loss)
        tolerance = 0.0 if device == "cpu" else 0.05
        checks.add("resume", resumed["steps"] == 300 and gap <= tolerance,
                   f"val loss {resumed['final_val_loss']:.4f} against {loss:.4f} straight (gap {gap:.2e}, "
                   f"allowed {tolerance})")

        gpus = 0
        if device != "cpu":
            import torch
            gpus = torch.cuda.device_count()
        if device != "cpu" and gpus < 2:
            checks.add("parallel", None, f"NCCL needs two GPUs, this machine has {gpus}")
        else:
            parallel = train(bin_dir, data, "cuda" if device != "cpu" else "cpu",
                                ["--max-iters", "100", "--nproc", "2", "--master-port", "29533"])
            checks.add("parallel", parallel["steps"] == 100 and parallel["final_val_loss"] < math.log(65),
                       f"2 ranks, val loss {parallel['final_val_loss']:.4f} after 100 steps")

        if device == "cpu":
            checks.add("gpt2-124m", None, "GPU only: one step of 16 x 1024 tokens takes about a minute on a CPU")
        else:
            checks.add(*gpt2_step(bin_dir, data, device))

        prompt = "ROMEO:"
        text = run([os.path.join(bin_dir, "crowdtrain-train"), "sample", "--checkpoint", export,
                    "--tokenizer-dir", os.path.join(data, "tokenizer"), "--prompt", prompt, "--temperature", "0",
                    "--max-new-tokens", "50"]).stdout[:-1]  # the program ends the text with a newline
        tokenize = [os.path.join(bin_dir, "crowdtrain-prepare"), "tokenize", "--tokenizer-dir",
                    os.path.join(data, "tokenizer")]
        ids = [int(x) for x in run(tokenize, input=text).stdout.split()]
        prompt_length = len(run(tokenize, input=prompt).stdout.split())
        mismatches, source = greedy_agrees(export, ids, prompt_length)
        checks.add("export", mismatches == 0 and len(ids) == prompt_length + 50,
                   f"{source}: {len(ids) - prompt_length - mismatches} of {len(ids) - prompt_length} greedy "
                   f"tokens agree; sample {text!r}")
    except (RuntimeError, ValueError, KeyError, OSError) as e:
        checks.add("error", False, str(e).replace("\n", " / "))
    return 1 if checks.failed() else 0


if __name__ == "__main__":
    sys.exit(main())
