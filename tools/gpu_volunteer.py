#!/usr/bin/env python3
"""A volunteer's whole path on one machine (issue 40 item 3): a local
coordinator (crowdtrain-server), the real daemon (`crowdtrain-worker run`)
with fresh folders, joined to the coordinator's project through its hub
link, training on DEVICE; then the daemon's governance is checked from the
outside, as a volunteer would see it:

  - a task trained and accepted, on the core family DEVICE asks for;
  - the busy share at each of SHARES, within 5 points: the daemon's reading
    (`status`; on cuda it counts the device's own time of each step, from
    CUDA timing events in the core) and, on cuda, nvidia-smi's utilization
    sampled beside it; at 100% the governor never rests and the time between tasks
    (upload, next task) is idle, so there at least 80%;
  - the core SIGKILLed mid-task: restarted, nothing accepted lost, the next
    task accepted;
  - snoozed: the core exits (on cuda: the GPU's memory back to what it was
    before the daemon started);
  - on cuda also: the VRAM cap (the core's memory at or under it), another
    program loading the GPU pausing training within 10 s and training
    resuming after it, NVML's temperature and power as `status` shows them.

Prints a Markdown table of what it measured and exits non-zero when a check
fails. On cpu it runs a tiny model in about two minutes (CTest's
gpu_volunteer_on_cpu keeps it in step with the programs); on cuda a GPT-2
124M project (tools/gpu-check.sh volunteer).

  gpu_volunteer.py DEVICE BIN CORPUS WORK [--core CORE] [--gpt2-dir DIR]

BIN holds crowdtrain-server, crowdtrain-worker, crowdtrain-daemon and
crowdtrain-prepare; CORE is the core for DEVICE (default: the daemon's own
choice beside it).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time


def now():
    return time.monotonic()


class Volunteer:
    def __init__(self, args):
        self.args = args
        self.bin = os.path.abspath(args.bin)
        self.work = os.path.abspath(args.work)
        home = os.path.join(self.work, "home")
        run = os.path.join(home, "run")
        os.makedirs(run, exist_ok=True)
        os.chmod(run, 0o700)
        self.env = dict(os.environ, HOME=home, XDG_RUNTIME_DIR=run,
                        XDG_CONFIG_HOME=os.path.join(home, "config"),
                        XDG_DATA_HOME=os.path.join(home, "data"))
        if args.core:
            variable = "CROWDTRAIN_CUDA_CORE" if args.device == "cuda" else "CROWDTRAIN_CORE"
            self.env[variable] = os.path.abspath(args.core)
        self.procs = []
        self.rows = []
        self.failures = []

    # The command-line client, as a volunteer's scripts use it.
    def cli(self, *words, check=True):
        out = subprocess.run([os.path.join(self.bin, "crowdtrain-worker"), *words, "--json"],
                             env=self.env, capture_output=True, text=True, timeout=60)
        if check and out.returncode != 0:
            raise RuntimeError(f"crowdtrain-worker {' '.join(words)}: {out.stderr.strip() or out.stdout.strip()}")
        return json.loads(out.stdout) if out.stdout.strip() else {}

    def status(self):
        return self.cli("status")

    def wait_for(self, what, test, timeout):
        """Polls `status` until test(status) holds; returns (status, seconds)."""
        start = now()
        while now() - start < timeout:
            s = self.status()
            if test(s):
                return s, now() - start
            time.sleep(0.25)
        s = self.status()
        raise RuntimeError(f"{what}: not within {timeout} s; status: {s.get('text')}")

    def record(self, check, measured, ok):
        self.rows.append((check, measured, "yes" if ok else "**no**"))
        if not ok:
            self.failures.append(check)
        print(f"  {check}: {measured} ({'ok' if ok else 'FAILED'})", flush=True)

    def start_server(self):
        a = self.args
        data = os.path.join(self.work, "data")
        tokenizer = ["--tokenizer", "gpt2", "--gpt2-dir", a.gpt2_dir] if a.gpt2_dir else ["--tokenizer", "char"]
        subprocess.run([os.path.join(self.bin, "crowdtrain-prepare"), a.corpus, "--out", data, *tokenizer,
                        "--val-fraction", "0.1"], check=True, capture_output=True)
        # Tasks long enough that the time between them (upload, the next
        # task) is a small part of the busy share at 100%.
        if a.device == "cuda":
            model = {"preset": "gpt2", "block_size": 1024}
            inner = {"steps": 300, "batch_size": 16}
        else:
            vocab = json.load(open(os.path.join(data, "meta.json")))["tokenizer"]["vocab_size"]
            model = {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64, "vocab_size": vocab}
            inner = {"steps": 300, "batch_size": 8}
        tokens = inner["steps"] * inner["batch_size"] * model["block_size"]
        spec = {"name": "volunteer-check", "model": model, "data": data, "init": {"seed": 1},
                "inner": dict(inner, learning_rate=3e-4, min_lr=3e-5, warmup_iters=2),
                # One volunteer: a round is many tasks long, so that the
                # measurements below see training, not rounds closing.
                "round": {"token_target": 1000 * tokens, "deadline_seconds": 24 * 3600},
                "codec": "sparse", "outer": {"lr": 4.0, "momentum": 0},
                "checkpoints": {"every_rounds": 1000}, "validation": {"batches": 2, "batch_size": 2}}
        spec_file = os.path.join(self.work, "spec.json")
        json.dump(spec, open(spec_file, "w"))
        self.server_out = open(os.path.join(self.work, "server.out"), "w+")
        server = subprocess.Popen(
            [os.path.join(self.bin, "crowdtrain-server"), spec_file, "--state", os.path.join(self.work, "state"),
             "--bind", "tcp://127.0.0.1:*", "--publish", "tcp://127.0.0.1:*", "--threads", "1"],
            stdout=self.server_out, stderr=open(os.path.join(self.work, "server.err"), "w"))
        self.procs.append(server)
        start = now()
        while now() - start < 300:
            self.server_out.seek(0)
            line = self.server_out.readline()
            if line.endswith("\n"):
                return json.loads(line)["hub_link"]
            if server.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError("the coordinator did not start: " + open(os.path.join(self.work, "server.err")).read()[-2000:])

    def start_daemon(self):
        log = open(os.path.join(self.work, "daemon.log"), "w")
        daemon = subprocess.Popen([os.path.join(self.bin, "crowdtrain-worker"), "run"], env=self.env,
                                  stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(daemon)
        self.daemon = daemon
        start = now()
        while now() - start < 30:
            try:
                self.status()
                return
            except (RuntimeError, json.JSONDecodeError):
                time.sleep(0.2)
        raise RuntimeError("the daemon did not answer: " + open(os.path.join(self.work, "daemon.log")).read()[-2000:])

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def core_pids(root):
    """The training cores under process `root` (the daemon), not others'."""
    parents, names = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            names[int(entry)] = stat[stat.index("(") + 1:stat.rindex(")")]
            parents[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])

    def under(pid):
        while pid > 1:
            if pid == root:
                return True
            pid = parents.get(pid, 0)
        return False
    return [pid for pid, name in names.items() if name.startswith("crowdtrain-core") and under(pid)]


class GpuSampler:
    """nvidia-smi's utilization and memory, sampled every 200 ms."""

    def __init__(self):
        self.samples = []
        self.stopping = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stopping:
            out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits",
                                  "-i", "0"], capture_output=True, text=True)
            if out.returncode == 0 and out.stdout.strip():
                util, used = (float(x) for x in out.stdout.split(","))
                self.samples.append((now(), util, used))
            time.sleep(0.2)

    def mean_util(self, start, end):
        values = [u for t, u, _ in self.samples if start <= t <= end]
        return sum(values) / len(values) if values else float("nan")

    def stop(self):
        self.stopping = True
        self.thread.join()


def gpu_memory_used():
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def process_gpu_memory(pids):
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True)
    used = 0.0
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and int(parts[0]) in pids:
            used += float(parts[1])
    return used


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("device", choices=["cpu", "cuda"])
    p.add_argument("bin")
    p.add_argument("corpus")
    p.add_argument("work")
    p.add_argument("--core", help="the training core for DEVICE (default: beside the daemon)")
    p.add_argument("--gpt2-dir", help="GPT-2's encoder.json and vocab.bpe (default on cpu: a character model)")
    p.add_argument("--shares", default="25,50,75,100", help="busy shares to measure, in %%")
    p.add_argument("--window", type=float, default=None, help="seconds a busy share is measured over")
    p.add_argument("--vram-cap-mib", type=int, default=6144)
    args = p.parse_args()
    cuda = args.device == "cuda"
    window = args.window or (30.0 if cuda else 12.0)
    v = Volunteer(args)
    began = now()
    sampler = None
    try:
        baseline = gpu_memory_used() if cuda else None
        hub = v.start_server()
        v.start_daemon()
        v.cli("settings", "set", "device", args.device)
        v.cli("settings", "set", "busy_share_idle", "100")
        if cuda:
            v.cli("settings", "set", "gpu_memory_limit_mib", str(args.vram_cap_mib))
            sampler = GpuSampler()
        v.cli("follow", hub)
        v.cli("join", hub, "volunteer-check")
        print(f"joined {hub}; waiting for the first accepted task", flush=True)
        s, seconds = v.wait_for("a task accepted", lambda s: s.get("accepted", 0) >= 1, 900 if cuda else 300)
        v.record("a task trained and accepted", f"{s.get('accepted')} accepted after {seconds:.0f} s, on "
                 f"{s.get('device_in_use', '?')} (core {s.get('core', '?')}, {s.get('core_runtime', '')}), "
                 f"plan {s.get('memory_plan', '-')}", s.get("core") == args.device)

        if cuda:
            gpu = s.get("limits", {}).get("gpu", {})
            v.record("NVML as `status` shows it", json.dumps(gpu, sort_keys=True)[:300],
                     gpu.get("available") is True and "temperature_c" in json.dumps(gpu))
            peak = 0.0
            for _ in range(10):  # over 5 s of training
                peak = max(peak, process_gpu_memory(core_pids(v.daemon.pid)))
                time.sleep(0.5)
            v.record(f"VRAM cap {args.vram_cap_mib} MiB", f"the core's memory (nvidia-smi, with its CUDA context) "
                     f"{peak:.0f} MiB", 0 < peak <= args.vram_cap_mib + 600)

        for share in [int(x) for x in args.shares.split(",")]:
            v.cli("settings", "set", "busy_share_idle", str(share))
            time.sleep(window / 2)  # the governor's window turns over
            start = now()
            readings = []
            while now() - start < window:
                st = v.status()
                if st.get("state") == "training":
                    readings.append(st.get("limits", {}).get("busy_measured", 0.0))
                time.sleep(0.5)
            end = now()
            daemon_share = 100.0 * readings[-1] if readings else float("nan")
            text = f"daemon {daemon_share:.1f}%"
            # At 100% the governor never rests: what is left is the time
            # between tasks (the upload, the next task), idle by definition.
            ok = bool(readings) and (abs(daemon_share - share) <= 5 if share < 100 else daemon_share >= 80)
            if sampler:
                device_share = sampler.mean_util(start, end)
                text += f", device (nvidia-smi) {device_share:.1f}%"
                ok = ok and (abs(device_share - share) <= 5 if share < 100 else device_share >= 80)
            v.record(f"busy share {share}%", text + f" over {window:.0f} s", ok)
        v.cli("settings", "set", "busy_share_idle", "100")

        if cuda:
            # Another program loads the GPU: training pauses, then resumes.
            load = subprocess.Popen([sys.executable, "-c",
                                     "import torch, time\n"
                                     "a = torch.randn(8192, 8192, device='cuda')\n"
                                     "end = time.time() + 40\n"
                                     "while time.time() < end:\n"
                                     "    b = a @ a\n"
                                     "    torch.cuda.synchronize()\n"])
            started = now()
            s, paused_after = v.wait_for("paused for another program on the GPU",
                                         lambda s: s.get("state") == "paused", 60)
            v.record("another program on the GPU pauses training", f"after {paused_after:.1f} s: {s.get('text')}",
                     paused_after <= 10)
            load.wait()
            s, resumed_after = v.wait_for("training again after the other program",
                                          lambda s: s.get("state") == "training", 180)
            v.record("training resumes after it", f"{resumed_after:.1f} s after it ended "
                     f"({now() - started:.0f} s after it started)", True)

        # The core killed mid-task: restarted, nothing accepted lost.
        v.wait_for("training", lambda s: s.get("state") == "training" and s.get("step", 0) >= 1, 300)
        before = v.status()
        pids = core_pids(v.daemon.pid)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        s, seconds = v.wait_for("a task accepted after the core was killed",
                                lambda s: s.get("accepted", 0) > before.get("accepted", 0), 900 if cuda else 300)
        daemon_alive = v.daemon.poll() is None
        v.record("the core SIGKILLed mid-task", f"killed pid {pids} at step {before.get('step')} of task "
                 f"{before.get('task')}; next task accepted after {seconds:.0f} s, accepted "
                 f"{before.get('accepted')} -> {s.get('accepted')}, rejected {s.get('rejected')}, daemon "
                 f"{'alive' if daemon_alive else 'gone'}", bool(pids) and daemon_alive
                 and s.get("accepted", 0) > before.get("accepted", 0))

        # Snoozed: the core exits and gives its memory back.
        v.cli("snooze", "120")
        s, seconds = v.wait_for("the core gone while snoozed",
                                lambda s: not s.get("core_running", True) and not core_pids(v.daemon.pid), 120)
        text = f"core exited {seconds:.1f} s after snooze ({s.get('text')})"
        ok = True
        if cuda:
            time.sleep(2)
            used = gpu_memory_used()
            text += f"; GPU memory {used:.0f} MiB against {baseline:.0f} MiB before the daemon"
            ok = used <= baseline + 64
        v.record("snoozed: every byte of the device given back", text, ok)
        v.cli("resume")
    except Exception as error:  # a check that could not run is a failure too
        v.record("the run", str(error)[:400], False)
    finally:
        if sampler:
            sampler.stop()
        v.stop()

    print()
    print(f"Volunteer check on {args.device}, {now() - began:.0f} s:")
    print()
    print("| check | measured | passed |")
    print("| --- | --- | --- |")
    for check, measured, ok in v.rows:
        print(f"| {check} | {measured} | {ok} |")
    if v.failures:
        print("\nFAILED: " + "; ".join(v.failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
