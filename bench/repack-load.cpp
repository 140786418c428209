// What --repack on costs at load, and where:
//   bench-repack-load [--rounds R] MODEL.gguf...
// 1. The packers alone, per format: every repackable 2-D weight of the file (token_embd excluded: it is
//    repacked only when it is also the output) packed into a buffer that is already resident, by the scalar
//    reference (repack::pack_group_ref) and by the load-time packer (repack::pack_group), one thread; MB of
//    file bytes per CPU-second of the calling thread (CLOCK_THREAD_CPUTIME_ID, so other jobs on a busy host
//    do not count), best of R rounds. The outputs are compared byte for byte.
// 2. Whole loads (wall clock, best and median of R): transformer::load with repack off, and on with a pool of
//    1 and 2 threads, alternating in one process. These include the first touch of the packed copy's fresh
//    pages (page zeroing; on a VM that also faults the memory in from the host).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backends/cpu/repack.h"
#include "core/dtype.h"
#include "core/thread-pool.h"
#include "gguf/gguf-file.h"
#include "guarded-main.h"
#include "models/transformer.h"
#include "thread-clock.h"

using namespace memtile;

namespace {

struct tensor_ref {
    dtype type;
    const uint8_t* data;
    int64_t n_in, n_out;
    size_t row_bytes;
};

// Packs every group of t into out (group_bytes * groups) with the given packer.
void pack_all(const tensor_ref& t, uint8_t* out, bool reference) {
    const size_t gb = cpu::repack::group_bytes(t.type, t.n_in);
    const int64_t gr = cpu::repack::group_rows(t.type);
    const uint8_t* rows[cpu::repack::k_max_rows];
    for (int64_t g = 0; g < (t.n_out + gr - 1) / gr; g++) {
        for (int r = 0; r < gr; r++) {
            const int64_t o = g * gr + r;
            rows[r] = o < t.n_out ? t.data + size_t(o) * t.row_bytes : nullptr;
        }
        (reference ? cpu::repack::pack_group_ref : cpu::repack::pack_group)(t.type, rows, t.n_in, out + size_t(g) * gb);
    }
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

static int bench_main(int argc, char** argv) {
    int rounds = 3;
    std::vector<std::string> files;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "--rounds" && i + 1 < argc)
            rounds = std::max(1, std::atoi(argv[++i]));
        else
            files.push_back(a);
    }
    if (files.empty()) {
        fmt::print(stderr, "usage: bench-repack-load [--rounds R] MODEL.gguf...\n");
        return 2;
    }
    fmt::print(
        "| model | format | MB | reference MB/cpu-s | fast MB/cpu-s | same bytes |\n|---|---|---|---|---|---|\n");
    for (const auto& path : files) {
        const std::string name = path.substr(path.find_last_of('/') + 1);
        {
            const auto g = gguf_file::open(path);
            std::map<dtype, std::vector<tensor_ref>> by_type;
            size_t max_bytes = 0;
            for (const auto& ti : g->tensors()) {
                if (ti.dims.size() != 2 || !cpu::repack::supported(ti.type) || ti.name == "token_embd.weight") continue;
                const tensor_ref t{ti.type, ti.data, int64_t(ti.dims[0]), int64_t(ti.n_rows()), size_t(ti.row_size())};
                by_type[t.type].push_back(t);
                max_bytes = std::max(max_bytes, cpu::repack::group_bytes(t.type, t.n_in) *
                                                    size_t((t.n_out + cpu::repack::group_rows(t.type) - 1) /
                                                           cpu::repack::group_rows(t.type)));
            }
            std::vector<uint8_t> a(max_bytes, 1), b(max_bytes, 2);  // resident before timing
            for (const auto& [type, ts] : by_type) {
                double best[2] = {1e30, 1e30}, src_mb = 0;
                bool same = true;
                for (const auto& t : ts) {
                    src_mb += double(t.row_bytes) * double(t.n_out) / 1e6;
                    pack_all(t, a.data(), true);
                    pack_all(t, b.data(), false);
                    const size_t n =
                        cpu::repack::group_bytes(t.type, t.n_in) *
                        size_t((t.n_out + cpu::repack::group_rows(t.type) - 1) / cpu::repack::group_rows(t.type));
                    same = same && std::memcmp(a.data(), b.data(), n) == 0;
                }
                for (int r = 0; r < rounds; r++)
                    for (int reference = 1; reference >= 0; reference--) {
                        double s = 0;
                        for (const auto& t : ts) {
                            const double t0 = thread_seconds();
                            pack_all(t, reference ? a.data() : b.data(), reference);
                            s += thread_seconds() - t0;
                        }
                        best[reference] = std::min(best[reference], s);
                    }
                fmt::print("| {} | {} | {:.0f} | {:.0f} | {:.0f} | {} |\n", name, dtype_name(type), src_mb,
                           src_mb / best[1], src_mb / best[0], same ? "yes" : "NO");
            }
        }
    }
    fmt::print(
        "\n| model | load off ms | load on, 1 thread ms | load on, 2 threads ms | (best / median of {})\n"
        "|---|---|---|---|\n",
        rounds);
    for (const auto& path : files) {
        const std::string name = path.substr(path.find_last_of('/') + 1);
        std::vector<double> ms[3];
        thread_pool p1(1), p2(2);
        for (int r = 0; r < rounds; r++)
            for (int v = 0; v < 3; v++) {
                model_options mo;
                mo.repack = v > 0 ? repack_mode::on : repack_mode::off;
                const auto t0 = std::chrono::steady_clock::now();
                auto m = transformer::load(path, mo, v == 2 ? &p2 : &p1);
                ms[v].push_back(
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
            }
        fmt::print("| {} | {:.0f} / {:.0f} | {:.0f} / {:.0f} | {:.0f} / {:.0f} |\n", name,
                   *std::min_element(ms[0].begin(), ms[0].end()), median(ms[0]),
                   *std::min_element(ms[1].begin(), ms[1].end()), median(ms[1]),
                   *std::min_element(ms[2].begin(), ms[2].end()), median(ms[2]));
    }
    return 0;
}

int main(int argc, char** argv) {
    return memtile::bench::guarded_main(argc, argv, bench_main);
}
