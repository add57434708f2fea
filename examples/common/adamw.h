// SPDX-License-Identifier: BSD-3-Clause
/*
 * torch.optim.AdamW's update of one element, written once for the CPU
 * (nn_adamw, nn_cpu.c) and the GPU (nn_cuda_adamw, nn_cuda/adamw.cu): a
 * header for C and CUDA alike. Both compute the scalars with
 * nn_adamw_scalars_make on the host and run nn_adamw_element on each
 * element, so the CPU and the GPU give the same bits for the same inputs
 * (what --check compares): on the device each operation is an IEEE
 * round-to-nearest intrinsic, which nvcc never fuses into a multiply-add,
 * as GCC does not on the examples' x86-64 target (no -mfma).
 */
#ifndef TPDP_EXAMPLES_COMMON_ADAMW_H
#define TPDP_EXAMPLES_COMMON_ADAMW_H

#include <math.h>

#ifdef __CUDACC__
#define NN_HOST_DEVICE __host__ __device__
#else
#define NN_HOST_DEVICE
#endif

/* torch.optim.AdamW's hyperparameters (weight decay apart: it differs per
 * parameter). */
typedef struct {
  double lr, beta1, beta2, eps;
} nn_adamw_opts;

/* The per-step scalars, as torch computes them: Python floats (double)
 * used as f32 by the tensor ops. */
typedef struct {
  float decay;     /* 1 - lr * weight_decay */
  float b1, b2;    /* beta1, beta2 */
  float a1, a2;    /* 1 - beta1, 1 - beta2 */
  float step_size; /* lr / (1 - beta1^step) */
  float bc2_sqrt;  /* sqrt(1 - beta2^step) */
  float eps;
} nn_adamw_scalars;

/* step counts from 1. */
static inline nn_adamw_scalars nn_adamw_scalars_make(const nn_adamw_opts *o,
                                                     double weight_decay,
                                                     int step) {
  nn_adamw_scalars s;
  s.decay = (float)(1.0 - o->lr * weight_decay);
  s.b1 = (float)o->beta1;
  s.b2 = (float)o->beta2;
  s.a1 = (float)(1.0 - o->beta1);
  s.a2 = (float)(1.0 - o->beta2);
  s.step_size = (float)(o->lr / (1.0 - pow(o->beta1, step)));
  s.bc2_sqrt = (float)sqrt(1.0 - pow(o->beta2, step));
  s.eps = (float)o->eps;
  return s;
}

/* f32 arithmetic rounded after every operation. */
#ifdef __CUDA_ARCH__
#define NN_FMUL(a, b) __fmul_rn((a), (b))
#define NN_FADD(a, b) __fadd_rn((a), (b))
#define NN_FSUB(a, b) __fsub_rn((a), (b))
#define NN_FDIV(a, b) __fdiv_rn((a), (b))
#define NN_FSQRT(a) __fsqrt_rn(a)
#else
#define NN_FMUL(a, b) ((a) * (b))
#define NN_FADD(a, b) ((a) + (b))
#define NN_FSUB(a, b) ((a) - (b))
#define NN_FDIV(a, b) ((a) / (b))
#define NN_FSQRT(a) sqrtf(a)
#endif

/* One element: the moments *m, *v from gradient g, then the parameter *p:
 * p = p * decay - step_size * m / (sqrt(v) / bc2_sqrt + eps). */
NN_HOST_DEVICE static inline void nn_adamw_element(float *p, float *m, float *v,
                                                   float g,
                                                   const nn_adamw_scalars *s) {
  const float mk = NN_FADD(NN_FMUL(*m, s->b1), NN_FMUL(g, s->a1));
  const float vk = NN_FADD(NN_FMUL(*v, s->b2), NN_FMUL(NN_FMUL(g, g), s->a2));
  *m = mk;
  *v = vk;
  const float denom = NN_FADD(NN_FDIV(NN_FSQRT(vk), s->bc2_sqrt), s->eps);
  *p =
      NN_FSUB(NN_FMUL(*p, s->decay), NN_FMUL(s->step_size, NN_FDIV(mk, denom)));
}

#endif
