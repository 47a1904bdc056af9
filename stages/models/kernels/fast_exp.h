/* e^x in float32 without libm, written so that the compiler vectorizes loops that call it (libm's expf
 * is called one value at a time). x is clamped to [-87, 88], where e^x is a normal float; there it is
 * within 2.6 ulp of e^x (measured every 1e-6): x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor
 * series to r^7, times 2^n. */
#ifndef LIVESERVE_FAST_EXP_H
#define LIVESERVE_FAST_EXP_H
#include <math.h>
#include <stdint.h>

static inline float exp_clamped(float x) {
    x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
    float n = floorf(x * 1.44269504f + 0.5f), r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f;
    float e = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720 + r * (1.0f / 5040)))))));
    union { int32_t i; float f; } scale = {.i = ((int32_t)n + 127) << 23};
    return e * scale.f;
}
#endif
