/* chat.c — chat formatting without a template engine: one table row per format.
 *
 *   ChatML   [<|im_start|>system\n{default}<|im_end|>\n]  (when the template has a default system
 *            prompt and messages[0] is not a system message)
 *            per message:  <|im_start|>{role}\n{content}<|im_end|>\n
 *            generation:   <|im_start|>assistant\n
 *   Llama-3  per message:  [{bos} before the first] <|start_header_id|>{role}<|end_header_id|>\n\n
 *                          {content | trim}<|eot_id|>
 *            generation:   <|start_header_id|>assistant<|end_header_id|>\n\n
 *
 * The template text of tokenizer_config.json only picks the row (by the marker it contains) and
 * supplies the default system prompt, found as the literal text after "<|im_start|>system\n" up to
 * "<|im_end|>" (the first occurrence without template syntax inside). Limits: Llama-3.1 templates
 * also write "Cutting Knowledge Date" / "Today Date" lines into a system header, and Qwen2.5's
 * tool-calling branch adds tool text; moq renders neither.
 * "trim" is Python's str.strip() (Jinja's trim filter): White_Space plus U+001C..U+001F.
 *
 * Tested by tests/model/test_chat.c against jinja2 renderings of the models' own templates
 * (tests/golden/tokenizer/gen.py).
 */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "io/json.h"
#include "model/chat.h"
#include "model/tokenizer.h"

#define CFG_FILE "tokenizer_config.json"

/* How a format places system messages. */
typedef enum sys_mode {
    SYS_MESSAGE,     /* a message like any other                                                   */
    SYS_FIRST_USER,  /* Gemma: the first system message's content + "\n\n" opens the first user turn */
    SYS_TOP,         /* DeepSeek-V3: every system content, joined by "\n\n", right after bos         */
} sys_mode;

typedef struct chat_row {
    const char *name;
    const char *marker;         /* template text that selects this row            */
    const char *also;           /* ... together with this text (NULL: marker alone) */
    const char *start;          /* before everything                              */
    const char *msg_prefix;     /* before the role                                */
    const char *role_suffix;    /* between role and content                       */
    const char *msg_suffix;     /* after the content                              */
    const char *gen_prompt;     /* add_generation_prompt                          */
    const char *system_start;   /* default system prompt follows this ("" = none) */
    const char *system_end;
    const char *assistant_name; /* the role written for "assistant" (NULL: as is) */
    /* formats that write no role name: per role prefix / suffix (user_prefix non-NULL selects this) */
    const char *user_prefix, *assistant_prefix, *assistant_suffix;
    sys_mode    system;
    bool        trim;           /* content | trim                                 */
    bool        trim_system0;   /* a system message first: its content | trim      */
    bool        bos_first;      /* bos text before the first message              */
    bool        bos_start;      /* bos text first, even with no message           */
    bool        strip_think;    /* assistant content: only the text after the last "</think>" */
    bool        think_history;  /* strip_think only for assistant turns before the last user turn,
                                   and leading newlines dropped (Qwen3 / 3.5: content.split('</think>')
                                   [-1].lstrip('\n'))                                               */
    bool        strip_channel;  /* assistant content: <|channel>..<channel|> spans dropped (Gemma 4
                                   strip_thinking: per part of split('<channel|>'), the text before
                                   '<|channel>')                                                     */
} chat_row;

static const chat_row k_chat[MOQ_CHAT_FORMAT_COUNT] = {
    [MOQ_CHAT_NONE]   = { .name = "none", .marker = "" },
    [MOQ_CHAT_CHATML] = { .name = "chatml", .marker = "<|im_start|>", .msg_prefix = "<|im_start|>", .role_suffix = "\n",
                          .msg_suffix = "<|im_end|>\n", .gen_prompt = "<|im_start|>assistant\n",
                          .system_start = "<|im_start|>system", .system_end = "<|im_end|>" },
    [MOQ_CHAT_LLAMA3] = { .name = "llama3", .marker = "<|start_header_id|>", .msg_prefix = "<|start_header_id|>",
                          .role_suffix = "<|end_header_id|>\n\n", .msg_suffix = "<|eot_id|>",
                          .gen_prompt = "<|start_header_id|>assistant<|end_header_id|>\n\n", .trim = true, .bos_first = true },
    [MOQ_CHAT_GEMMA]  = { .name = "gemma", .marker = "<start_of_turn>", .msg_prefix = "<start_of_turn>", .role_suffix = "\n",
                          .msg_suffix = "<end_of_turn>\n", .gen_prompt = "<start_of_turn>model\n", .trim = true,
                          .bos_start = true, .assistant_name = "model", .system = SYS_FIRST_USER },
    [MOQ_CHAT_DEEPSEEK] = { .name = "deepseek", .marker = "<\xef\xbd\x9cUser\xef\xbd\x9c>", .gen_prompt = "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>",
                          .bos_start = true, .system = SYS_TOP, .user_prefix = "<\xef\xbd\x9cUser\xef\xbd\x9c>",
                          .assistant_prefix = "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>",
                          .assistant_suffix = "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", .strip_think = true },
    [MOQ_CHAT_LLAMA4] = { .name = "llama4", .marker = "<|header_start|>", .msg_prefix = "<|header_start|>",
                          .role_suffix = "<|header_end|>\n\n", .msg_suffix = "<|eot|>",
                          .gen_prompt = "<|header_start|>assistant<|header_end|>\n\n", .bos_start = true, .trim_system0 = true },
    [MOQ_CHAT_GLM]    = { .name = "glm", .marker = "[gMASK]<sop>", .start = "[gMASK]<sop>", .msg_prefix = "<|",
                          .role_suffix = "|>\n", .gen_prompt = "<|assistant|>" },
    [MOQ_CHAT_GEMMA4] = { .name = "gemma4", .marker = "<|turn>", .msg_prefix = "<|turn>", .role_suffix = "\n",
                          .msg_suffix = "<turn|>\n", .gen_prompt = "<|turn>model\n<|channel>thought\n<channel|>", .trim = true,
                          .bos_start = true, .assistant_name = "model", .strip_channel = true },
    /* marker: the template text `'<think>\n' }}` (a Jinja string ending the generation prompt) in a ChatML template */
    [MOQ_CHAT_CHATML_THINK] = { .name = "chatml-think", .marker = "<think>\\n' }}", .also = "<|im_start|>", .msg_prefix = "<|im_start|>", .role_suffix = "\n",
                          .msg_suffix = "<|im_end|>\n", .gen_prompt = "<|im_start|>assistant\n<think>\n",
                          .system_start = "<|im_start|>system", .system_end = "<|im_end|>", .strip_think = true, .think_history = true },
};

/* Detection order: the more specific markers first (a ChatML-think template also holds <|im_start|>). */
static const moq_chat_format k_detect[] = {
    MOQ_CHAT_CHATML_THINK, MOQ_CHAT_CHATML, MOQ_CHAT_LLAMA3, MOQ_CHAT_GEMMA, MOQ_CHAT_DEEPSEEK, MOQ_CHAT_LLAMA4, MOQ_CHAT_GLM, MOQ_CHAT_GEMMA4,
};
_Static_assert(sizeof k_detect / sizeof k_detect[0] == MOQ_CHAT_FORMAT_COUNT - 1, "every format has a place in k_detect");

/* Templates moq recognises but does not render, and why (checked before the rows). */
static const struct { const char *marker, *why; } k_beyond[] = {
    { "<|channel|>", "the gpt-oss harmony format (current date, reasoning effort, channels, tool namespaces)" },
    { "[INST]", "a Mistral [INST] format (eos_token inside turns, system prompt folded into the last user turn)" },
};

const char *moq_chat_format_name(moq_chat_format f) {
    return (unsigned)f < MOQ_CHAT_FORMAT_COUNT ? k_chat[f].name : "unknown";
}

/* The default system prompt: literal text after system_start + newline ("\n" or the two characters
 * backslash n) up to system_end, at the first occurrence free of template syntax. */
static void find_default_system(const chat_row *r, const char *tmpl, char *out, size_t cap) {
    out[0] = '\0';
    if (!r->system_start || !r->system_start[0]) return;
    size_t sl = strlen(r->system_start);
    for (const char *p = strstr(tmpl, r->system_start); p; p = strstr(p + 1, r->system_start)) {
        const char *q = p + sl;
        if (q[0] == '\n') q += 1;
        else if (q[0] == '\\' && q[1] == 'n') q += 2;
        else continue;
        const char *e = strstr(q, r->system_end);
        if (!e || e == q || strcspn(q, "'\"{}") < (size_t)(e - q)) continue;
        size_t o = 0;
        for (; q < e && o + 1 < cap; q++) {
            if (q[0] == '\\' && q[1] == 'n') { out[o++] = '\n'; q++; }
            else out[o++] = *q;
        }
        out[o] = '\0';
        return;
    }
}

moq_status moq_chat_template_from_config(moq_chat_template *out, const char *config_json, size_t len, moq_error *err) {
    if (!out || !config_json) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_chat_template_from_config", "NULL argument");
    memset(out, 0, sizeof *out);
    cJSON *cfg = NULL;
    MOQ_TRY(moq_json_parse(&cfg, config_json, len, CFG_FILE, err));
    moq_status st = MOQ_OK;
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    const char *tmpl = NULL;
    if (cJSON_IsString(ct)) {
        tmpl = ct->valuestring;
    } else if (cJSON_IsArray(ct)) { /* [{"name": "default", "template": ...}, {"name": "tool_use", ...}] */
        for (const cJSON *e = ct->child; e; e = e->next) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
            const cJSON *tt = cJSON_GetObjectItemCaseSensitive(e, "template");
            if (cJSON_IsString(name) && strcmp(name->valuestring, "default") == 0 && cJSON_IsString(tt)) tmpl = tt->valuestring;
        }
        if (!tmpl) st = MOQ_FAIL(err, MOQ_ERR_CONFIG, CFG_FILE, "chat_template is a list without a \"default\" entry");
    } else if (ct && !cJSON_IsNull(ct)) {
        st = MOQ_FAIL(err, MOQ_ERR_CONFIG, CFG_FILE, "chat_template is %s, expected a string or a list", moq_json_type(ct));
    }
    const cJSON *bos = cJSON_GetObjectItemCaseSensitive(cfg, "bos_token");
    if (cJSON_IsObject(bos)) bos = cJSON_GetObjectItemCaseSensitive(bos, "content");
    if (st == MOQ_OK && tmpl)
        st = moq_chat_template_detect(out, tmpl, cJSON_IsString(bos) ? bos->valuestring : NULL, "chat_template", err);
    cJSON_Delete(cfg);
    if (st != MOQ_OK) memset(out, 0, sizeof *out);
    return st;
}

moq_status moq_chat_template_detect(moq_chat_template *out, const char *tmpl, const char *bos, const char *what, moq_error *err) {
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < sizeof k_beyond / sizeof k_beyond[0]; i++)
        if (strstr(tmpl, k_beyond[i].marker))
            return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, CFG_FILE, "%s is %s, beyond what moq renders without a template engine", what, k_beyond[i].why);
    for (size_t i = 0; i < sizeof k_detect / sizeof k_detect[0]; i++)
        if (strstr(tmpl, k_chat[k_detect[i]].marker) && (!k_chat[k_detect[i]].also || strstr(tmpl, k_chat[k_detect[i]].also))) {
            out->format = k_detect[i];
            break;
        }
    if (out->format == MOQ_CHAT_NONE)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, CFG_FILE,
                        "%s \"%.80s...\" is none of the formats moq renders (ChatML <|im_start|>, Llama-3 <|start_header_id|>, "
                        "Gemma <start_of_turn>, DeepSeek-V3 <\xef\xbd\x9cUser\xef\xbd\x9c>, Llama 4 <|header_start|>, GLM [gMASK]<sop>, Gemma 4 <|turn>)", what, tmpl);
    const chat_row *r = &k_chat[out->format];
    find_default_system(r, tmpl, out->default_system, sizeof out->default_system);
    if ((r->bos_first || r->bos_start) && strstr(tmpl, "bos_token")) {
        moq_status st = MOQ_OK;
        if (!bos)
            st = MOQ_FAIL(err, MOQ_ERR_CONFIG, CFG_FILE, "%s uses bos_token but bos_token is absent or not a string", what);
        else if (strlen(bos) >= sizeof out->bos)
            st = MOQ_FAIL(err, MOQ_ERR_CONFIG, CFG_FILE, "bos_token is %zu bytes, longer than %zu", strlen(bos), sizeof out->bos - 1);
        if (st != MOQ_OK) { memset(out, 0, sizeof *out); return st; }
        snprintf(out->bos, sizeof out->bos, "%s", bos);
    }
    return MOQ_OK;
}

typedef struct sink { char *out; size_t cap, n; } sink;

static void put(sink *s, const char *p, size_t n) {
    if (s->n + n < s->cap) memcpy(s->out + s->n, p, n);
    s->n += n;
}
static void puts_(sink *s, const char *p) { if (p) put(s, p, strlen(p)); }

/* Python str.isspace() for one UTF-8 character: White_Space or U+001C..U+001F. */
static bool py_space(uint32_t cp) { return moq_unicode_is_white_space(cp) || (cp >= 0x1C && cp <= 0x1F); }

static void put_trimmed(sink *s, const char *p) {
    const uint8_t *u = (const uint8_t *)p;
    size_t n = strlen(p), a = 0, b = 0; /* keep [a, b) */
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = moq_utf8_next(u, n, i, &cp);
        if (!py_space(cp)) { if (b == 0) a = i; b = i + l; }
        i += l;
    }
    if (b > a) put(s, p + a, b - a);
}

/* Gemma 4's strip_thinking: the parts of content split at "<channel|>", each cut at its first
 * "<|channel>", joined, then trimmed. The kept parts are increasing ranges of content, so two passes
 * over them find the first and the last non-space character of the joined text, and the second one
 * writes what lies between (no copy). */
static const char *channel_part(const char *p, const char **stop) {
    const char *end = strstr(p, "<channel|>"), *open = strstr(p, "<|channel>");
    *stop = end ? end : p + strlen(p);
    if (open && open < *stop) *stop = open;
    return end ? end + 10 : NULL; /* the next part */
}

static void put_without_channels(sink *s, const char *content) {
    const char *last = NULL; /* end of the last non-space character kept */
    for (int pass = 0; pass < 2; pass++) {
        bool started = false;
        for (const char *p = content, *stop; p;) {
            const char *next = channel_part(p, &stop);
            const uint8_t *u = (const uint8_t *)p;
            const size_t n = (size_t)(stop - p);
            for (size_t i = 0; i < n;) {
                uint32_t cp;
                const size_t l = moq_utf8_next(u, n, i, &cp);
                if (!py_space(cp)) started = true, last = pass == 0 ? p + i + l : last;
                if (pass == 1 && started && p + i < last) put(s, p + i, l);
                i += l;
            }
            p = next;
        }
    }
}

moq_status moq_chat_render(const moq_chat_template *t, const moq_chat_message *msgs, size_t n, bool add_generation_prompt,
                           char *out, size_t cap, size_t *len, moq_error *err) {
    if (len) *len = 0;
    if (!t || (!msgs && n) || (!out && cap) || !len) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_chat_render", "NULL argument");
    if ((unsigned)t->format >= MOQ_CHAT_FORMAT_COUNT || t->format == MOQ_CHAT_NONE)
        return t->why_none[0] ? MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, CFG_FILE, "no chat format: %.200s", t->why_none)
                              : MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, CFG_FILE, "no chat format (the tokenizer has no chat_template)");
    const chat_row *r = &k_chat[t->format];
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content || !msgs[i].role[0])
            return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_chat_render", "message %zu has no role or no content, expected both", i);
    sink s = { out, cap, 0 };
    if (r->start) puts_(&s, r->start);
    if (r->bos_start) puts_(&s, t->bos);
    if (n && t->default_system[0] && strcmp(msgs[0].role, "system") != 0) {
        puts_(&s, r->msg_prefix); puts_(&s, "system"); puts_(&s, r->role_suffix);
        puts_(&s, t->default_system); puts_(&s, r->msg_suffix);
    }
    if (r->system == SYS_TOP) {
        bool first = true;
        for (size_t i = 0; i < n; i++) {
            if (strcmp(msgs[i].role, "system") != 0) continue;
            if (!first) puts_(&s, "\n\n");
            puts_(&s, msgs[i].content);
            first = false;
        }
    }
    size_t last_user = 0; /* think_history: turns before the last user message (Qwen3's last_query_index) */
    for (size_t i = 0; i < n; i++)
        if (strcmp(msgs[i].role, "user") == 0) last_user = i;
    const char *first_user_prefix = NULL; /* SYS_FIRST_USER */
    size_t i0 = 0;
    if (r->system == SYS_FIRST_USER && n && strcmp(msgs[0].role, "system") == 0) { first_user_prefix = msgs[0].content; i0 = 1; }
    for (size_t i = i0; i < n; i++) {
        const char *role = msgs[i].role;
        bool is_asst = strcmp(role, "assistant") == 0;
        if (i == i0 && r->bos_first) puts_(&s, t->bos);
        const char *content = msgs[i].content;
        if (is_asst && r->strip_think && (!r->think_history || i < last_user)) {
            for (const char *p = strstr(content, "</think>"); p; p = strstr(p + 1, "</think>")) content = p + 8;
            while (r->think_history && content != msgs[i].content && *content == '\n') content++;
        }
        if (r->user_prefix) { /* no role names: user and assistant turns only, system went on top */
            if (strcmp(role, "user") == 0) { puts_(&s, r->user_prefix); puts_(&s, content); }
            else if (is_asst) { puts_(&s, r->assistant_prefix); puts_(&s, content); puts_(&s, r->assistant_suffix); }
            continue;
        }
        if (is_asst && r->assistant_name) role = r->assistant_name;
        puts_(&s, r->msg_prefix); puts_(&s, role); puts_(&s, r->role_suffix);
        if (i == i0 && first_user_prefix) { puts_(&s, first_user_prefix); puts_(&s, "\n\n"); } /* not trimmed */
        if (is_asst && r->strip_channel) put_without_channels(&s, content);
        else if (r->trim || (i == 0 && r->trim_system0 && strcmp(role, "system") == 0)) put_trimmed(&s, content);
        else puts_(&s, content);
        if (r->msg_suffix) puts_(&s, r->msg_suffix);
    }
    if (add_generation_prompt) puts_(&s, r->gen_prompt);
    *len = s.n;
    if (s.n >= cap) return MOQ_FAIL(err, MOQ_ERR_NOMEM, "moq_chat_render", "output holds %zu bytes, the chat needs %zu and a NUL", cap, s.n);
    out[s.n] = '\0';
    return MOQ_OK;
}
