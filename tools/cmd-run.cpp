// memtile run [-m MODEL] [-p PROMPT | -f FILE | --prompt-ids IDS] [-n N] [sampling flags] [--ids] [--verbose]
//             [--device cpu|cuda]
#include <fmt/core.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "backends/cuda/cuda-backend.h"
#include "bench-extras.h"
#include "commands.h"
#include "core/error.h"
#include "core/thread-pool.h"
#include "core/units.h"
#include "gguf/gguf-file.h"
#include "model-flags.h"
#include "observe/machine-profile.h"
#include "observe/memory-model.h"
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
        sub->add_option("--device", device_, "Where to compute: cpu, or cuda (the GPU decode step)")
            ->check(CLI::IsMember({"cpu", "cuda"}));
        return sub;
    }

    int run() override {
        if (device_ == "cuda") return run_cuda();
        using clock_type = std::chrono::steady_clock;
        const auto t_load = clock_type::now();
        const std::string path = model_.model_path();
        auto model = transformer::load(path, model_.options());
        std::shared_ptr<const tokenizer> tok;
        try {
            tok = tokenizer::from_gguf(model->file());
        } catch (const error& e) {
            if (prompt_ids_.empty() || !ids_) throw;
        }
        const auto& cfg = model->config();
        thread_pool pool(model_.thread_count(), model_.cpu_ids());
        forward_context ctx(*model, model_.context_for(cfg.n_ctx_train), model_.kv_dtype(), pool);
        const double load_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t_load).count();

        std::vector<int32_t> prompt;
        if (!prompt_ids_.empty()) {
            prompt = parse_ids(prompt_ids_);
        } else {
            std::string text = prompt_;
            if (!prompt_file_.empty()) {
                std::ifstream f(prompt_file_, std::ios::binary);
                text.assign(std::istreambuf_iterator<char>(f), {});
            }
            tokenize_options to;
            to.add_special = !no_bos_;
            to.parse_special = parse_special_;
            prompt = tok->tokenize(text, to);
            if (prompt.empty()) {
                if (tok->bos() < 0) fail("run", "empty prompt and the model has no BOS token to start from");
                prompt.push_back(tok->bos());
            }
        }
        if (prompt.size() > ctx.n_ctx())
            fail("run", "the prompt has {} tokens but the context holds {} (raise --ctx, up to the model's {})",
                 prompt.size(), ctx.n_ctx(), cfg.n_ctx_train);

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
        generation_result r = generate(ctx, ids_ ? nullptr : tok.get(), smp, prompt, gen_, on_text);
        if (!ids_) fmt::print("\n");
        std::fflush(stdout);  // the text ends before the statistics on stderr

        const memory_model mm = compute_memory_model(model->file(), model_.kv_dtype());
        const double gbps = r.decode_tps() * double(mm.streamed_bytes_per_token) / 1e9;
        fmt::print(stderr, "[memtile] {} prompt tokens, {} generated ({}): decode {:.2f} tok/s, prefill {:.1f} tok/s\n",
                   r.n_prompt, r.tokens.size(), r.stop_reason, r.decode_tps(), r.prefill_tps());
        if (verbose_) {
            fmt::print(stderr, "[memtile] model {} ({} {}, {} threads, ctx {}, KV {})\n", path, cfg.arch,
                       format_bytes(mm.weight_bytes), pool.size(), ctx.n_ctx(), model_.kv_type);
            fmt::print(stderr,
                       "[memtile] load {:.1f} ms, time to first token {:.1f} ms, prefill {:.1f} ms, decode "
                       "{:.1f} ms\n",
                       load_ms, r.ttft_ms, r.prefill_ms, r.decode_ms);
            fmt::print(stderr, "[memtile] {} streamed per token, {:.2f} GB/s achieved during decode\n",
                       format_bytes(mm.streamed_bytes_per_token), gbps);
            const std::string huge = huge_page_note(model->file().file());
            fmt::print(stderr, "[memtile] memory mode {} ({})\n", model_.memory_mode(),
                       huge.empty() ? model->file().file().memory_mode() : huge);
            if (const auto prof = load_machine_profile())
                fmt::print(stderr, "[memtile] roofline {:.1f} % of {:.2f} GB/s ({} threads, machine profile {})\n",
                           gbps / prof->read_gbps_for(pool.size()) * 100, prof->read_gbps_for(pool.size()), pool.size(),
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

    // The CUDA path: the prompt in prefill passes, then the GPU decode step per token; sampling on the host
    // logits with the same sampler as the CPU path.
    int run_cuda() {
        using clock_type = std::chrono::steady_clock;
        cuda::require_device();
        const std::string path = model_.model_path();
        auto g = gguf_file::open(path, model_.options().load);
        std::shared_ptr<const tokenizer> tok;
        try {
            tok = tokenizer::from_gguf(*g);
        } catch (const error& e) {
            if (prompt_ids_.empty() || !ids_) throw;
        }
        const model_config cfg = read_model_config(*g);
        auto dec = cuda::decoder::load(g, model_.context_for(cfg.n_ctx_train));
        const std::vector<int32_t> prompt = prompt_tokens(tok.get());
        if (prompt.size() >= model_.context_for(cfg.n_ctx_train))
            fail("run", "the prompt has {} tokens but the context holds {}", prompt.size(),
                 model_.context_for(cfg.n_ctx_train));
        sampler smp(sampling_.params());
        std::span<const float> logits;
        const auto t0 = clock_type::now();
        for (int32_t t : prompt) smp.accept(t);
        if (!prompt.empty()) logits = dec->forward_prefill(prompt);  // one pass on tensor cores
        const auto t1 = clock_type::now();
        int n_gen = 0;
        for (; n_gen < gen_.n_predict && dec->used() < model_.context_for(cfg.n_ctx_train); n_gen++) {
            const int32_t id = smp.sample(logits);
            smp.accept(id);
            if (tok && !gen_.ignore_eos && tok->is_eog(id)) break;
            if (ids_)
                fmt::print("{}\n", id);
            else
                fmt::print("{}", tok->token_to_piece(id));
            std::fflush(stdout);
            logits = dec->forward(id);
        }
        if (!ids_) fmt::print("\n");
        const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
        const double decode_s = std::chrono::duration<double>(clock_type::now() - t1).count();
        fmt::print(stderr,
                   "[memtile] cuda: {} prompt tokens, {} generated: decode {:.2f} tok/s, prefill {:.1f} tok/s\n",
                   prompt.size(), n_gen, decode_s > 0 ? n_gen / decode_s : 0.0,
                   prefill_s > 0 ? double(prompt.size()) / prefill_s : 0.0);
        if (verbose_) fmt::print(stderr, "[memtile] {}: {}\n", cuda::device_description(), dec->summary());
        return 0;
    }

    std::string device_ = "cpu";
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
