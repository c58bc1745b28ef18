/* device.c — the public device layer (moq.h "devices"): where a layer's memory lives. CPU:
 * aligned host memory and memcpy. CUDA: src/kernels/cuda/device.cu when the library was built
 * with MOQ_CUDA; otherwise every CUDA call is MOQ_ERR_UNSUPPORTED saying so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "moq.h"
#ifdef MOQ_HAVE_CUDA
#include "kernels/cuda/cuda_api.h"
#endif

#define WHERE "moq_device"

const char *moq_device_name(moq_device d) { return d == MOQ_DEVICE_CUDA ? "cuda" : d == MOQ_DEVICE_CPU ? "cpu" : "?"; }

static moq_status bad_device(moq_device d, moq_error *err) {
    if (d != MOQ_DEVICE_CPU && d != MOQ_DEVICE_CUDA)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, WHERE, "device %d, expected MOQ_DEVICE_CPU or MOQ_DEVICE_CUDA", (int)d);
#ifndef MOQ_HAVE_CUDA
    if (d == MOQ_DEVICE_CUDA)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, WHERE, "this libmoq was built without CUDA (cmake -DMOQ_CUDA=ON needs nvcc)");
#endif
    return MOQ_OK;
}

#ifdef MOQ_HAVE_CUDA
static moq_status cuda_err(const char *e, moq_error *err) {
    return e ? MOQ_FAIL(err, MOQ_ERR_DEVICE, WHERE, "%s", e) : MOQ_OK;
}
#endif

moq_status moq_device_check(moq_device d, char *info, size_t info_len, moq_error *err) {
    if (info && info_len) info[0] = 0;
    MOQ_TRY(bad_device(d, err));
    if (d == MOQ_DEVICE_CPU) {
        if (info && info_len) snprintf(info, info_len, "cpu");
        return MOQ_OK;
    }
#ifdef MOQ_HAVE_CUDA
    const char *e = moq_cuda_probe(info, info_len);
    if (e) return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, WHERE, "%s", e);
#endif
    return MOQ_OK;
}

moq_status moq_device_alloc(moq_device d, size_t bytes, void **out, moq_error *err) {
    if (!out) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, WHERE, "out must not be NULL");
    *out = NULL;
    MOQ_TRY(bad_device(d, err));
    if (d == MOQ_DEVICE_CPU) {
        *out = aligned_alloc(64, (bytes + 63) & ~(size_t)63 ? (bytes + 63) & ~(size_t)63 : 64);
        return *out ? MOQ_OK : MOQ_FAIL(err, MOQ_ERR_NOMEM, WHERE, "out of memory for %zu bytes", bytes);
    }
#ifdef MOQ_HAVE_CUDA
    return cuda_err(moq_cuda_malloc(bytes, out), err);
#else
    return MOQ_OK;
#endif
}

void moq_device_free(moq_device d, void *p) {
    if (!p) return;
    if (d == MOQ_DEVICE_CPU) free(p);
#ifdef MOQ_HAVE_CUDA
    else if (d == MOQ_DEVICE_CUDA) moq_cuda_free(p);
#endif
}

typedef enum { UP, DOWN, D2D } dir;
static moq_status copy(moq_device d, void *dst, const void *src, size_t bytes, dir k, moq_error *err) {
    MOQ_TRY(bad_device(d, err));
    if (!dst || !src) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, WHERE, "copy of %zu bytes with a NULL pointer", bytes);
    if (!bytes) return MOQ_OK;
    if (d == MOQ_DEVICE_CPU) {
        memmove(dst, src, bytes);
        return MOQ_OK;
    }
#ifdef MOQ_HAVE_CUDA
    return cuda_err(k == UP ? moq_cuda_h2d(dst, src, bytes) : k == DOWN ? moq_cuda_d2h(dst, src, bytes) : moq_cuda_d2d(dst, src, bytes), err);
#else
    (void)k;
    return MOQ_OK;
#endif
}

moq_status moq_device_upload(moq_device d, void *dst, const void *src, size_t bytes, moq_error *err) { return copy(d, dst, src, bytes, UP, err); }
moq_status moq_device_download(moq_device d, void *dst, const void *src, size_t bytes, moq_error *err) { return copy(d, dst, src, bytes, DOWN, err); }
moq_status moq_device_copy(moq_device d, void *dst, const void *src, size_t bytes, moq_error *err) { return copy(d, dst, src, bytes, D2D, err); }

moq_status moq_device_sync(moq_device d, moq_error *err) {
    MOQ_TRY(bad_device(d, err));
#ifdef MOQ_HAVE_CUDA
    if (d == MOQ_DEVICE_CUDA) return cuda_err(moq_cuda_sync(), err);
#endif
    return MOQ_OK;
}
