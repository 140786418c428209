// memtile bench -m MODEL [-p 64,512] [-n 128] [-d 0,4096] [-t 1,2] [--cpu-mask LIST] [-r 3] [--md|--csv|--json]
//               [--svg FILE] [--profile] [--cold] [--soak SECONDS] [--perf] [--device cpu|cuda] [memory modes]
// llama-bench-like throughput rows, each with the bytes it must move per token and how close that comes to
// the machine's measured bandwidth (the roofline). See docs/observability.md.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>

#include "bench-extras.h"
#include "commands.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/thread-pool.h"
#include "core/units.h"
#include "gguf/gguf-file.h"
#include "model-flags.h"
#include "observe/bandwidth.h"
#include "observe/forward-profile.h"
#include "observe/machine-profile.h"
#include "observe/memory-model.h"
#include "observe/perf-counters.h"
#include "observe/read-variants.h"
#include "observe/svg-charts.h"
#include "quant/file-type.h"

namespace memtile::cli {
namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t0) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

int32_t argmax(std::span<const float> v) {
    return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

struct bench_row {
    std::string model, type, mem;
    uint64_t size = 0, params = 0;
    int threads = 1;
    std::string test;  // pp512, tg128
    int n_prompt = 0, n_gen = 0, n_depth = 0;
    std::vector<double> tps;  // one per repetition
    double mean = 0, sd = 0, ttft_ms = 0;
    double bytes_per_token = 0, achieved_gbps = 0, available_gbps = 0, roofline = 0;
    std::vector<counter_reading> counters;  // --perf, whole row (all repetitions)
    uint64_t counted_tokens = 0;
};

class bench_command : public command {
public:
    CLI::App* add(CLI::App& app) override {
        auto* sub = app.add_subcommand("bench", "Measure prompt and generation speed against the memory roofline");
        model_.add(sub, false);
        sub->add_option("-p,--n-prompt", prompts_, "Prompt lengths (comma-separated; 0: none)")->delimiter(',');
        sub->add_option("-n,--n-gen", gens_, "Generated tokens per generation test (comma-separated; 0: none)")
            ->delimiter(',');
        sub->add_option("-d,--depth", depths_,
                        "Context depths (comma-separated): each test runs after this many tokens already in the KV "
                        "cache (filled by one prefill per depth, kept across repetitions), as llama-bench's -d")
            ->delimiter(',')
            ->check(CLI::Range(0, 16777216));
        sub->add_option("-t,--threads", threads_, "Thread counts (comma-separated; default: physical cores)")
            ->delimiter(',')
            ->check(CLI::Range(1, 1024));
        sub->add_option(
            "--cpu-mask", cpu_mask_,
            "Pin thread i to the i-th CPU of this list, e.g. 0,2-3 (each thread count uses its first CPUs)");
        sub->add_option("-r,--repetitions", reps_, "Repetitions per test")->check(CLI::Range(1, 1000));
        auto* md = sub->add_flag("--md", md_, "Markdown table (default)");
        auto* csv = sub->add_flag("--csv", csv_, "CSV rows");
        auto* js = sub->add_flag("--json", json_, "JSON array of rows");
        md->excludes(csv)->excludes(js);
        csv->excludes(js);
        sub->add_option("--svg", svg_, "Write the roofline chart (or the --soak timeline) as SVG");
        sub->add_flag("--profile", profile_, "Break decode time and bytes down by operation class and layer");
        sub->add_flag("--cold", cold_, "First-token latency after dropping the model from the page cache");
        sub->add_option("--soak", soak_s_, "Decode continuously for SECONDS, sampling once a second")
            ->check(CLI::Range(1, 86400));
        sub->add_flag("--perf", perf_, "Hardware/software event counters per token (perf_event_open)");
        model_.add_device(sub, false);
        return sub;
    }

    int run() override {
        if (model_.device == "cuda") {
            if (perf_ || cold_ || soak_s_ > 0 || profile_ || csv_ || !svg_.empty() || !threads_.empty() ||
                !cpu_mask_.empty())
                fail("bench", "--device cuda takes -m, -p, -n, -d, -r, -c, --json and memory modes only");
            std::erase(prompts_, 0);
            std::erase(gens_, 0);
            if (depths_.empty()) depths_.push_back(0);
            return run_cuda_bench(
                {model_.model_path(), model_.options().load, prompts_, gens_, depths_, reps_, model_.ctx, json_});
        }
        // Counters first: they must exist before the worker threads so that the threads inherit them.
        std::unique_ptr<perf_counters> counters;
        if (perf_) counters = std::make_unique<perf_counters>();
        const std::vector<int> mask = cpu_mask_.empty() ? std::vector<int>{} : thread_pool::parse_cpu_list(cpu_mask_);
        if (threads_.empty()) threads_.push_back(mask.empty() ? thread_pool::default_threads() : int(mask.size()));
        // Pinning per thread count: the first t CPUs of --cpu-mask, else the default placement.
        const auto cpus_for = [&mask](int t) {
            if (mask.empty()) return thread_pool::default_cpus(t);
            if (int(mask.size()) < t) fail("bench", "--cpu-mask lists {} CPUs for {} threads", mask.size(), t);
            return std::vector<int>(mask.begin(), mask.begin() + t);
        };
        std::erase(prompts_, 0);
        std::erase(gens_, 0);
        const std::string path = model_.model_path();
        const auto prof = load_machine_profile();

        if (cold_) {
            cold_start_report(path, model_, threads_.front(), cpus_for(threads_.front()), json_ ? stderr : stdout);
            if (prompts_.empty() && gens_.empty() && soak_s_ == 0) return 0;
        }

        // One pool at a time: the first thread count's pool repacks at load and is reused while t is the same.
        auto pool = std::make_unique<thread_pool>(threads_.front(), cpus_for(threads_.front()));
        auto model = transformer::load(path, model_.options(), pool.get());
        const memory_model mm = compute_memory_model(model->file(), model_.kv_dtype());
        std::string mem = model_.memory_mode();
        if (const auto note = huge_page_note(model->file().file()); !note.empty()) mem += " (" + note + ")";
        if (!model->file().file().warning().empty())
            fmt::print(stderr, "[bench] warning: {}\n", model->file().file().warning());

        if (soak_s_ > 0) {
            soak_options so;
            so.seconds = soak_s_;
            so.threads = threads_.front();
            so.cpus = cpus_for(so.threads);
            so.n_ctx = model_.ctx ? model_.ctx : std::min<uint32_t>(model->config().n_ctx_train, 512);
            so.kv_type = model_.kv_dtype();
            so.svg_path = svg_;
            pool.reset();  // the soak has its own pool
            run_soak(*model, so);
            return 0;
        }

        const std::string type_name(file_type_name(uint32_t(model->file().get_u64("general.file_type", 9999))));
        int max_len = 1;
        for (int p : prompts_) max_len = std::max(max_len, p);
        for (int n : gens_) max_len = std::max(max_len, n);
        if (depths_.empty()) depths_.push_back(0);
        const int max_depth = *std::max_element(depths_.begin(), depths_.end());
        const uint32_t n_ctx = model_.ctx ? model_.ctx : uint32_t(max_len + max_depth + 8);
        if (uint64_t(max_len) + uint64_t(max_depth) > n_ctx)
            fail("bench", "tests of {} tokens at depth {} do not fit the context of {}", max_len, max_depth, n_ctx);
        std::vector<bench_row> rows;
        std::vector<std::string> profile_text;
        for (int t : threads_) {
            if (pool->size() != t) {
                pool.reset();
                pool = std::make_unique<thread_pool>(t, cpus_for(t));
            }
            forward_context ctx(*model, n_ctx, model_.kv_dtype(), *pool);
            const double available = prof ? prof->read_gbps_for(t) : fallback_gbps(t);
            for (int depth : depths_) {
                // The depth's context, filled once and kept: each repetition truncates back to it.
                ctx.truncate(0);
                if (depth > 0)
                    ctx.forward(random_tokens(size_t(depth), model->config().n_vocab, 4321 + uint64_t(depth)));
                const std::string at = depth > 0 ? fmt::format(" @ d{}", depth) : "";
                auto base_row = [&](const std::string& test) {
                    bench_row r;
                    r.model = std::filesystem::path(path).filename().string();
                    r.type = type_name;
                    r.mem = mem;
                    r.size = mm.weight_bytes;
                    r.threads = t;
                    r.test = test + at;
                    r.n_depth = depth;
                    r.available_gbps = available;
                    return r;
                };
                for (int p : prompts_) {
                    bench_row r = base_row(fmt::format("pp{}", p));
                    r.n_prompt = p;
                    const auto tokens = random_tokens(size_t(p), model->config().n_vocab, 1234 + uint64_t(p));
                    auto once = [&] {
                        ctx.truncate(uint32_t(depth));
                        const auto t0 = clock_type::now();
                        const auto logits = ctx.forward(tokens);
                        (void)argmax(logits);
                        return ms_since(t0);
                    };
                    once();  // warm-up: page faults, caches, thread start
                    std::vector<double> ms;
                    if (counters) counters->start();
                    for (int i = 0; i < reps_; i++) ms.push_back(once());
                    if (counters) finish_counters(*counters, r, uint64_t(p) * uint64_t(reps_));
                    for (double x : ms) r.tps.push_back(p * 1000.0 / x);
                    r.ttft_ms = std::accumulate(ms.begin(), ms.end(), 0.0) / double(ms.size());
                    // Weights are streamed once per batch; each token reads the KV rows before it (the depth's and
                    // the prompt's) and writes its own.
                    r.bytes_per_token = double(mm.streamed_bytes_per_token) / p +
                                        double(mm.kv_bytes_per_token) * (double(depth) + double(p + 1) / 2.0 + 1.0);
                    finish_row(r);
                    rows.push_back(r);
                }
                for (int n : gens_) {
                    bench_row r = base_row(fmt::format("tg{}", n));
                    r.n_gen = n;
                    forward_profile fp;
                    auto once = [&](int count, bool observe) {
                        ctx.truncate(uint32_t(depth));
                        ctx.set_observer(observe ? &fp : nullptr);
                        int32_t tok = 1 % int32_t(model->config().n_vocab);
                        double first = 0;
                        const auto t0 = clock_type::now();
                        for (int i = 0; i < count; i++) {
                            const auto logits = ctx.forward(std::span<const int32_t>(&tok, 1));
                            const auto ts = clock_type::now();
                            tok = argmax(logits);
                            if (observe)
                                fp.add_sampling(
                                    std::chrono::duration<double, std::nano>(clock_type::now() - ts).count());
                            if (i == 0) first = ms_since(t0);
                        }
                        ctx.set_observer(nullptr);
                        return std::pair{ms_since(t0), first};
                    };
                    once(std::min(n, 16), false);
                    std::vector<double> ms, first;
                    if (counters) counters->start();
                    for (int i = 0; i < reps_; i++) {
                        const auto [total, f] = once(n, false);
                        ms.push_back(total);
                        first.push_back(f);
                    }
                    if (counters) finish_counters(*counters, r, uint64_t(n) * uint64_t(reps_));
                    for (double x : ms) r.tps.push_back(n * 1000.0 / x);
                    r.ttft_ms = std::accumulate(first.begin(), first.end(), 0.0) / double(first.size());
                    r.bytes_per_token = double(mm.streamed_bytes_per_token) +
                                        double(mm.kv_bytes_per_token) * (double(depth) + double(n + 1) / 2.0 + 1.0);
                    finish_row(r);
                    rows.push_back(r);
                    if (profile_) {
                        once(n, true);
                        // The decode's own ceiling: its weights read as it walks them, by this pool, without
                        // arithmetic.
                        const auto weights = model->streamed_weights();
                        uint64_t weight_bytes = 0;
                        for (const auto& w : weights) weight_bytes += w.size();
                        // Two runs per chunk (the AVX-512 K-quant decode on AMD) or four (elsewhere): the better.
                        const double own = std::max(measure_decode_read_gbps(*pool, weights, 2, 3),
                                                    measure_decode_read_gbps(*pool, weights, 4, 3));
                        profile_text.push_back(profile_report(fp, r, n, prof.has_value(), own, weight_bytes));
                    }
                }
            }
        }
        print_rows(rows, prof.has_value());
        if (counters) print_counters(*counters, rows);
        for (const auto& s : profile_text) fmt::print(json_ ? stderr : stdout, "\n{}", s);
        if (!svg_.empty()) {
            std::vector<roofline_bar> bars;
            for (const auto& r : rows)
                bars.push_back({fmt::format("{}, {} thread{}", r.test, r.threads, r.threads == 1 ? "" : "s"),
                                r.achieved_gbps, r.available_gbps});
            std::ofstream f(svg_);
            f << roofline_svg(fmt::format("memtile bench: {} ({}, {})", rows.empty() ? path : rows[0].model,
                                          rows.empty() ? "" : rows[0].type, format_bytes(mm.weight_bytes)),
                              bars);
            if (!f) fail("bench", "cannot write '{}'", svg_);
        }
        if (!prof)
            fmt::print(
                stderr,
                "[bench] no machine profile ({}): roofline against a quick 256 MiB read (best of 4 variants); run "
                "memtile probe for a stable one\n",
                machine_profile_path());
        return 0;
    }

private:
    static std::vector<int32_t> random_tokens(size_t n, uint32_t n_vocab, uint64_t seed) {
        rng r(seed);
        std::vector<int32_t> out(n);
        for (auto& t : out) t = int32_t(r.next() % n_vocab);
        return out;
    }

    double fallback_gbps(int threads) {
        auto it = fallback_.find(threads);
        if (it == fallback_.end())
            it = fallback_.emplace(threads, quick_best_read_gbps(threads, size_t(256) << 20, 3)).first;
        return it->second;
    }

    static void finish_row(bench_row& r) {
        const double n = double(r.tps.size());
        r.mean = std::accumulate(r.tps.begin(), r.tps.end(), 0.0) / n;
        double var = 0;
        for (double x : r.tps) var += (x - r.mean) * (x - r.mean);
        r.sd = r.tps.size() > 1 ? std::sqrt(var / (n - 1)) : 0;
        r.achieved_gbps = r.mean * r.bytes_per_token / 1e9;
        r.roofline = r.available_gbps > 0 ? r.achieved_gbps / r.available_gbps : 0;
    }

    static void finish_counters(perf_counters& c, bench_row& r, uint64_t tokens) {
        c.stop();
        r.counters = c.read();
        r.counted_tokens = tokens;
    }

    void print_rows(const std::vector<bench_row>& rows, bool have_profile) {
        if (json_) {
            nlohmann::json a = nlohmann::json::array();
            for (const auto& r : rows) {
                nlohmann::json j{{"model", r.model},
                                 {"type", r.type},
                                 {"size_bytes", r.size},
                                 {"memory_mode", r.mem},
                                 {"threads", r.threads},
                                 {"test", r.test},
                                 {"n_prompt", r.n_prompt},
                                 {"n_gen", r.n_gen},
                                 {"n_depth", r.n_depth},
                                 {"tokens_per_second", r.mean},
                                 {"tokens_per_second_sd", r.sd},
                                 {"samples", r.tps},
                                 {"bytes_per_token", r.bytes_per_token},
                                 {"achieved_gbps", r.achieved_gbps},
                                 {"available_gbps", r.available_gbps},
                                 {"roofline", r.roofline},
                                 {"roofline_source", have_profile ? "machine profile" : "quick measurement"},
                                 {"ttft_ms", r.ttft_ms}};
                if (!r.counters.empty()) {
                    nlohmann::json c;
                    for (const auto& x : r.counters)
                        c[x.name] = x.value ? nlohmann::json(double(*x.value) / double(r.counted_tokens))
                                            : nlohmann::json(nullptr);
                    j["counters_per_token"] = c;
                }
                a.push_back(j);
            }
            fmt::print("{}\n", a.dump(2));
            return;
        }
        if (csv_) {
            fmt::print(
                "model,type,size_bytes,memory_mode,threads,test,tokens_per_second,sd,bytes_per_token,achieved_gbps,"
                "available_gbps,roofline,ttft_ms\n");
            for (const auto& r : rows)
                fmt::print("{},{},{},{},{},{},{:.3f},{:.3f},{:.0f},{:.3f},{:.3f},{:.4f},{:.3f}\n", r.model, r.type,
                           r.size, r.mem, r.threads, r.test, r.mean, r.sd, r.bytes_per_token, r.achieved_gbps,
                           r.available_gbps, r.roofline, r.ttft_ms);
            return;
        }
        fmt::print("| model | size | type | mem | threads | test | t/s | bytes/token | GB/s | roofline | ttft ms |\n");
        fmt::print("| --- | ---: | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
        for (const auto& r : rows)
            fmt::print(
                "| {} | {} | {} | {} | {} | {} | {:.2f} ± {:.2f} | {} | {:.2f} | {:.1f} % of {:.1f} | {:.2f} |\n",
                r.model, format_bytes(r.size), r.type, r.mem, r.threads, r.test, r.mean, r.sd,
                format_bytes(uint64_t(r.bytes_per_token)), r.achieved_gbps, r.roofline * 100, r.available_gbps,
                r.ttft_ms);
    }

    // Three significant digits at least, so that rare events (0.02 context switches per token) stay visible.
    static std::string per_token(double v) {
        return v >= 100 ? fmt::format("{:.0f}", v) : v >= 1 ? fmt::format("{:.2f}", v) : fmt::format("{:.4f}", v);
    }

    void print_counters(const perf_counters& c, const std::vector<bench_row>& rows) {
        FILE* out = json_ ? stderr : stdout;
        fmt::print(out, "\nevent counters per token (perf_event_open; software events from {})\n", c.software_source());
        if (!c.hardware_available())
            fmt::print(out,
                       "hardware counters are unavailable here ({}): this kernel exposes no PMU to the process "
                       "(typical of VMs and containers); cycles, instructions, cache and dTLB misses are not shown\n",
                       c.hardware_reason());
        if (rows.empty()) return;
        std::string head = "| threads | test |";
        std::string sep = "| ---: | --- |";
        for (const auto& x : rows[0].counters)
            if (x.value || (x.hardware && c.hardware_available())) {
                head += " " + x.name + " |";
                sep += " ---: |";
            }
        if (c.hardware_available()) {
            head += " IPC |";
            sep += " ---: |";
        }
        fmt::print(out, "{}\n{}\n", head, sep);
        for (const auto& r : rows) {
            std::string line = fmt::format("| {} | {} |", r.threads, r.test);
            std::optional<uint64_t> cyc, ins;
            for (const auto& x : r.counters) {
                if (x.name == "cycles") cyc = x.value;
                if (x.name == "instructions") ins = x.value;
                if (x.value || (x.hardware && c.hardware_available()))
                    line += x.value ? " " + per_token(double(*x.value) / double(r.counted_tokens)) + " |" : " n/a |";
            }
            if (c.hardware_available())
                line += cyc && ins && *cyc ? fmt::format(" {:.2f} |", double(*ins) / double(*cyc)) : " n/a |";
            fmt::print(out, "{}\n", line);
        }
    }

    // own_gbps: the model's weight_bytes read as the decode walks them (measure_decode_read_gbps).
    std::string profile_report(const forward_profile& fp, const bench_row& r, int n, bool have_profile, double own_gbps,
                               uint64_t weight_bytes) {
        const double tokens = double(n);
        const double total_ms = fp.total().ns / 1e6 / tokens;
        std::string s = fmt::format(
            "decode profile: {}, {} thread{}, {:.3f} ms/token observed ({:.3f} ms/token "
            "unobserved)\n",
            r.test, r.threads, r.threads == 1 ? "" : "s", total_ms, 1000.0 / r.mean);
        s += fmt::format(
            "| op class | ms/token | share | calls/token | MB/token | GB/s |\n| --- | ---: | ---: | ---: | ---: | ---: "
            "|\n");
        std::vector<std::pair<std::string, profile_bucket>> classes(fp.by_class().begin(), fp.by_class().end());
        std::sort(classes.begin(), classes.end(),
                  [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
        for (const auto& [name, b] : classes)
            s += fmt::format("| {} | {:.4f} | {:.1f} % | {:.0f} | {:.3f} | {:.2f} |\n", name, b.ns / 1e6 / tokens,
                             100.0 * b.ns / fp.total().ns, double(b.calls) / tokens, double(b.bytes()) / 1e6 / tokens,
                             b.ns > 0 ? double(b.bytes()) / b.ns : 0.0);
        s += "\n| layer | ms/token | weights MB/token | KV read MB/token | GB/s |\n| ---: | ---: | ---: | ---: | "
             "---: |\n";
        const auto& layers = fp.by_layer();
        for (size_t i = 0; i < layers.size(); i++) {
            const auto& b = layers[i];
            s += fmt::format("| {} | {:.4f} | {:.3f} | {:.3f} | {:.2f} |\n", i, b.ns / 1e6 / tokens,
                             double(b.weight_bytes) / 1e6 / tokens, double(b.kv_read_bytes) / 1e6 / tokens,
                             b.ns > 0 ? double(b.bytes()) / b.ns : 0.0);
        }
        const auto& t = fp.total();
        const double bytes = double(t.bytes()) / tokens;
        s += fmt::format(
            "\nbytes moved per token: weights {}, KV-cache reads {}, KV-cache writes {}, activations {}; "
            "total {}\n",
            format_bytes(uint64_t(double(t.weight_bytes) / tokens)),
            format_bytes(uint64_t(double(t.kv_read_bytes) / tokens)),
            format_bytes(uint64_t(double(t.kv_write_bytes) / tokens)),
            format_bytes(uint64_t(double(t.activation_bytes) / tokens)), format_bytes(uint64_t(bytes)));
        if (r.available_gbps > 0) {
            const double floor_ms = bytes / (r.available_gbps * 1e9) * 1e3;
            s += fmt::format(
                "effective bandwidth utilisation: {} at {:.2f} GB/s ({}) needs {:.3f} ms/token; measured "
                "{:.3f} ms/token: {:.1f} %\n",
                format_bytes(uint64_t(bytes)), r.available_gbps, have_profile ? "machine profile" : "quick measurement",
                floor_ms, 1000.0 / r.mean, 100.0 * floor_ms * r.mean / 1000.0);
        }
        if (own_gbps > 0) {
            const double read_ms = double(weight_bytes) / (own_gbps * 1e9) * 1e3;
            s += fmt::format(
                "the weights ({}) read as the decode walks them (matrix by matrix over the threads, two or four runs "
                "per chunk, the better, no arithmetic): {:.2f} GB/s{}, {:.3f} ms/token; the decode's {:.3f} ms/token "
                "is {:.1f} % of that read's rate (the rest is the kernels' arithmetic between loads and the other "
                "ops)\n",
                format_bytes(weight_bytes), own_gbps,
                r.available_gbps > 0
                    ? fmt::format(" ({:.1f} % of {:.2f})", 100.0 * own_gbps / r.available_gbps, r.available_gbps)
                    : std::string(),
                read_ms, 1000.0 / r.mean, 100.0 * read_ms * r.mean / 1000.0);
            if (read_ms * r.mean > 1000.0 || (r.available_gbps > 0 && own_gbps > r.available_gbps))
                s += "(a share above 100 %: the machine's read rate changed between the measurements, which ran at "
                     "different moments)\n";
        }
        return s;
    }

    model_flags model_;
    std::string cpu_mask_;
    std::vector<int> prompts_{512}, gens_{128}, depths_, threads_;
    int reps_ = 3;
    bool md_ = false, csv_ = false, json_ = false, profile_ = false, cold_ = false, perf_ = false;
    int soak_s_ = 0;
    std::string svg_;
    std::map<int, double> fallback_;
};

}  // namespace
std::unique_ptr<command> make_bench_command() {
    return std::make_unique<bench_command>();
}
}  // namespace memtile::cli
