#!/usr/bin/env python3
"""gen.py — builds the tokenizer golden files used by tests/model/test_tokenizer.c, test_chat.c and
tests/fuzz/fuzz_tokenizer.c. Shares no code with moq: token ids come from the Hugging Face
`tokenizers` package, chat texts from `jinja2` rendering the models' chat templates, lossy UTF-8
decoding from Python's bytes.decode(errors="replace").

  usage: python3 tests/golden/tokenizer/gen.py      (pip install tokenizers jinja2)

Writes, next to this script:
  <style>/tokenizer.json          byte-level BPE trained here on TRAIN_TEXT, one per style:
      gpt2     ByteLevel pre-tokenizer (GPT-2 regex); merges written as "a b" strings
      llama3   Split(Llama-3 regex) + ByteLevel, ignore_merges, TemplateProcessing adding bos
      qwen2    NFC normalizer + Split(Qwen2 regex) + ByteLevel
      smollm2  Digits(individual) + ByteLevel (GPT-2 regex), as SmolLM2 / StarCoder
      tiny     hand-written vocab + merges (ignore_merges, merge order and equal-rank ties), and
               the same with the Llama-3 / Qwen2 Split and Digits pre-tokenizers (tiny_*): merges
               across digits and whitespace make every split boundary visible in the ids
  <style>/tokenizer_config.json   bos/eos tokens and the model's chat template
  <style>/config.json             bos_token_id / eos_token_id
  expected.json                   encodings of CASES per style, chat renderings, lossy UTF-8 cases
Texts are stored as hex (bytes) so that NUL and controls survive every JSON reader.
"""
import hashlib
import json
import os
import random

import jinja2
import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC = "moq-tokenizer-golden"
VERSION = 1

GPT2_RE = None  # ByteLevel(use_regex=True) carries the GPT-2 pattern itself
LLAMA3_RE = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2_RE = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

TRAIN_TEXT = """The quick brown fox jumps over the lazy dog. I'm sure you're right; we'll see, they've gone, he'd know.
It's 2024 and the numbers 1234567, 3.14159, 42, 1000000 and 2718281828 appear often in text.
Hello world! Hello again, world. HELLO WORLD. hello, hello, hello.
def main(args):\n    for i in range(10):\n        print(i ** 2)  # squares\n    return 0\n
    indented   text\twith\ttabs\r\nand windows newlines\n\n\nand blank lines.
Café, naïve, résumé, façade, Ünïcödé, straße, smørrebrød, ÅÄÖ åäö.
日本語のテキストです。東京は日本の首都です。中文字符和标点符号。我们喜欢学习。
한국어 문장입니다. Русский текст и Кириллица. Ελληνικά γράμματα αβγ ΑΒΓ. नमस्ते दुनिया. مرحبا بالعالم.
Emoji: 😀 😀😀 👍 👍🏽 ❤️ 👨‍👩‍👧 🎉🎉 🚀 — dashes – and “quotes” ‘single’ … ellipsis.
<html><body class="main">x &amp; y</body></html> {"key": [1, 2, 3], "ok": true}
""" * 3

# Special tokens per style, in id order after training (trainer puts them first).
STYLES = {
    "gpt2":    {"special": ["<|endoftext|>"], "added": ["moqtok"], "bos": "<|endoftext|>", "eos": "<|endoftext|>"},
    "llama3":  {"special": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                            "<|eot_id|>"], "added": [], "bos": "<|begin_of_text|>", "eos": "<|eot_id|>"},
    "qwen2":   {"special": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], "added": [], "bos": None,
                "eos": "<|im_end|>"},
    "smollm2": {"special": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], "added": [], "bos": "<|im_start|>",
                "eos": "<|im_end|>"},
    "tiny":    {"special": [], "added": [], "bos": None, "eos": None},
    "tiny_llama3": {"special": [], "added": [], "bos": None, "eos": None},
    "tiny_qwen2": {"special": [], "added": [], "bos": None, "eos": None},
    "tiny_digits": {"special": [], "added": [], "bos": None, "eos": None},
}

# Chat templates as published with the models (tokenizer_config.json "chat_template").
TEMPLATES = {
    "gpt2": None,
    "tiny": None, "tiny_llama3": None, "tiny_qwen2": None, "tiny_digits": None,
    "llama3": ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
               "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
               "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
               "{{ content }}{% endfor %}{% if add_generation_prompt %}"
               "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"),
    "qwen2": ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
              "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
              "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
              "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"),
    "smollm2": ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                "{% endif %}"),
}

# Templates of other models whose rendering moq must reproduce from the template text alone
# (Qwen2.5: default system prompt inside a template with a tool-calling branch; written out from the
# published tokenizer_config.json, with the tool branch shortened).
EXTRA_TEMPLATES = {
    "qwen2.5": ("{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n"
                "        {{- messages[0]['content'] }}\n    {%- else %}\n"
                "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n    {%- endif %}\n"
                "    {{- '<|im_end|>\\n' }}\n{%- else %}\n    {%- if messages[0]['role'] == 'system' %}\n"
                "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n"
                "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n"
                "    {%- endif %}\n{%- endif %}\n{%- for message in messages %}\n"
                "    {%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or (message.role == 'assistant') %}\n"
                "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
                "    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n"),
}

CASES = [
    "", " ", "  ", "\n", "a", "Hello world", "Hello world!",
    "I'M here, you're THERE; we'll've 'tis it's IT'S 'Re 'rE",
    "'s's 'S 'ſ x'll'd'm", "'Sx 'ſx 'REx 'rEx 'sx x'S x'ſx x'Sx x'REx", 
    "numbers 1234567 and 3.14159, 42nd, 12345678901234567890",
    "  leading and trailing spaces   ", "multiple     spaces    between",
    "tabs\tand\nnewlines\r\n\n\nmore\n", " \n \n  x \n", "\r\r\n\n\r",
    "héllo wörld café naïve ÅÄÖ straße",
    "日本語のテキスト、中文字符。", "한국어 문장", "Кириллица ΑΒΓ αβγ", "नमस्ते दुनिया", "مرحبا",
    "emoji 😀👍🏽 family 👨‍👩‍👧 ❤️🎉🚀",
    "\u00a0nbsp\u3000ideographic\u2028ls\u0085nel\u200bzw",
    "a\x00b\x1fc\x1c\x1c d\x7f",
    "def f(x):\n    return x**2  # comment\n",
    "<html><body class=\"main\">x &amp; y</body></html>",
    "¼ ½ Ⅻ ² ３４５ ٣٤٥",
    "x<|endoftext|>y <|endoftext|> <|endoftext",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<|im_start|><|im_start|><|im_end|>",
    "xmoqtoky moqtok moqto",
    "ﬁ ﬀ ℌ Å Ω",
    "abc abcd aaaaa aaaa aaa abab bcbc xabcx",
    "ab" * 1500, " " * 1200 + "x", "1" * 100 + " " + "\n" * 50, "😀" * 300,
]
# A seeded random mix of everything above (differential test: whatever the mix, the ids must agree).
MIX_POOL = list("abcxyzABCXYZ'sStTmMdDlLrReEvV0123456789 .,;:!?-_()[]{}<>|/\\\"#@") + [
    " ", "  ", "\n", "\r\n", "\t", "\u00a0", "\u3000", "\u2028", "\u0085", "\x1c", "é", "e\u0301", "\u0301", "\u0323",
    "ſ", "ß", "日", "本", "한", "\u1100\u1161", "Ж", "λ", "٣", "３", "½", "Ⅻ", "😀", "👍🏽", "\u200d", "\u212b", "\u0958",
    "<|im_start|>", "<|endoftext|>", "<|eot_id|>", "moqtok", "'ll", "'RE", "'ſ", "aaaa", "abc", "123", "1234567"]
_rng = random.Random(7)
CASES.append("".join(_rng.choice(MIX_POOL) for _ in range(1000)))

# Not NFC: the qwen2 tokenizer (NFC normalizer) changes them (composition, reordering, Hangul jamo,
# singletons, exclusions, leading combining marks); the others keep them as they are.
NOT_NFC = ["e\u0301", "\u212b", "\u1100\u1161\u11a8 \u1100\u1161 \uac00\u11a8", "a\u0323\u0302 a\u0302\u0323",
           "\u0921\u093c \u0958 \u0929", "\u0344x \u0345\u0300", "e\u0301\u0301 \u00e9\u0301 A\u030a\u0301",
           "q\u0307\u0323 \u1e0b\u0323", "\u2126 \u00c5 \u0390", "caf\u0065\u0301 <|im_start|>\u0301 x"]

LOSSY = [b"", b"abc", b"\xc3", b"\xc3\xa9", b"\xe6\x97", b"\xe6\x97\xa5", b"\xf0\x9f\x98", b"\xf0\x9f\x98\x80",
         b"\xff", b"\x80abc", b"\xc3\x28", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
         b"\xf0\x9f\x98x", b"\xc0\xaf", b"a\xf1\x80\x80\xe1\x80\xc2b", b"\xf8\x88\x80\x80\x80"]

CHATS = [
    [{"role": "user", "content": "Hi there!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "  And 3+3?\n"}],
    [{"role": "user", "content": "\x1f multi\nline\t "}, {"role": "assistant", "content": "ok 😀"}],
]


def build_tiny(style):
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    byte_chars = sorted(alphabet, key=lambda ch: ord(ch))
    vocab = {ch: i for i, ch in enumerate(byte_chars)}
    G, C = "\u0120", "\u010a"  # byte-level space and newline
    merges = [("b", "c"), ("a", "b"), ("a", "a"), ("aa", "a"), (G, "a"), ("1", "2"), ("12", "3"), ("3", "4"),
              (G, G), (C, C), (G, "1"), ("'", "s"), (G, "'"), (G, C), (G + G, G), (",", G), ("x", "'"),
              ("\u00c3", "\u00a9"), ("x", "1"), ("S", "x"), ("\u00bf", "x"), ("E", "x")]
    # "abc" is in the vocabulary but no merge builds it: only ignore_merges can produce it.
    for tok in ["abc"] + ["".join(m) for m in merges]:
        vocab.setdefault(tok, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=(style == "tiny")))
    if style == "tiny":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif style == "tiny_digits":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_RE if style == "tiny_llama3" else QWEN2_RE), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    return tok


def build(style):
    spec = STYLES[style]
    if style.startswith("tiny"):
        return build_tiny(style)
    bpe = models.BPE(ignore_merges=(style == "llama3"))
    tok = Tokenizer(bpe)
    if style == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif style == "llama3":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_RE), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    elif style == "qwen2":
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_RE), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    elif style == "smollm2":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=900, min_frequency=2, show_progress=False,
                                  special_tokens=spec["special"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([TRAIN_TEXT], trainer=trainer)
    if spec["added"]:
        tok.add_tokens(spec["added"])
    if style == "llama3":
        bos = spec["bos"]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main():
    out = {"magic": MAGIC, "version": VERSION, "tokenizers_version": tokenizers.__version__,
           "jinja2_version": jinja2.__version__, "encode": [], "chat": [], "lossy": []}
    for style in STYLES:
        spec = STYLES[style]
        tok = build(style)
        d = os.path.join(HERE, style)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "tokenizer.json")
        tok.save(path)
        if style == "gpt2":  # the older merges format: "a b" strings; reload must give the same tokenizer
            j = json.load(open(path, encoding="utf-8"))
            j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
            write_json(path, j)
        tok = Tokenizer.from_file(path)
        cfg = {"bos_token": spec["bos"], "eos_token": spec["eos"], "model_max_length": 2048,
               "tokenizer_class": "PreTrainedTokenizerFast"}
        if TEMPLATES[style]:
            cfg["chat_template"] = TEMPLATES[style]
        write_json(os.path.join(d, "tokenizer_config.json"), cfg)
        write_json(os.path.join(d, "config.json"), {
            "bos_token_id": tok.token_to_id(spec["bos"]) if spec["bos"] else None,
            "eos_token_id": tok.token_to_id(spec["eos"]) if spec["eos"] else None,
            "vocab_size": tok.get_vocab_size()})
        for text in CASES + NOT_NFC:
            for flags in (["plain"], ["add_special"], ["special_as_text"]):
                if flags == ["add_special"] and style != "llama3":
                    continue
                if flags == ["special_as_text"] and "<|" not in text and "moqtok" not in text:
                    continue
                tok.encode_special_tokens = flags == ["special_as_text"]
                enc = tok.encode(text, add_special_tokens=(flags == ["add_special"]))
                tok.encode_special_tokens = False
                row = {"tokenizer": style, "flags": flags, "text_hex": text.encode().hex(),
                       "text": text if len(text) <= 100 else text[:40] + "...",
                       "ids": enc.ids}
                dec = tok.decode(enc.ids, skip_special_tokens=False).encode().hex()
                if dec != row["text_hex"]:  # absent: decode() gave the text back
                    row["decoded_hex"] = dec
                out["encode"].append(row)
        tmpl = TEMPLATES[style]
        if tmpl:
            env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)  # as transformers renders them
            t = env.from_string(tmpl)
            for msgs in CHATS:
                for gen in (False, True):
                    text = t.render(messages=msgs, add_generation_prompt=gen, bos_token=spec["bos"] or "",
                                    eos_token=spec["eos"])
                    out["chat"].append({"tokenizer": style, "messages": msgs, "add_generation_prompt": gen,
                                        "text": text, "ids": tok.encode(text, add_special_tokens=False).ids})
    out["chat_extra"] = []
    for name, tmpl in EXTRA_TEMPLATES.items():
        t = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(tmpl)
        for msgs in CHATS:
            for gen in (False, True):
                out["chat_extra"].append({"template": name, "config": json.dumps({"chat_template": tmpl}),
                                          "messages": msgs, "add_generation_prompt": gen,
                                          "text": t.render(messages=msgs, add_generation_prompt=gen, tools=None)})
    for b in LOSSY:
        out["lossy"].append({"in_hex": b.hex(), "out_hex": b.decode("utf-8", errors="replace").encode().hex()})
    with open(os.path.join(HERE, "expected.json"), "w", encoding="utf-8") as f:  # one row per line
        f.write("{\n")
        items = list(out.items())
        for i, (k, v) in enumerate(items):
            end = ",\n" if i + 1 < len(items) else "\n"
            if isinstance(v, list):
                rows = ",\n  ".join(json.dumps(r, ensure_ascii=False) for r in v)
                f.write(f' "{k}": [\n  {rows}\n ]{end}')
            else:
                f.write(f' "{k}": {json.dumps(v)}{end}')
        f.write("}\n")
    for root, _, files in sorted(os.walk(HERE)):
        for f in sorted(files):
            if f.endswith(".json"):
                p = os.path.join(root, f)
                print(hashlib.sha256(open(p, "rb").read()).hexdigest(), os.path.relpath(p, HERE))


if __name__ == "__main__":
    main()
