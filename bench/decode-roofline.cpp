// Decode and prefill speed of real model files against the memory-bandwidth limit, measured side by side:
//   bench-decode-roofline [--threads 1,2] [--tg 32] [--reps 3] [--no-pp] [--repack off|on|off,on]
//                         [--hugepages] [--phase-rounds N] [--phase-tg 16] [--read-mib 1024] [--split i,r8]
//                         MODEL.gguf...
// For each model and thread count: the plain STREAM-style read over fresh 1 GiB buffers with the same threads
// (median of three best-of-3; the column earlier tables called "read"), then tg (decode tok/s, best of reps),
// then pp64 and pp512 (prefill tok/s, best of reps after one untimed pass that faults the weights in). Roofline
// ratio = streamed bytes per token (memory model) × decode tok/s ÷ the best read: every variant of
// observe/read-variants.h (software prefetch hints and distances, interleaved chunks, several passes, 2 MiB
// pages) on two 1 GiB buffers, one round before the first decode run and one after each, the best figure of
// any variant and round or of the plain read (best against best, as tg is). Why: decode read faster than the
// plain loop here (its weights are largely on 2 MiB mappings, and a single read before the decode runs can
// catch a slow 2-thread phase; docs/cpu-log-s3-s6.md, session 5 cbw), so the plain read is not the achievable read.
// Prints a Markdown table.
// With --repack off,on both layouts are loaded and their decode runs alternate; RSS is each model's resident
// growth after loading it and decoding 2 tokens (with repack on, the released file pages are not counted, the
// packed copy is), also shown over the budget: file size + a 1024-position f16 KV cache (limit 1.05).
// A third denominator, "weights read", is the same threads reading the model's own streamed weight bytes (the
// pages decode reads, plain loop), best of 3 right before the decode runs: on VMs whose fresh buffers read at
// one of two rates it says what those pages allow.
// Phase-matched ratio (--phase-rounds N, a second table after the first): the best-of-run ratio above divides a
// decode that may have run in a slow phase of the VM's memory by a read from a fast one (2-thread rows 0.58-0.70
// of the best read but 0.91-1.32 of the plain read of the same run, session 8), so it says little. Here, after the
// rows above, the same pool alternates read slots and decode bursts: S D S D ... D S, each repack mode's burst in
// turn; a slot reads the same probe buffers with the three best variants of the run so far plus the plain read,
// one pass of --read-mib each, and counts the best of them; a burst is --phase-tg greedy tokens (every token
// timed, at positions 8.. after a truncate). Per burst: ratio = streamed bytes per token x burst tok/s ÷ the
// mean of the two adjacent slots (also ÷ their max, ÷ the mean of their plain reads, and per CPU-second: the
// burst's tokens per CPU-second of the process ÷ threads against the slots' reads per CPU-second of the reading
// threads, observe/read-variants.h, so that a core taken by another job counts less; the pool's spinning
// counts as decode time); the table gives median and [min-max] over the N bursts and every ratio in order, next
// to the first table's whole-run ratios, the load average and the calling thread's clock measured in each slot.
// --read-mib (default 1024, the issue's >= 1 GiB) sizes every read buffer of the run; smaller is for tests.
// --split (phase-matched rounds only): the pool's chunk hand-outs whose bursts alternate (thread_pool::set_split:
// i = interleaved; rN = ranges with N chunks per thread, r4 the default; hN = halving), each burst of each model in
// each of them; the repack column then names the hand-out ("on r8"). Slots and the first table use the default.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/thread-pool.h"
#include "gguf/gguf-file.h"
#include "guarded-main.h"
#include "int-list.h"
#include "models/transformer.h"
#include "observe/bandwidth.h"
#include "observe/memory-model.h"
#include "observe/read-variants.h"
#include "quant/file-type.h"
#include "split-variants.h"

using namespace memtile;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::vector<int32_t> tokens(int n, uint32_t vocab) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int i = 0; i < n; i++) t[size_t(i)] = int32_t((uint64_t(i) * 7919 + 13) % vocab);
    return t;
}

// Resident set of this process (VmRSS of /proc/self/status), MB; 0 when unreadable.
double rss_mb() {
    std::FILE* f = std::fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    double kb = 0;
    while (std::fgets(line, sizeof line, f))
        if (std::strncmp(line, "VmRSS:", 6) == 0) kb = std::atof(line + 6);
    std::fclose(f);
    return kb / 1024;
}

// Decode tok/s of tg tokens after an 8-token prompt.
double decode_tps(const transformer& m, thread_pool& pool, int tg) {
    forward_context ctx(m, 1024, dtype::f16, pool);
    ctx.forward(tokens(8, m.config().n_vocab));
    int32_t t = 1;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < tg; i++) {
        auto l = ctx.forward(std::span<const int32_t>(&t, 1));
        t = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    }
    return tg / seconds_since(t0);
}

// The plain read (the earlier tables' "read"): median of three best-of-3 reads of fresh buffers.
double plain_read_gbps(int threads, size_t bytes) {
    double r[3];
    for (double& x : r) x = measure_read_gbps(threads, bytes, 3);
    std::sort(r, r + 3);
    return r[1];
}

double process_cpu_seconds() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Clock of the calling thread, GHz: 2^25 dependent 64-bit multiplies (3 cycles each on Intel and AMD cores since
// Sandy Bridge / Zen) over its CPU time; 0 off x86-64. Not adds: Golden Cove and later cores fold a chain of
// add-immediates at rename, several per cycle, which read 16-17 "GHz" on session 41's Xeon (3.55 by the multiplies).
// Why: on a shared VM the core's clock moves with the host's load, and the decode loops are more compute-bound than
// a read, so a ratio that falls with the clock points at the clock, not at memory.
double clock_ghz() {
#if defined(__x86_64__)
    timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    uint64_t x = 1;
    const uint64_t m = 3;
    constexpr int k_iters = 1 << 22, k_per_iter = 8, k_cycles_per_multiply = 3;
    for (int i = 0; i < k_iters; i++)
        asm volatile(
            "imul %1, %0\n\timul %1, %0\n\timul %1, %0\n\timul %1, %0\n\timul %1, %0\n\timul %1, %0\n\timul %1, "
            "%0\n\timul %1, %0"
            : "+r"(x)
            : "r"(m));
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    const double cycles = double(k_iters) * k_per_iter * k_cycles_per_multiply;
    return cycles / (double(b.tv_sec - a.tv_sec) + 1e-9 * double(b.tv_nsec - a.tv_nsec)) / 1e9;
#else
    return 0;
#endif
}

double load_average_1min() {
    double l = -1;
    if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
        if (std::fscanf(f, "%lf", &l) != 1) l = -1;
        std::fclose(f);
    }
    return l;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// "0.912 [0.871-0.944]": median and range.
std::string spread(const std::vector<double>& v, int digits) {
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    return fmt::format("{:.{}f} [{:.{}f}-{:.{}f}]", median(v), digits, *lo, digits, *hi, digits);
}

struct phase_row_input {
    std::string model, type;
    bool repack = false;
    std::string split;                               // the hand-out's name when --split was given
    double old_best_ratio = 0, old_plain_ratio = 0;  // the first table's whole-run ratios of this row
};

// The phase-matched rounds of one thread count (see the file comment): slots and bursts alternate on `pool`;
// returns one Markdown row per model of `ms`. `vbest`: each variant's best figure of the run so far.
// Bursts of model in[k] run on ms[in_model[k]] with the pool's hand-out splits[in_split[k]].
std::vector<std::string> phase_matched_rows(const std::vector<std::unique_ptr<transformer>>& ms,
                                            const std::vector<phase_row_input>& in, const std::vector<size_t>& in_model,
                                            const std::vector<split_variant>& splits,
                                            const std::vector<size_t>& in_split, double bytes_per_token,
                                            thread_pool& pool, read_probe& probe,
                                            const std::vector<read_variant>& variants, const std::vector<double>& vbest,
                                            int rounds, int tg) {
    // The three best variants so far, plus the plain read (index 0) when it is not among them.
    std::vector<size_t> order(variants.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return vbest[a] > vbest[b]; });
    order.resize(std::min<size_t>(3, order.size()));
    if (std::find(order.begin(), order.end(), size_t(0)) == order.end()) order.push_back(0);
    std::vector<read_variant> chosen;
    std::string names;
    for (size_t i : order) {
        chosen.push_back(variants[i]);
        names += (names.empty() ? "" : ", ") + read_variant_name(variants[i]);
    }
    const size_t plain_at = size_t(std::find(order.begin(), order.end(), size_t(0)) - order.begin());
    std::vector<double> slot_best, slot_plain, slot_cpu, ghz;
    const auto slot = [&] {
        const auto f = probe.measure(pool, chosen, 1);
        double b = 0, c = 0;
        for (const auto& x : f) {
            b = std::max(b, x.gbps);
            c = std::max(c, x.gbps_cpu);
        }
        slot_best.push_back(b);
        slot_plain.push_back(f[plain_at].gbps);
        slot_cpu.push_back(c);
        ghz.push_back(clock_ghz());
    };
    std::vector<std::unique_ptr<forward_context>> ctxs;
    for (size_t k = 0; k < in.size(); k++) {
        const transformer& m = *ms[in_model[k]];
        ctxs.push_back(std::make_unique<forward_context>(m, 1024, dtype::f16, pool));
        ctxs.back()->forward(tokens(8, m.config().n_vocab));
    }
    const double load0 = load_average_1min();
    // before[k][r]: the slot before row k's burst of round r (the slot after it is the next one).
    std::vector<std::vector<double>> tps(in.size()), cpu_tps(in.size());
    std::vector<std::vector<size_t>> before(in.size());
    slot();
    for (int r = 0; r < rounds; r++)
        for (size_t k = 0; k < in.size(); k++) {
            forward_context& ctx = *ctxs[k];
            ctx.truncate(8);
            const split_variant& sv = splits[in_split[k]];
            pool.set_split(sv.split, sv.chunks);
            int32_t t = 1;
            const double c0 = process_cpu_seconds();
            const auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < tg; i++) {
                auto l = ctx.forward(std::span<const int32_t>(&t, 1));
                t = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
            }
            tps[k].push_back(tg / seconds_since(t0));
            // Tokens per CPU-second of one thread: the pool's CPU time (spinning workers included) ÷ threads.
            cpu_tps[k].push_back(tg * pool.size() / (process_cpu_seconds() - c0));
            pool.set_split(thread_pool::k_default_split);
            before[k].push_back(slot_best.size() - 1);
            slot();
        }
    const double load1 = load_average_1min();
    std::vector<std::string> rows;
    for (size_t k = 0; k < in.size(); k++) {
        std::vector<double> mean_r, max_r, plain_r, cpu_r, reads;
        std::string each;
        for (size_t r = 0; r < tps[k].size(); r++) {
            const size_t s = before[k][r];
            const double gbps = tps[k][r] * bytes_per_token / 1e9;
            const double mean_read = 0.5 * (slot_best[s] + slot_best[s + 1]);
            mean_r.push_back(gbps / mean_read);
            max_r.push_back(gbps / std::max(slot_best[s], slot_best[s + 1]));
            plain_r.push_back(gbps / (0.5 * (slot_plain[s] + slot_plain[s + 1])));
            cpu_r.push_back(cpu_tps[k][r] * bytes_per_token / 1e9 / (0.5 * (slot_cpu[s] + slot_cpu[s + 1])));
            reads.push_back(mean_read);
            each += fmt::format("{}{:.2f}", each.empty() ? "" : " ", mean_r.back());
        }
        rows.push_back(fmt::format(
            "| {} | {} | {} | {} | {} | {} x {} | {:.2f}-{:.2f} | {} | {} | {} | **{}** | {} | {} | {} | {} | "
            "{:.2f} | {:.2f} |\n",
            in[k].model, in[k].type,
            std::string(in[k].repack ? "on" : "off") + (in[k].split.empty() ? "" : " ") + in[k].split, pool.size(),
            names, rounds, tg, load0, load1, spread(ghz, 2), spread(reads, 1), spread(tps[k], 2), spread(mean_r, 3),
            spread(max_r, 3), spread(plain_r, 3), spread(cpu_r, 3), each, in[k].old_best_ratio, in[k].old_plain_ratio));
    }
    return rows;
}

}  // namespace

static int bench_main(int argc, char** argv) {
    std::vector<int> threads = {1, 2};
    int tg = 32, reps = 3, phase_rounds = 0, phase_tg = 16;
    size_t read_bytes = size_t(1) << 30;
    bool pp = true, hugepages = false;
    std::vector<bool> repack_modes = {false};
    std::vector<split_variant> splits = {{""}};
    std::vector<std::string> models;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "--threads" && i + 1 < argc)
            threads = parse_list(argv[++i]);
        else if (a == "--tg" && i + 1 < argc)
            tg = std::stoi(argv[++i]);
        else if (a == "--reps" && i + 1 < argc)
            reps = std::stoi(argv[++i]);
        else if (a == "--phase-rounds" && i + 1 < argc)
            phase_rounds = std::stoi(argv[++i]);
        else if (a == "--phase-tg" && i + 1 < argc)
            phase_tg = std::stoi(argv[++i]);
        else if (a == "--read-mib" && i + 1 < argc)
            read_bytes = size_t(std::stoul(argv[++i])) << 20;
        else if (a == "--hugepages")
            hugepages = true;
        else if (a == "--no-pp")
            pp = false;
        else if (a == "--split" && i + 1 < argc)
            splits = parse_splits(argv[++i]);
        else if (a == "--repack" && i + 1 < argc) {
            const std::string v = argv[++i];
            repack_modes = v == "on"       ? std::vector<bool>{true}
                           : v == "off,on" ? std::vector<bool>{false, true}
                                           : std::vector<bool>{false};
        } else
            models.push_back(a);
    }
    if (tg < 1 || reps < 1 || phase_rounds < 0 || phase_tg < 1 || read_bytes < (size_t(2) << 20) ||
        read_bytes % (size_t(2) << 20))
        throw std::invalid_argument(
            "bench-decode-roofline: --tg, --reps, --phase-tg >= 1, --phase-rounds >= 0, "
            "--read-mib a positive even number");
    std::vector<std::string> phase_rows;
    fmt::print(
        "| model | type | repack | streamed MB/token | RSS MB | RSS ÷ (file + KV) | threads | plain read GB/s | best "
        "read "
        "GB/s | best read variant | weights read GB/s | pp64 tok/s | pp512 tok/s | tg tok/s | tg GB/s | tg ÷ best read "
        "| "
        "tg ÷ plain read | tg ÷ weights read |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& path : models) {
        // All repack modes loaded side by side; the RSS column is measured with that model alone, after a decode.
        std::vector<std::unique_ptr<transformer>> ms;
        std::vector<double> rss;
        for (bool r : repack_modes) {
            const double before = rss_mb();
            {
                thread_pool pool(1);
                ms.push_back(transformer::load(
                    path, {.load = {.hugepages = hugepages}, .repack = r ? repack_mode::on : repack_mode::off}));
                decode_tps(*ms.back(), pool, 2);
            }
            rss.push_back(rss_mb() - before);
        }
        const transformer& m0 = *ms[0];
        const memory_model mm = compute_memory_model(m0.file());
        const std::string type(file_type_name(uint32_t(m0.file().get_u64("general.file_type", 0))));
        const uint32_t V = m0.config().n_vocab;
        for (int th : threads) {
            thread_pool pool(th);
            const double read = plain_read_gbps(th, read_bytes);
            const auto variants = standard_read_variants();
            std::vector<double> vbest(variants.size(), 0.0);
            read_probe probe(read_bytes, pool);
            const auto read_round = [&] {
                const auto f = probe.measure(pool, variants, 2);
                for (size_t v = 0; v < f.size(); v++) vbest[v] = std::max(vbest[v], f[v].gbps);
            };
            read_round();
            std::vector<double> best(ms.size(), 0.0), wread(ms.size(), 0.0);
            for (size_t k = 0; k < ms.size(); k++) {
                const auto ranges = ms[k]->streamed_weights();
                wread[k] = measure_read_gbps(pool, ranges, 3);
            }
            // Repack modes alternate within each repetition so that a change in the machine's load hits both.
            for (int r = 0; r < reps; r++) {
                for (size_t k = 0; k < ms.size(); k++) best[k] = std::max(best[k], decode_tps(*ms[k], pool, tg));
                read_round();
            }
            // The plain read of fresh buffers is one more read of these threads: when it was faster (a quieter
            // moment), it is the best read.
            const size_t bi = best_read_index(vbest);
            const double bread = std::max(vbest[bi], read);
            const std::string bname = vbest[bi] >= read ? read_variant_name(variants[bi]) : "plain read column";
            std::vector<phase_row_input> phase_in;
            std::vector<size_t> in_model, in_split;
            for (size_t k = 0; k < ms.size(); k++) {
                double pps[2] = {0, 0};
                for (int j = 0; pp && j < 2; j++) {
                    const int n = j == 0 ? 64 : 512;
                    forward_context ctx(*ms[k], 1024, dtype::f16, pool);
                    for (int r = 0; r < 1 + reps; r++) {
                        ctx.truncate(0);
                        const auto t0 = std::chrono::steady_clock::now();
                        ctx.forward(tokens(n, V));
                        if (r > 0) pps[j] = std::max(pps[j], n / seconds_since(t0));
                    }
                }
                const double gbps = best[k] * double(mm.streamed_bytes_per_token) / 1e9;
                const double budget_mb = (double(m0.file().file().size()) + double(mm.kv_bytes(1024))) / 1e6;
                fmt::print(
                    "| {} | {} | {} | {:.0f} | {:.0f} | {:.3f} | {} | {:.1f} | {:.1f} | {} | {:.1f} | {:.1f} | {:.1f} "
                    "| "
                    "{:.2f} | {:.1f} | {:.2f} | {:.2f} | {:.2f} |\n",
                    m0.config().name, type, repack_modes[k] ? "on" : "off", double(mm.streamed_bytes_per_token) / 1e6,
                    rss[k], rss[k] * 1.048576 / budget_mb, th, read, bread, bname, wread[k], pps[0], pps[1], best[k],
                    gbps, gbps / bread, gbps / read, gbps / wread[k]);
                for (size_t sv = 0; sv < splits.size(); sv++) {
                    phase_in.push_back(
                        {m0.config().name, type, repack_modes[k], splits[sv].name, gbps / bread, gbps / read});
                    in_model.push_back(k);
                    in_split.push_back(sv);
                }
            }
            std::fflush(stdout);
            if (phase_rounds > 0) {
                const auto rows =
                    phase_matched_rows(ms, phase_in, in_model, splits, in_split, double(mm.streamed_bytes_per_token),
                                       pool, probe, variants, vbest, phase_rounds, phase_tg);
                phase_rows.insert(phase_rows.end(), rows.begin(), rows.end());
            }
        }
    }
    if (phase_rounds > 0) {
        fmt::print(
            "\nPhase-matched roofline: read slots and decode bursts alternated in one pool; per burst, streamed bytes "
            "x tok/s ÷ the mean of the adjacent slots' reads (each slot: best of the variants named, one pass of {} "
            "MiB each, same threads as the decode); median [min-max] over the bursts.\n\n"
            "| model | type | repack | threads | slot read variants | rounds x tokens | load avg start-end | clock "
            "GHz (slots) | slot read GB/s | burst tok/s | ratio ÷ mean adjacent read | ÷ max adjacent read | ÷ mean "
            "adjacent plain "
            "read | ÷ mean adjacent read, per CPU-second | ratio per burst | whole-run tg ÷ best read | whole-run tg ÷ "
            "plain read |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
            read_bytes >> 20);
        for (const auto& r : phase_rows) fmt::print("{}", r);
    }
    return 0;
}

int main(int argc, char** argv) {
    return memtile::bench::guarded_main(argc, argv, bench_main);
}
