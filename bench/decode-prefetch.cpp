// Decode with and without software prefetch of the weight stream (cpu::set_decode_prefetch), the variants
// alternating inside one process so that a change in the machine's load hits all of them:
//   bench-decode-prefetch [options] matrix N_IN N_OUT          one N_OUT x N_IN matrix per format
//   bench-decode-prefetch [options] layers N_LAYERS            N_LAYERS copies of TinyLlama's decode matrices
//   bench-decode-prefetch [options] model MODEL.gguf...        decode tok/s of model files
// options: --prefetch 0,32768 (distances in bytes, 0 = off)  --formats f16,q8_0,q4_k,q5_k,q6_k,bf16,q4_0
//          --streams 1,2,4 (cpu::set_decode_streams: the x8 / x32 decode over that many group streams per thread,
//          0 = each format's default, the default) --distance 32768,1048576 (their least distance in bytes, default
//          the library's) --load-width 256,512 (cpu::set_decode_load_width: the AVX-512 x8 decode's weight loads,
//          0 = each format's default, the default) --stagger -1,0,1 (cpu::set_decode_stream_stagger: -1 each
//          format's default, the default, 0 off, 1 on); the variants are every isa x prefetch x streams x distance x
//          load-width x stagger combination
//          --isa avx2,avx512 (cpu::force_isa per variant, default the automatic choice)
//          --repack 0|1  --threads N  --rounds R  --tg N (model mode)
// matrix/layers: GB of weights per second of the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), best
// and median over the rounds (1 thread; with more threads the figure covers the calling thread only, so
// read the wall-clock one); layers mode splits it by matrix and adds a read of the same bytes, once in one stream
// and once as the decode walks them at two streams (each matrix's halves in lockstep, 256-bit loads, no
// arithmetic: the "halves" row); model mode prints that second read over the model's streamed weights in decode
// order, as GB/s and as the tok/s it would allow (the ceiling for the decode's own bytes and order), next to the
// same read over one 256 MiB buffer. Every variant's output is compared with the first's (prefetch never changes
// a result).
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/cpu-isa.h"
#include "backends/cpu/matmul.h"
#include "core/thread-pool.h"
#include "greedy-decode.h"
#include "guarded-main.h"
#include "models/transformer.h"
#include "observe/bandwidth.h"
#include "quant/quant.h"
#include "thread-clock.h"

using namespace memtile;

namespace {

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> v;
    std::stringstream ss(s);
    std::string x;
    while (std::getline(ss, x, ',')) v.push_back(x);
    return v;
}

dtype parse_type(const std::string& s) {
    const std::pair<const char*, dtype> names[] = {{"f16", dtype::f16},   {"bf16", dtype::bf16}, {"f32", dtype::f32},
                                                   {"q8_0", dtype::q8_0}, {"q4_0", dtype::q4_0}, {"q4_k", dtype::q4_k},
                                                   {"q5_k", dtype::q5_k}, {"q6_k", dtype::q6_k}};
    for (const auto& [n, t] : names)
        if (s == n) return t;
    std::fprintf(stderr, "unknown format %s\n", s.c_str());
    std::exit(2);
}

struct options {
    std::vector<int64_t> prefetch = {0, cpu::k_default_decode_prefetch};
    std::vector<int64_t> streams = {0};
    std::vector<int64_t> distance = {cpu::k_default_decode_stream_distance};
    std::vector<int64_t> load_width = {0};
    std::vector<int64_t> stagger = {-1};
    std::vector<std::string> isas = {"auto"};
    struct variant {
        std::string isa;
        int64_t prefetch, streams, distance, load_width, stagger;
    };
    // Every (isa, prefetch, streams, distance, load width, stagger) combination, isa-major (filled by bench_main).
    std::vector<variant> variants;
    std::vector<std::string> formats = {"f16", "q8_0", "q4_k", "q5_k", "q6_k"};
    bool repack = false;
    int threads = 1, rounds = 5, tg = 32;
};

double best(std::vector<double> v) {
    return *std::max_element(v.begin(), v.end());
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

void set_variant(const options& o, size_t c) {
    cpu::force_isa(o.variants[c].isa);
    cpu::set_decode_prefetch(o.variants[c].prefetch);
    cpu::set_decode_streams(int(o.variants[c].streams), o.variants[c].distance);
    cpu::set_decode_load_width(int(o.variants[c].load_width));
    const int64_t sg = o.variants[c].stagger;
    cpu::set_decode_stream_stagger(sg < 0 ? std::nullopt : std::optional<bool>(sg != 0));
}

std::string variant_name(const options& o, size_t c) {
    std::string s = "prefetch " + std::to_string(o.variants[c].prefetch);
    if (o.isas.size() > 1 || o.isas[0] != "auto") s = o.variants[c].isa + " " + s;
    if (o.streams.size() > 1 || o.streams[0] != 0) s += " streams " + std::to_string(o.variants[c].streams);
    if (o.distance.size() > 1) s += " distance " + std::to_string(o.variants[c].distance);
    if (o.load_width.size() > 1 || o.load_width[0] != 0) s += " loads " + std::to_string(o.variants[c].load_width);
    if (o.stagger.size() > 1 || o.stagger[0] != -1) s += " stagger " + std::to_string(o.variants[c].stagger);
    return s;
}

void print_header(const options& o, const char* what) {
    std::printf("| %s |", what);
    for (size_t c = 0; c < o.variants.size(); c++) std::printf(" %s best / median |", variant_name(o, c).c_str());
    std::printf("\n|---|");
    for (size_t i = 0; i < o.variants.size(); i++) std::printf("---|");
    std::printf("\n");
}

// The weight bytes of format t (F32 stored as is: quantize_tensor does not produce it).
std::vector<uint8_t> encode(dtype t, const std::vector<float>& w, int64_t n_out, int64_t n_in) {
    if (t != dtype::f32) return quantize_tensor(t, w.data(), n_out, n_in);
    std::vector<uint8_t> bytes(w.size() * sizeof(float));
    std::memcpy(bytes.data(), w.data(), bytes.size());
    return bytes;
}

std::vector<float> gaussian(size_t n, std::mt19937& rng) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

int matrix_mode(const options& o, int64_t n_in, int64_t n_out) {
    std::mt19937 rng(3);
    const std::vector<float> wf = gaussian(size_t(n_in * n_out), rng), x = gaussian(size_t(n_in), rng);
    std::vector<float> y(static_cast<size_t>(n_out)), y0(static_cast<size_t>(n_out));
    thread_pool pool(o.threads);
    std::printf("%lld x %lld, %d thread(s), repack %s; GB/s of weights per CPU-second (wall-clock in brackets)\n\n",
                static_cast<long long>(n_out), static_cast<long long>(n_in), o.threads, o.repack ? "on" : "off");
    print_header(o, "type");
    for (const auto& fs : o.formats) {
        const dtype t = parse_type(fs);
        const std::vector<uint8_t> q = encode(t, wf, n_out, n_in);
        const cpu::weight_view v{t, q.data(), n_in, n_out, size_t(row_bytes(t, uint64_t(n_in)))};
        const uint64_t bytes = uint64_t(v.row_bytes) * uint64_t(n_out);
        const auto w = cpu::prepare_weight(v, {.repack = o.repack});
        const int reps = int(std::max<uint64_t>(4, (uint64_t(1) << 30) / bytes));
        std::vector<std::vector<double>> cpu_g(o.variants.size()), wall_g(o.variants.size());
        set_variant(o, 0);
        cpu::matmul(*w, x.data(), 1, y0.data(), pool);
        bool same = true;
        for (int r = 0; r < o.rounds; r++) {
            for (size_t c = 0; c < o.variants.size(); c++) {
                set_variant(o, c);
                const double c0 = thread_seconds();
                const auto t0 = std::chrono::steady_clock::now();
                for (int i = 0; i < reps; i++) cpu::matmul(*w, x.data(), 1, y.data(), pool);
                const double cs = thread_seconds() - c0;
                const double ws = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                cpu_g[c].push_back(double(bytes) * reps / cs / 1e9);
                wall_g[c].push_back(double(bytes) * reps / ws / 1e9);
                same = same && y == y0;
            }
        }
        std::printf("| %s %.0f MB%s |", fs.c_str(), double(bytes) / 1e6, same ? "" : " RESULTS DIFFER");
        for (size_t c = 0; c < o.variants.size(); c++)
            std::printf(" %.1f / %.1f (%.1f) |", best(cpu_g[c]), median(cpu_g[c]), median(wall_g[c]));
        std::printf("\n");
        std::fflush(stdout);
    }
    return 0;
}

// The bytes of r read as two halves in lockstep, 128 bytes of each per step: the decode's order at two group
// streams, without its arithmetic (256-bit loads where the CPU has AVX2, as the decode kernels on AMD use).
#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t read_halves_avx2(std::span<const uint8_t> r) {
    const size_t h = r.size() / 256 * 128;
    __m256i acc = _mm256_setzero_si256();
    for (size_t o = 0; o < h; o += 128)
        for (const uint8_t* p : {r.data() + o, r.data() + h + o})
            for (int k = 0; k < 4; k++)
                acc = _mm256_xor_si256(acc, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * k)));
    return uint64_t(_mm256_extract_epi64(acc, 0)) ^ uint64_t(_mm256_extract_epi64(acc, 3));
}
#endif

uint64_t read_halves(std::span<const uint8_t> r) {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) return read_halves_avx2(r);
#endif
    const size_t h = r.size() / 256 * 128;
    uint64_t acc = 0, w[2];
    for (size_t o = 0; o < h; o += 16)
        for (const uint8_t* p : {r.data() + o, r.data() + h + o}) {
            std::memcpy(w, p, 16);
            acc ^= w[0] ^ w[1];
        }
    return acc;
}

// Wall-clock GB/s of reading ranges in halves on the calling thread alone (whatever --threads is), best of 3 passes.
double read_halves_gbps(std::span<const std::span<const uint8_t>> ranges, uint64_t& sink) {
    uint64_t bytes = 0;
    for (const auto& r : ranges) bytes += r.size() / 256 * 256;
    double best_s = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        const auto t0 = std::chrono::steady_clock::now();
        for (const auto& r : ranges) sink += read_halves(r);
        best_s = std::min(best_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return double(bytes) / best_s / 1e9;
}

int layers_mode(const options& o, int n_layers) {
    struct shape {
        const char* name;
        int64_t n_in, n_out;
    };
    constexpr int n_shapes = 7;
    const shape shapes[n_shapes] = {{"q", 2048, 2048},    {"k", 2048, 256},   {"v", 2048, 256},    {"o", 2048, 2048},
                                    {"gate", 2048, 5632}, {"up", 2048, 5632}, {"down", 5632, 2048}};
    std::mt19937 rng(3);
    const std::vector<float> x = gaussian(5632, rng);
    std::vector<float> y(5632);
    thread_pool pool(o.threads);
    std::printf(
        "%d layers of TinyLlama's decode matrices, %d thread(s), repack %s; GB/s per CPU-second, best pass "
        "of 3 per round, median over %d rounds\n\n",
        n_layers, o.threads, o.repack ? "on" : "off", o.rounds);
    std::printf("| type | MB | read GB/s | variant |");
    for (const auto& s : shapes) std::printf(" %s |", s.name);
    std::printf(" all |\n|---|---|---|---|");
    for (int k = 0; k <= n_shapes; k++) std::printf("---|");
    std::printf("\n");
    for (const auto& fs : o.formats) {
        const dtype t = parse_type(fs);
        std::vector<std::vector<uint8_t>> data;
        std::vector<std::unique_ptr<cpu::prepared_weight>> ws;
        std::vector<int> kind;
        std::vector<std::span<const uint8_t>> ranges;
        uint64_t kind_bytes[n_shapes] = {}, total = 0;
        for (int l = 0; l < n_layers; l++)
            for (int k = 0; k < n_shapes; k++) {
                const std::vector<float> wf = gaussian(size_t(shapes[k].n_in * shapes[k].n_out), rng);
                data.push_back(encode(t, wf, shapes[k].n_out, shapes[k].n_in));
                const cpu::weight_view v{t, data.back().data(), shapes[k].n_in, shapes[k].n_out,
                                         size_t(row_bytes(t, uint64_t(shapes[k].n_in)))};
                ws.push_back(cpu::prepare_weight(v, {.repack = o.repack}));
                if (ws.back()->resident_bytes()) std::vector<uint8_t>().swap(data.back());
                kind.push_back(k);
                ranges.push_back(ws.back()->streamed());
                kind_bytes[k] += ws.back()->streamed().size();
                total += ws.back()->streamed().size();
            }
        const size_t nc = o.variants.size();
        std::vector<std::vector<std::vector<double>>> gb(nc, std::vector<std::vector<double>>(n_shapes + 1));
        std::vector<std::vector<double>> halves(n_shapes + 1);
        std::vector<double> rd;
        std::vector<std::vector<float>> y0(ws.size());
        bool same = true;
        uint64_t sink = 0;
        // GB per CPU-second of each matrix kind and of all, best of 3 passes of pass(i) over the matrices.
        const auto timed = [&](auto&& pass, std::vector<std::vector<double>>& out) {
            std::vector<double> bt(n_shapes + 1, 1e30);
            for (int rep = 0; rep < 3; rep++) {
                std::vector<double> tt(n_shapes + 1, 0.0);
                const double a0 = thread_seconds();
                for (size_t i = 0; i < ws.size(); i++) {
                    const double c0 = thread_seconds();
                    pass(i);
                    tt[size_t(kind[i])] += thread_seconds() - c0;
                }
                tt[n_shapes] = thread_seconds() - a0;
                for (int k = 0; k <= n_shapes; k++) bt[size_t(k)] = std::min(bt[size_t(k)], tt[size_t(k)]);
            }
            for (int k = 0; k <= n_shapes; k++)
                out[size_t(k)].push_back(double(k < n_shapes ? kind_bytes[k] : total) / bt[size_t(k)] / 1e9);
        };
        for (int r = 0; r < o.rounds; r++) {
            rd.push_back(measure_read_gbps(pool, ranges, 1));
            timed([&](size_t i) { sink += read_halves(ranges[i]); }, halves);
            for (size_t c = 0; c < nc; c++) {
                set_variant(o, c);
                timed(
                    [&](size_t i) {
                        cpu::matmul(*ws[i], x.data(), 1, y.data(), pool);
                        const size_t n = size_t(ws[i]->view().n_out);
                        if (y0[i].empty())
                            y0[i].assign(y.begin(), y.begin() + long(n));
                        else
                            same = same && std::equal(y0[i].begin(), y0[i].end(), y.begin());
                    },
                    gb[c]);
            }
        }
        std::printf("| %s | %.0f | %.1f | halves (%u) |", fs.c_str(), double(total) / 1e6, median(rd),
                    unsigned(sink & 1));
        for (int k = 0; k <= n_shapes; k++) std::printf(" %.1f |", median(halves[size_t(k)]));
        std::printf("\n");
        for (size_t c = 0; c < nc; c++) {
            std::printf("| %s%s | %.0f | %.1f | %s |", fs.c_str(), same ? "" : " RESULTS DIFFER", double(total) / 1e6,
                        median(rd), variant_name(o, c).c_str());
            for (int k = 0; k <= n_shapes; k++) std::printf(" %.1f |", median(gb[c][size_t(k)]));
            std::printf("\n");
        }
        std::fflush(stdout);
    }
    return 0;
}

int model_mode(const options& o, const std::vector<std::string>& paths) {
    std::printf(
        "decode tok/s (tg %d after an 8-token prompt), %d thread(s), repack %s; best / median of %d rounds "
        "(1 thread: also per CPU-second of the calling thread)\n\n",
        o.tg, o.threads, o.repack ? "on" : "off", o.rounds);
    print_header(o, "model");
    thread_pool pool(o.threads);
    constexpr size_t k_huge = size_t(2) << 20, k_region_bytes = size_t(256) << 20;
    const std::unique_ptr<uint8_t, decltype(&std::free)> region(
        static_cast<uint8_t*>(std::aligned_alloc(k_huge, k_region_bytes)), &std::free);
    if (!region) throw std::runtime_error("cannot allocate the 256 MiB read buffer");
    madvise(region.get(), k_region_bytes, MADV_HUGEPAGE);
    std::memset(region.get(), 1, k_region_bytes);
    for (const auto& path : paths) {
        model_options mo;
        mo.repack = o.repack ? repack_mode::on : repack_mode::off;
        const auto m = transformer::load(path, mo);
        std::vector<int32_t> first, toks;
        set_variant(o, 0);
        bench::greedy_decode(*m, pool, 4, first);
        std::vector<std::vector<double>> tps(o.variants.size()), cps(o.variants.size());
        bool same = true;
        std::vector<int32_t> ref;
        const auto weights = m->streamed_weights();
        uint64_t weight_bytes = 0, sink = 0;
        for (const auto& r : weights) weight_bytes += r.size();
        std::vector<double> read_model, read_region;
        for (int r = 0; r < o.rounds; r++) {
            read_model.push_back(read_halves_gbps(weights, sink));
            const std::span<const uint8_t> one[] = {{region.get(), k_region_bytes}};
            read_region.push_back(read_halves_gbps(one, sink));
            for (size_t c = 0; c < o.variants.size(); c++) {
                set_variant(o, c);
                const bench::decode_rate dr = bench::greedy_decode(*m, pool, o.tg, toks);
                tps[c].push_back(dr.wall);
                cps[c].push_back(dr.cpu);
                if (ref.empty()) ref = toks;
                same = same && toks == ref;
            }
        }
        const double rm = median(read_model);
        std::printf(
            "read in halves (median of the rounds): the %zu streamed weights in decode order (%.1f MB) %.2f "
            "GB/s = %.2f tok/s; one 256 MiB buffer %.2f GB/s (%u)\n",
            weights.size(), double(weight_bytes) / 1e6, rm, rm * 1e9 / double(weight_bytes), median(read_region),
            unsigned(sink & 1));
        const auto slash = path.find_last_of('/');
        std::printf("| %s%s |", path.substr(slash == std::string::npos ? 0 : slash + 1).c_str(),
                    same ? "" : " TOKENS DIFFER");
        for (size_t c = 0; c < tps.size(); c++)
            if (o.threads == 1)
                std::printf(" %.2f / %.2f (CPU-s %.2f / %.2f) |", best(tps[c]), median(tps[c]), best(cps[c]),
                            median(cps[c]));
            else
                std::printf(" %.2f / %.2f |", best(tps[c]), median(tps[c]));
        std::printf("\n");
        std::fflush(stdout);
    }
    return 0;
}

}  // namespace

static int bench_main(int argc, char** argv) {
    options o;
    std::vector<std::string> rest;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        const bool has = i + 1 < argc;
        // The integer lists, one per variant dimension.
        const std::pair<const char*, std::vector<int64_t>*> lists[] = {{"--prefetch", &o.prefetch},
                                                                       {"--streams", &o.streams},
                                                                       {"--distance", &o.distance},
                                                                       {"--load-width", &o.load_width},
                                                                       {"--stagger", &o.stagger}};
        const auto list = std::find_if(std::begin(lists), std::end(lists), [&](const auto& l) { return a == l.first; });
        if (list != std::end(lists) && has) {
            list->second->clear();
            for (const auto& s : split(argv[++i])) list->second->push_back(std::atoll(s.c_str()));
        } else if (a == "--isa" && has) {
            o.isas = split(argv[++i]);
        } else if (a == "--formats" && has) {
            o.formats = split(argv[++i]);
        } else if (a == "--repack" && has) {
            o.repack = std::atoi(argv[++i]) != 0;
        } else if (a == "--threads" && has) {
            o.threads = std::max(1, std::atoi(argv[++i]));
        } else if (a == "--rounds" && has) {
            o.rounds = std::max(1, std::atoi(argv[++i]));
        } else if (a == "--tg" && has) {
            o.tg = std::max(1, std::atoi(argv[++i]));
        } else {
            rest.push_back(a);
        }
    }
    if (o.prefetch.empty()) o.prefetch = {0};
    if (o.streams.empty()) o.streams = {0};
    if (o.distance.empty()) o.distance = {cpu::k_default_decode_stream_distance};
    if (o.isas.empty()) o.isas = {"auto"};
    if (o.load_width.empty()) o.load_width = {0};
    if (o.stagger.empty()) o.stagger = {-1};
    for (const std::string& isa : o.isas)
        cpu::force_isa(isa);  // an unknown or unsupported path fails before any output
    cpu::force_isa("auto");
    for (int64_t w : o.load_width) cpu::set_decode_load_width(int(w));  // likewise a width other than 0, 256, 512
    cpu::set_decode_load_width(0);
    for (const std::string& isa : o.isas)
        for (int64_t pf : o.prefetch)
            for (int64_t n : o.streams)
                for (int64_t d : o.distance)
                    for (int64_t w : o.load_width)
                        for (int64_t sg : o.stagger) o.variants.push_back({isa, pf, n, d, w, sg});
    if (rest.size() == 3 && rest[0] == "matrix" && std::atoll(rest[1].c_str()) > 0 && std::atoll(rest[2].c_str()) > 0 &&
        std::atoll(rest[1].c_str()) % 256 == 0)
        return matrix_mode(o, std::atoll(rest[1].c_str()), std::atoll(rest[2].c_str()));
    if (rest.size() == 2 && rest[0] == "layers" && std::atoi(rest[1].c_str()) > 0)
        return layers_mode(o, std::atoi(rest[1].c_str()));
    if (rest.size() >= 2 && rest[0] == "model") return model_mode(o, {rest.begin() + 1, rest.end()});
    std::fprintf(stderr,
                 "usage: bench-decode-prefetch [--prefetch 0,32768] [--streams 1,2,4] [--distance 32768] "
                 "[--load-width 256,512] [--stagger -1,0,1] [--isa avx2,avx512] [--formats "
                 "f16,q8_0,...] [--repack 0|1] "
                 "[--threads N] [--rounds R] [--tg N]\n"
                 "       matrix N_IN N_OUT (N_IN a multiple of 256) | layers N_LAYERS | model MODEL.gguf...\n");
    return 2;
}

int main(int argc, char** argv) {
    return memtile::bench::guarded_main(argc, argv, bench_main);
}
