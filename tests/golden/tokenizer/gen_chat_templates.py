#!/usr/bin/env python3
"""gen_chat_templates.py — jinja2 renderings of the Gemma 4 and Qwen3.5 chat formats, for
tests/model/test_chat.c (test_golden_gemma4_qwen35). Shares no code with moq.

  usage: python3 tests/golden/tokenizer/gen_chat_templates.py [--real NAME=FILE ...]
         (jinja2; 3.1.6 was used)

The templates below are written here (not copied) to state what the published templates do for
plain text conversations (no tools, images, or template variables other than messages, bos_token,
add_generation_prompt and enable_thinking):
  gemma4   Gemma 4 (google/gemma-4-*-it chat_template.jinja): bos, a first system (or developer)
           message as a `<|turn>system` turn, every turn `<|turn>{role}\n{content | trim}<turn|>\n` with
           assistant written `model` and its `<|channel>..<channel|>` thought spans dropped before
           trimming, generation `<|turn>model\n` plus an empty thought channel unless enable_thinking.
  qwen3_5  Qwen3.5 / 3.6: ChatML; assistant turns before the last user turn keep the text after their
           last `</think>` with leading newlines dropped (Qwen3's rule); generation
           `<|im_start|>assistant\n<think>\n` (`<think>\n\n</think>\n\n` with enable_thinking false).
moq picks its format from the template text alone, so each row carries the template in `config`.

--real NAME=FILE renders the model's own template file FILE (not committed: e.g. the published
Gemma 4 chat_template.jinja) on the same conversations and fails unless every rendering equals the
one of the template written here, i.e. moq, which must equal these, renders the real template's text.
"""
import json
import os
import sys

import jinja2

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC = "moq-chat-templates"
VERSION = 1

TEMPLATES = {
    "gemma4": ("<bos>",
               "{{ bos_token }}\n"
               "{%- set msgs = messages -%}\n"
               "{%- if msgs and msgs[0].role in ('system', 'developer') -%}\n"
               "{{ '<|turn>system\\n' ~ (msgs[0].content | trim) ~ '<turn|>\\n' }}\n"
               "{%- set msgs = msgs[1:] -%}\n"
               "{%- endif -%}\n"
               "{%- for m in msgs -%}\n"
               "{%- if m.role == 'assistant' -%}\n"
               "{%- set kept = namespace(t='') -%}\n"
               "{%- for piece in m.content.split('<channel|>') -%}{%- set kept.t = kept.t ~ piece.split('<|channel>')[0] -%}{%- endfor -%}\n"
               "{{ '<|turn>model\\n' ~ (kept.t | trim) ~ '<turn|>\\n' }}\n"
               "{%- else -%}\n"
               "{{ '<|turn>' ~ m.role ~ '\\n' ~ (m.content | trim) ~ '<turn|>\\n' }}\n"
               "{%- endif -%}\n"
               "{%- endfor -%}\n"
               "{%- if add_generation_prompt -%}{{ '<|turn>model\\n' }}"
               "{%- if not enable_thinking | default(false) -%}{{ '<|channel>thought\\n<channel|>' }}{%- endif -%}{%- endif -%}\n"),
    "qwen3_5": (None,
                "{%- set last = namespace(i=-1) -%}\n"
                "{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set last.i = loop.index0 -%}{%- endif -%}{%- endfor -%}\n"
                "{%- for m in messages -%}\n"
                "{%- set c = m.content -%}\n"
                "{%- if m.role == 'assistant' and loop.index0 < last.i and '</think>' in c -%}"
                "{%- set c = c.split('</think>')[-1].lstrip('\\n') -%}{%- endif -%}\n"
                "{{ '<|im_start|>' ~ m.role ~ '\\n' ~ c ~ '<|im_end|>\\n' }}\n"
                "{%- endfor -%}\n"
                "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}\n"
                "{%- if enable_thinking is defined and enable_thinking is false -%}{{ '<think>\\n\\n</think>\\n\\n' }}"
                "{%- else -%}{{- '<think>\\n' }}{%- endif -%}{%- endif -%}\n"),
}

CHATS = [
    [{"role": "user", "content": "Hi there!"}],
    [{"role": "system", "content": "  You are terse. "}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "  And 3+3?\n"}],
    [{"role": "user", "content": "\x1f multi\nline\t "}, {"role": "assistant", "content": "ok 😀"}],
    [{"role": "user", "content": "q"},
     {"role": "assistant", "content": "<|channel>thought\nhmm<channel|>  A <|channel>x<channel|>B<channel|> C \n"},
     {"role": "user", "content": "again"}],
    [{"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>\nhmm</think>\n\n\nA </think>\nB"},
     {"role": "user", "content": "again"}, {"role": "assistant", "content": "<think>\nlater</think>\n\nkept"}],
    [{"role": "system", "content": "S"}, {"role": "system", "content": " second "}, {"role": "user", "content": "hi"}],
]


def env():
    e = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)  # as transformers renders templates
    def raise_exception(msg):
        raise jinja2.TemplateError(msg)
    e.globals["raise_exception"] = raise_exception
    return e


def rows():
    out = []
    for name, (bos, tmpl) in TEMPLATES.items():
        t = env().from_string(tmpl)
        for msgs in CHATS:
            for gen in (False, True):
                cfg = {"chat_template": tmpl}
                if bos:
                    cfg["bos_token"] = bos
                out.append({"template": name, "config": json.dumps(cfg, ensure_ascii=False), "messages": msgs,
                            "add_generation_prompt": gen, "text": t.render(messages=msgs, add_generation_prompt=gen, bos_token=bos or "")})
    return out


def check_real(name, path, rendered):
    real = env().from_string(open(path, encoding="utf-8").read())
    bos = TEMPLATES[name][0] or ""
    n = 0
    for r in rendered:
        if r["template"] != name:
            continue
        got = real.render(messages=r["messages"], add_generation_prompt=r["add_generation_prompt"], bos_token=bos)
        if got != r["text"]:
            sys.exit(f"{name}: {path} renders\n{got!r}\nthe template here\n{r['text']!r}\nfor {r['messages']}")
        n += 1
    print(f"{name}: {path} renders all {n} conversations as the template here")


def main():
    rendered = rows()
    for arg in sys.argv[1:]:
        if arg == "--real":
            continue
        name, path = arg.split("=", 1)
        check_real(name, path, rendered)
    with open(os.path.join(HERE, "chat_templates.json"), "w", encoding="utf-8") as f:
        f.write('{"magic": %s, "version": %d, "jinja2_version": %s,\n"chat": [\n' % (json.dumps(MAGIC), VERSION, json.dumps(jinja2.__version__)))
        f.write(",\n".join(json.dumps(r, ensure_ascii=False) for r in rendered))
        f.write("\n]}\n")


if __name__ == "__main__":
    main()
