/* serve.c — `moq serve` (serve.h): HTTP front, OpenAI JSON, and the continuous-batching scheduler.
 *
 * Threads:
 *   main       opens the model, starts the rest, waits in sigwait for SIGINT/SIGTERM
 *   MHD        libmicrohttpd, one thread per connection: reads the body, validates it, tokenizes
 *              the prompt, queues a request, then waits for its output (a stream's reader waits
 *              for the next bytes; a plain request waits for the end), polling its socket so a
 *              client that goes away cancels its request
 *   scheduler  owns the model, the moq_batch and every moq_seq. Each iteration:
 *                1. retire cancelled requests (their sequence freed: pages back to the pool)
 *                2. admit queued requests in arrival order while fewer than max_batch run and
 *                   the pool can reserve prompt + max_tokens positions (else they wait)
 *                3. one moq_batch_run: one token for every decoding request, plus up to
 *                   prefill_chunk prompt tokens of the requests still prefilling, no more than
 *                   fill the rows of one forward (chunked prefill: a long prompt never holds
 *                   the others for more than one chunk)
 *                4. sample, detokenize, check stop strings / eos / max_tokens, publish output
 *
 * A request is shared by its connection thread and the scheduler (refs = 2); whichever lets go
 * last frees it. Its output (text, SSE bytes, done flag) is guarded by its mutex.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "serve/serve.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define MAX_STOP 4
#define MAX_TOP_LOGPROBS 20

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- growable byte buffer ---- */
typedef struct sbuf { char *p; size_t n, cap; bool oom; } sbuf;
static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) { b->oom = true; return; }
        b->p = q, b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}
static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* ---- metrics (Prometheus text) ---- */
static const double lat_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
#define NB (sizeof lat_bounds / sizeof lat_bounds[0])
typedef struct hist { uint64_t b[NB + 1]; double sum; uint64_t n; } hist;
static void hist_add(hist *h, double v) {
    size_t i = 0;
    while (i < NB && v > lat_bounds[i]) i++;
    h->b[i]++, h->sum += v, h->n++;
}

typedef struct metrics {
    pthread_mutex_t mu;
    uint64_t req_ok[2], req_err[2]; /* [chat, completions] */
    uint64_t req_4xx, cancelled, prompt_tokens, gen_tokens, steps, step_rows;
    int64_t  queued, running;
    hist     ttft, itl, batch;     /* batch: decode sequences per step (bounds reused as counts) */
} metrics;

/* ---- requests ---- */
enum { ST_QUEUED, ST_PREFILL, ST_DECODE, ST_DONE };

typedef struct req {
    struct req *next;              /* queue link (scheduler lists)                       */
    /* set by the connection thread before queueing, read-only after */
    uint64_t id;
    int64_t  max_tokens;
    moq_sampler_opts so;
    char    *stop[MAX_STOP];
    size_t   stop_max;             /* longest stop string                                */
    int32_t *prompt;
    int64_t  n_prompt;
    double   t_arrive;
    int      n_stop;
    int      logprobs;             /* -1 none; else top-k count (0..20)                  */
    int      fd;                   /* client socket, polled for hang-up                  */
    /* scheduler only */
    int      state;
    moq_seq *seq;
    moq_sampler *smp;
    int64_t  prefilled, n_gen;
    double   t_last;
    int32_t  feed;                 /* token to run next                                  */
    moq_utf8_stream us;
    /* shared, under mu */
    bool     cancelled, done;
    bool     chat, stream, include_usage, echo;  /* set before queueing, read-only after */
    int      refs;
    int      err_status;           /* != 0: failed (message in errmsg)                   */
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    sbuf     text;                 /* completion text so far (stop strings cut it)       */
    size_t   emitted;              /* text bytes already sent as stream deltas           */
    sbuf     sse;                  /* stream bytes not yet handed to MHD                 */
    size_t   sse_off;
    cJSON   *lp;                   /* logprob entries, array                             */
    cJSON   *lp_last;              /* the ending token's entry, for the last stream chunk */
    const char *finish;            /* "stop", "length", or NULL                          */
    char     errmsg[512];
} req;

typedef struct server {
    serve_opts      o;
    char            model_id[256];
    moq_model      *m;
    moq_tokenizer  *tok;
    moq_batch      *b;
    int64_t         V, ctx;
    pthread_t       sched;
    pthread_mutex_t mu;            /* queue + stopping                                   */
    pthread_cond_t  cv;
    req            *qhead, *qtail; /* arrived, not yet seen by the scheduler             */
    bool            stopping;
    uint64_t        next_id;
    metrics         met;
    int64_t         created;
} server;

static void req_release(req *r) {
    pthread_mutex_lock(&r->mu);
    const int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left) return;
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->prompt);
    free(r->text.p);
    free(r->sse.p);
    cJSON_Delete(r->lp);
    cJSON_Delete(r->lp_last);
    moq_sampler_free(r->smp);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

/* ---- OpenAI JSON pieces ---- */
static char *err_json(const char *msg, const char *type, const char *param, const char *code) {
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    if (param) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    if (code) cJSON_AddStringToObject(e, "code", code);
    else cJSON_AddNullToObject(e, "code");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* A request rejected before it runs: HTTP status, message, the parameter at fault. */
typedef struct reject { int status; char msg[400], param[64]; const char *code; } reject; /* param copied: it may be a key of the parsed body */
static bool rej(reject *j, int status, const char *param, const char *code, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static bool rej(reject *j, int status, const char *param, const char *code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->msg, sizeof j->msg, fmt, ap);
    va_end(ap);
    j->status = status, j->code = code;
    snprintf(j->param, sizeof j->param, "%s", param ? param : "");
    return false;
}

/* The request fields, one row each: name, JSON type, which endpoints take it. */
enum { T_STR = 1, T_NUM = 2, T_INT = 4, T_BOOL = 8, T_ARR = 16, T_OBJ = 32, T_NULL = 64 };
enum { E_CHAT = 1, E_COMP = 2 };
static const struct field { const char *name; int types, ep; } fields[] = {
    {"model", T_STR, E_CHAT | E_COMP},         {"messages", T_ARR, E_CHAT},
    {"prompt", T_STR | T_ARR, E_COMP},          {"max_tokens", T_INT | T_NULL, E_CHAT | E_COMP},
    {"max_completion_tokens", T_INT | T_NULL, E_CHAT}, {"temperature", T_NUM | T_NULL, E_CHAT | E_COMP},
    {"top_p", T_NUM | T_NULL, E_CHAT | E_COMP}, {"top_k", T_INT | T_NULL, E_CHAT | E_COMP},
    {"seed", T_INT | T_NULL, E_CHAT | E_COMP},  {"stop", T_STR | T_ARR | T_NULL, E_CHAT | E_COMP},
    {"n", T_INT | T_NULL, E_CHAT | E_COMP},     {"stream", T_BOOL | T_NULL, E_CHAT | E_COMP},
    {"stream_options", T_OBJ | T_NULL, E_CHAT | E_COMP}, {"logprobs", T_BOOL | T_NULL, E_CHAT},
    {"logprobs", T_INT | T_NULL, E_COMP},       {"top_logprobs", T_INT | T_NULL, E_CHAT},
    {"echo", T_BOOL | T_NULL, E_COMP},          {"user", T_STR, E_CHAT | E_COMP},
};

static int json_type(const cJSON *v) {
    if (cJSON_IsString(v)) return T_STR;
    if (cJSON_IsBool(v)) return T_BOOL;
    if (cJSON_IsNull(v)) return T_NULL;
    if (cJSON_IsArray(v)) return T_ARR;
    if (cJSON_IsObject(v)) return T_OBJ;
    if (cJSON_IsNumber(v)) return v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 9e15 ? T_INT | T_NUM : T_NUM;
    return 0;
}
static const char *type_names(int t) {
    static const char *n[] = {"a string", "a number", "an integer", "a boolean", "an array", "an object", "null"};
    for (int i = 0; i < 7; i++)
        if (t & (1 << i)) return n[i]; /* the first accepted type names the expectation */
    return "?";
}

static char *dup_str(const char *s) {
    char *d = malloc(strlen(s) + 1);
    if (d) strcpy(d, s);
    return d;
}

static bool encode(server *s, const char *text, size_t len, uint32_t flags, req *r, reject *j) {
    size_t n = 0;
    moq_error e;
    r->prompt = malloc((len + 8) * sizeof *r->prompt);
    if (!r->prompt) return rej(j, 500, NULL, NULL, "out of memory");
    if (moq_tokenizer_encode(s->tok, text, len, flags, r->prompt, len + 8, &n, &e) != MOQ_OK) {
        char m[512];
        moq_error_format(&e, m, sizeof m);
        return rej(j, 400, "prompt", NULL, "cannot tokenize the prompt: %s", m);
    }
    r->n_prompt = (int64_t)n;
    return true;
}

/* Chat messages -> rendered prompt -> ids, as `moq run --chat` does. */
static bool chat_prompt(server *s, const cJSON *msgs, req *r, reject *j) {
    const int n = cJSON_GetArraySize(msgs);
    if (n < 1) return rej(j, 400, "messages", NULL, "'messages' must hold at least one message");
    const moq_chat_template *ct = moq_tokenizer_chat_template(s->tok);
    if (!ct || ct->format == MOQ_CHAT_NONE) return rej(j, 400, "messages", NULL, "the checkpoint has no chat template moq knows (ChatML or Llama-3); use /v1/completions");
    moq_chat_message *cm = calloc((size_t)n, sizeof *cm);
    char **own = calloc((size_t)n, sizeof *own);
    bool ok = cm && own;
    if (!ok) rej(j, 500, NULL, NULL, "out of memory");
    for (int i = 0; ok && i < n; i++) {
        const cJSON *mm = cJSON_GetArrayItem(msgs, i), *role = cJSON_GetObjectItemCaseSensitive(mm, "role"),
                    *content = cJSON_GetObjectItemCaseSensitive(mm, "content");
        if (!cJSON_IsObject(mm)) { ok = rej(j, 400, "messages", NULL, "messages[%d] must be an object", i); break; }
        for (const cJSON *k = mm->child; k; k = k->next)
            if ((strcmp(k->string, "role") != 0) && (strcmp(k->string, "content") != 0) && (strcmp(k->string, "name") != 0)) {
                ok = rej(j, 400, "messages", NULL, "messages[%d]: unknown field '%s'", i, k->string);
                break;
            }
        if (!ok) break;
        if (!cJSON_IsString(role) || ((strcmp(role->valuestring, "system") != 0) && (strcmp(role->valuestring, "user") != 0) &&
                                      (strcmp(role->valuestring, "assistant") != 0) && (strcmp(role->valuestring, "developer") != 0))) {
            ok = rej(j, 400, "messages", NULL, "messages[%d].role must be one of system, developer, user, assistant", i);
            break;
        }
        cm[i].role = (strcmp(role->valuestring, "developer") != 0) ? role->valuestring : "system";
        if (cJSON_IsString(content)) cm[i].content = content->valuestring;
        else if (cJSON_IsArray(content)) { /* [{type: "text", text}] parts, joined */
            sbuf t = {0};
            for (const cJSON *p = content->child; p; p = p->next) {
                const cJSON *ty = cJSON_GetObjectItemCaseSensitive(p, "type"), *tx = cJSON_GetObjectItemCaseSensitive(p, "text");
                if (!cJSON_IsString(ty) || (strcmp(ty->valuestring, "text") != 0) || !cJSON_IsString(tx)) {
                    ok = rej(j, 400, "messages", NULL, "messages[%d].content: only {\"type\": \"text\", \"text\": ...} parts are supported", i);
                    break;
                }
                sb_str(&t, tx->valuestring);
            }
            sb_add(&t, "", 0);
            own[i] = t.p, cm[i].content = t.p ? t.p : "";
            if (t.oom && ok) ok = rej(j, 500, NULL, NULL, "out of memory");
        } else {
            ok = rej(j, 400, "messages", NULL, "messages[%d].content must be a string or an array of text parts", i);
        }
    }
    char *text = NULL;
    size_t need = 0;
    moq_error e;
    if (ok) {
        moq_status st = moq_chat_render(ct, cm, (size_t)n, true, NULL, 0, &need, &e);
        if (st != MOQ_OK && st != MOQ_ERR_NOMEM) {
            char m[512];
            moq_error_format(&e, m, sizeof m);
            ok = rej(j, 400, "messages", NULL, "%s", m);
        } else if (!(text = malloc(need + 1)) || moq_chat_render(ct, cm, (size_t)n, true, text, need + 1, &need, &e) != MOQ_OK) {
            ok = rej(j, 500, NULL, NULL, "cannot render the chat");
        }
    }
    if (ok) ok = encode(s, text, need, 0, r, j);
    free(text);
    for (int i = 0; own && i < n; i++) free(own[i]);
    free(own);
    free(cm);
    return ok;
}

/* Parses and checks a request body; fills r or j. */
static bool parse_request(server *s, const char *body, size_t len, bool chat, req *r, reject *j) {
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) return rej(j, 400, NULL, NULL, "the body is not valid JSON (error near byte %td)", cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - body : (ptrdiff_t)0);
    bool ok = true;
    if (!cJSON_IsObject(root)) ok = rej(j, 400, NULL, NULL, "the body must be a JSON object");
    const int ep = chat ? E_CHAT : E_COMP;
    for (const cJSON *k = ok ? root->child : NULL; k && ok; k = k->next) {
        const struct field *f = NULL;
        for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
            if (fields[i].ep & ep && (strcmp(fields[i].name, k->string) == 0)) f = &fields[i];
        if (!f) ok = rej(j, 400, k->string, NULL, "unknown field '%s' (moq serve takes %s)", k->string,
                         chat ? "model, messages, max_tokens, max_completion_tokens, temperature, top_p, top_k, seed, stop, n, stream, stream_options, logprobs, top_logprobs, user"
                              : "model, prompt, max_tokens, temperature, top_p, top_k, seed, stop, n, stream, stream_options, logprobs, echo, user");
        else if (!(json_type(k) & f->types)) ok = rej(j, 400, f->name, NULL, "'%s' must be %s", f->name, type_names(f->types));
    }
#define GET(name) cJSON_GetObjectItemCaseSensitive(root, name)
#define NUM(name) (GET(name) && cJSON_IsNumber(GET(name)))
    const cJSON *v;
    r->so = moq_sampler_opts_default();
    r->so.temperature = 1.0f; /* OpenAI's default */
    r->logprobs = -1;
    r->chat = chat;
    if (ok && (v = GET("n")) && cJSON_IsNumber(v) && v->valuedouble != 1) ok = rej(j, 400, "n", NULL, "'n' must be 1 (moq serve returns one choice)");
    if (ok && NUM("temperature") && !((v = GET("temperature"))->valuedouble >= 0 && v->valuedouble <= 2)) ok = rej(j, 400, "temperature", NULL, "'temperature' must be in [0, 2]");
    if (ok && NUM("temperature")) r->so.temperature = (float)GET("temperature")->valuedouble;
    if (ok && NUM("top_p") && !((v = GET("top_p"))->valuedouble > 0 && v->valuedouble <= 1)) ok = rej(j, 400, "top_p", NULL, "'top_p' must be in (0, 1]");
    if (ok && NUM("top_p")) r->so.top_p = (float)GET("top_p")->valuedouble;
    if (ok && NUM("top_k") && ((v = GET("top_k"))->valuedouble < -1 || v->valuedouble > INT32_MAX)) ok = rej(j, 400, "top_k", NULL, "'top_k' must be -1, 0 (no limit) or a positive integer");
    if (ok && NUM("top_k")) r->so.top_k = GET("top_k")->valueint > 0 ? GET("top_k")->valueint : 0;
    if (ok && NUM("seed")) r->so.seed = (uint64_t)(int64_t)GET("seed")->valuedouble;
    r->max_tokens = -1;
    const char *mt = chat && NUM("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (ok && NUM(mt) && GET(mt)->valuedouble < 1) ok = rej(j, 400, mt, NULL, "'%s' must be >= 1", mt);
    if (ok && NUM(mt)) r->max_tokens = GET(mt)->valuedouble > 1e9 ? 1000000000 : (int64_t)GET(mt)->valuedouble;
    if (ok && (v = GET("stream")) && cJSON_IsTrue(v)) r->stream = true;
    if (ok && (v = GET("stream_options")) && cJSON_IsObject(v)) {
        for (const cJSON *k = v->child; k && ok; k = k->next)
            if ((strcmp(k->string, "include_usage") != 0) || !cJSON_IsBool(k)) ok = rej(j, 400, "stream_options", NULL, "stream_options takes only include_usage (a boolean)");
        if (ok && !r->stream) ok = rej(j, 400, "stream_options", NULL, "stream_options needs \"stream\": true");
        r->include_usage = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "include_usage"));
    }
    if (ok && (v = GET("echo")) && cJSON_IsTrue(v)) ok = rej(j, 400, "echo", NULL, "'echo' true is not supported");
    if (ok && (v = GET("stop")) && !cJSON_IsNull(v)) {
        const cJSON *items = cJSON_IsString(v) ? NULL : v;
        if (items && cJSON_GetArraySize(items) > MAX_STOP) ok = rej(j, 400, "stop", NULL, "'stop' takes at most %d strings", MAX_STOP);
        for (const cJSON *it = items ? items->child : v; ok && it; it = items ? it->next : NULL) {
            if (!cJSON_IsString(it) || !it->valuestring[0]) { ok = rej(j, 400, "stop", NULL, "'stop' must be a non-empty string or an array of them"); break; }
            if (!(r->stop[r->n_stop++] = dup_str(it->valuestring))) ok = rej(j, 500, NULL, NULL, "out of memory");
            else if (strlen(it->valuestring) > r->stop_max) r->stop_max = strlen(it->valuestring);
        }
    }
    if (ok && chat && (v = GET("logprobs")) && cJSON_IsTrue(v)) {
        r->logprobs = 0;
        if (NUM("top_logprobs")) r->logprobs = GET("top_logprobs")->valueint;
    } else if (ok && chat && NUM("top_logprobs")) {
        ok = rej(j, 400, "top_logprobs", NULL, "'top_logprobs' needs \"logprobs\": true");
    }
    if (ok && !chat && NUM("logprobs")) r->logprobs = GET("logprobs")->valueint;
    if (ok && (r->logprobs < -1 || r->logprobs > MAX_TOP_LOGPROBS))
        ok = rej(j, 400, chat ? "top_logprobs" : "logprobs", NULL, "top log-probabilities must be in 0..%d", MAX_TOP_LOGPROBS);
    if (ok && chat) {
        if (!(v = GET("messages"))) ok = rej(j, 400, "messages", NULL, "'messages' is required");
        else ok = chat_prompt(s, v, r, j);
    } else if (ok) {
        if (!(v = GET("prompt"))) ok = rej(j, 400, "prompt", NULL, "'prompt' is required");
        else if (cJSON_IsString(v)) ok = encode(s, v->valuestring, strlen(v->valuestring), MOQ_ENCODE_ADD_SPECIAL, r, j);
        else { /* an array of token ids, or of one string */
            const int n = cJSON_GetArraySize(v);
            if (n == 1 && cJSON_IsString(v->child)) ok = encode(s, v->child->valuestring, strlen(v->child->valuestring), MOQ_ENCODE_ADD_SPECIAL, r, j);
            else if (n < 1) ok = rej(j, 400, "prompt", NULL, "'prompt' is empty");
            else if (!(r->prompt = malloc((size_t)n * sizeof *r->prompt))) ok = rej(j, 500, NULL, NULL, "out of memory");
            else
                for (const cJSON *it = v->child; ok && it; it = it->next) {
                    if (!(json_type(it) & T_INT) || it->valuedouble < 0 || it->valuedouble >= (double)s->V)
                        ok = rej(j, 400, "prompt", NULL, "'prompt' must be a string, one string in an array, or token ids in [0, %lld)", (long long)s->V);
                    else r->prompt[r->n_prompt++] = (int32_t)it->valuedouble;
                }
        }
    }
    if (ok && r->n_prompt < 1) ok = rej(j, 400, chat ? "messages" : "prompt", NULL, "the prompt encodes to no tokens");
    if (ok && r->max_tokens < 0) r->max_tokens = chat ? s->ctx - r->n_prompt : 16; /* OpenAI: chat to the context, completions 16 */
    if (ok && (r->max_tokens < 1 || r->n_prompt + r->max_tokens > s->ctx))
        ok = rej(j, 400, chat ? "messages" : "prompt", "context_length_exceeded",
                 "This model's maximum context length is %lld tokens. However, you requested %lld tokens (%lld in the prompt, %lld for the completion).",
                 (long long)s->ctx, (long long)r->n_prompt + (r->max_tokens > 0 ? (long long)r->max_tokens : 1LL), (long long)r->n_prompt,
                 r->max_tokens > 0 ? (long long)r->max_tokens : 1LL);
    if (ok && moq_batch_pages_for(s->b, r->n_prompt + r->max_tokens) > moq_batch_pages_total(s->b))
        ok = rej(j, 400, "max_tokens", "kv_cache_exceeded", "%lld positions need %lld KV pages; --kv-cache-mem holds %lld",
                 (long long)r->n_prompt + (long long)r->max_tokens, (long long)moq_batch_pages_for(s->b, r->n_prompt + r->max_tokens),
                 (long long)moq_batch_pages_total(s->b));
#undef GET
#undef NUM
    cJSON_Delete(root);
    return ok;
}

/* ---- output, produced by the scheduler ---- */
static void add_chunk(server *s, req *r, const char *delta, size_t n, const char *finish, cJSON *lp) {
    cJSON *o = cJSON_CreateObject(), *ch = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "choices");
    char id[64];
    snprintf(id, sizeof id, "%s-%llu", r->chat ? "chatcmpl" : "cmpl", (unsigned long long)r->id);
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", r->chat ? "chat.completion.chunk" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)s->created);
    cJSON_AddStringToObject(o, "model", s->model_id);
    cJSON_AddItemToArray(arr, ch);
    cJSON_AddNumberToObject(ch, "index", 0);
    char *t = malloc(n + 1);
    if (t) {
        if (delta && n) memcpy(t, delta, n);
        t[n] = '\0';
    }
    if (r->chat) {
        cJSON *d = cJSON_AddObjectToObject(ch, "delta");
        if (!delta) cJSON_AddStringToObject(d, "role", "assistant"), cJSON_AddStringToObject(d, "content", "");
        else if (n) cJSON_AddStringToObject(d, "content", t ? t : "");
        if (lp) cJSON_AddItemToObject(cJSON_AddObjectToObject(ch, "logprobs"), "content", lp);
        else cJSON_AddNullToObject(ch, "logprobs");
    } else {
        cJSON_AddStringToObject(ch, "text", t && delta ? t : "");
        if (lp) cJSON_AddItemToObject(ch, "logprobs", lp);
        else cJSON_AddNullToObject(ch, "logprobs");
    }
    free(t);
    if (finish) cJSON_AddStringToObject(ch, "finish_reason", finish);
    else cJSON_AddNullToObject(ch, "finish_reason");
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    sb_str(&r->sse, "data: ");
    sb_str(&r->sse, js ? js : "{}");
    sb_str(&r->sse, "\n\n");
    free(js);
}

static cJSON *usage_obj(const req *r) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)r->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)r->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(r->n_prompt + r->n_gen));
    return u;
}

static cJSON *legacy_logprobs(cJSON *entries);

/* Sends (stream) the text not yet sent that no stop string can still claim; all of it when final.
 * Every token gets a chunk, also one whose text is held back (part of a character, or perhaps the
 * start of a stop string): its delta is then empty, so clients see each token when it is made. */
static void stream_text(server *s, req *r, bool final, cJSON *lp) {
    size_t upto = r->text.n;
    if (!final && r->stop_max > 1) upto = r->text.n > r->stop_max - 1 ? r->text.n - (r->stop_max - 1) : 0;
    while (r->text.p && upto > r->emitted && upto < r->text.n && ((unsigned char)r->text.p[upto] & 0xC0) == 0x80) upto--; /* whole characters */
    if (upto > r->emitted || lp || !final) add_chunk(s, r, r->text.p ? r->text.p + r->emitted : "", upto > r->emitted ? upto - r->emitted : 0, NULL, lp);
    if (upto > r->emitted) r->emitted = upto;
}

static void finish_stream(server *s, req *r) {
    cJSON *one = NULL;
    if (r->lp_last) one = cJSON_CreateArray(), cJSON_AddItemToArray(one, r->lp_last), r->lp_last = NULL;
    if (one && !r->chat) {
        cJSON *legacy = legacy_logprobs(one);
        cJSON_Delete(one);
        one = legacy;
    }
    stream_text(s, r, true, one);
    add_chunk(s, r, "", 0, r->finish, NULL);
    if (r->include_usage) {
        cJSON *o = cJSON_CreateObject();
        char id[64];
        snprintf(id, sizeof id, "%s-%llu", r->chat ? "chatcmpl" : "cmpl", (unsigned long long)r->id);
        cJSON_AddStringToObject(o, "id", id);
        cJSON_AddStringToObject(o, "object", r->chat ? "chat.completion.chunk" : "text_completion");
        cJSON_AddNumberToObject(o, "created", (double)s->created);
        cJSON_AddStringToObject(o, "model", s->model_id);
        cJSON_AddArrayToObject(o, "choices");
        cJSON_AddItemToObject(o, "usage", usage_obj(r));
        char *js = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        sb_str(&r->sse, "data: ");
        sb_str(&r->sse, js ? js : "{}");
        sb_str(&r->sse, "\n\n");
        free(js);
    }
    sb_str(&r->sse, "data: [DONE]\n\n");
}

/* Ends a request (under r->mu): finish reason or error; wakes its connection thread. */
static void end_req(server *s, req *r, const char *finish, int status, const char *msg) {
    r->finish = finish;
    if (status) {
        r->err_status = status;
        snprintf(r->errmsg, sizeof r->errmsg, "%s", msg);
        if (r->stream) { /* an error after the 200: an error event, then [DONE] */
            char *e = err_json(msg, "server_error", NULL, NULL);
            sb_str(&r->sse, "data: ");
            sb_str(&r->sse, e ? e : "{}");
            sb_str(&r->sse, "\n\ndata: [DONE]\n\n");
            free(e);
        }
    } else if (r->stream) {
        finish_stream(s, r);
    }
    r->done = true;
    pthread_cond_broadcast(&r->cv);
}

/* A token's text as valid UTF-8 (a token may hold part of a character: U+FFFD for it, as
 * OpenAI's API does; the raw bytes go to "bytes"). */
static void token_text(server *s, int32_t id, char *out, size_t cap, cJSON *bytes) {
    const uint8_t *b = NULL;
    size_t n = 0, len = 0;
    moq_error e;
    out[0] = '\0';
    if (id < moq_tokenizer_vocab_size(s->tok) && moq_tokenizer_decode_token(s->tok, id, &b, &n, &e) == MOQ_OK) {
        if (n > 64) n = 64;
        if (cap < MOQ_UTF8_STREAM_OUT_MAX(64) + 1) return;
        moq_utf8_stream us;
        moq_utf8_stream_reset(&us);
        if (moq_utf8_stream_push(&us, b, n, out, cap - 1, &len, &e) != MOQ_OK) len = 0;
        len += moq_utf8_stream_flush(&us, out + len, cap - 1 - len);
        out[len] = '\0';
        for (size_t i = 0; bytes && i < n; i++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber(b[i]));
    }
}

static cJSON *logprob_entry(server *s, const req *r, const float *lg, int32_t id) {
    if (!lg || s->V < 1) return cJSON_CreateObject();
    double mx = -INFINITY, sum = 0;
    for (int64_t i = 0; i < s->V; i++) mx = lg[i] > mx ? lg[i] : mx;
    for (int64_t i = 0; i < s->V; i++) sum += exp((double)lg[i] - mx);
    const double lse = mx + log(sum > 0 ? sum : 1); /* sum >= 1: the largest term is exp(0) */
    char t[256];
    cJSON *e = cJSON_CreateObject(), *top = cJSON_CreateArray(), *by = cJSON_CreateArray();
    token_text(s, id, t, sizeof t, by);
    cJSON_AddStringToObject(e, "token", t);
    cJSON_AddItemToObject(e, "bytes", by);
    cJSON_AddNumberToObject(e, "logprob", (double)lg[id] - lse);
    /* the k largest in (logit desc, id asc) order, one pass over the vocabulary: best[] is kept
       sorted, and id i (ids rising) goes after every kept entry whose logit is >= its own, so
       ties keep the lower id first (was k passes, each testing every id against the chosen) */
    int32_t best[MAX_TOP_LOGPROBS];
    const int K = r->logprobs < s->V ? r->logprobs : (int)s->V;
    int nb = 0;
    for (int64_t i = 0; i < s->V && K > 0; i++) {
        if (nb == K && !(lg[i] > lg[best[K - 1]])) continue;
        int q = nb < K ? nb++ : K - 1;
        for (; q > 0 && lg[i] > lg[best[q - 1]]; q--) best[q] = best[q - 1];
        best[q] = (int32_t)i;
    }
    for (int k = 0; k < nb; k++) {
        const int32_t bi = best[k];
        cJSON *x = cJSON_CreateObject(), *xb = cJSON_CreateArray();
        token_text(s, bi, t, sizeof t, xb);
        cJSON_AddStringToObject(x, "token", t);
        cJSON_AddItemToObject(x, "bytes", xb);
        cJSON_AddNumberToObject(x, "logprob", (double)lg[bi] - lse);
        cJSON_AddItemToArray(top, x);
    }
    cJSON_AddItemToObject(e, "top_logprobs", top);
    return e;
}

/* Completions' legacy logprobs object from the chat-shaped entries. */
static cJSON *legacy_logprobs(cJSON *entries) {
    cJSON *o = cJSON_CreateObject(), *tok = cJSON_AddArrayToObject(o, "tokens"), *lp = cJSON_AddArrayToObject(o, "token_logprobs"),
          *top = cJSON_AddArrayToObject(o, "top_logprobs"), *off = cJSON_AddArrayToObject(o, "text_offset");
    double at = 0;
    for (const cJSON *e = entries ? entries->child : NULL; e; e = e->next) {
        const char *t = cJSON_GetObjectItemCaseSensitive(e, "token")->valuestring;
        cJSON_AddItemToArray(tok, cJSON_CreateString(t));
        cJSON_AddItemToArray(lp, cJSON_CreateNumber(cJSON_GetObjectItemCaseSensitive(e, "logprob")->valuedouble));
        cJSON *m = cJSON_CreateObject();
        for (const cJSON *x = cJSON_GetObjectItemCaseSensitive(e, "top_logprobs")->child; x; x = x->next)
            if (!cJSON_GetObjectItemCaseSensitive(m, cJSON_GetObjectItemCaseSensitive(x, "token")->valuestring))
                cJSON_AddNumberToObject(m, cJSON_GetObjectItemCaseSensitive(x, "token")->valuestring, cJSON_GetObjectItemCaseSensitive(x, "logprob")->valuedouble);
        cJSON_AddItemToArray(top, m);
        cJSON_AddItemToArray(off, cJSON_CreateNumber(at));
        at += (double)strlen(t);
    }
    return o;
}

/* A sampled token: text, stop strings, eos, max_tokens. Returns true when the request ended. */
static bool on_token(server *s, req *r, const float *lg, int32_t id, double t) {
    metrics *mt = &s->met;
    pthread_mutex_lock(&mt->mu);
    mt->gen_tokens++;
    if (r->n_gen == 0) hist_add(&mt->ttft, t - r->t_arrive);
    else hist_add(&mt->itl, t - r->t_last);
    pthread_mutex_unlock(&mt->mu);
    r->t_last = t;
    r->n_gen++;
    pthread_mutex_lock(&r->mu);
    cJSON *lp = NULL;
    if (r->logprobs >= 0 && !moq_tokenizer_is_eos(s->tok, id)) {
        lp = logprob_entry(s, r, lg, id);
        if (!r->lp) r->lp = cJSON_CreateArray();
        cJSON_AddItemToArray(r->lp, cJSON_Duplicate(lp, true));
    }
    bool end = false;
    const size_t before = r->text.n;
    if (r->stream && lp) r->lp_last = cJSON_Duplicate(lp, true); /* sent by finish_stream if this token ends it */
    if (moq_tokenizer_is_eos(s->tok, id)) {
        r->n_gen--; /* as `moq run`: the eos is not part of the completion */
        char tail[16];
        const size_t n = moq_utf8_stream_flush(&r->us, tail, sizeof tail);
        sb_add(&r->text, tail, n);
        end_req(s, r, "stop", 0, NULL);
        end = true;
    } else {
        const uint8_t *b = NULL;
        size_t bl = 0, pl = 0;
        moq_error e;
        char piece[MOQ_UTF8_STREAM_OUT_MAX(256)];
        if (id < moq_tokenizer_vocab_size(s->tok) && moq_tokenizer_decode_token(s->tok, id, &b, &bl, &e) == MOQ_OK)
            for (size_t i = 0; i < bl; i += 256) {
                const size_t c = bl - i < 256 ? bl - i : 256;
                if (moq_utf8_stream_push(&r->us, b + i, c, piece, sizeof piece, &pl, &e) == MOQ_OK) sb_add(&r->text, piece, pl);
            }
        /* a stop string: search from where it could first begin */
        const size_t from = before > r->stop_max ? before - r->stop_max : 0;
        for (int k = 0; k < r->n_stop && r->text.p; k++) {
            const char *hit = memmem(r->text.p + from, r->text.n - from, r->stop[k], strlen(r->stop[k]));
            if (hit && (!end || (size_t)(hit - r->text.p) < r->text.n)) {
                r->text.n = (size_t)(hit - r->text.p), r->text.p[r->text.n] = '\0';
                end = true;
            }
        }
        if (end) end_req(s, r, "stop", 0, NULL);
        else if (r->n_gen >= r->max_tokens) {
            char tail[16];
            const size_t n = moq_utf8_stream_flush(&r->us, tail, sizeof tail);
            sb_add(&r->text, tail, n);
            end_req(s, r, "length", 0, NULL), end = true;
        }
    }
    if (!end && r->stream) {
        cJSON_Delete(r->lp_last);
        r->lp_last = NULL;
        cJSON *one = NULL;
        if (lp) one = cJSON_CreateArray(), cJSON_AddItemToArray(one, lp), lp = NULL;
        stream_text(s, r, false, r->chat ? one : (one ? legacy_logprobs(one) : NULL));
        if (!r->chat) cJSON_Delete(one);
        pthread_cond_broadcast(&r->cv);
    }
    cJSON_Delete(lp);
    if (r->text.oom || r->sse.oom) end_req(s, r, NULL, 500, "out of memory"), end = true;
    pthread_mutex_unlock(&r->mu);
    return end;
}

/* ---- the scheduler ---- */
static void retire(server *s, req **list, req *r) {
    for (req **p = list; *p; p = &(*p)->next)
        if (*p == r) { *p = r->next; break; }
    moq_seq_free(r->seq);
    r->seq = NULL;
    pthread_mutex_lock(&s->met.mu);
    s->met.running--;
    pthread_mutex_unlock(&s->met.mu);
    req_release(r);
}

/* Item n of a run: n_tok tokens of r; its last token's output (when `last`) is the argmax the
 * library finds for a greedy request (moq_sampler_is_greedy: temperature 0 or top_k 1) that wants no
 * log-probabilities (on the GPU with MOQ_CUDA_ARGMAX=1 only the id comes down), else the logits row n
 * for the sampler. */
static moq_batch_item out_item(const server *s, req *r, const int32_t *tok, int64_t n_tok, bool last, float *logits, int32_t *greedy, int n) {
    const bool argmax = last && moq_sampler_is_greedy(r->smp) && r->logprobs < 0;
    return (moq_batch_item){r->seq, tok, n_tok, last && !argmax ? logits + (size_t)n * (size_t)s->V : NULL, argmax ? &greedy[n] : NULL};
}

static void *scheduler(void *arg) {
    server *s = arg;
    const int B = s->o.max_batch;
    req *waiting = NULL, **wtail = &waiting, *active = NULL;
    int n_active = 0;
    float *logits = malloc((size_t)(B + 1) * (size_t)s->V * sizeof(float));
    moq_batch_item *items = malloc((size_t)(B + 1) * sizeof *items);
    int32_t *greedy = malloc((size_t)(B + 1) * sizeof *greedy); /* ids the library found (greedy requests) */
    req **owner = malloc((size_t)(B + 1) * sizeof(req *));
    const size_t ss = moq_sampler_scratch_size((size_t)s->V);
    void *scratch = malloc(ss ? ss : 1);
    if (!logits || !items || !greedy || !owner || !scratch) {
        fprintf(stderr, "moq serve: out of memory for the scheduler\n");
        pthread_mutex_lock(&s->mu);
        s->stopping = true;
        pthread_mutex_unlock(&s->mu);
        kill(getpid(), SIGTERM);
    }
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->stopping && !s->qhead && !waiting && !active) pthread_cond_wait(&s->cv, &s->mu);
        const bool stopping = s->stopping;
        for (req *r = s->qhead; r; r = r->next) *wtail = r, wtail = &r->next;
        s->qhead = s->qtail = NULL;
        pthread_mutex_unlock(&s->mu);
        if (stopping || !logits || !items || !greedy || !owner || !scratch) { /* cancel everything, then leave */
            for (req *r = waiting, *nx; r; r = nx) {
                nx = r->next;
                pthread_mutex_lock(&r->mu);
                end_req(s, r, NULL, 503, "the server is shutting down");
                pthread_mutex_unlock(&r->mu);
                req_release(r);
            }
            while (active) {
                req *r = active;
                pthread_mutex_lock(&r->mu);
                if (!r->done) end_req(s, r, NULL, 503, "the server is shutting down");
                pthread_mutex_unlock(&r->mu);
                retire(s, &active, r);
            }
            pthread_mutex_lock(&s->met.mu);
            s->met.queued = 0;
            pthread_mutex_unlock(&s->met.mu);
            break;
        }
        /* 1. retire cancelled (client gone) */
        for (req *r = active, *nx; r; r = nx) {
            nx = r->next;
            pthread_mutex_lock(&r->mu);
            const bool gone = r->cancelled;
            pthread_mutex_unlock(&r->mu);
            if (gone) {
                pthread_mutex_lock(&s->met.mu);
                s->met.cancelled++;
                pthread_mutex_unlock(&s->met.mu);
                retire(s, &active, r), n_active--;
            }
        }
        for (req **p = &waiting; *p;) {
            req *r = *p;
            pthread_mutex_lock(&r->mu);
            const bool gone = r->cancelled;
            pthread_mutex_unlock(&r->mu);
            if (gone) {
                *p = r->next;
                pthread_mutex_lock(&s->met.mu);
                s->met.cancelled++;
                pthread_mutex_unlock(&s->met.mu);
                req_release(r);
            } else {
                p = &r->next;
            }
        }
        wtail = &waiting;
        while (*wtail) wtail = &(*wtail)->next;
        /* 2. admit in arrival order while there is room */
        while (waiting && n_active < B) {
            req *r = waiting;
            moq_error e;
            if (!r->seq && moq_seq_create(&r->seq, s->b, &e) != MOQ_OK) break;
            if (moq_seq_reserve(r->seq, r->n_prompt + r->max_tokens, &e) != MOQ_OK) break; /* pool full: wait */
            if (moq_sampler_create(&r->smp, &r->so, &e) != MOQ_OK) {
                waiting = r->next;
                moq_seq_free(r->seq), r->seq = NULL;
                pthread_mutex_lock(&r->mu);
                end_req(s, r, NULL, 500, e.msg);
                pthread_mutex_unlock(&r->mu);
                req_release(r);
                continue;
            }
            waiting = r->next;
            r->state = ST_PREFILL;
            r->next = NULL;
            req **p = &active;
            while (*p) p = &(*p)->next;
            *p = r;
            n_active++;
        }
        wtail = &waiting;
        while (*wtail) wtail = &(*wtail)->next;
        int64_t nq = 0;
        for (req *r = waiting; r; r = r->next) nq++;
        pthread_mutex_lock(&s->met.mu);
        s->met.queued = nq, s->met.running = n_active;
        pthread_mutex_unlock(&s->met.mu);
        if (!active) continue;
        /* 3. one run: every decoding request's token, then prompt chunks */
        int n = 0, n_dec = 0;
        int64_t rows = 0;
        for (req *r = active; r; r = r->next)
            if (r->state == ST_DECODE) items[n] = out_item(s, r, &r->feed, 1, true, logits, greedy, n), owner[n++] = r, n_dec++;
        /* prompt tokens: up to --prefill-chunk, and no more than fill the rows one forward takes
           (so a step with a prefill costs one forward, not two), at least one */
        const int64_t room = moq_batch_rows_per_forward(s->b) - n_dec;
        int64_t budget = s->o.prefill_chunk < room ? s->o.prefill_chunk : room;
        if (budget < 1) budget = 1;
        for (req *r = active; r && budget > 0; r = r->next)
            if (r->state == ST_PREFILL) {
                const int64_t c = r->n_prompt - r->prefilled < budget ? r->n_prompt - r->prefilled : budget;
                const bool last = r->prefilled + c == r->n_prompt;
                items[n] = out_item(s, r, r->prompt + r->prefilled, c, last, logits, greedy, n);
                owner[n++] = r, budget -= c;
            }
        for (int i = 0; i < n; i++) rows += items[i].n;
        moq_error e;
        const moq_status st = moq_batch_run(s->b, items, n, &e);
        const double t = now_s();
        pthread_mutex_lock(&s->met.mu);
        s->met.steps++, s->met.step_rows += (uint64_t)rows;
        if (n_dec) hist_add(&s->met.batch, (double)n_dec / 1000.0); /* counts on the latency bounds x 1000 */
        pthread_mutex_unlock(&s->met.mu);
        if (st != MOQ_OK) { /* the model failed (non-finite output): fail these requests */
            char m[512];
            moq_error_format(&e, m, sizeof m);
            fprintf(stderr, "moq serve: %s\n", m);
            for (int i = 0; i < n; i++) {
                req *r = owner[i];
                pthread_mutex_lock(&r->mu);
                end_req(s, r, NULL, 500, m);
                pthread_mutex_unlock(&r->mu);
                retire(s, &active, r), n_active--;
            }
            continue;
        }
        /* 4. sample */
        for (int i = 0; i < n; i++) {
            req *r = owner[i];
            if (r->state == ST_PREFILL) {
                r->prefilled += items[i].n;
                pthread_mutex_lock(&s->met.mu);
                s->met.prompt_tokens += (uint64_t)items[i].n;
                pthread_mutex_unlock(&s->met.mu);
                if (r->prefilled < r->n_prompt) continue;
                r->state = ST_DECODE;
            }
            int32_t id;
            bool end;
            if (items[i].argmax) {
                id = *items[i].argmax;
                end = on_token(s, r, NULL, id, t);
            } else if (moq_sampler_sample(r->smp, items[i].logits, (size_t)s->V, scratch, ss, &id, &e) != MOQ_OK) {
                char m[512];
                moq_error_format(&e, m, sizeof m);
                pthread_mutex_lock(&r->mu);
                end_req(s, r, NULL, 500, m);
                pthread_mutex_unlock(&r->mu);
                end = true;
            } else {
                end = on_token(s, r, items[i].logits, id, t);
            }
            r->feed = id;
            if (end) {
                pthread_mutex_lock(&s->met.mu);
                s->met.req_ok[r->chat ? 0 : 1]++;
                pthread_mutex_unlock(&s->met.mu);
                retire(s, &active, r), n_active--;
            }
        }
    }
    free(logits), free(items), free(greedy), free(owner), free(scratch);
    return NULL;
}

/* ---- HTTP ---- */
typedef struct conn {
    sbuf body;
    bool too_big;
    req *r;
} conn;

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, char *js) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(js ? strlen(js) : 2, js ? js : "{}", js ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(resp, "Content-Type", "application/json");
    const enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result send_error(server *s, struct MHD_Connection *c, unsigned status, const char *msg, const char *param, const char *code) {
    if (status >= 400 && status < 500) {
        pthread_mutex_lock(&s->met.mu);
        s->met.req_4xx++;
        pthread_mutex_unlock(&s->met.mu);
    }
    const char *type = status == 401 ? "authentication_error" : status == 404 ? "not_found_error" : status >= 500 ? "server_error" : "invalid_request_error";
    return send_json(c, status, err_json(msg, type, param, code));
}

/* True when the peer has closed or reset its end. */
static bool peer_gone(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static void cancel(req *r) {
    pthread_mutex_lock(&r->mu);
    if (!r->done) r->cancelled = true;
    pthread_mutex_unlock(&r->mu);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    req *r = cls;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        if (r->sse.n > r->sse_off) {
            size_t n = r->sse.n - r->sse_off;
            if (n > max) n = max;
            memcpy(buf, r->sse.p + r->sse_off, n);
            r->sse_off += n;
            pthread_mutex_unlock(&r->mu);
            return (ssize_t)n;
        }
        if (r->done) {
            pthread_mutex_unlock(&r->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        if (!r->done && r->sse.n == r->sse_off && peer_gone(r->fd)) {
            r->cancelled = true;
            pthread_mutex_unlock(&r->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static void stream_free(void *cls) {
    req *r = cls;
    cancel(r); /* a client that left before the end: the scheduler frees its sequence */
    req_release(r);
}

static char *full_response(server *s, req *r) {
    cJSON *o = cJSON_CreateObject(), *ch = cJSON_CreateObject();
    char id[64];
    snprintf(id, sizeof id, "%s-%llu", r->chat ? "chatcmpl" : "cmpl", (unsigned long long)r->id);
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", r->chat ? "chat.completion" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)s->created);
    cJSON_AddStringToObject(o, "model", s->model_id);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), ch);
    cJSON_AddNumberToObject(ch, "index", 0);
    const char *text = r->text.p ? r->text.p : "";
    if (r->chat) {
        cJSON *m = cJSON_AddObjectToObject(ch, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddStringToObject(m, "content", text);
        if (r->logprobs >= 0) cJSON_AddItemToObject(cJSON_AddObjectToObject(ch, "logprobs"), "content", r->lp ? cJSON_Duplicate(r->lp, true) : cJSON_CreateArray());
        else cJSON_AddNullToObject(ch, "logprobs");
    } else {
        cJSON_AddStringToObject(ch, "text", text);
        if (r->logprobs >= 0) cJSON_AddItemToObject(ch, "logprobs", legacy_logprobs(r->lp));
        else cJSON_AddNullToObject(ch, "logprobs");
    }
    cJSON_AddStringToObject(ch, "finish_reason", r->finish ? r->finish : "stop");
    cJSON_AddItemToObject(o, "usage", usage_obj(r));
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return js;
}

static void metrics_text(server *s, sbuf *b) {
    metrics *m = &s->met;
    char line[512];
    pthread_mutex_lock(&m->mu);
#define P(...) (snprintf(line, sizeof line, __VA_ARGS__), sb_str(b, line))
    P("# HELP moq_requests_total Requests finished, by endpoint and outcome.\n# TYPE moq_requests_total counter\n");
    P("moq_requests_total{endpoint=\"chat\",outcome=\"ok\"} %llu\n", (unsigned long long)m->req_ok[0]);
    P("moq_requests_total{endpoint=\"completions\",outcome=\"ok\"} %llu\n", (unsigned long long)m->req_ok[1]);
    P("moq_requests_total{endpoint=\"any\",outcome=\"rejected\"} %llu\n", (unsigned long long)m->req_4xx);
    P("moq_requests_total{endpoint=\"any\",outcome=\"cancelled\"} %llu\n", (unsigned long long)m->cancelled);
    P("# HELP moq_prompt_tokens_total Prompt tokens prefilled.\n# TYPE moq_prompt_tokens_total counter\nmoq_prompt_tokens_total %llu\n", (unsigned long long)m->prompt_tokens);
    P("# HELP moq_generation_tokens_total Tokens generated.\n# TYPE moq_generation_tokens_total counter\nmoq_generation_tokens_total %llu\n", (unsigned long long)m->gen_tokens);
    P("# HELP moq_queue_depth Requests waiting for admission.\n# TYPE moq_queue_depth gauge\nmoq_queue_depth %lld\n", (long long)m->queued);
    P("# HELP moq_running_requests Requests admitted (prefilling or decoding).\n# TYPE moq_running_requests gauge\nmoq_running_requests %lld\n", (long long)m->running);
    P("# HELP moq_kv_pages_free KV cache pages free.\n# TYPE moq_kv_pages_free gauge\nmoq_kv_pages_free %lld\n", (long long)moq_batch_pages_free(s->b));
    P("# HELP moq_kv_pages_total KV cache pages in the pool.\n# TYPE moq_kv_pages_total gauge\nmoq_kv_pages_total %lld\n", (long long)moq_batch_pages_total(s->b));
    P("# HELP moq_steps_total Forward runs of the scheduler.\n# TYPE moq_steps_total counter\nmoq_steps_total %llu\n", (unsigned long long)m->steps);
    P("# HELP moq_step_rows_total Token rows over all forward runs.\n# TYPE moq_step_rows_total counter\nmoq_step_rows_total %llu\n", (unsigned long long)m->step_rows);
    const struct { const char *name, *help; const hist *h; double scale; } hs[] = {
        {"moq_time_to_first_token_seconds", "Arrival to first generated token.", &m->ttft, 1},
        {"moq_inter_token_latency_seconds", "Time between consecutive tokens of a request.", &m->itl, 1},
        {"moq_batch_size", "Decoding sequences per forward run.", &m->batch, 1000},
    };
    for (size_t k = 0; k < 3; k++) {
        P("# HELP %s %s\n# TYPE %s histogram\n", hs[k].name, hs[k].help, hs[k].name);
        uint64_t cum = 0;
        for (size_t i = 0; i < NB; i++) {
            cum += hs[k].h->b[i];
            P("%s_bucket{le=\"%g\"} %llu\n", hs[k].name, lat_bounds[i] * hs[k].scale, (unsigned long long)cum);
        }
        P("%s_bucket{le=\"+Inf\"} %llu\n%s_sum %g\n%s_count %llu\n", hs[k].name, (unsigned long long)hs[k].h->n, hs[k].name,
          hs[k].h->sum * hs[k].scale, hs[k].name, (unsigned long long)hs[k].h->n);
    }
#undef P
    pthread_mutex_unlock(&m->mu);
}

static enum MHD_Result handle_generate(server *s, struct MHD_Connection *c, conn *cn, bool chat) {
    req *r = calloc(1, sizeof *r);
    if (!r) return send_error(s, c, 500, "out of memory", NULL, NULL);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->refs = 1;
    r->t_arrive = now_s();
    reject j = {0};
    if (!parse_request(s, cn->body.p ? cn->body.p : "", cn->body.n, chat, r, &j)) {
        req_release(r);
        return send_error(s, c, (unsigned)j.status, j.msg, j.param[0] ? j.param : NULL, j.code);
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->fd = ci ? ci->connect_fd : -1;
    r->refs = 2; /* this connection + the scheduler */
    r->id = __atomic_add_fetch(&s->next_id, 1, __ATOMIC_RELAXED);
    if (r->stream && r->chat) add_chunk(s, r, NULL, 0, NULL, NULL); /* chat: the role first */
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        r->refs = 1;
        req_release(r);
        return send_error(s, c, 503, "the server is shutting down", NULL, NULL);
    }
    if (s->qtail) s->qtail->next = r;
    else s->qhead = r;
    s->qtail = r;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (r->stream) {
        cn->r = NULL; /* the response owns the reference now */
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, r, stream_free);
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        const enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    pthread_mutex_lock(&r->mu);
    while (!r->done) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        if (!r->done && peer_gone(r->fd)) {
            r->cancelled = true;
            pthread_mutex_unlock(&r->mu);
            req_release(r);
            return MHD_NO; /* the client left: close */
        }
    }
    pthread_mutex_unlock(&r->mu);
    enum MHD_Result ret;
    if (r->err_status) ret = send_error(s, c, (unsigned)r->err_status, r->errmsg, NULL, NULL);
    else ret = send_json(c, 200, full_response(s, r));
    req_release(r);
    return ret;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method, const char *version,
                               const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    server *s = cls;
    conn *cn = *con_cls;
    if (!cn) { /* first call: headers only */
        if (!(cn = calloc(1, sizeof *cn))) return MHD_NO;
        *con_cls = cn;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body) cn->too_big = true;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cn->too_big && cn->body.n + *upload_size <= s->o.max_body) sb_add(&cn->body, upload, *upload_size);
        else cn->too_big = true;
        *upload_size = 0;
        return MHD_YES;
    }
    const bool post = (strcmp(method, "POST") == 0), get = (strcmp(method, "GET") == 0);
    const bool gen = (strcmp(url, "/v1/chat/completions") == 0) || (strcmp(url, "/v1/completions") == 0);
    const bool known = gen || (strcmp(url, "/v1/models") == 0) || (strcmp(url, "/health") == 0) || (strcmp(url, "/metrics") == 0);
    if (!known) return send_error(s, c, 404, "no such endpoint", NULL, NULL);
    if ((gen && !post) || (!gen && !get)) return send_error(s, c, 405, gen ? "use POST" : "use GET", NULL, NULL);
    if (s->o.api_key && strncmp(url, "/v1/", 4) == 0) {
        const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        if (!a || (strncmp(a, "Bearer ", 7) != 0) || (strcmp(a + 7, s->o.api_key) != 0))
            return send_error(s, c, 401, "missing or wrong API key (Authorization: Bearer KEY)", NULL, "invalid_api_key");
    }
    if (strcmp(url, "/health") == 0) return send_json(c, 200, dup_str("{\"status\":\"ok\"}"));
    if (strcmp(url, "/metrics") == 0) {
        sbuf b = {0};
        metrics_text(s, &b);
        struct MHD_Response *resp = MHD_create_response_from_buffer(b.n, b.p ? b.p : "", b.p ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4");
        const enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    if (strcmp(url, "/v1/models") == 0) {
        cJSON *o = cJSON_CreateObject(), *d = cJSON_AddArrayToObject(o, "data"), *mm = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "object", "list");
        cJSON_AddStringToObject(mm, "id", s->model_id);
        cJSON_AddStringToObject(mm, "object", "model");
        cJSON_AddNumberToObject(mm, "created", (double)s->created);
        cJSON_AddStringToObject(mm, "owned_by", "moq");
        cJSON_AddNumberToObject(mm, "max_model_len", (double)s->ctx);
        cJSON_AddItemToArray(d, mm);
        char *js = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        return send_json(c, 200, js);
    }
    if (cn->too_big) {
        char m[128];
        snprintf(m, sizeof m, "the body exceeds the limit of %zu bytes (--max-body)", s->o.max_body);
        return send_error(s, c, 413, m, NULL, NULL);
    }
    return handle_generate(s, c, cn, (strcmp(url, "/v1/chat/completions") == 0));
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    conn *cn = *con_cls;
    if (!cn) return;
    free(cn->body.p);
    free(cn);
    *con_cls = NULL;
}

int serve_run(const serve_opts *opts) {
    server *s = calloc(1, sizeof *s);
    if (!s) return MOQ_ERR_NOMEM;
    s->o = *opts;
    moq_error e;
    int rc = 0;
    struct MHD_Daemon *d = NULL;
    bool sched_started = false;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_init(&s->met.mu, NULL);
    s->created = (int64_t)time(NULL);
    if (s->o.model_name) snprintf(s->model_id, sizeof s->model_id, "%s", s->o.model_name);
    else {
        const char *d0 = s->o.dir, *sl = strrchr(d0, '/');
        while (sl && !sl[1] && sl > d0) { /* trailing slashes */
            const char *p = sl - 1;
            while (p > d0 && *p != '/') p--;
            snprintf(s->model_id, sizeof s->model_id, "%.*s", (int)(sl - (*p == '/' ? p + 1 : p)), *p == '/' ? p + 1 : p);
            sl = NULL;
        }
        if (!s->model_id[0]) snprintf(s->model_id, sizeof s->model_id, "%s", sl ? sl + 1 : d0);
    }
    /* block the signals in every thread; main takes them with sigwait */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    const double t0 = now_s();
    if (moq_tokenizer_open(&s->tok, s->o.dir, &e) != MOQ_OK || moq_model_open(&s->m, s->o.dir, &s->o.mo, &e) != MOQ_OK) {
        char m[512];
        moq_error_format(&e, m, sizeof m);
        fprintf(stderr, "moq: %s\n", m);
        rc = (int)e.code;
        goto out;
    }
    for (int i = 0; i < moq_model_warning_count(s->m); i++) fprintf(stderr, "moq: warning: %s\n", moq_model_warning(s->m, i));
    s->V = moq_model_vocab_size(s->m), s->ctx = moq_model_ctx(s->m);
    moq_batch_opts bo = moq_batch_opts_default();
    bo.max_rows = s->o.max_batch + 1;
    if (s->o.kv_bytes) bo.kv_bytes = s->o.kv_bytes;
    else { /* max_batch sequences of the full context */
        moq_batch_opts one = bo;
        one.kv_bytes = 0;
        moq_batch *probe = NULL;
        if (moq_batch_create(&probe, s->m, &one, &e) == MOQ_OK) {
            bo.kv_bytes = (uint64_t)s->o.max_batch * (uint64_t)moq_batch_pages_for(probe, s->ctx) * moq_batch_page_bytes(probe);
            moq_batch_free(probe);
        }
    }
    if (moq_batch_create(&s->b, s->m, &bo, &e) != MOQ_OK) {
        char m[512];
        moq_error_format(&e, m, sizeof m);
        fprintf(stderr, "moq: %s\n", m);
        rc = (int)e.code;
        goto out;
    }
    if (pthread_create(&s->sched, NULL, scheduler, s) != 0) {
        fprintf(stderr, "moq serve: cannot start the scheduler thread\n");
        rc = MOQ_ERR_INTERNAL;
        goto out;
    }
    sched_started = true;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->o.port)};
    if (inet_pton(AF_INET, s->o.host, &addr.sin_addr) != 1) {
        fprintf(stderr, "moq serve: --host %s is not an IPv4 address\n", s->o.host);
        rc = MOQ_ERR_INVALID_ARG;
        goto out;
    }
    d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL, handler, s,
                         MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, completed, s,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "moq serve: cannot listen on %s:%d: %s\n", s->o.host, s->o.port, strerror(errno));
        rc = MOQ_ERR_IO;
        goto out;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    const int port = di ? di->port : s->o.port;
    if (s->o.port_file) {
        FILE *f = fopen(s->o.port_file, "w");
        if (f) fprintf(f, "%d\n", port), fclose(f);
    }
    fprintf(stderr, "moq serve: %s (%s), %lld positions, max batch %d, %lld KV pages of %lld positions (%.1f MiB); loaded in %.2f s\n",
            s->model_id, moq_model_architecture(s->m), (long long)s->ctx, s->o.max_batch, (long long)moq_batch_pages_total(s->b),
            (long long)moq_batch_page_tokens(s->b), (double)moq_batch_pages_total(s->b) * (double)moq_batch_page_bytes(s->b) / 1048576.0,
            now_s() - t0);
    fprintf(stderr, "moq serve: listening on http://%s:%d%s\n", s->o.host, port, s->o.api_key ? " (API key required)" : "");
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "moq serve: %s: cancelling requests in flight and exiting\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
out:
    if (d) MHD_quiesce_daemon(d);
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (sched_started) pthread_join(s->sched, NULL);
    if (d) MHD_stop_daemon(d); /* connection threads see their requests ended and return */
    for (req *r = s->qhead, *nx; r; r = nx) { /* arrived after the scheduler left */
        nx = r->next;
        pthread_mutex_lock(&r->mu);
        end_req(s, r, NULL, 503, "the server is shutting down");
        pthread_mutex_unlock(&r->mu);
        req_release(r);
    }
    moq_batch_free(s->b);
    moq_model_free(s->m);
    moq_tokenizer_free(s->tok);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->met.mu);
    free(s);
    return rc;
}
