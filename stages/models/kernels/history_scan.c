/* A history branch's scan and reads for one layer and one step (stages/models/history.py), a sequence
 * per OpenMP iteration: its state h [state_size, width] comes from its cache rows, every query reads
 * its state (read[q] = c[q] h), the absorbed rows update it (h = e^(dt A) h + b (dt u)), and the last
 * state goes back to the cache rows. One pass over each state, where torch makes a dozen small calls. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fast_exp.h"

static void read_state(const float *c, const float *h, int64_t state_size, int64_t width, float *out) {
    memset(out, 0, width * sizeof(float));
    for (int64_t n = 0; n < state_size; n++) {
        const float cn = c[n], *row = h + n * width;
        for (int64_t i = 0; i < width; i++) out[i] += cn * row[i];
    }
}

static void absorb(float *h, const float *a, const float *dt, const float *b, const float *du, int64_t state_size,
                   int64_t width) {
    for (int64_t n = 0; n < state_size; n++) {
        float *row = h + n * width;
        const float *an = a + n * width, bn = b[n];
        for (int64_t i = 0; i < width; i++) row[i] = exp_clamped(dt[i] * an[i]) * row[i] + bn * du[i];
    }
}

/* Caches flat [slots, width]; state rows: k_rows in the K cache (state_k), the rest in the V cache
 * (state_v), per sequence. dt, du [seqs, steps, width], b [seqs, steps, state_size] (a padded step has
 * dt 0 and b 0: it keeps the state); a [state_size, width]. Queries of sequence s are
 * [query_start[s], query_start[s + 1]), in order of the state they read (absorbed[q], 0..steps).
 * Returns nonzero if a state buffer cannot be allocated. */
int history_scan(float *k_cache, float *v_cache, int64_t width, const int64_t *state_k, int64_t k_rows,
                 const int64_t *state_v, int64_t state_size, const float *dt, const float *b, const float *du,
                 int64_t steps, const float *a, const float *c, const int64_t *query_start, const int64_t *absorbed,
                 int64_t num_seqs, int64_t threads, float *read) {
    int failed = 0;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t s = 0; s < num_seqs; s++) {
        float *h = malloc(state_size * width * sizeof(float));
        if (h == NULL) {
            failed = 1;
            continue;
        }
        for (int64_t n = 0; n < state_size; n++) {
            const float *row = n < k_rows ? k_cache + state_k[s * k_rows + n] * width
                                          : v_cache + state_v[s * (state_size - k_rows) + n - k_rows] * width;
            memcpy(h + n * width, row, width * sizeof(float));
        }
        int64_t q = query_start[s];
        for (int64_t step = 0; step <= steps; step++) {
            for (; q < query_start[s + 1] && absorbed[q] == step; q++)
                read_state(c + q * state_size, h, state_size, width, read + q * width);
            if (step < steps) {
                int64_t at = s * steps + step;
                absorb(h, a, dt + at * width, b + at * state_size, du + at * width, state_size, width);
            }
        }
        for (int64_t n = 0; n < state_size; n++) {
            float *row = n < k_rows ? k_cache + state_k[s * k_rows + n] * width
                                    : v_cache + state_v[s * (state_size - k_rows) + n - k_rows] * width;
            memcpy(row, h + n * width, width * sizeof(float));
        }
        free(h);
    }
    return failed;
}
