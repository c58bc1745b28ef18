/* cmd_tokenize.c — `moq tokenize DIR ...`: encode text (or a one-message chat) with a checkpoint's
 * tokenizer.json and print the ids, or decode ids back to text. For checking a tokenizer against
 * another implementation by hand, and for tests/e2e/tokenize.sh. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cmd_tokenize_help(FILE *out) {
    fprintf(out,
            "usage: moq tokenize DIR [--text T] [--chat [--system S]] [--add-special] [--special-as-text] [--pieces]\n"
            "       moq tokenize DIR --decode \"ID ID ...\"\n\n"
            "Encodes T (or standard input) with DIR/tokenizer.json (DIR may also be the tokenizer.json file) and\n"
            "prints the ids on one line. --chat renders T as one user message (after system prompt S, else the\n"
            "template's default) in the chat format tokenizer_config.json selects, with the assistant header\n"
            "appended. --add-special adds the post-processor's tokens (e.g. Llama-3's bos); --special-as-text\n"
            "encodes special-token text as plain text. --pieces prints one \"id<TAB>bytes\" line per token\n"
            "(C escapes for bytes outside printable ASCII). --decode prints the text of the ids as the\n"
            "`tokenizers` library's decode() does (invalid UTF-8 becomes U+FFFD).\n");
}

static char *read_stdin(size_t *len) {
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n, stdin)) > 0;) {
        n += r;
        if (n == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) { free(buf); return NULL; }
            buf = nb;
        }
    }
    *len = n;
    return buf;
}

static void print_piece(const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (b[i] == '\\') fputs("\\\\", stdout);
        else if (b[i] == '\n') fputs("\\n", stdout);
        else if (b[i] == '\t') fputs("\\t", stdout);
        else if (b[i] >= 0x20 && b[i] < 0x7f) putchar(b[i]);
        else printf("\\x%02x", b[i]);
    }
}

static int decode_ids(moq_tokenizer *t, const char *list) {
    moq_error err;
    size_t n = 0, cap = 64;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) { fprintf(stderr, "moq tokenize: out of memory\n"); return MOQ_ERR_NOMEM; }
    for (const char *p = list; *p;) {
        if (*p == ' ' || *p == ',' || *p == '\n' || *p == '\t') { p++; continue; }
        char *end;
        errno = 0;
        long id = strtol(p, &end, 10);
        if (end == p || errno || id < INT32_MIN || id > INT32_MAX) { free(ids); return cli_usage_error("tokenize", "--decode: \"%.20s\" is not an id", p); }
        p = end;
        if (n == cap) {
            int32_t *ni = realloc(ids, (cap *= 2) * sizeof *ids);
            if (!ni) { free(ids); fprintf(stderr, "moq tokenize: out of memory\n"); return MOQ_ERR_NOMEM; }
            ids = ni;
        }
        ids[n++] = (int32_t)id;
    }
    size_t len = 0;
    moq_status st = moq_tokenizer_decode(t, ids, n, NULL, 0, &len, &err); /* the length */
    if (st != MOQ_OK && st != MOQ_ERR_NOMEM) { free(ids); return cli_report(&err); }
    char *out = malloc(len + 1);
    if (!out) { free(ids); fprintf(stderr, "moq tokenize: out of memory\n"); return MOQ_ERR_NOMEM; }
    st = moq_tokenizer_decode(t, ids, n, out, len, &len, &err);
    free(ids);
    if (st != MOQ_OK) { free(out); return cli_report(&err); }
    fwrite(out, 1, len, stdout);
    putchar('\n');
    free(out);
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    static const struct option opts[] = {
        {"text", required_argument, NULL, 't'}, {"chat", no_argument, NULL, 'c'}, {"system", required_argument, NULL, 's'},
        {"add-special", no_argument, NULL, 'a'}, {"special-as-text", no_argument, NULL, 'x'},
        {"pieces", no_argument, NULL, 'p'}, {"decode", required_argument, NULL, 'd'}, {NULL, 0, NULL, 0}};
    const char *text = NULL, *system = NULL, *decode = NULL;
    bool chat = false, pieces = false;
    uint32_t flags = 0;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "t:cs:axpd:", opts, NULL)) != -1) {
        switch (ch) {
        case 't': text = optarg; break;
        case 'c': chat = true; break;
        case 's': system = optarg; break;
        case 'a': flags |= MOQ_ENCODE_ADD_SPECIAL; break;
        case 'x': flags |= MOQ_ENCODE_SPECIAL_AS_TEXT; break;
        case 'p': pieces = true; break;
        case 'd': decode = optarg; break;
        default: return cli_usage_error("tokenize", "unknown option");
        }
    }
    if (optind != argc - 1) return cli_usage_error("tokenize", "expected one DIR");
    if (system && !chat) return cli_usage_error("tokenize", "--system needs --chat");
    moq_error err;
    moq_tokenizer *t = NULL;
    if (moq_tokenizer_open(&t, argv[optind], &err) != MOQ_OK) return cli_report(&err);
    int rc = 0;
    char *owned = NULL, *rendered = NULL;
    int32_t *ids = NULL;
    size_t len = 0;
    if (decode) {
        rc = decode_ids(t, decode);
        goto done;
    }
    if (!text) {
        owned = read_stdin(&len);
        if (!owned) { rc = cli_usage_error("tokenize", "cannot read standard input"); goto done; }
        text = owned;
    } else {
        len = strlen(text);
    }
    if (chat) {
        moq_chat_message m[2] = { { "system", system ? system : "" }, { "user", "" } };
        if (owned) { /* NUL for the message */
            char *nb = realloc(owned, len + 1);
            if (!nb) { rc = MOQ_ERR_NOMEM; goto done; }
            owned = nb;
            owned[len] = '\0';
            text = owned;
        }
        m[1].content = text; /* the user message, with or without a system message before it */
        const moq_chat_template *ct = moq_tokenizer_chat_template(t);
        size_t need = 0;
        moq_status st = moq_chat_render(ct, system ? m : m + 1, system ? 2 : 1, true, NULL, 0, &need, &err);
        if (st != MOQ_OK && st != MOQ_ERR_NOMEM) { rc = cli_report(&err); goto done; }
        rendered = malloc(need + 1);
        if (!rendered || moq_chat_render(ct, system ? m : m + 1, system ? 2 : 1, true, rendered, need + 1, &need, &err) != MOQ_OK) {
            rc = rendered ? cli_report(&err) : MOQ_ERR_NOMEM;
            goto done;
        }
        text = rendered;
        len = need;
    }
    size_t n = 0;
    ids = malloc((len + 8) * sizeof *ids); /* byte-level BPE: at most one id per byte, plus specials */
    if (!ids) { rc = MOQ_ERR_NOMEM; goto done; }
    if (moq_tokenizer_encode(t, text, len, flags, ids, len + 8, &n, &err) != MOQ_OK) { rc = cli_report(&err); goto done; }
    for (size_t i = 0; i < n; i++) {
        if (!pieces) { printf(i ? " %d" : "%d", ids[i]); continue; }
        const uint8_t *b;
        size_t bl;
        if (moq_tokenizer_decode_token(t, ids[i], &b, &bl, &err) != MOQ_OK) { rc = cli_report(&err); goto done; }
        printf("%d\t", ids[i]);
        print_piece(b, bl);
        putchar('\n');
    }
    if (!pieces) putchar('\n');
done:
    free(ids); free(rendered); free(owned);
    moq_tokenizer_free(t);
    return rc;
}
