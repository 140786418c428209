// Which sequential read is fastest on this machine, side by side (observe/read-variants.h):
//   bench-read-variants [--mib 1024] [--threads 1,2] [--rounds 5] [--reps 2] [--fresh]
// Every round measures every standard variant with each thread count in turn (variants and thread counts
// interleaved, so a change in the machine's load or phase hits all of them), each the best of reps passes.
// --fresh allocates and first-touches new buffers every round (does the rate follow the buffer's pages?).
// Prints each round's figures (in time order, to see phases), then per variant and thread count the median and
// best over rounds and the median ratio to the plain reference of the same round.
#include <fcntl.h>
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "core/thread-pool.h"
#include "guarded-main.h"
#include "int-list.h"
#include "observe/read-variants.h"

using namespace memtile;

namespace {

// Where the buffer's pages are in guest-physical memory (/proc/self/pagemap, needs root for the frame numbers):
// "a-b GiB (median m)" over one sample per 2 MiB; empty when unreadable. The rate of a fresh buffer may follow
// the host memory behind those addresses.
std::string guest_placement(std::span<const uint8_t> buf) {
    const int fd = ::open("/proc/self/pagemap", O_RDONLY);
    if (fd < 0) return "";
    std::vector<double> gib;
    for (size_t off = 0; off < buf.size(); off += size_t(2) << 20) {
        uint64_t e = 0;
        const uint64_t vpn = (reinterpret_cast<uintptr_t>(buf.data()) + off) / 4096;
        if (::pread(fd, &e, 8, off_t(vpn * 8)) == 8 && (e >> 63) && (e & ((uint64_t(1) << 55) - 1)))
            gib.push_back(double((e & ((uint64_t(1) << 55) - 1)) * 4096) / double(uint64_t(1) << 30));
    }
    ::close(fd);
    if (gib.empty()) return "";
    std::sort(gib.begin(), gib.end());
    return fmt::format("{:.1f}-{:.1f} GiB (median {:.1f})", gib.front(), gib.back(), gib[gib.size() / 2]);
}

// Dependent multiply-add chains for a fixed count, per CPU-second of the thread, averaged over the pool's
// threads running at once (millions of steps per CPU-second). With 2 threads against 1, a ratio near 1 says
// the two vCPUs each get a whole core; well below 1 that they share one (SMT siblings on the host, or a
// neighbour's job on the sibling): the host placement a 2-thread read may follow.
double compute_rate(thread_pool& pool) {
    const int n = pool.size();
    std::vector<double> rate(size_t(n) * 8, 0.0);
    std::vector<uint64_t> sink(size_t(n) * 8, 0);
    pool.parallel_for(n, [&](int th, int64_t a, int64_t b) {
        for (int64_t t = a; t < b; t++) {
            timespec c0, c1;
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
            uint64_t x[4] = {1, 2, 3, 4};
            constexpr int steps = 20'000'000;
            for (int i = 0; i < steps; i++)
                for (uint64_t& v : x) v = v * 6364136223846793005ull + 1442695040888963407ull;
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
            const double sec = double(c1.tv_sec - c0.tv_sec) + 1e-9 * double(c1.tv_nsec - c0.tv_nsec);
            rate[size_t(t) * 8] = steps / sec / 1e6;
            sink[size_t(th) * 8] += x[0] ^ x[1] ^ x[2] ^ x[3];
        }
    });
    volatile uint64_t keep = 0;
    for (uint64_t v : sink) keep = keep + v;
    double s = 0;
    for (double r : rate) s += r;
    return s / n;
}

// Steal time of all CPUs so far (/proc/stat, clock ticks): time the host ran something else on our vCPUs.
uint64_t steal_ticks() {
    std::FILE* f = std::fopen("/proc/stat", "r");
    if (!f) return 0;
    unsigned long long v[8] = {};
    const int got = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                                &v[5], &v[6], &v[7]);
    std::fclose(f);
    return got == 8 ? v[7] : 0;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

static int bench_main(int argc, char** argv) {
    size_t mib = 1024;
    std::vector<int> threads = {1, 2};
    int rounds = 5, reps = 2;
    bool fresh = false;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "--mib" && i + 1 < argc)
            mib = size_t(std::stoul(argv[++i]));
        else if (a == "--threads" && i + 1 < argc)
            threads = parse_list(argv[++i]);
        else if (a == "--rounds" && i + 1 < argc)
            rounds = std::stoi(argv[++i]);
        else if (a == "--reps" && i + 1 < argc)
            reps = std::stoi(argv[++i]);
        else if (a == "--fresh")
            fresh = true;
        else {
            fmt::print(stderr,
                       "usage: bench-read-variants [--mib N] [--threads 1,2] [--rounds N] [--reps N] [--fresh]\n");
            return 2;
        }
    }
    const auto variants = standard_read_variants();
    std::vector<std::unique_ptr<thread_pool>> pools;
    int max_threads = 1;
    for (int t : threads) {
        pools.push_back(std::make_unique<thread_pool>(t));
        max_threads = std::max(max_threads, t);
    }
    thread_pool& fill_pool = *pools[size_t(std::max_element(threads.begin(), threads.end()) - threads.begin())];
    std::unique_ptr<read_probe> probe;
    // fig[k][t][v][round], k = 0: wall-clock GB/s, 1: GB per CPU-second of the readers x threads
    std::vector<std::vector<std::vector<std::vector<double>>>> fig(
        2, std::vector<std::vector<std::vector<double>>>(threads.size(),
                                                         std::vector<std::vector<double>>(variants.size())));
    for (int r = 0; r < rounds; r++) {
        if (!probe || fresh) {
            probe.reset();
            probe = std::make_unique<read_probe>(mib << 20, fill_pool);
            fmt::print("buffers: 4 KiB pages at {}, 2 MiB pages at {}\n", guest_placement(probe->buffer(false)),
                       guest_placement(probe->buffer(true)));
        }
        const uint64_t steal0 = steal_ticks();
        if (threads.size() > 1)
            fmt::print("compute per CPU-second, {} threads ÷ 1 thread: {:.2f}\n", threads.back(),
                       compute_rate(*pools.back()) / compute_rate(*pools.front()));
        uint64_t check = 0;
        for (size_t ti = 0; ti < threads.size(); ti++) {
            const auto f = probe->measure(*pools[ti], variants, reps);
            std::string line = fmt::format("round {} threads {} wall (cpu):", r, threads[ti]);
            for (size_t v = 0; v < variants.size(); v++) {
                fig[0][ti][v].push_back(f[v].gbps);
                fig[1][ti][v].push_back(f[v].gbps_cpu);
                line += fmt::format(" {:.1f} ({:.1f})", f[v].gbps, f[v].gbps_cpu);
                if (check == 0) check = f[v].checksum;
                if (f[v].checksum != check)
                    fmt::print(stderr, "checksum mismatch: {}\n", read_variant_name(variants[v]));
            }
            fmt::print("{}  (huge pages granted: {} of {} MiB; steal ticks so far this round {})\n", line,
                       probe->huge_bytes_granted() >> 20, mib, steal_ticks() - steal0);
            std::fflush(stdout);
        }
    }
    for (int k = 0; k < 2; k++) {
        fmt::print("\n{}: {} MiB per buffer, {} rounds, best of {} passes per figure{}\n\n",
                   k == 0 ? "wall-clock GB/s" : "GB per CPU-second of the readers x threads", mib, rounds, reps,
                   fresh ? ", fresh buffers every round" : "");
        fmt::print("| variant |");
        for (int t : threads) fmt::print(" {} thr median | {} thr best | {} thr ÷ plain (median) |", t, t, t);
        fmt::print("\n|---|");
        for (size_t i = 0; i < threads.size(); i++) fmt::print("---|---|---|");
        fmt::print("\n");
        for (size_t v = 0; v < variants.size(); v++) {
            fmt::print("| {} |", read_variant_name(variants[v]));
            for (size_t ti = 0; ti < threads.size(); ti++) {
                const auto& x = fig[size_t(k)][ti];
                std::vector<double> ratio;
                for (int r = 0; r < rounds; r++) ratio.push_back(x[v][size_t(r)] / x[0][size_t(r)]);
                fmt::print(" {:.1f} | {:.1f} | {:.3f} |", median(x[v]), *std::max_element(x[v].begin(), x[v].end()),
                           median(ratio));
            }
            fmt::print("\n");
        }
    }
    return 0;
}

int main(int argc, char** argv) {
    return memtile::bench::guarded_main(argc, argv, bench_main);
}
