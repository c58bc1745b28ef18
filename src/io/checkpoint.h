/* checkpoint.h — the internals of moq_checkpoint (public API in moq.h), for code that builds on an
 * opened checkpoint (config resolution, inspect, check, loaders). */
#ifndef MOQ_IO_CHECKPOINT_H
#define MOQ_IO_CHECKPOINT_H

#include <cjson/cJSON.h>

#include "core/notes.h"
#include "core/strmap.h"
#include "io/safetensors.h"
#include "moq.h"

typedef struct moq_side_file {
    const char *name;   /* "config.json", ... */
    char       *text;   /* NULL when absent   */
    cJSON      *json;   /* parsed, NULL when absent */
} moq_side_file;

enum { MOQ_SIDE_CONFIG, MOQ_SIDE_HF_QUANT, MOQ_SIDE_GENERATION, MOQ_SIDE_INDEX,
       MOQ_SIDE_TOKENIZER_CONFIG, MOQ_SIDE_COUNT };

struct moq_checkpoint {
    char          *path;             /* as given                                        */
    char          *dir;              /* directory holding the shards                    */
    bool           is_dir;
    moq_st_file   *shards;           /* [n_shards]                                      */
    int            n_shards;
    moq_tensor   **tensors;          /* [n_tensors] pointers into shards, stable order  */
    size_t         n_tensors;
    moq_strmap     by_name;          /* name -> index into tensors                      */
    moq_side_file  side[MOQ_SIDE_COUNT];
    bool           has_tokenizer;    /* tokenizer.json present                          */
    moq_arch       arch;
    bool           has_arch;
    moq_notes      warnings;         /* accepted but worth saying (moq_checkpoint_warning) */
};

/* Parses config.json's architecture fields (top level, then text_config). */
moq_status moq_arch_parse(moq_arch *a, const cJSON *cfg, const char *file, moq_error *err);

#endif
