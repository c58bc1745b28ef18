#!/usr/bin/env python3
# ncu_step_summary.py — per-kernel times of the last decode step in an ncu CSV written by
# scripts/device_all.sh PROFILE=1 (ncu --csv --page raw --metrics gpu__time_duration.sum): the step
# starts at the last embedding kernel; kernels are grouped by name and launch shape, largest first.
# Usage: scripts/ncu_step_summary.py profile_FP8.csv [profile_NVFP4.csv ...]
import csv,collections,sys
for f in sys.argv[1:]:
    lines=open(f).read().splitlines()
    i=[k for k,l in enumerate(lines) if l.startswith('"ID"')][0]
    rows=list(csv.reader(lines[i:]))
    hdr=rows[0]; units=rows[1]; rows=rows[2:] if not rows[1][0].isdigit() else rows[1:]
    ki=hdr.index('Kernel Name'); ti=hdr.index('gpu__time_duration.sum'); gi=hdr.index('Grid Size'); bi=hdr.index('Block Size')
    val=lambda r: float(r[ti].replace(',',''))
    print(f, len(rows), units[ti])
    names=[r[ki] for r in rows]
    emb=[k for k,n in enumerate(names) if 'embed' in n]
    print('embed at',emb)
    for s,e in [(emb[-1],len(rows))]:
        step=rows[s:e]
        tot=sum(val(r) for r in step)
        print('step kernels',len(step),'total us',tot/1000)
        agg=collections.OrderedDict()
        for r in step:
            n=r[ki][:90]+' g'+r[gi]+' b'+r[bi]
            a=agg.setdefault(n,[0,0.0]); a[0]+=1; a[1]+=val(r)/1000
        for n,(c,t) in sorted(agg.items(),key=lambda x:-x[1][1]):
            print(f'{t:9.1f} us {c:4d}x {t/c:7.2f} {n}')
