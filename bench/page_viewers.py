#!/usr/bin/python3
"""The public page under load (issue 29, item 6): a real crowdtrain-server
--http with one real volunteer (crowdtrain-worker join ENDPOINT) training a
tiny model; round time with no viewer, then with VIEWERS page viewers that
poll the page's API as page.js does (the summary and metrics?since= every
5 s, staggered), each from its own loopback address (127.0.x.y, so the
per-address rate limit sees separate clients). Prints a table: rounds
closed and their median/max interval, requests, p50/p99/max response time,
non-200 answers.

    bench/page_viewers.py BUILD_DIR [VIEWERS] [ROUNDS]
Standard library only; loopback only; bounded in time."""
import asyncio, json, os, statistics, subprocess, sys, tempfile, time

build = os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else "build/ci")
viewers = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 8
bin_dir = os.path.join(build, "bin")
corpus = os.path.realpath(os.path.join(os.path.dirname(__file__), "../../shared/data/tinyshakespeare.txt"))
work = tempfile.mkdtemp(prefix="crowdtrain-page-bench.")
procs = []


def start(args, **kw):
    p = subprocess.Popen(args, **kw)
    procs.append(p)
    return p


async def get(host, port, path, local):
    reader, writer = await asyncio.open_connection(host, port, local_addr=(local, 0))
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    return int(data.split(b" ", 2)[1]), data


async def viewer(i, host, port, project, until, latencies, statuses):
    local = f"127.0.{1 + i // 250}.{1 + i % 250}"
    await asyncio.sleep(5.0 * i / max(1, viewers))  # staggered, as page loads are
    since = 0
    while time.monotonic() < until:
        for path in (f"/api/projects/{project}", f"/api/projects/{project}/metrics?since={since}"):
            t0 = time.monotonic()
            try:
                status, data = await get(host, port, path, local)
            except OSError:
                status, data = -1, b""
            latencies.append(time.monotonic() - t0)
            statuses[status] = statuses.get(status, 0) + 1
            if status == 200 and "metrics" in path:
                rows = json.loads(data.split(b"\r\n\r\n", 1)[1]).get("rows", [])
                since = rows[-1][0] if rows else since
        await asyncio.sleep(5.0)


def version(api):
    import urllib.error, urllib.request
    try:
        with urllib.request.urlopen(api, timeout=10) as r:
            return json.load(r)["version"]
    except urllib.error.HTTPError:  # before the loop's first snapshot, or rate-limited
        return -1


def round_times(api_metrics, first, last):
    import urllib.request
    with urllib.request.urlopen(api_metrics + "?since=0", timeout=10) as r:
        rows = json.load(r)["rows"]
    closes = {}
    for row in rows:
        closes.setdefault(row[0], row[5])
    times = [closes[v] for v in range(first, last + 1) if v in closes]
    return [(b - a) / 1000 for a, b in zip(times, times[1:])]


def wait_rounds(api, target, limit_s):
    until = time.monotonic() + limit_s
    while time.monotonic() < until:
        if version(api) >= target:
            return True
        time.sleep(0.5)
    return False


def main():
    subprocess.run([f"{bin_dir}/crowdtrain-prepare", corpus, "--tokenizer", "char", "--val-fraction", "0.1",
                    "--out", f"{work}/data"], check=True, capture_output=True)
    spec = {"name": "bench", "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64, "vocab_size": 65},
            "data": "data", "inner": {"steps": 20, "batch_size": 8}, "round": {"token_target": 10240},
            "checkpoints": {"every_rounds": 4, "keep_last": 2}, "validation": {"batches": 4, "batch_size": 8}}
    with open(f"{work}/bench.json", "w") as f:
        json.dump(spec, f)
    server = start([f"{bin_dir}/crowdtrain-server", f"{work}/bench.json", "--state", f"{work}/state", "--bind",
                    "tcp://127.0.0.1:*", "--publish", "tcp://127.0.0.1:*", "--http", "127.0.0.1:0", "--threads", "1"],
                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    first = json.loads(server.stdout.readline())
    page = first["page"]
    host, port = page[len("http://"):-1].rsplit(":", 1)
    api = f"{page}api/projects/bench"
    env = dict(os.environ, XDG_DATA_HOME=f"{work}/volunteer")
    start([f"{bin_dir}/crowdtrain-worker", "join", first["requests"], "bench", "--server-key", first["public_key"],
           "--threads", "1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    v0 = 1
    if not wait_rounds(api, v0 + 1, 300):
        sys.exit("no round closed in 300 s")
    for label, count in (("none", 0), (str(viewers), viewers)):
        start_version = version(api)
        latencies, statuses = [], {}
        until = time.monotonic() + 600

        async def run():
            tasks = [asyncio.create_task(viewer(i, host, int(port), "bench", until, latencies, statuses))
                     for i in range(count)]
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, wait_rounds, api, start_version + rounds, 600)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run(run())
        end_version = version(api)
        intervals = round_times(f"{api}/metrics", start_version, end_version)
        lat = sorted(latencies)
        pct = lambda q: 1000 * lat[min(len(lat) - 1, int(q * len(lat)))] if lat else float("nan")
        rows.append((label, len(intervals), statistics.median(intervals) if intervals else float("nan"),
                     max(intervals) if intervals else float("nan"), len(lat), pct(0.5), pct(0.99),
                     1000 * lat[-1] if lat else float("nan"),
                     sum(n for s, n in statuses.items() if s != 200)))
    print("| viewers | rounds | round median (s) | round max (s) | requests | p50 (ms) | p99 (ms) | max (ms) | non-200 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]:.2f} | {r[3]:.2f} | {r[4]} | {r[5]:.1f} | {r[6]:.1f} | {r[7]:.1f} | {r[8]} |")


try:
    main()
finally:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
    subprocess.run(["rm", "-rf", work])
