/* serve.h — `moq serve`: an OpenAI-compatible HTTP server over the batched decode API (moq.h
 * "batched decode"). Part of the CLI program, not of libmoq: it prints its log lines on stderr.
 * HTTP is libmicrohttpd (Debian libmicrohttpd-dev), JSON is cJSON. Documented in docs/SERVE.md;
 * tested by tests/e2e/serve.sh (curl), tests/e2e/serve_openai.sh (the openai client) and
 * tests/e2e/serve_soak.sh.
 */
#ifndef MOQ_SERVE_H
#define MOQ_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "moq.h"

typedef struct serve_opts {
    const char    *dir;          /* checkpoint directory                                      */
    const char    *host;         /* bind address (default 127.0.0.1)                          */
    int            port;         /* default 8080; 0 = any free port (printed on stderr)       */
    int            max_batch;    /* sequences decoded together (default 8)                    */
    int64_t        prefill_chunk;/* prompt tokens prefilled per scheduler step (default 32)   */
    uint64_t       kv_bytes;     /* KV pool budget (0: max_batch full contexts)               */
    size_t         max_body;     /* request body limit, bytes (default 1 MiB)                 */
    const char    *api_key;      /* NULL: no authentication                                   */
    const char    *model_name;   /* the id /v1/models reports (default: the directory's name) */
    const char    *port_file;    /* when set, the bound port is written there (tests)         */
    moq_model_opts mo;
} serve_opts;

/* Loads the model, serves until SIGINT or SIGTERM, then cancels what is in flight and returns 0
 * (or the moq_status of what failed at start). */
int serve_run(const serve_opts *o);

#endif
