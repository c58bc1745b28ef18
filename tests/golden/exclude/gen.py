#!/usr/bin/env python3
"""gen.py — expected results for SGLang's exclusion rules, computed with Python itself.

  usage: python3 tests/golden/exclude/gen.py        (standard library only; Python >= 3.11)

Writes expected.json next to this script, read by tests/config/test_glob.c and test_resolve.c:

  "regex":       [pattern, name, result] (ASCII names, and NONASCII below): SGLang's is_layer_excluded turns an exclude pattern into
                 a regular expression by replacing "." with r"\." and then "*" with ".*"; result is
                 what Python's re.fullmatch of that expression gives on name (true / false), or
                 "invalid" when re.compile raises re.error.
  "unsupported": patterns Python accepts that moq refuses to translate (lookaround, backreferences,
                 inline flags, possessive quantifiers, ...): each is checked here to compile.
  "excluded":    {exclude, prefix, packed, result}: whether SGLang's linear path leaves the module
                 unquantized, i.e. is_layer_skipped(prefix, exclude, packed) or
                 is_layer_excluded(prefix); result true / false, or "mixed" when is_layer_skipped
                 raises "Detected some but not all shards of PREFIX are quantized".

The two SGLang functions are restated below from their behaviour (seed 000: is_layer_excluded;
issue 10: is_layer_skipped of current SGLang, checked by its authors against SGLang's code); the
regular-expression matching itself is Python's re module, which moq shares no code with.
"""
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC = "moq-exclude-golden"
VERSION = 1


def sglang_regex(pattern):
    return pattern.replace(".", r"\.").replace("*", r".*")


# --- restated behaviour -------------------------------------------------------------------------
FUSED_TAILS = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj")
BUILTIN_FUSED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}


def entry_matches(prefix, entry):
    """Current SGLang is_layer_skipped: trailing dots dropped; equal, a leading run of whole parts,
    or a run of whole parts anywhere."""
    e = entry.rstrip(".")
    return prefix == e or prefix.startswith(e + ".") or ("." + e + ".") in ("." + prefix + ".")


def is_layer_skipped(prefix, ignored, packed):
    proj = prefix.split(".")[-1]
    shards = (packed or {}).get(proj) or BUILTIN_FUSED.get(proj)
    if shards:
        states = {any(entry_matches(prefix.replace(proj, s), e) for e in ignored) for s in shards}
        if len(states) > 1:
            raise ValueError("Detected some but not all shards of %s are quantized" % prefix)
        return states.pop()
    return any(entry_matches(prefix, e) for e in ignored)


def is_layer_excluded(prefix, patterns):
    variants = [prefix]
    if prefix.startswith("language_model."):
        variants.append(prefix[len("language_model."):])
    for pat in patterns:
        rx = sglang_regex(pat)
        for v in variants:
            if re.fullmatch(rx, v) or any(re.fullmatch(rx, part) for part in v.split(".")):
                return True
        tail = pat.rsplit(".", 1)[-1]
        if tail in FUSED_TAILS and any(tail in v.rsplit(".", 1)[-1] for v in variants):
            return True
    return False


# --- cases --------------------------------------------------------------------------------------
PATTERNS = [
    # plain names and SGLang's `*`
    "lm_head", "mtp*", "model.layers.0*", "model.layers.1.*", "*.attn.*", "*mlp.gate", "", "*",
    "model.layers.0.mlp", "layers.1", "head",
    # character classes keep their meaning
    "model.layers.[0-2].mlp", "model.layers.[0-2]*", "model.layers.[!0-2].mlp", "model.layers.[^0-2].mlp",
    "[a-c]", "[]a]", "[^]a]", "[a-]", "[-a]", "[.]", "[*]", "[\\d]", "[\\w]x", "[\\s]", "[a\\-z]", "[\\]]",
    "[z-a]", "[a", "[^^]", "[\\x41-\\x43]",
    # quantifiers, groups, alternation, anchors
    "model.layers.1?", "model.layers.1+", "mlp?", "layers{2}", "ab{2}", "ab{2,}", "ab{,2}", "ab{1,2}", "ab{}",
    "ab{,}", "ab{x}", "ab{2,1}", "a{", "a}", "(mlp|attn)", "mlp|attn", "(?:mlp|attn)", "(mlp)?x", "x|",
    "()", "(a(b)c)", "(", ")", "+a", "?a", "a|*b", "^mlp$", "^", "$", "a^", "mlp$x", "(?#note)mlp", "a*?",
    "\\d+", "\\w+", "\\s", "\\D", "\\W+", "\\S+", "layers\\.0", "\\(x\\)", "\\bmlp\\b", "\\Bx",
    "\\Amlp\\Z", "a\\-b", "a\\", "\\q", "\\n", "\\x41", "\\x4", "a{2}{3}", "a+*", "é", "é+", "lm_h.ad",
]
UNSUPPORTED = ["(?=mlp)mlp", "(?!x)mlp", "(?<=a)b", "(a)\\1", "(?P<n>a)", "(?i)mlp", "a++", "a?+", "(?>a)",
               "\\u0041", "\\x80", "\\0", "[é]", "[\\D]", "a{1001}", "((a{100}){100}){100}"]
NAMES = ["lm_head", "model.lm_head", "mtp", "mtp_layers", "model.layers.0.mlp", "model.layers.1.mlp",
         "model.layers.5.mlp", "model.layers.12", "model.layers.1", "layers.1", "mlp", "attn", "mlp.gate",
         "x", "a", "b", "c", "]", "-", ".", "*", "!", "^", "5", " ", "\t", "_", "ab", "abb", "abbb", "a{}",
         "a{", "a}", "ab{x}", "a-b", "x)", "(x)", "layers.0", "layersX0", "mlpx", "", "lm_head2",
         "model.layers.0.self_attn.q_proj", "A", "B", "D", "ax"]

# Module names are ASCII; moq matches bytes, so with a non-ASCII name only patterns whose meaning does
# not depend on the width of a character are compared (a literal, a repeated literal, `*`).
NONASCII = [("é", "é"), ("é", "éé"), ("é+", "éé"), ("é+", "éx"), ("*", "é"), ("x*", "xéé"), ("é", "e"),
            ("a.é*", "a.éé"), ("a.é*", "aXé")]

EXCLUDED = [
    # is_layer_skipped: whole-part runs, trailing dots
    (["model.layers.0.mlp.gate"], "model.layers.0.mlp.gate", None),
    (["mlp.gate"], "model.layers.0.mlp.gate", None),
    (["mlp.gate"], "model.layers.0.mlp.gate_up_proj", {}),
    (["layers.0"], "model.layers.0.mlp.down_proj", None),
    (["layers.0"], "model.layers.01.mlp.down_proj", None),
    (["model.layers.34."], "model.layers.34.mlp.experts.0.down_proj", None),
    (["model.layers.34.."], "model.layers.34.mlp.down_proj", None),
    (["model.layers.34."], "model.layers.340.mlp.down_proj", None),
    (["model"], "model.layers.3.self_attn.o_proj", None),
    (["self_attn.o"], "model.layers.3.self_attn.o_proj", None),
    # fused modules: the packed mapping, else the built-in table; shards must agree
    (["model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj", "model.layers.0.self_attn.v_proj"],
     "model.layers.0.self_attn.qkv_proj", None),
    (["model.layers.0.self_attn.q_proj"], "model.layers.0.self_attn.qkv_proj", None),
    (["model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj"], "model.layers.0.self_attn.qkv_proj",
     {"qkv_proj": ["q_proj", "k_proj"]}),
    (["model.layers.0.self_attn.q_proj"], "model.layers.0.self_attn.qkv_proj", {"gate_up_proj": ["gate_proj", "up_proj"]}),
    (["model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj"], "model.layers.0.mlp.gate_up_proj", None),
    (["model.layers.0.mlp.gate_proj"], "model.layers.0.mlp.gate_up_proj", None),
    (["layers.0"], "model.layers.0.mlp.gate_up_proj", None),
    (["mlp.gate"], "model.layers.0.mlp.gate_up_proj", None),
    (["model.layers.1.mlp.gate_proj"], "model.layers.0.mlp.gate_up_proj", None),
    # is_layer_excluded: prefix, prefix without language_model., each part; fused tails
    (["mtp*"], "model.mtp_layers.0.fc", None),
    (["model.layers.[0-2].*"], "model.layers.1.self_attn.o_proj", None),
    (["model.layers.[0-2].*"], "model.layers.3.self_attn.o_proj", None),
    (["model.layers.[0-2].*"], "language_model.model.layers.2.mlp.down_proj", None),
    (["model.layers.[0-2]*"], "model.layers.21.mlp.down_proj", None),
    (["layers.1?"], "model.layers.1.mlp.down_proj", None),
    (["o_pro."], "model.layers.1.self_attn.o_proj", None),
    (["o_proj|down_proj"], "model.layers.1.mlp.down_proj", None),
    (["\\d+"], "model.layers.1.mlp.down_proj", None),
    (["model.layers.0.self_attn.kv_a_proj_with_mqa"], "model.layers.0.self_attn.fused_qkv_a_proj_with_mqa", None),
    (["model.layers.0.self_attn.q_a_proj"], "model.layers.0.self_attn.fused_qkv_a_proj_with_mqa", None),
    (["lm_head"], "language_model.lm_head", None),
]


def main():
    assert sys.version_info >= (3, 11), "possessive quantifiers need Python 3.11"
    rows = []
    for p in PATTERNS:
        rx = sglang_regex(p)
        try:
            c = re.compile(rx)
        except re.error:
            rows.append([p, "", "invalid"])
            continue
        for n in NAMES:
            rows.append([p, n, c.fullmatch(n) is not None])
    for p, n in NONASCII:
        rows.append([p, n, re.fullmatch(sglang_regex(p), n) is not None])
    for p in UNSUPPORTED:
        re.compile(sglang_regex(p))  # Python accepts every one of them
    excluded = []
    for ex, prefix, packed in EXCLUDED:
        try:
            r = is_layer_skipped(prefix, ex, packed) or is_layer_excluded(prefix, ex)
        except ValueError as e:
            assert "Detected some but not all shards" in str(e)
            r = "mixed"
        excluded.append({"exclude": ex, "prefix": prefix, "packed": packed, "result": r})
    out = {"magic": MAGIC, "version": VERSION, "python": sys.version.split()[0], "regex": rows,
           "unsupported": UNSUPPORTED, "excluded": excluded}
    with open(os.path.join(HERE, "expected.json"), "w", encoding="utf-8") as f:
        f.write("{\n")
        keys = list(out)
        for i, k in enumerate(keys):
            v = out[k]
            if isinstance(v, list):
                f.write(json.dumps(k) + ": [\n")
                f.write(",\n".join("  " + json.dumps(x, ensure_ascii=False) for x in v))
                f.write("\n]")
            else:
                f.write(json.dumps(k) + ": " + json.dumps(v))
            f.write(",\n" if i + 1 < len(keys) else "\n")
        f.write("}\n")
    print("regex rows %d, unsupported %d, excluded rows %d" % (len(rows), len(UNSUPPORTED), len(excluded)))


if __name__ == "__main__":
    main()
