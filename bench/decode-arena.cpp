// Decode with the packed weights in one arena (cpu::packed_arena, the default) against one buffer per matrix (the
// layout before session 8): the model is loaded twice with --repack on, and the two copies decode in turn in one
// process, so a change in the machine's load hits both. Greedy tokens must be the same.
//   bench-decode-arena [--threads N] [--rounds R] [--tg N] MODEL.gguf...
// Per round and variant: tok/s wall clock, and with 1 thread tokens per second of the calling thread's CPU time
// (the pool runs a 1-thread job on the caller), which leaves out time the thread waited for a core.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/thread-pool.h"
#include "greedy-decode.h"
#include "guarded-main.h"
#include "models/transformer.h"
#include "thread-clock.h"

using namespace memtile;

namespace {

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

static int bench_main(int argc, char** argv) {
    int threads = 1, rounds = 5, tg = 32;
    std::vector<std::string> paths;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "--threads" && i + 1 < argc)
            threads = std::max(1, std::atoi(argv[++i]));
        else if (a == "--rounds" && i + 1 < argc)
            rounds = std::max(1, std::atoi(argv[++i]));
        else if (a == "--tg" && i + 1 < argc)
            tg = std::max(1, std::atoi(argv[++i]));
        else
            paths.push_back(a);
    }
    if (paths.empty()) {
        std::fprintf(stderr, "usage: bench-decode-arena [--threads N] [--rounds R] [--tg N] MODEL.gguf...\n");
        return 2;
    }
    thread_pool pool(threads);
    std::printf("decode tg %d after an 8-token prompt, %d thread(s), repack on; median / best of %d rounds%s\n\n", tg,
                threads, rounds, threads == 1 ? "; tok per CPU-second in brackets" : "");
    std::printf("| model | own buffers tok/s | arena tok/s | arena / own (medians) |\n|---|---|---|---|\n");
    for (const auto& path : paths) {
        std::unique_ptr<transformer> m[2];
        for (int v = 0; v < 2; v++) {
            model_options mo;
            mo.repack = repack_mode::on;
            mo.packed_arena = v == 1;
            m[v] = transformer::load(path, mo, &pool);
        }
        std::vector<int32_t> toks[2];
        bool same = true;
        std::vector<double> wall[2], cpu[2];
        for (int v = 0; v < 2; v++) bench::greedy_decode(*m[v], pool, 4, toks[v]);  // warm-up
        for (int r = 0; r < rounds; r++)
            for (int v = 0; v < 2; v++) {
                const bench::decode_rate x =
                    bench::greedy_decode(*m[r % 2 ? 1 - v : v], pool, tg, toks[r % 2 ? 1 - v : v]);
                wall[r % 2 ? 1 - v : v].push_back(x.wall);
                cpu[r % 2 ? 1 - v : v].push_back(x.cpu);
            }
        same = toks[0] == toks[1];
        const auto slash = path.find_last_of('/');
        std::printf("| %s%s |", path.substr(slash == std::string::npos ? 0 : slash + 1).c_str(),
                    same ? "" : " TOKENS DIFFER");
        for (int v = 0; v < 2; v++) {
            std::printf(" %.2f / %.2f", median(wall[v]), *std::max_element(wall[v].begin(), wall[v].end()));
            if (threads == 1)
                std::printf(" (%.2f / %.2f)", median(cpu[v]), *std::max_element(cpu[v].begin(), cpu[v].end()));
            std::printf(" |");
        }
        std::printf(" %.3f", median(wall[1]) / median(wall[0]));
        if (threads == 1) std::printf(" (%.3f)", median(cpu[1]) / median(cpu[0]));
        std::printf(" |\n");
        std::fflush(stdout);
    }
    return 0;
}

int main(int argc, char** argv) {
    return memtile::bench::guarded_main(argc, argv, bench_main);
}
