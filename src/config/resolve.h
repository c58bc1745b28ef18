/* resolve.h — (module prefix, kind) -> method + the rule that decided; public entry moq_resolve in
 * moq.h. Rule names are listed in docs/COMPAT.md. Tested by tests/config/test_resolve.c. */
#ifndef MOQ_CONFIG_RESOLVE_H
#define MOQ_CONFIG_RESOLVE_H

#include "config/modelopt.h"

/* Does an exclude pattern of q match `prefix` under q's profile? Sets *rule to the rule name.
 * `linear` selects SGLang's linear-only exact/packed check. Errors when packed shards disagree. */
moq_status moq_resolve_excluded(const moq_qconfig *q, const char *prefix, bool linear, const moq_packed *packed,
                                int n_packed, bool *excluded, const char **rule, moq_error *err);

#endif
