#!/usr/bin/env python3
"""cpu_tier_table.py — issue 14's CPU targets on this machine, one command, markdown tables out.

For every linear format: decode (M = 1, N = 4096, K = 14336: more weight than the L3) with cold
weights at 1 and 2 threads against the same run's DRAM read bandwidth (`cold_of_dram`), and prefill
(M = 512, N = K = 4096, one thread) against OpenBLAS sgemm on the dequantized F32 weights by process
CPU time (median and minimum of --reps runs: the minimum is the robust figure on a shared machine).
With --model DIR (repeatable): `moq bench model` decode against its bandwidth bound at 1 and 2
threads, and the load time per GB of checkpoint.

  usage: bench/cpu_tier_table.py [--moq build/moq] [--mask 1] [--rounds 2] [--model DIR ...]
         [--skip decode,prefill,model]
  --mask 1 sets MOQ_CPU_MASK=1 (the AVX2 tier on an AVX-512 machine).
Each measurement runs --rounds times, interleaved (formats inside rounds) so all see the same load;
the tables give every round's value.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

ALGOS = ["nvfp4_w4a4", "nvfp4_w4a16", "fp8_tensor", "fp8_row", "fp8_blk128", "mxfp8", "bf16", "f16"]


def run(cmd, env):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"cpu_tier_table: {' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-400:]}")
    return p.stdout


def bench_linear(moq, env, algo, m, n, k, threads, extra):
    out = run([moq, "bench", "linear", "--algo", algo, "--m", str(m), "--n", str(n), "--k", str(k),
               "--threads", str(threads), "--json"] + extra, env)
    return json.loads(out)


def bench_model(moq, env, d, threads):
    out = run([moq, "bench", "model", d, "--prompt", "16", "--decode", "24", "--threads", str(threads)], env)
    r = {}
    for key, pat in (("of_bound", r"decode at ([0-9.]+) % of it"), ("tok_s", r"decode\s+\d+ tokens\s+([0-9.]+) tok/s"),
                     ("dram", r"DRAM read ([0-9.]+) GB/s")):
        m = re.search(pat, out)
        if not m:
            sys.exit(f"cpu_tier_table: moq bench model {d}: no line matching {pat!r} in its output:\n{out[-600:]}")
        r[key] = float(m.group(1))
    return r, out


def load_line(moq, env, d, threads):
    p = subprocess.run([moq, "bench", "model", d, "--prompt", "1", "--decode", "1", "--threads", str(threads)],
                       env=env, capture_output=True, text=True)
    text = p.stdout + p.stderr
    m = re.search(r"load ([0-9.]+) s .*cpu ([0-9.]+) s", text)
    if p.returncode != 0 or not m:
        sys.exit(f"cpu_tier_table: moq bench model {d} --prompt 1: exit {p.returncode}, expected a 'load S s ... cpu S s' line:\n{text[-600:]}")
    return float(m.group(1)), float(m.group(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moq", default="build/moq")
    ap.add_argument("--mask", default=None)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--model", action="append", default=[])
    ap.add_argument("--skip", default="")
    a = ap.parse_args()
    env = dict(os.environ)
    if a.mask:
        env["MOQ_CPU_MASK"] = a.mask
    skip = set(a.skip.split(",")) if a.skip else set()
    cpu = open("/proc/cpuinfo").read()
    model = re.search(r"model name\s*:\s*(.*)", cpu).group(1)
    fam = re.search(r"cpu family\s*:\s*(\d+)", cpu).group(1)
    mod = re.search(r"\nmodel\s*:\s*(\d+)", cpu).group(1)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {model} family {fam} model {mod}, "
          f"MOQ_CPU_MASK={a.mask or 'unset'}, load average {open('/proc/loadavg').read().split()[0]}")

    if "decode" not in skip:
        rows = {}
        for _ in range(a.rounds):
            for algo in ALGOS:
                for t in (1, 2):
                    r = bench_linear(a.moq, env, algo, 1, 4096, 14336, t, [])
                    rows.setdefault((algo, t), []).append(r)
        print("\n| pair | row | threads | cold weight GB/s | DRAM read GB/s | of DRAM (each round) |")
        print("|---|---|---|---|---|---|")
        for (algo, t), rs in rows.items():
            print(f"| {algo} | {rs[0]['kernel']} | {t} | {', '.join('%.1f' % r['cold_weight_gbs'] for r in rs)} | "
                  f"{', '.join('%.1f' % r['dram_read_gbs'] for r in rs)} | "
                  f"{', '.join('%.0f %%' % (100 * r['cold_of_dram']) for r in rs)} |")

    if "prefill" not in skip:
        rows = {}
        for _ in range(a.rounds):
            for algo in ALGOS:
                rows.setdefault(algo, []).append(bench_linear(a.moq, env, algo, 512, 4096, 4096, 1, ["--reps", "8"]))
        print("\n| pair | row | moq CPU ms (min) | OpenBLAS CPU ms (min) | ratio by min (each round) | ratio by median |")
        print("|---|---|---|---|---|---|")
        for algo, rs in rows.items():
            print(f"| {algo} | {rs[0]['kernel']} | {', '.join('%.1f' % (r['hot_cpu_min_us'] / 1e3) for r in rs)} | "
                  f"{', '.join('%.1f' % (r['openblas_hot_cpu_min_us'] / 1e3) for r in rs)} | "
                  f"{', '.join('%.2fx' % r['speedup_vs_openblas_hot_cpu_min'] for r in rs)} | "
                  f"{', '.join('%.2fx' % r['speedup_vs_openblas_hot_cpu'] for r in rs)} |")

    if "model" not in skip and a.model:
        print("\n| checkpoint | threads | decode tok/s | DRAM read GB/s | of the bound (each round) |")
        print("|---|---|---|---|---|")
        for d in a.model:
            for t in (1, 2):
                rs = [bench_model(a.moq, env, d, t)[0] for _ in range(a.rounds)]
                print(f"| {d} | {t} | {', '.join('%.1f' % r['tok_s'] for r in rs)} | {', '.join('%.1f' % r['dram'] for r in rs)} | "
                      f"{', '.join('%.1f %%' % r['of_bound'] for r in rs)} |")
        print("\n| checkpoint | GB | load wall s (each round) | load CPU s | wall s per GB |")
        print("|---|---|---|---|---|")
        for d in a.model:
            gb = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".safetensors")) / 1e9
            ls = [load_line(a.moq, env, d, 2) for _ in range(a.rounds)]
            print(f"| {d} | {gb:.2f} | {', '.join('%.2f' % l[0] for l in ls)} | {', '.join('%.2f' % l[1] for l in ls)} | "
                  f"{', '.join('%.2f' % (l[0] / gb) for l in ls)} |")


if __name__ == "__main__":
    main()
