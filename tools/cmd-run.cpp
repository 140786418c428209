// memtile run [-m MODEL] [-p PROMPT | -f FILE | --prompt-ids IDS] [-n N] [sampling flags] [--ids] [--verbose]
//             [--device cpu|cuda]: the same generation loop (sampling, stop strings, streaming) on either backend
#include <fmt/core.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "bench-extras.h"
#include "commands.h"
#include "core/error.h"
#include "core/thread-pool.h"
#include "core/units.h"
#include "gguf/gguf-file.h"
#include "model-flags.h"
#include "observe/machine-profile.h"
#include "observe/memory-model.h"
#include "observe/system-info.h"
#include "runtime/executor.h"
#include "runtime/generator.h"
#include "sampling-flags.h"
#include "tokenizer/tokenizer.h"

namespace memtile::cli {
namespace {

std::vector<int32_t> parse_ids(const std::string& s) {
    std::vector<int32_t> ids;
    std::string item;
    std::stringstream ss(s);
    while (std::getline(ss, item, ',')) {
        if (item.empty()) continue;
        try {
            size_t used = 0;
            const long v = std::stol(item, &used);
            if (used != item.size() || v < 0 || v > 0x7fffffff) throw std::invalid_argument(item);
            ids.push_back(int32_t(v));
        } catch (const std::exception&) {
            fail("run", "--prompt-ids: '{}' is not a token id", item);
        }
    }
    return ids;
}

class run_command : public command {
public:
    CLI::App* add(CLI::App& app) override {
        auto* sub = app.add_subcommand("run", "Generate text from a prompt");
        model_.add(sub);
        sampling_.add(sub);
        sub->add_option("-p,--prompt", prompt_, "Prompt text (empty: start from BOS alone)");
        sub->add_option("-f,--file", prompt_file_, "Read the prompt from a file")->check(CLI::ExistingFile);
        sub->add_option("--prompt-ids", prompt_ids_, "Prompt as comma-separated token ids (no BOS added)");
        sub->add_option("-n,--n-predict", gen_.n_predict, "Tokens to generate (0: only process the prompt)")
            ->check(CLI::Range(0, 1 << 24));
        sub->add_option("--stop", gen_.stop, "Stop before this string (repeatable)");
        sub->add_flag("--ignore-eos", gen_.ignore_eos, "Keep generating after end-of-generation tokens");
        sub->add_flag("--no-bos", no_bos_, "Do not add BOS to the prompt");
        sub->add_flag("--parse-special", parse_special_, "Recognise special-token text in the prompt");
        sub->add_flag("--ids", ids_, "Print generated token ids, one per line, instead of text");
        sub->add_flag("-v,--verbose", verbose_, "Print load time, time to first token, prefill and decode speed");
        model_.add_device(sub);
        return sub;
    }

    int run() override {
        using clock_type = std::chrono::steady_clock;
        const auto t_load = clock_type::now();
        const std::string path = model_.model_path();
        auto ex = executor::open(path, model_.executor_opts());
        std::shared_ptr<const tokenizer> tok;
        try {
            tok = tokenizer::from_gguf(ex->file());
        } catch (const error& e) {
            if (prompt_ids_.empty() || !ids_) throw;
        }
        const auto& cfg = ex->config();
        const double load_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t_load).count();

        const std::vector<int32_t> prompt = prompt_tokens(tok.get());
        if (prompt.size() > ex->n_ctx())
            fail("run", "the prompt has {} tokens but the context holds {} (raise --ctx, up to the model's {})",
                 prompt.size(), ex->n_ctx(), cfg.n_ctx_train);

        sampler smp(sampling_.params());
        auto on_text = [&](const std::string& piece, int32_t id) {
            if (ids_) {
                if (id >= 0) fmt::print("{}\n", id);
            } else {
                std::fwrite(piece.data(), 1, piece.size(), stdout);
            }
            std::fflush(stdout);
            return true;
        };
        generation_result r = generate(*ex, ids_ ? nullptr : tok.get(), smp, prompt, gen_, on_text);
        if (!ids_) fmt::print("\n");
        std::fflush(stdout);  // the text ends before the statistics on stderr

        const memory_model mm = compute_memory_model(ex->file(), model_.kv_dtype());
        // Each decoded token streams the weights and reads the K and V rows of every position before it: at a long
        // prompt those reads are a large part of its bytes (Llama-3.2-1B at 4,056 tokens: 134 MB to 800 MB).
        const double kv_read = double(mm.kv_bytes_per_token) * (double(r.n_prompt) + double(r.tokens.size()) / 2.0);
        const double per_token = double(mm.streamed_bytes_per_token) + kv_read;
        const double gbps = r.decode_tps() * per_token / 1e9;
        fmt::print(stderr, "[memtile] {} prompt tokens, {} generated ({}): decode {:.2f} tok/s, prefill {:.1f} tok/s\n",
                   r.n_prompt, r.tokens.size(), r.stop_reason, r.decode_tps(), r.prefill_tps());
        if (verbose_) {
            fmt::print(stderr, "[memtile] model {} ({} {}, ctx {}, KV {}) on {}\n", path, cfg.arch,
                       format_bytes(mm.weight_bytes), ex->n_ctx(), model_.kv_type, ex->describe());
            fmt::print(stderr, "[memtile] sampling on the {}\n", ex->device_sampler() ? "GPU" : "host");
            fmt::print(stderr,
                       "[memtile] load {:.1f} ms, time to first token {:.1f} ms, prefill {:.1f} ms, decode "
                       "{:.1f} ms\n",
                       load_ms, r.ttft_ms, r.prefill_ms, r.decode_ms);
            fmt::print(stderr,
                       "[memtile] {} streamed per token (weights {} + KV-cache reads {}, mean over the decode), {:.2f} "
                       "GB/s achieved during decode\n",
                       format_bytes(uint64_t(per_token)), format_bytes(mm.streamed_bytes_per_token),
                       format_bytes(uint64_t(kv_read)), gbps);
            // Issue 4's memory target: the whole process's peak resident set against the file and the KV cache
            // (bench/peak-memory.sh collects this line per model).
            // With --device cuda the weights and the KV cache (or part of them, with --gpu-layers) live on the GPU,
            // so only the host's peak is printed, without the ratio.
            if (const auto hwm = read_process_counters().hwm_bytes) {
                const double mib = 1024.0 * 1024.0, file = double(ex->file().file().size());
                const double kv = double(mm.kv_bytes(ex->n_ctx()));
                if (model_.device == "cpu")
                    fmt::print(stderr, "[memtile] peak RSS {:.1f} MiB = {:.3f} x (file {:.1f} MiB + KV {:.1f} MiB)\n",
                               double(*hwm) / mib, double(*hwm) / (file + kv), file / mib, kv / mib);
                else
                    fmt::print(stderr, "[memtile] host peak RSS {:.1f} MiB (weights and KV cache on the {})\n",
                               double(*hwm) / mib, model_.device);
            }
            const std::string huge = huge_page_note(ex->file().file());
            fmt::print(stderr, "[memtile] memory mode {} ({})\n", model_.memory_mode(),
                       huge.empty() ? ex->file().file().memory_mode() : huge);
            const int threads = ex->threads();
            if (ex->device() != "cpu")
                fmt::print(stderr, "[memtile] roofline: see memtile bench --device {} (probes the device)\n",
                           ex->device());
            else if (const auto prof = load_machine_profile())
                fmt::print(stderr, "[memtile] roofline {:.1f} % of {:.2f} GB/s ({} threads, machine profile {})\n",
                           gbps / prof->read_gbps_for(threads) * 100, prof->read_gbps_for(threads), threads,
                           prof->path);
            else
                fmt::print(stderr, "[memtile] roofline unknown: run memtile probe to measure this machine\n");
        }
        return 0;
    }

private:
    std::vector<int32_t> prompt_tokens(const tokenizer* tok) const {
        if (!prompt_ids_.empty()) return parse_ids(prompt_ids_);
        std::string text = prompt_;
        if (!prompt_file_.empty()) {
            std::ifstream f(prompt_file_, std::ios::binary);
            text.assign(std::istreambuf_iterator<char>(f), {});
        }
        tokenize_options to;
        to.add_special = !no_bos_;
        to.parse_special = parse_special_;
        std::vector<int32_t> prompt = tok->tokenize(text, to);
        if (prompt.empty()) {
            if (tok->bos() < 0) fail("run", "empty prompt and the model has no BOS token to start from");
            prompt.push_back(tok->bos());
        }
        return prompt;
    }

    model_flags model_;
    sampling_flags sampling_;
    generate_options gen_;
    std::string prompt_, prompt_file_, prompt_ids_;
    bool no_bos_ = false, parse_special_ = false, ids_ = false, verbose_ = false;
};

}  // namespace
std::unique_ptr<command> make_run_command() {
    return std::make_unique<run_command>();
}
}  // namespace memtile::cli
