/* Decode attention over a paged KV cache, read in place.
 *
 * One query token per sequence attends to the first `lengths[r]` positions of its
 * blocks. K and V are read once each, straight from the cache: no gathered copy.
 * Scores of a query group are kept for the whole context (two passes: scores and
 * softmax, then the weighted sum of values).
 *
 * q, out: [rows, heads, dim] (q's rows `q_stride` floats apart: a fused projection's columns);
 * k_cache, v_cache: [blocks, block_size, kv_heads, dim]; block_table: [rows, width], row r's
 * blocks in order (entries past its length unread).
 *
 * With OpenMP (built with -fopenmp), the work is shared among `threads` threads, each
 * with its own score buffer; the loader then reuses the OpenMP runtime torch has loaded
 * (same soname), so the kernel and torch's ops share one thread pool. A unit of work is
 * a row's KV heads together when there are rows enough to keep every thread busy: a
 * position's heads lie side by side, so a block is then read front to back.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fast_exp.h"
#ifdef _OPENMP
#include <omp.h>
#define THREAD_INDEX omp_get_thread_num()
#else
#define THREAD_INDEX 0
#endif

static inline float dot(const float *restrict a, const float *restrict b, int64_t n) {
    float acc = 0.0f;
    for (int64_t i = 0; i < n; i++) acc += a[i] * b[i];
    return acc;
}

/* Loops over positions p < length in order; slot is p's row in the cache (block by block: no division). */
#define FOR_EACH_POSITION(blocks, length, block_size, slot, p)                                   \
    for (int64_t b_ = 0, p = 0; p < (length); b_++)                                              \
        for (int64_t slot = (blocks)[b_] * (block_size), end_ = slot + (block_size); slot < end_ && p < (length); \
             slot++, p++)

/* One row's query heads of KV heads [head, head + span) (q and out point at the first of them). */
static inline __attribute__((always_inline)) void attend(const float *q, const float *k_cache, const float *v_cache,
                                                         const int64_t *blocks, int64_t length, int64_t group,
                                                         int64_t kv_heads, int64_t head, int64_t span, int64_t dim,
                                                         int64_t block_size, float scale, float *scores, float *out) {
    int64_t queries = span * group;
    FOR_EACH_POSITION(blocks, length, block_size, slot, p) {
        const float *k = k_cache + (slot * kv_heads + head) * dim;
        for (int64_t h = 0, j = 0; h < span; h++)
            for (int64_t g = 0; g < group; g++, j++) scores[j * length + p] = dot(q + j * dim, k + h * dim, dim) * scale;
    }
    for (int64_t j = 0; j < queries; j++) {
        float *s = scores + j * length, top = -INFINITY, sum = 0.0f;
        for (int64_t p = 0; p < length; p++) top = s[p] > top ? s[p] : top;
        for (int64_t p = 0; p < length; p++) sum += (s[p] = exp_clamped(s[p] - top));
        for (int64_t p = 0; p < length; p++) s[p] /= sum;
        for (int64_t d = 0; d < dim; d++) out[j * dim + d] = 0.0f;
    }
    FOR_EACH_POSITION(blocks, length, block_size, slot, p) {
        const float *restrict v = v_cache + (slot * kv_heads + head) * dim;
        for (int64_t h = 0, j = 0; h < span; h++)
            for (int64_t g = 0; g < group; g++, j++) {
                float w = scores[j * length + p], *restrict o = out + j * dim;
                for (int64_t d = 0; d < dim; d++) o[d] += w * v[h * dim + d];
            }
    }
}

/* Rows of new keys and values (`width` floats each, `k_stride` and `v_stride` apart) into their slots. */
void write_slots(const float *k, int64_t k_stride, const float *v, int64_t v_stride, const int64_t *slots,
                 int64_t rows, int64_t width, float *k_cache, float *v_cache) {
    for (int64_t r = 0; r < rows; r++) {
        memcpy(k_cache + slots[r] * width, k + r * k_stride, sizeof(float) * width);
        memcpy(v_cache + slots[r] * width, v + r * v_stride, sizeof(float) * width);
    }
}

int paged_decode(const float *q, int64_t q_stride, const float *k_cache, const float *v_cache, const int64_t *block_table,
                 const int64_t *lengths, int64_t rows, int64_t width, int64_t heads, int64_t kv_heads,
                 int64_t dim, int64_t block_size, float scale, int64_t threads, float *out) {
    int64_t group = heads / kv_heads, longest = 1;
    for (int64_t r = 0; r < rows; r++) longest = lengths[r] > longest ? lengths[r] : longest;
    int64_t span = rows >= threads ? kv_heads : 1, per_row = kv_heads / span, units = rows * per_row;
    int64_t per_thread = span * group * longest;
    if (threads > units) threads = units;
    if (threads < 1) threads = 1;
    float *scores = malloc(sizeof(float) * per_thread * threads);
    if (scores == NULL) return -1;
#pragma omp parallel for schedule(dynamic) num_threads(threads) if (threads > 1)
    for (int64_t unit = 0; unit < units; unit++) {
        int64_t r = unit / per_row, h = unit % per_row * span;
        int64_t first = (r * heads + h * group) * dim, q_first = r * q_stride + h * group * dim;
        const int64_t *blocks = block_table + r * width;
        float *mine = scores + per_thread * THREAD_INDEX;
        /* A constant head size lets the compiler unroll the dot products: a quarter faster at 64. */
        if (dim == 64)
            attend(q + q_first, k_cache, v_cache, blocks, lengths[r], group, kv_heads, h, span, 64, block_size,
                   scale, mine, out + first);
        else if (dim == 128)
            attend(q + q_first, k_cache, v_cache, blocks, lengths[r], group, kv_heads, h, span, 128, block_size,
                   scale, mine, out + first);
        else
            attend(q + q_first, k_cache, v_cache, blocks, lengths[r], group, kv_heads, h, span, dim, block_size,
                   scale, mine, out + first);
    }
    free(scores);
    return 0;
}
