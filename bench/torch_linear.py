#!/usr/bin/env python3
"""torch_linear.py — what a user would run instead of moq on the same GPU, in the same device call
(issue 12): bf16 torch.matmul, torch._scaled_mm FP8 per-tensor, FP8 block-scaled (1x128 x 128x128)
where this PyTorch supports it, and the device copy bandwidth (bytes read + written).

Weights rotate over copies totalling >= 256 MiB (the H200's L2 is 60 MiB) so every call streams
them from HBM, as moq's "cold" runs do; times are CUDA-event means over back-to-back calls.
Prints one JSON object per line (also to --out) and nothing else.

  python3 bench/torch_linear.py [--out FILE] [--shapes 8192x8192,4096x14336,14336x4096] [--m 1,16,128,1024,8192]
"""
import argparse
import json
import sys

import torch


def timed(fn, reps):
    for _ in range(3):
        fn(0)
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for i in range(reps):
        fn(i)
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / reps * 1e-3  # seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--shapes", default="8192x8192,4096x14336,14336x4096")
    ap.add_argument("--m", default="1,16,128,1024,8192")
    args = ap.parse_args()
    out = open(args.out, "w") if args.out else None

    def emit(d):
        line = json.dumps(d)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(0)
    g = torch.Generator(device=dev).manual_seed(1)
    n = 1 << 28  # 1 GiB of f32
    s = torch.empty(n, device=dev).uniform_(generator=g)
    d = torch.empty_like(s)
    t = timed(lambda i: d.copy_(s), 10)
    emit({"gpu": name, "torch": torch.__version__, "op": "copy", "bytes": 2 * 4 * n, "us": t * 1e6, "gbs": 2 * 4 * n / t / 1e9})
    del s, d
    f8 = torch.float8_e4m3fn
    for shape in args.shapes.split(","):
        N, K = (int(v) for v in shape.split("x"))
        cop16 = max(2, (256 << 20) // (2 * N * K) + 1)
        cop8 = max(2, (256 << 20) // (N * K) + 1)
        W16 = [torch.empty(N, K, device=dev, dtype=torch.bfloat16).uniform_(-1, 1, generator=g) for _ in range(cop16)]
        W8 = [torch.empty(N, K, device=dev, dtype=torch.bfloat16).uniform_(-1, 1, generator=g).to(f8) for _ in range(cop8)]
        sw_blk = [torch.rand((K // 128, N // 128), device=dev, generator=g) + 0.5 for _ in range(cop8)]
        one = torch.ones((), device=dev)
        for M in (int(v) for v in args.m.split(",")):
            x = torch.empty(M, K, device=dev, dtype=torch.bfloat16).uniform_(-1, 1, generator=g)
            x8 = x.to(f8)
            flop = 2.0 * M * N * K
            reps = 50 if M >= 1024 else 200
            t = timed(lambda i: torch.matmul(x, W16[i % cop16].t()), reps)
            emit({"op": "bf16_matmul", "m": M, "n": N, "k": K, "us": t * 1e6, "weight_gbs": 2 * N * K / t / 1e9, "tflops": flop / t / 1e12})
            try:
                t = timed(lambda i: torch._scaled_mm(x8, W8[i % cop8].t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16), reps)
                emit({"op": "scaled_mm_fp8_tensor", "m": M, "n": N, "k": K, "us": t * 1e6, "weight_gbs": N * K / t / 1e9, "tflops": flop / t / 1e12})
            except Exception as e:  # noqa: BLE001 - report what this torch refuses
                emit({"op": "scaled_mm_fp8_tensor", "m": M, "n": N, "k": K, "error": str(e).splitlines()[0][:200]})
            # 1x128 activation groups [M, K/128] and 128x128 weight blocks [K/128, N/128]; torch's
            # sm_90 blockwise path wants both scale tensors outer-dim-major (stride 1 along M / N):
            # try that layout, then plain row-major.
            errs = []
            for layout in ("outer", "row"):
                try:
                    if layout == "outer":
                        sa = (torch.rand((K // 128, M), device=dev, generator=g) + 0.5).t()
                        sbs = [s.t().contiguous().t() for s in sw_blk]
                    else:
                        sa = torch.rand((M, K // 128), device=dev, generator=g) + 0.5
                        sbs = sw_blk
                    t = timed(lambda i: torch._scaled_mm(x8, W8[i % cop8].t(), scale_a=sa, scale_b=sbs[i % cop8], out_dtype=torch.bfloat16), reps)
                    emit({"op": "scaled_mm_fp8_block128", "layout": layout, "m": M, "n": N, "k": K, "us": t * 1e6,
                          "weight_gbs": N * K / t / 1e9, "tflops": flop / t / 1e12})
                    break
                except Exception as e:  # noqa: BLE001 - report what this torch refuses
                    errs.append(layout + ": " + str(e).splitlines()[0][:160])
            else:
                emit({"op": "scaled_mm_fp8_block128", "m": M, "n": N, "k": K, "error": "; ".join(errs)})
        del W16, W8, sw_blk
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
