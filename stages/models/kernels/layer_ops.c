/* A decoder layer's element-wise steps over rows of float32, one pass each: RMS norm, rotary position
 * embedding (in place) and the SwiGLU product silu(gate) * up. Torch runs each as several ops (its
 * CPU rms_norm alone is seven), each a dispatch and a pass over memory; at decode's few rows the
 * dispatches cost more than the arithmetic.
 *
 * A row's elements are contiguous and rows lie `stride` floats apart (a row of a wider fused output);
 * outputs are contiguous. With OpenMP, rows are shared among `threads` threads once there are enough
 * elements to pay for waking them (a prefill's rows; never a decode step's few).
 */
#include <math.h>
#include <stdint.h>

#include "fast_exp.h"

#define PARALLEL_ELEMENTS 65536

void rms_norm(const float *x, int64_t stride, const float *weight, int64_t rows, int64_t size, float eps,
              int64_t threads, float *out) {
#pragma omp parallel for num_threads(threads) if (threads > 1 && rows * size >= PARALLEL_ELEMENTS)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * stride;
        float *o = out + r * size, squares = 0.0f;
        for (int64_t i = 0; i < size; i++) squares += xr[i] * xr[i];
        float scale = 1.0f / sqrtf(squares / (float)size + eps);
        for (int64_t i = 0; i < size; i++) o[i] = xr[i] * scale * weight[i];
    }
}

/* x [rows, heads, dim] (heads contiguous within a row) rotated by each row's cos and sin [rows, dim],
 * as x * cos + rotate_half(x) * sin with rotate_half(x) = (-x[dim/2:], x[:dim/2]). */
void rotate(float *x, int64_t stride, int64_t rows, int64_t heads, int64_t dim, const float *cos,
            const float *sin, int64_t threads) {
    int64_t half = dim / 2;
#pragma omp parallel for num_threads(threads) if (threads > 1 && rows * heads * dim >= PARALLEL_ELEMENTS)
    for (int64_t r = 0; r < rows; r++) {
        const float *c = cos + r * dim, *s = sin + r * dim;
        for (int64_t h = 0; h < heads; h++) {
            float *v = x + r * stride + h * dim;
            for (int64_t i = 0; i < half; i++) {
                float a = v[i], b = v[half + i];
                v[i] = a * c[i] - b * s[i];
                v[half + i] = b * c[half + i] + a * s[half + i];
            }
        }
    }
}

/* out = silu(gate) * up = gate / (1 + e^-gate) * up; gate and up rows `stride` apart. */
void silu_mul(const float *gate, const float *up, int64_t stride, int64_t rows, int64_t size, int64_t threads,
              float *out) {
#pragma omp parallel for num_threads(threads) if (threads > 1 && rows * size >= PARALLEL_ELEMENTS)
    for (int64_t r = 0; r < rows; r++) {
        const float *g = gate + r * stride, *u = up + r * stride;
        float *o = out + r * size;
        for (int64_t i = 0; i < size; i++) o[i] = g[i] / (1.0f + exp_clamped(-g[i])) * u[i];
    }
}
