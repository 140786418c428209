/* An independent STREAM-style read-bandwidth check for tests/cli/probe.sh: one thread sums a large array of
 * 64-bit words with eight independent accumulators (plain C, no intrinsics) and prints the best GB/s
 * (1e9 bytes/s) of several passes. Usage: stream-check MIB REPS */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
    const size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 512;
    const int reps = argc > 2 ? atoi(argv[2]) : 5;
    const size_t n = mib * 1024 * 1024 / sizeof(uint64_t);
    uint64_t* a = aligned_alloc(64, n * sizeof(uint64_t));
    if (!a || n < 64 || reps < 1) return 2;
    for (size_t i = 0; i < n; i++) a[i] = i * 2654435761u;
    double best = 0;
    uint64_t keep = 0;
    for (int r = 0; r <= reps; r++) {
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
        const double t0 = now_s();
        for (size_t i = 0; i + 8 <= n; i += 8) {
            s0 += a[i];
            s1 += a[i + 1];
            s2 += a[i + 2];
            s3 += a[i + 3];
            s4 += a[i + 4];
            s5 += a[i + 5];
            s6 += a[i + 6];
            s7 += a[i + 7];
        }
        const double dt = now_s() - t0;
        keep += s0 ^ s1 ^ s2 ^ s3 ^ s4 ^ s5 ^ s6 ^ s7;
        /* pass 0 is a warm-up */
        if (r > 0 && (double)(n * sizeof(uint64_t)) / dt / 1e9 > best) best = (double)(n * sizeof(uint64_t)) / dt / 1e9;
    }
    printf("%.3f\n", best);
    fprintf(stderr, "checksum %llu\n", (unsigned long long)keep);
    free(a);
    return 0;
}
