#!/usr/bin/env python3
"""serve_bench.py — load test for `moq serve` (docs/PERFORMANCE.md "moq serve").

Drives C concurrent streaming clients against /v1/completions, each sending R requests one after
another (greedy, ignore nothing: every request asks for --max-tokens and the synthetic models rarely
stop early; the count comes from the usage chunk), and reports for each concurrency:
requests/s, output tokens/s (total), time to first token p50/p99, inter-token latency p50/p99;
with --server-pid also the output tokens per CPU-second of the server and, after the runs, the
server's CPU over --idle-s seconds with no request (a server that polls or spins shows it there).
Standard library only (http.client, threads).

  moq serve DIR --port 8080 --max-batch 8 &
  python3 bench/serve_bench.py --url http://127.0.0.1:8080 --clients 1,8 --requests 4 --max-tokens 64
"""
import argparse, http.client, json, os, threading, time, urllib.parse


def one_request(host, port, prompt, max_tokens, key):
    c = http.client.HTTPConnection(host, port, timeout=600)
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    hdr = {"Content-Type": "application/json"}
    if key:
        hdr["Authorization"] = "Bearer " + key
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, hdr)
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    times, n_tok = [], 0
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        d = json.loads(line[6:])
        if d.get("usage"):
            n_tok = d["usage"]["completion_tokens"]
        elif d["choices"] and d["choices"][0].get("finish_reason") is None:
            times.append(time.perf_counter())  # one chunk per token (moq serve sends empty deltas too)
    c.close()
    return t0, times, n_tok


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def cpu_s(pid):
    """utime + stime of the server process, seconds (None without --server-pid)."""
    if not pid:
        return None
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def run(url, clients, requests, max_tokens, key, pid):
    u = urllib.parse.urlparse(url)
    ttft, itl, toks, errs = [], [], [0], []
    lock = threading.Lock()

    def client(ci):
        for k in range(requests):
            try:
                t0, times, n = one_request(u.hostname, u.port, f"Client {ci} request {k}: once upon a time", max_tokens, key)
            except Exception as e:  # noqa: BLE001 - reported below
                with lock:
                    errs.append(str(e))
                continue
            with lock:
                toks[0] += n
                if times:
                    ttft.append(times[0] - t0)
                    itl.extend(b - a for a, b in zip(times, times[1:]))

    th = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t0, c0 = time.perf_counter(), cpu_s(pid)
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall, c1 = time.perf_counter() - t0, cpu_s(pid)
    return {"clients": clients, "requests": clients * requests - len(errs), "errors": len(errs), "wall_s": wall,
            "req_s": (clients * requests - len(errs)) / wall, "tok_s": toks[0] / wall,
            "ttft_p50_ms": 1e3 * pct(ttft, 50), "ttft_p99_ms": 1e3 * pct(ttft, 99),
            "itl_p50_ms": 1e3 * pct(itl, 50), "itl_p99_ms": 1e3 * pct(itl, 99),
            "tok_per_cpu_s": toks[0] / (c1 - c0) if pid and c1 > c0 else float("nan")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--clients", default="1,8", help="comma-separated concurrency levels")
    ap.add_argument("--requests", type=int, default=4, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--server-pid", type=int, default=0,
                    help="the server's pid: also report output tokens per CPU-second of the server (robust on a loaded machine)")
    ap.add_argument("--idle-s", type=float, default=2.0, help="with --server-pid: seconds to measure the idle server's CPU after the runs")
    a = ap.parse_args()
    rows = [run(a.url, int(c), a.requests, a.max_tokens, a.api_key, a.server_pid) for c in a.clients.split(",")]
    print(f"{'clients':>7} {'requests':>8} {'req/s':>7} {'out tok/s':>9} {'TTFT p50':>9} {'TTFT p99':>9} {'ITL p50':>8} {'ITL p99':>8} {'tok/cpu-s':>9}  (ms)")
    for r in rows:
        print(f"{r['clients']:>7} {r['requests']:>8} {r['req_s']:>7.2f} {r['tok_s']:>9.1f} {r['ttft_p50_ms']:>9.1f} {r['ttft_p99_ms']:>9.1f}"
              f" {r['itl_p50_ms']:>8.1f} {r['itl_p99_ms']:>8.1f} {r['tok_per_cpu_s']:>9.1f}" + (f"  errors: {r['errors']}" if r["errors"] else ""))
    if len(rows) > 1 and rows[0]["tok_s"] > 0:
        print(f"total output tok/s at {rows[-1]['clients']} clients / at {rows[0]['clients']}: {rows[-1]['tok_s'] / rows[0]['tok_s']:.2f}x"
              + (f"; per server CPU-second: {rows[-1]['tok_per_cpu_s'] / rows[0]['tok_per_cpu_s']:.2f}x" if a.server_pid else ""))
    if a.server_pid and a.idle_s > 0:
        c0 = cpu_s(a.server_pid)
        time.sleep(a.idle_s)
        idle = cpu_s(a.server_pid) - c0
        print(f"idle server: {1e3 * idle:.0f} ms CPU in {a.idle_s:g} s ({100 * idle / a.idle_s:.1f} % of one core; /proc resolution 10 ms)")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
