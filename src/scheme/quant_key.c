/* quant_key.c — one row per quant key used by the ModelOpt schemes. */
#include "scheme/quant_key.h"

#include <stdio.h>

/*                                           elem            scale_elem      rows  cols  static global */
const moq_quant_key MOQ_KEY_W_F32        = {MOQ_ELEM_F32,  MOQ_ELEM_NONE, -1,   -1,   false, false};
const moq_quant_key MOQ_KEY_W_BF16       = {MOQ_ELEM_BF16, MOQ_ELEM_NONE, -1,   -1,   false, false};
const moq_quant_key MOQ_KEY_W_F16        = {MOQ_ELEM_F16,  MOQ_ELEM_NONE, -1,   -1,   false, false};
const moq_quant_key MOQ_KEY_W_FP8_TENSOR = {MOQ_ELEM_E4M3, MOQ_ELEM_F32,  -1,   -1,   true,  false};
const moq_quant_key MOQ_KEY_W_FP8_ROW    = {MOQ_ELEM_E4M3, MOQ_ELEM_F32,   1,   -1,   true,  false};
const moq_quant_key MOQ_KEY_W_FP8_BLK128 = {MOQ_ELEM_E4M3, MOQ_ELEM_F32, 128,  128,   true,  false};
const moq_quant_key MOQ_KEY_W_NVFP4      = {MOQ_ELEM_E2M1, MOQ_ELEM_E4M3,  1,   16,   true,  true};
const moq_quant_key MOQ_KEY_W_MXFP8      = {MOQ_ELEM_E4M3, MOQ_ELEM_E8M0,  1,   32,   true,  false};
const moq_quant_key MOQ_KEY_A_NONE       = {MOQ_ELEM_NONE, MOQ_ELEM_NONE,  0,    0,   false, false};
const moq_quant_key MOQ_KEY_A_FP8_TENSOR_STATIC = {MOQ_ELEM_E4M3, MOQ_ELEM_F32, -1, -1, true,  false};
const moq_quant_key MOQ_KEY_A_FP8_TOKEN_DYN     = {MOQ_ELEM_E4M3, MOQ_ELEM_F32,  1, -1, false, false};
const moq_quant_key MOQ_KEY_A_FP8_G128_DYN      = {MOQ_ELEM_E4M3, MOQ_ELEM_F32,  1, 128, false, false};
const moq_quant_key MOQ_KEY_A_NVFP4_DYN  = {MOQ_ELEM_E2M1, MOQ_ELEM_E4M3,  1,   16,   false, true};
const moq_quant_key MOQ_KEY_A_MXFP8_DYN  = {MOQ_ELEM_E4M3, MOQ_ELEM_E8M0,  1,   32,   false, false};

bool moq_quant_key_eq(const moq_quant_key *a, const moq_quant_key *b) {
    return a->elem == b->elem && a->scale_elem == b->scale_elem && a->group_rows == b->group_rows &&
           a->group_cols == b->group_cols && a->scale_static == b->scale_static && a->global_scale == b->global_scale;
}

const char *moq_quant_key_str(const moq_quant_key *k, char *buf, size_t n) {
    if (k->elem == MOQ_ELEM_NONE) snprintf(buf, n, "none");
    else if (k->scale_elem == MOQ_ELEM_NONE) snprintf(buf, n, "%s", moq_elem_name(k->elem));
    else
        snprintf(buf, n, "%s/%s[%dx%d]%s%s", moq_elem_name(k->elem), moq_elem_name(k->scale_elem), k->group_rows,
                 k->group_cols, k->scale_static ? "" : "dyn", k->global_scale ? "+g" : "");
    return buf;
}
