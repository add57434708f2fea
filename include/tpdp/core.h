// SPDX-License-Identifier: BSD-3-Clause
/*
 * tpdp core: status codes and the last-error contract, logging, tensor views.
 *
 * Error contract (stated once, holds for every tpdp function):
 *   Functions return tpdp_status. TPDP_SUCCESS is 0. On any other value the
 *   calling thread's last-error message (tpdp_last_error()) names the failing
 *   function and the thing at fault (parameter FQN, rank, expected and actual
 *   values). Out-parameters are left untouched or set to NULL on failure,
 *   never half-initialised; the library never calls exit/abort on bad input.
 */
#ifndef TPDP_CORE_H
#define TPDP_CORE_H

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the exported API. libtpdp is built with -fvisibility=hidden, so
 * only what these headers declare with TPDP_API is visible to programs
 * linking libtpdp.so. */
#if defined(__GNUC__)
#define TPDP_API __attribute__((visibility("default")))
#else
#define TPDP_API
#endif

#define TPDP_VERSION_MAJOR 0
#define TPDP_VERSION_MINOR 3
#define TPDP_VERSION_PATCH 0
/* API version as one integer: major*10000 + minor*100 + patch. */
#define TPDP_VERSION \
  (TPDP_VERSION_MAJOR * 10000 + TPDP_VERSION_MINOR * 100 + TPDP_VERSION_PATCH)

/* Version of the library actually linked (compare with TPDP_VERSION). */
TPDP_API int tpdp_version(void);

/* ---------------------------------------------------------------- status */

/* Status codes. Values are explicit and the list only grows at the end. */
typedef enum {
  TPDP_SUCCESS = 0,
  TPDP_ERR_INVALID_ARGUMENT = 1, /* a value out of its documented range */
  TPDP_ERR_NULL_POINTER = 2,     /* a required pointer argument was NULL */
  TPDP_ERR_OUT_OF_MEMORY = 3,
  TPDP_ERR_SHAPE_MISMATCH = 4,   /* shapes or element counts disagree */
  TPDP_ERR_DTYPE_MISMATCH = 5,   /* dtypes disagree or dtype unsupported */
  TPDP_ERR_DEVICE_MISMATCH = 6,  /* memory on the wrong device */
  TPDP_ERR_MPI = 7,              /* an MPI call failed */
  TPDP_ERR_NCCL = 8,             /* an NCCL call failed */
  TPDP_ERR_CUDA = 9,             /* a CUDA runtime call failed */
  TPDP_ERR_TIMEOUT = 10,         /* a wait ran past TPDP_TIMEOUT_S */
  TPDP_ERR_NOT_INITIALIZED = 11, /* tpdp_init was not called */
  TPDP_ERR_UNSUPPORTED = 12,     /* not built in / not possible here */
  TPDP_ERR_MESH_SIZE = 13,       /* mesh size differs from the world size */
  TPDP_ERR_DUPLICATE = 14,       /* duplicate name or entry */
  TPDP_ERR_STATE = 15,           /* object in the wrong state for the call */
  TPDP_ERR_NOT_FOUND = 16,       /* a named thing does not exist */
  TPDP_ERR_INTERNAL = 17,        /* a bug in tpdp: please report */
  TPDP_ERR_EMPTY_NAME = 18,      /* an empty name where one is required */
  TPDP_ERR_TOO_MANY_DIMS = 19,   /* more than TPDP_MAX_DIMS dims */
  TPDP_ERR_BAD_DIM_SIZE = 20,    /* a zero or negative dimension size */
  TPDP_ERR_PARSE = 21,           /* text (mesh spec, JSON) did not parse */
  TPDP_ERR_IO = 22,              /* a file could not be read or written */
  TPDP_ERR_CYCLE = 23,           /* a module tree would contain a cycle */
  TPDP_ERR_MESH_MISMATCH = 24,   /* two objects live on different meshes */
  TPDP_ERR_OP_DTYPE = 25,        /* reduce op not valid for the dtype */
  TPDP_ERR_ALREADY = 26,         /* done twice (hook removed twice, ...) */
  TPDP_STATUS_COUNT              /* sentinel: number of status codes */
} tpdp_status;

/* Static name of a status ("TPDP_ERR_SHAPE_MISMATCH"); never NULL. */
TPDP_API const char *tpdp_status_string(tpdp_status status);

/* The calling thread's message from its last failed tpdp call ("" if none).
 * The string is thread-local and valid until the thread's next tpdp call. */
TPDP_API const char *tpdp_last_error(void);

/* Clear the calling thread's last-error message. */
TPDP_API void tpdp_clear_error(void);

/* --------------------------------------------------------------- logging */

typedef enum {
  TPDP_LOG_NONE = 0,
  TPDP_LOG_WARN = 1, /* default */
  TPDP_LOG_INFO = 2,
  TPDP_LOG_TRACE = 3
} tpdp_log_level;

/* Level from TPDP_DEBUG (NONE, WARN, INFO, TRACE; case-insensitive), read
 * once; WARN when unset or unknown. */
TPDP_API tpdp_log_level tpdp_log_get_level(void);
/* Override the level for this process (thread-safe). */
TPDP_API void tpdp_log_set_level(tpdp_log_level level);
/* Rank shown in the "[rank r]" prefix; -1 (the default) prints "[rank ?]". */
TPDP_API void tpdp_log_set_rank(int rank);
/* printf-style message to stderr with "[rank r] tpdp LEVEL: " prefix if
 * level <= the current level. */
TPDP_API void tpdp_log(tpdp_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* --------------------------------------------------------- tensor views */

#define TPDP_MAX_DIMS 8

/* Element types. Values only grow at the end. */
typedef enum {
  TPDP_F32 = 0,
  TPDP_F64 = 1,
  TPDP_F16 = 2,
  TPDP_BF16 = 3,
  TPDP_I32 = 4,
  TPDP_I64 = 5,
  TPDP_U8 = 6,
  TPDP_DTYPE_COUNT
} tpdp_dtype;

/* Bytes per element (0 for an invalid dtype). */
TPDP_API size_t tpdp_dtype_size(tpdp_dtype dtype);
/* Short name: "f32", "f64", "f16", "bf16", "i32", "i64", "u8" ("?" if bad). */
TPDP_API const char *tpdp_dtype_name(tpdp_dtype dtype);
/* Parse a short name; TPDP_ERR_PARSE on an unknown one. */
TPDP_API tpdp_status tpdp_dtype_parse(const char *name, tpdp_dtype *out);
/* 1 for f32/f64/f16/bf16. */
TPDP_API int tpdp_dtype_is_float(tpdp_dtype dtype);

typedef enum { TPDP_DEVICE_CPU = 0, TPDP_DEVICE_CUDA = 1 } tpdp_device_type;

typedef struct {
  tpdp_device_type type;
  int index; /* CUDA ordinal; 0 for the CPU */
} tpdp_device;

/* Writes "cpu" or "cuda:N" into buf (always NUL-terminated). */
TPDP_API void tpdp_device_format(tpdp_device device, char *buf, size_t len);
/* 1 if both name the same device. */
TPDP_API int tpdp_device_equal(tpdp_device a, tpdp_device b);

/*
 * A non-owning view of a strided tensor. Element (i0, ..., i{n-1}) lives at
 *   (char *)data + tpdp_dtype_size(dtype) * sum_k i_k * strides[k]
 * Strides are in elements, not bytes. A contiguous (row-major) tensor has
 *   strides[n-1] = 1, strides[k] = strides[k+1] * shape[k+1].
 * ndim == 0 is a scalar (numel 1). Entries past ndim are ignored.
 */
typedef struct {
  void *data;
  tpdp_dtype dtype;
  tpdp_device device;
  int ndim;                       /* 0 .. TPDP_MAX_DIMS */
  int64_t shape[TPDP_MAX_DIMS];   /* >= 0 each */
  int64_t strides[TPDP_MAX_DIMS]; /* in elements */
} tpdp_tensor;

/* Fill *out as a contiguous view of `data` with the given shape.
 * Errors: NULL out/shape (with ndim > 0), ndim out of range, negative size,
 * bad dtype; TPDP_ERR_INVALID_ARGUMENT ("shape [..] of f32 overflows") when
 * the product of the non-zero sizes times the element size is above
 * INT64_MAX (its strides and byte size would not fit, whether or not a size
 * is 0). `data` may be NULL only when the tensor is empty or for
 * metadata-only use. */
TPDP_API tpdp_status tpdp_tensor_init(tpdp_tensor *out, void *data,
                                      tpdp_dtype dtype, tpdp_device device,
                                      int ndim, const int64_t *shape);
/* Shorthand for a 1-D contiguous CPU view of `count` elements. */
TPDP_API tpdp_tensor tpdp_tensor_1d(void *data, tpdp_dtype dtype,
                                    int64_t count);

/* Element count; -1 for a view tpdp_tensor_init would refuse (a negative
 * size, or non-zero sizes whose product overflows int64), 0 for NULL. */
TPDP_API int64_t tpdp_tensor_numel(const tpdp_tensor *t);
/* numel * element size; 0 for NULL, a bad dtype, or a view whose byte size
 * overflows int64 (which tpdp_tensor_init refuses). */
TPDP_API size_t tpdp_tensor_nbytes(const tpdp_tensor *t);
/* 1 if row-major contiguous (size-1 and empty dims may have any stride). */
TPDP_API int tpdp_tensor_is_contiguous(const tpdp_tensor *t);
/* 1 if shape (ndim and sizes) are equal. */
TPDP_API int tpdp_tensor_same_shape(const tpdp_tensor *a, const tpdp_tensor *b);
/* Writes "[5, 7]" into buf (always NUL-terminated). */
TPDP_API void tpdp_shape_format(int ndim, const int64_t *shape, char *buf,
                                size_t len);

/* View of rows [start, start+length) along `dim`; shares memory with `t`.
 * The result is contiguous when `t` is and every dim before `dim` has size
 * 1 (always for dim 0). Errors: dim out of range, start/length outside
 * [0, shape[dim]], a byte offset (start times the dim's stride) outside
 * int64 (only a hand-made view's strides can do that). */
TPDP_API tpdp_status tpdp_tensor_narrow(const tpdp_tensor *t, int dim,
                                        int64_t start, int64_t length,
                                        tpdp_tensor *out);

/* Copy src into dst elementwise (host memory only; any strides; same shape
 * and dtype). Errors: shape/dtype/device mismatch. */
TPDP_API tpdp_status tpdp_tensor_copy(tpdp_tensor *dst, const tpdp_tensor *src);

/* DLPack interop (the exchange format of PyTorch, JAX, CuPy).
 * to_dlpack: out->shape and out->strides point into *t, so *out is valid only
 * while *t lives and is unchanged. Errors: NULL pointers.
 * from_dlpack: copies shape and strides (NULL strides = contiguous) and folds
 * byte_offset into data. Errors: dtype or device tpdp cannot represent,
 * ndim > TPDP_MAX_DIMS, byte_offset not a multiple of the element size, a
 * shape tpdp_tensor_init refuses, strides that put an element's byte
 * offset outside int64 (TPDP_ERR_INVALID_ARGUMENT, "... overflow"). */
TPDP_API tpdp_status tpdp_tensor_to_dlpack(const tpdp_tensor *t, DLTensor *out);
TPDP_API tpdp_status tpdp_tensor_from_dlpack(const DLTensor *in,
                                             tpdp_tensor *out);

/* ------------------------------------------------ half-precision helpers */

TPDP_API float tpdp_f16_to_f32(uint16_t h);
TPDP_API uint16_t tpdp_f32_to_f16(float f); /* round to nearest even */
TPDP_API float tpdp_bf16_to_f32(uint16_t b);
TPDP_API uint16_t tpdp_f32_to_bf16(float f); /* round to nearest even */
/* dst[0, n) = src[0, n) converted between f32, bf16 and f16 in host
 * memory, as the functions above convert (the same dtype: a copy; the
 * buffers may be the same memory only then). Errors: a negative n, NULL
 * buffers (n > 0), another dtype (TPDP_ERR_DTYPE_MISMATCH naming both). */
TPDP_API tpdp_status tpdp_convert_floats(void *dst, tpdp_dtype dst_dtype,
                                         const void *src, tpdp_dtype src_dtype,
                                         int64_t n);

#ifdef __cplusplus
}
#endif
#endif /* TPDP_CORE_H */
