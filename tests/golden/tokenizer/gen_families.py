#!/usr/bin/env python3
"""gen_families.py — tokenizers shaped like those of the model families NVIDIA publishes, and their
encodings, for tests/model/test_tokenizer_families.c. Shares no code with moq: ids and decode() texts
come from the Hugging Face `tokenizers` package.

  usage: python3 tests/golden/tokenizer/gen_families.py
         (pip install tokenizers==0.23.3 jinja2 transformers==5.24.0: transformers for Llama 4's template)

Each tokenizer is trained here (BpeTrainer, vocab 1200) on gen.py's TRAIN_TEXT with the normalizer,
pre-tokenizer, decoder and added-token flags of one family (the regexes are written out as those
families' tokenizer.json files spell them; the vocabularies are ours, small enough to commit):

  llama2     SentencePiece-style BPE: byte_fallback with <0x00>..<0xFF> in the vocabulary, unk + fuse_unk,
             normalizer Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer, decoder Replace + ByteFallback
             + Fuse + Strip(" ", 1, 0), alphabet limited so that rare characters fall back to bytes
  gemma      as llama2 with normalizer Replace(" ", "▁") only, decoder without Strip, Gemma's turn
             tokens (special, normalized false), an lstrip/rstrip token and a single_word token
  metaspace  Metaspace pre-tokenizer (prepend_scheme "first", split) and decoder (Mistral-style)
  deepseek   DeepSeek-V3: Split(\p{N}{1,3}) + Split(CJK ranges) + Split(the Latin/punctuation regex)
             + ByteLevel(use_regex false)
  o200k      gpt-oss / Llama 4 (o200k): case-aware letter runs with (?i:'s|...)?, \p{N}{1,3}, look-ahead
  qwen35     Qwen3.5: NFC, [\p{L}\p{M}]+ letter runs, single digits
  mixed      NFKC + Lowercase + StripAccents-free Replace(regex) + Strip; Digits(contiguous),
             Punctuation(MergedWithNext), Split(String "-", MergedWithPrevious), Split(invert, Contiguous),
             ByteLevel(add_prefix_space)
  wsplit     Whitespace pre-tokenizer (\w+|[^\w\s]+, the rest removed), NFD + StripAccents, no decoder
  unigram    Unigram (T5-style: NFKC, Metaspace always), unk for characters outside the pieces
  unigram_bf the same with byte_fallback (<0xNN> pieces added below every score) and Llama-2's decoder

Writes families/<name>/tokenizer.json and families/expected.json: rows {tokenizer, text_hex, ids,
decoded_hex} for gen.py's CASES (+ its NOT_NFC and random mix) and rows {tokenizer, ids, text_hex} of
decode() on seeded random id sequences (byte tokens in runs, invalid UTF-8 included).
"""
import hashlib
import importlib.util
import json
import os
import random

import jinja2
import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("gen", os.path.join(HERE, "gen.py"))
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)

MAGIC = "moq-tokenizer-families"
VERSION = 1
BYTES = ["<0x%02X>" % b for b in range(256)]

DEEPSEEK_RE_DIGITS = r"\p{N}{1,3}"
DEEPSEEK_RE_CJK = r"[一-龥぀-ゟ゠-ヿ]+"
DEEPSEEK_RE_MAIN = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*"
                    r"|\s*[\r\n]+|\s+(?!\S)|\s+")
O200K_RE = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
            r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
            r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")

SP_SPECIAL = ["<unk>", "<s>", "</s>"]


def limited_text(n):
    """TRAIN_TEXT lines keeping only its n most frequent characters (ties by code point), so that the
    vocabulary lacks the rest: they take the byte fallback / unk paths. (The trainer's own
    limit_alphabet breaks ties in hash order, which would make the files differ run to run.)"""
    count = {}
    for ch in gen.TRAIN_TEXT:
        count[ch] = count.get(ch, 0) + 1
    keep = set(sorted(count, key=lambda ch: (-count[ch], ch))[:n]) | {" "}
    return ["".join(ch for ch in line if ch in keep) for line in gen.TRAIN_TEXT.split("\n")]


def sp_bpe(name):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    if name == "llama2":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    elif name == "gemma":
        tok.normalizer = normalizers.Replace(" ", "▁")
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    else:  # metaspace
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    trainer = trainers.BpeTrainer(vocab_size=1200, min_frequency=2, special_tokens=SP_SPECIAL + BYTES,
                                  show_progress=False)
    tok.train_from_iterator(limited_text(90), trainer)
    # Byte tokens are plain vocabulary entries in SentencePiece conversions, not added tokens.
    j = json.loads(tok.to_str())
    j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] not in BYTES]
    tok = Tokenizer.from_str(json.dumps(j))
    if name == "gemma":
        tok.add_special_tokens([AddedToken("<start_of_turn>", normalized=False, special=True),
                                AddedToken("<end_of_turn>", normalized=False, special=True)])
        tok.add_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, normalized=False),
                        AddedToken("moqword", single_word=True, normalized=False)])
    if name == "llama2":  # normalized=true: matched by its normalized form ("▁moq▁tok")
        tok.add_tokens([AddedToken(" moq tok", normalized=True)])
    if name == "metaspace":
        tok.add_special_tokens([AddedToken("[INST]", normalized=False, special=True),
                                AddedToken("[/INST]", normalized=False, special=True)])
        tok.add_tokens([AddedToken("<tool>", lstrip=True, normalized=False)])
    return tok


def byte_level(name):
    tok = Tokenizer(models.BPE())
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    specials = ["<|endoftext|>"]
    if name == "deepseek":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(DEEPSEEK_RE_DIGITS), behavior="isolated"),
            pre_tokenizers.Split(Regex(DEEPSEEK_RE_CJK), behavior="isolated"),
            pre_tokenizers.Split(Regex(DEEPSEEK_RE_MAIN), behavior="isolated"), bl])
        specials = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"]
    elif name == "o200k":
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(O200K_RE), behavior="isolated"), bl])
        specials = ["<|start|>", "<|message|>", "<|end|>", "<|return|>"]
    elif name == "qwen35":
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN35_RE), behavior="isolated"), bl])
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    elif name == "mixed":
        tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(),
                                               normalizers.Replace(Regex(r" {2,}"), " "), normalizers.Strip()])
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=False),
            pre_tokenizers.Punctuation(behavior="merged_with_next"),
            pre_tokenizers.Split("-", behavior="merged_with_previous"),
            pre_tokenizers.Split(Regex(r"[aeiou]"), behavior="contiguous", invert=True),
            pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, min_frequency=2, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(gen.TRAIN_TEXT.split("\n"), trainer)
    if name == "mixed":  # normalized=true under NFKC + Lowercase: "MoqTok" matches "MOQTOK", "ｍｏｑｔｏｋ"
        tok.add_tokens([AddedToken("MoqTok", normalized=True)])
    return tok


def wsplit():
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents()])
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=900, min_frequency=2, special_tokens=["[UNK]"], show_progress=False)
    tok.train_from_iterator(limited_text(120), trainer)
    return tok


def unigram(name):
    """Pieces: the metaspace BPE vocabulary (deterministic; UnigramTrainer is not), scored by id in
    steps of 50 so that many pieces tie (Viterbi's tie rule shows)."""
    src = json.loads(sp_bpe("metaspace").to_str())["model"]["vocab"]
    pieces = [(p, -1.0 - (i // 50)) for p, i in sorted(src.items(), key=lambda kv: kv[1]) if p not in BYTES]
    if name == "unigram_bf":
        pieces += [(b, pieces[-1][1] - 1.0) for b in BYTES]
    tok = Tokenizer(models.Unigram(pieces, unk_id=0, byte_fallback=(name == "unigram_bf")))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    if name == "unigram_bf":
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    else:
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    return tok


NAMES = ["llama2", "gemma", "metaspace", "deepseek", "o200k", "qwen35", "mixed", "wsplit", "unigram", "unigram_bf"]


def build(name):
    if name in ("llama2", "gemma", "metaspace"):
        return sp_bpe(name)
    if name == "wsplit":
        return wsplit()
    if name.startswith("unigram"):
        return unigram(name)
    return byte_level(name)


EXTRA = ["<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n", "a <mask> b<mask>c  <mask>  d",
         "moqword xmoqword moqword_ moqword. (moqword)", "[INST] hi [/INST]ok</s>", "x <tool>  y", "  <tool>",
         "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>", "<|start|>user<|message|>hi<|end|>",
         "<think>\nhmm\n</think>\n\nok", "CamelCaseWord HTTPServer don't DON'T iPhone ǅemal",
         "a--b -- c---d - e-", "ÉCOLE Ⅻ ﬁ ｆｕｌｌ  wide   spaces ", "über naïve ÅNGSTRÖM", "x\u0301\u0302y",
         "▁ ▁▁x", "<0x41> <unk> <s>", "1234567890 ١٢٣٤ ¹²³",
         "a moq tok b  moq tok  moq tokmoq tok", "  moq tok", "MOQTOK moqtok ｍｏｑｔｏｋ MoqTok",
         "x\u0308moqword \ufe0fmoqword \u200dmoqword ²moqword moqword\u0301", "a² b½ c₂ Ⓐb x\u200dy 🄰z ৴৵"]


# Chat templates in the shape the families publish (tokenizer_config.json "chat_template"), written out
# with their tool-call / multimodal branches left out, plus Llama 4's real one (llama4_template).
# moq must render them from the text alone.
CHAT_TEMPLATES = {
    "gemma3": ("<bos>", "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n"
               "    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n"
               "    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n"
               "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
               "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
               "    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n"
               "    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n"
               "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
               "    {{- message['content'] | trim -}}\n    {{ '<end_of_turn>\n' }}\n{%- endfor -%}\n"
               "{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\n'}}\n{%- endif -%}\n"),
    "deepseek_v3": ("<｜begin▁of▁sentence｜>",
                    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
                    "{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='', is_first_sp=true) %}"
                    "{%- for message in messages %}{%- if message['role'] == 'system' %}{%- if ns.is_first_sp %}"
                    "{% set ns.system_prompt = ns.system_prompt + message['content'] %}{% set ns.is_first_sp = false %}{%- else %}"
                    "{% set ns.system_prompt = ns.system_prompt + '\n\n' + message['content'] %}{%- endif %}{%- endif %}{%- endfor %}"
                    "{{ bos_token }}{{ ns.system_prompt }}{%- for message in messages %}{%- if message['role'] == 'user' %}"
                    "{{'<｜User｜>' + message['content']}}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is not none %}"
                    "{% set content = message['content'] %}{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}"
                    "{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor -%}"
                    "{% if add_generation_prompt %}{{'<｜Assistant｜>'}}{% endif %}"),
    "glm4": (None, "[gMASK]<sop>{% for item in messages %}<|{{ item['role'] }}|>\n{{ item['content'] }}{% endfor %}"
                   "{% if add_generation_prompt %}<|assistant|>{% endif %}"),
    "qwen3": (None, "{%- for message in messages %}\n    {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
                    "{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n"),
}
CHAT_EXTRA = [[{"role": "system", "content": "  Sys one. "}, {"role": "system", "content": "Sys two"},
               {"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>\nhmm</think>\n\nA </think>B"},
               {"role": "user", "content": "again"}]]


def llama4_template():
    """Llama 4's chat template as transformers 5.24 ships it (models/llama4/processing_llama4.py),
    read from the installed package's source without importing it."""
    import ast
    import transformers
    path = os.path.join(os.path.dirname(transformers.__file__), "models", "llama4", "processing_llama4.py")
    for node in ast.parse(open(path).read()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "chat_template":
            return ast.literal_eval(node.value)
    raise SystemExit("no chat_template in " + path)


def render_chats():
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    def raise_exception(msg):
        raise jinja2.TemplateError(msg)
    env.globals["raise_exception"] = raise_exception
    rows = []
    templates = dict(CHAT_TEMPLATES)
    templates["llama4_transformers"] = ("<|begin_of_text|>", llama4_template())
    for name, (bos, tmpl) in templates.items():
        t = env.from_string(tmpl)
        for msgs in gen.CHATS + CHAT_EXTRA:
            if name == "gemma3" and msgs is CHAT_EXTRA[0]:
                continue  # Gemma 3 takes one system message and alternating turns
            for g in (False, True):
                cfg = {"chat_template": tmpl}
                if bos:
                    cfg["bos_token"] = bos
                rows.append({"template": name, "config": json.dumps(cfg, ensure_ascii=False), "messages": msgs,
                             "add_generation_prompt": g,
                             "text": t.render(messages=msgs, add_generation_prompt=g, bos_token=bos or "")})
    return rows


def main():
    rows, drows = [], []
    texts = gen.CASES + gen.NOT_NFC + EXTRA
    rng = random.Random(11)
    for name in NAMES:
        tok = build(name)
        d = os.path.join(HERE, "families", name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"))
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        for text in texts:
            enc = tok.encode(text, add_special_tokens=False)
            dec = tok.decode(enc.ids, skip_special_tokens=False)
            row = {"tokenizer": name, "text_hex": text.encode().hex(), "ids": enc.ids}
            if dec != text:
                row["decoded_hex"] = dec.encode().hex()
            rows.append(row)
        n = tok.get_vocab_size()
        vocab = tok.get_vocab()
        byte_ids = [vocab[b] for b in BYTES if b in vocab]
        for k in range(40):
            ids = []
            for _ in range(rng.randint(1, 12)):
                if byte_ids and rng.random() < 0.4:
                    ids += [rng.choice(byte_ids) for _ in range(rng.randint(1, 4))]
                else:
                    ids.append(rng.randrange(n))
            drows.append({"tokenizer": name, "ids": ids,
                          "text_hex": tok.decode(ids, skip_special_tokens=False).encode().hex()})
    out = {"magic": MAGIC, "version": VERSION, "tokenizers_version": tokenizers.__version__, "names": NAMES}
    path = os.path.join(HERE, "families", "expected.json")
    with open(path, "w") as f:
        f.write('{"magic": %s, "version": %d, "tokenizers_version": %s, "names": %s,\n"encode": [\n' % (
            json.dumps(MAGIC), VERSION, json.dumps(tokenizers.__version__), json.dumps(NAMES)))
        f.write(",\n".join(json.dumps(r) for r in rows))
        f.write('\n],\n"decode": [\n')
        f.write(",\n".join(json.dumps(r) for r in drows))
        f.write('\n],\n"chat": [\n')
        f.write(",\n".join(json.dumps(r) for r in render_chats()))
        f.write("\n]}\n")
    for name in NAMES:
        p = os.path.join(HERE, "families", name, "tokenizer.json")
        print(hashlib.sha256(open(p, "rb").read()).hexdigest(), "families/%s/tokenizer.json" % name)
    print(hashlib.sha256(open(path, "rb").read()).hexdigest(), "families/expected.json")


if __name__ == "__main__":
    main()
