#!/usr/bin/env python3
"""gen.py — expected encodings of the byte-level tokenizer `moq synth` writes, by Hugging Face
`tokenizers` (PyPI), which shares no code with moq.

  usage: python3 tests/golden/synth_tokenizer/gen.py build/moq      (pip install tokenizers)

Runs `moq synth` (default vocab 512) into a temporary directory, loads its tokenizer.json with
tokenizers.Tokenizer.from_file and writes expected.tsv next to this script:
  line 1: "sha256<TAB><sha256 of tokenizer.json><TAB>tokenizers <version>"
  then one line per case: "<ids, space-separated><TAB><text>" (encode without special tokens;
  decode(ids) == text is asserted here).
tests/e2e/synth_bench_cli.sh compares `moq tokenize` with these ids and the file hash with the
tokenizer synth writes now (a different hash means synth changed: re-run this script).
"""
import hashlib
import os
import subprocess
import sys
import tempfile

from tokenizers import Tokenizer, __version__

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = ["hi", "hello world", "Hello, World!", "the quick brown fox jumps over the lazy dog",
         "  two  spaces", "digits 0123456789 and 3.14", "héllo wörld", "日本語", "emoji 🙂 ok",
         "<s>special</s> text", "a", "zz zz zzz", "MiXeD CaSe abc", "x" * 40]


def main():
    moq = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([moq, "synth", os.path.join(d, "ck")], check=True, stdout=subprocess.DEVNULL)
        path = os.path.join(d, "ck", "tokenizer.json")
        sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
        tok = Tokenizer.from_file(path)
        lines = ["sha256\t%s\ttokenizers %s" % (sha, __version__)]
        for text in CASES:
            ids = tok.encode(text, add_special_tokens=False).ids
            assert tok.decode(ids, skip_special_tokens=False) in (text, text.replace("<s>", "").replace("</s>", "")), text
            lines.append("%s\t%s" % (" ".join(map(str, ids)), text))
    with open(os.path.join(HERE, "expected.tsv"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("%d cases, tokenizer.json sha256 %s" % (len(CASES), sha))


if __name__ == "__main__":
    main()
