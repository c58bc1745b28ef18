#!/usr/bin/env python3
"""ref.py — an independent reference for the SmolLM2-135M-Instruct conversion (moq convert-gguf).

Shares no code with moq. Reads the GGUF file with llama.cpp's own `gguf` Python package (its
dequantizers), builds the tokenizer from the GGUF metadata with the Hugging Face `tokenizers` API,
renders the chat prompt with jinja2 from the GGUF's own template, and runs a float64 numpy forward
pass of the llama architecture **in llama.cpp's layout**: Q/K rows as stored in the GGUF (permuted)
with llama.cpp's interleaved-pair RoPE (rope type NORM). moq undoes the permutation and uses Hugging
Face's rotate-half RoPE; the two agree only if the un-permutation is right. Weights are rounded to
bf16 (nearest even, done here with integer arithmetic) as `moq convert-gguf --dtype bf16` stores them.

  usage: python3 tests/golden/smollm2/ref.py GGUF TEXT > tests/golden/smollm2/expected.json
         (pip install numpy gguf tokenizers jinja2; about a minute on two cores)

Writes JSON: the ids of TOKENIZER_CASES, the chat prompt's ids and greedy continuation (with each step's top-1/top-2 logit
margin), the text's token ids, and the perplexity over TEXT in windows of 256 tokens, each window
scored from its second token on (as `moq eval --ctx 256`), for the whole text and for its first
HEAD_LINES lines.
"""
import hashlib
import json
import sys

import jinja2
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

MAGIC = "moq-smollm2-ref"
VERSION = 1
PROMPT = "What is the capital of France?"
N_GEN = 24
WINDOW = 256
# texts whose ids the test compares: digits (split one by one), whitespace runs, contractions,
# non-Latin scripts, emoji, special tokens inside text, and bytes the vocabulary lacks (dropped)
TOKENIZER_CASES = [
    "In 1813, 42 ships carried 1,234,567 pounds.", "  two  spaces\tand\ttabs\n\n\nnewlines  ",
    "I'm sure you're right; we'll see.", "Café naïve 日本語のテキスト Русский текст", "emoji 😀👍🏽 ❤️",
    "<|im_start|>user\nhi<|im_end|>", "a\x04b !\x04! (\x06) \x13\x14", "def f(x):\n    return x ** 2  # sq",
]
HEAD_LINES = 24  # a short prefix of the text for the test under sanitizers


def field(r, key):
    f = r.fields[key]
    vals = [f.parts[i] for i in f.data]
    if f.types[0].name == "STRING":
        return bytes(vals[0]).decode()
    if f.types[0].name == "ARRAY":
        if f.types[1].name == "STRING":
            return [bytes(v).decode() for v in vals]
        return [v.tolist()[0] for v in vals]
    return vals[0].tolist()[0]


def bf16(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def main():
    path, text_path = sys.argv[1], sys.argv[2]
    r = GGUFReader(path)
    hp = {k: field(r, "llama." + k) for k in ["block_count", "embedding_length", "attention.head_count",
                                                "attention.head_count_kv", "rope.freq_base",
                                                "attention.layer_norm_rms_epsilon"]}
    L, H, NH, NKV = hp["block_count"], hp["embedding_length"], hp["attention.head_count"], hp["attention.head_count_kv"]
    D = H // NH
    theta, eps = hp["rope.freq_base"], hp["attention.layer_norm_rms_epsilon"]
    W = {}
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type)  # numpy shape = reversed ggml ne (rows, cols)
        W[t.name] = bf16(np.asarray(a, dtype=np.float32).reshape([int(x) for x in reversed(t.shape.tolist())]))
    emb = W["token_embd.weight"]
    out = W.get("output.weight", emb)

    # tokenizer from the GGUF metadata: byte-level BPE, Digits(individual) + ByteLevel (smollm)
    tokens = field(r, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ")) for m in field(r, "tokenizer.ggml.merges")]
    types = field(r, "tokenizer.ggml.token_type")
    assert field(r, "tokenizer.ggml.pre") == "smollm"
    tok = Tokenizer(models.BPE({s: i for i, s in enumerate(tokens)}, merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([tokens[i] for i, ty in enumerate(types) if ty == 3])
    eos = field(r, "tokenizer.ggml.eos_token_id")

    # llama.cpp RoPE NORM: rotate adjacent pairs (2i, 2i+1) with frequency theta^(-2i/D)
    inv = theta ** (-np.arange(0, D, 2, dtype=np.float64) / D)

    def rope(x, pos):  # x [T, heads, D]
        ang = pos[:, None] * inv[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        y = np.empty_like(x)
        y[..., 0::2] = x0 * c - x1 * s
        y[..., 1::2] = x0 * s + x1 * c
        return y

    def rms(x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

    def forward(ids):
        T = len(ids)
        pos = np.arange(T, dtype=np.float64)
        x = emb[ids]
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for l in range(L):
            p = f"blk.{l}."
            h = rms(x, W[p + "attn_norm.weight"])
            q = rope((h @ W[p + "attn_q.weight"].T).reshape(T, NH, D), pos)
            k = rope((h @ W[p + "attn_k.weight"].T).reshape(T, NKV, D), pos)
            v = (h @ W[p + "attn_v.weight"].T).reshape(T, NKV, D)
            k = np.repeat(k, NH // NKV, axis=1)
            v = np.repeat(v, NH // NKV, axis=1)
            s = np.einsum("thd,shd->hts", q, k) / np.sqrt(D) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            a = np.einsum("hts,shd->thd", s, v).reshape(T, NH * D)
            x = x + a @ W[p + "attn_output.weight"].T
            h = rms(x, W[p + "ffn_norm.weight"])
            g = h @ W[p + "ffn_gate.weight"].T
            u = h @ W[p + "ffn_up.weight"].T
            x = x + ((g / (1 + np.exp(-g))) * u) @ W[p + "ffn_down.weight"].T
        return rms(x, W["output_norm.weight"]) @ out.T

    tmpl = jinja2.Environment().from_string(field(r, "tokenizer.chat_template"))
    prompt = tmpl.render(messages=[{"role": "user", "content": PROMPT}], add_generation_prompt=True)
    ids = tok.encode(prompt).ids
    prompt_ids = list(ids)
    gen, margins = [], []
    for _ in range(N_GEN):
        lg = forward(np.array(ids))[-1]
        top = np.argsort(lg)[::-1][:2]
        gen.append(int(top[0]))
        margins.append(float(lg[top[0]] - lg[top[1]]))
        if top[0] == eos:
            break
        ids.append(int(top[0]))

    def perplexity(ids):
        nll, scored = 0.0, 0
        for w0 in range(0, len(ids) - 1, WINDOW):
            w = np.array(ids[w0:w0 + WINDOW])
            if len(w) < 2:
                break
            lg = forward(w)[:-1]
            m = lg.max(-1, keepdims=True)
            lp = lg - m - np.log(np.exp(lg - m).sum(-1, keepdims=True))
            nll -= lp[np.arange(len(w) - 1), w[1:]].sum()
            scored += len(w) - 1
        return float(np.exp(nll / scored)), scored

    text = open(text_path, encoding="utf-8").read()
    tids = tok.encode(text).ids
    ppl, scored = perplexity(tids)
    head = "".join(text.splitlines(keepends=True)[:HEAD_LINES])  # `head -n HEAD_LINES TEXT`
    hids = tok.encode(head).ids
    ppl_head, scored_head = perplexity(hids)
    cases = [tok.encode(c).ids for c in TOKENIZER_CASES]
    json.dump({
        "magic": MAGIC, "version": VERSION,
        "generator": "tests/golden/smollm2/ref.py (numpy float64, gguf dequantize, tokenizers, jinja2)",
        "gguf_sha256": hashlib.sha256(open(path, "rb").read()).hexdigest(),
        "prompt": PROMPT, "prompt_ids": prompt_ids,
        "greedy_ids": gen, "greedy_text": tok.decode(gen, skip_special_tokens=False), "greedy_margins": margins,
        "text_file": text_path, "text_n_tokens": len(tids), "text_ids": tids,
        "window": WINDOW, "scored": scored, "ppl": ppl,
        "tokenizer_cases_hex": [c.encode().hex() for c in TOKENIZER_CASES], "tokenizer_cases_ids": cases,
        "head_lines": HEAD_LINES, "head_n_tokens": len(hids), "head_scored": scored_head, "ppl_head": ppl_head,
    }, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
