// memtile chat [-m MODEL]: interactive conversation with the model's chat template. The KV cache is kept
// between turns: each turn re-renders the conversation and prefills only the tokens after the longest
// prefix already in the cache.
#include <fmt/core.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "commands.h"
#include "core/error.h"
#include "model-flags.h"
#include "runtime/chat-prompt.h"
#include "runtime/executor.h"
#include "runtime/generator.h"
#include "sampling-flags.h"
#include "tokenizer/tokenizer.h"

namespace memtile::cli {
namespace {

class chat_command : public command {
public:
    CLI::App* add(CLI::App& app) override {
        auto* sub = app.add_subcommand("chat", "Interactive chat using the model's chat template");
        model_.add(sub);
        model_.add_device(sub);
        sampling_.add(sub);
        sub->add_option("-s,--system", system_, "System prompt");
        sub->add_option("-n,--n-predict", gen_.n_predict, "Maximum tokens per reply")->capture_default_str();
        sub->add_option("--chat-template-file", template_file_, "Use this Jinja template instead of the model's")
            ->check(CLI::ExistingFile);
        sub->add_flag("-v,--verbose", verbose_, "Print timings after each reply");
        return sub;
    }

    int run() override {
        auto ex = executor::open(model_.model_path(), model_.executor_opts());
        executor& ctx = *ex;
        auto tok = tokenizer::from_gguf(ex->file());
        std::string override_src;
        if (!template_file_.empty()) {
            std::FILE* f = std::fopen(template_file_.c_str(), "rb");
            char buf[4096];
            size_t n;
            while (f && (n = std::fread(buf, 1, sizeof buf, f)) > 0) override_src.append(buf, n);
            if (f) std::fclose(f);
        }
        chat_prompt prompt(ex->file(), tok, override_src);
        sampler smp(sampling_.params());
        const bool tty = ::isatty(STDIN_FILENO) == 1;
        if (tty && !prompt.model_has_template())
            fmt::print(stderr, "[memtile] the model has no chat template; using ChatML\n");

        nlohmann::ordered_json messages = nlohmann::ordered_json::array();
        if (!system_.empty()) messages.push_back({{"role", "system"}, {"content", system_}});
        std::vector<int32_t> in_cache;  // tokens whose keys/values the cache holds, in order
        std::string line;
        for (;;) {
            if (tty) fmt::print("> "), std::fflush(stdout);
            if (!std::getline(std::cin, line)) break;
            if (line.empty()) continue;
            messages.push_back({{"role", "user"}, {"content", line}});
            const auto ids = prompt.tokenize(prompt.render(messages, nullptr, true));
            if (ids.size() + 1 >= ctx.n_ctx()) {
                fmt::print(stderr, "error: the conversation ({} tokens) no longer fits the context of {} tokens\n",
                           ids.size(), ctx.n_ctx());
                messages.erase(messages.end() - 1);
                continue;
            }
            size_t common = 0;
            while (common < in_cache.size() && common < ids.size() && in_cache[common] == ids[common]) common++;
            if (common == ids.size()) common--;  // at least one token must be processed to get logits
            ctx.truncate(uint32_t(common));
            in_cache.assign(ids.begin(), ids.begin() + long(common));
            const std::vector<int32_t> fresh(ids.begin() + long(common), ids.end());
            generate_options g = gen_;
            g.n_predict = std::min<int>(gen_.n_predict, int(ctx.n_ctx() - ids.size()));
            auto r = generate(ctx, tok.get(), smp, fresh, g, [](const std::string& piece, int32_t) {
                std::fwrite(piece.data(), 1, piece.size(), stdout);
                std::fflush(stdout);
                return true;
            });
            fmt::print("\n");
            in_cache.insert(in_cache.end(), fresh.begin(), fresh.end());
            in_cache.insert(in_cache.end(), r.tokens.begin(), r.tokens.end());
            // The last sampled token was not fed through the model (generation stopped after sampling it).
            if (!r.tokens.empty() && in_cache.size() > ctx.used()) in_cache.resize(ctx.used());
            messages.push_back({{"role", "assistant"}, {"content", r.text}});
            if (verbose_)
                fmt::print(stderr,
                           "[memtile] {} new prompt tokens ({} reused from the cache), {} generated: "
                           "prefill {:.1f} tok/s, decode {:.2f} tok/s\n",
                           fresh.size(), common, r.tokens.size(), r.prefill_tps(), r.decode_tps());
        }
        return 0;
    }

private:
    model_flags model_;
    sampling_flags sampling_;
    generate_options gen_{512, {}, false};
    std::string system_, template_file_;
    bool verbose_ = false;
};

}  // namespace
std::unique_ptr<command> make_chat_command() {
    return std::make_unique<chat_command>();
}
}  // namespace memtile::cli
