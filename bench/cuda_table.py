#!/usr/bin/env python3
"""cuda_table.py — joins `moq bench linear --device cuda --json` lines with bench/torch_linear.py
lines of the same device call into the table of docs/PERFORMANCE.md (issue 12's targets).

  python3 bench/cuda_table.py MOQ.jsonl TORCH.jsonl [--full]   (short table: N = K = 8192 only)
"""
import json
import sys


def load(p):
    out = []
    for line in open(p):
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def main():
    moq, tor = load(sys.argv[1]), load(sys.argv[2])
    full = "--full" in sys.argv
    copy = next((t["gbs"] for t in tor if t.get("op") == "copy"), None)
    tref = {(t["op"], t["m"], t["n"], t["k"]): t for t in tor if "m" in t and "us" in t}
    print(f"GPU {tor[0].get('gpu', '?') if tor else '?'}, torch {tor[0].get('torch', '?') if tor else '?'}; "
          f"device copy {copy:.0f} GB/s (torch), {moq[0]['copy_gbs'] if moq else float('nan'):.0f} GB/s (moq)" if copy else "no torch copy number")
    print(f"{'algo':12} {'N x K':>11} {'M':>5} {'moq us':>9} {'W GB/s':>7} {'%copy':>6} {'TFLOP/s':>8} "
          f"{'bf16 us':>8} {'fp8 us':>8} {'x bf16':>7} {'x fp8':>6}  kernel")
    for r in moq:
        if not full and (r["n"], r["k"]) != (8192, 8192):
            continue
        key = (r["m"], r["n"], r["k"])
        b = tref.get(("bf16_matmul",) + key)
        f = tref.get(("scaled_mm_fp8_tensor",) + key)
        us = r["cold_us"]
        print(f"{r['algo']:12} {r['n']:>5}x{r['k']:<5} {r['m']:>5} {us:9.1f} {r['cold_weight_gbs']:7.0f} {100 * r['cold_of_copy']:5.0f}% "
              f"{r['cold_tflops']:8.1f} {b['us'] if b else float('nan'):8.1f} {f['us'] if f else float('nan'):8.1f} "
              f"{(b['us'] / us) if b else float('nan'):6.2f}x {(f['us'] / us) if f else float('nan'):5.2f}x  {r['kernel']}")
    if full:
        for t in tor:
            if "error" in t:
                print(f"torch {t['op']} m={t['m']} n={t['n']} k={t['k']}: {t['error']}")
        for t in tor:
            if t.get("op") == "scaled_mm_fp8_block128" and "us" in t:
                print(f"torch block128 m={t['m']} n={t['n']} k={t['k']}: {t['us']:.1f} us, {t['tflops']:.1f} TFLOP/s")


if __name__ == "__main__":
    main()
