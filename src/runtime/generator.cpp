#include "runtime/generator.h"

#include <chrono>

#include "core/error.h"
#include "runtime/executor.h"
#include "runtime/text-stream.h"
#include "tokenizer/tokenizer.h"

namespace memtile {
namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

}  // namespace

generation_result generate(executor& ctx, const tokenizer* tok, sampler& smp, const std::vector<int32_t>& prompt,
                           const generate_options& o, const text_callback& on_text) {
    if (prompt.empty()) fail("generate", "empty prompt: at least one token (e.g. BOS) is needed");
    if (o.n_predict < 0) fail("generate", "n_predict must be >= 0 (got {})", o.n_predict);
    for (const auto& s : o.stop)
        if (s.empty()) fail("generate", "empty stop string");
    generation_result r;
    r.n_prompt = int(prompt.size());
    for (int32_t t : prompt) smp.accept(t);

    // GPU executors sample their device-resident logits (the same pipeline and rng stream as smp.sample()).
    device_sampling* ds = ctx.device_sampler();
    sampling_draw draw;
    std::span<const float> logits;
    auto advance = [&](std::span<const int32_t> tokens) {
        if (ds)
            ds->append(tokens);
        else
            logits = ctx.forward(tokens);
    };
    auto next_token = [&] {
        if (!ds) return smp.sample(logits);
        smp.next_draw(draw);
        return ds->sample(draw);
    };

    const auto t0 = clock_type::now();
    advance(prompt);
    r.prefill_ms = ms_since(t0);
    if (o.n_predict == 0) {
        r.stop_reason = "length";
        return r;
    }

    std::unique_ptr<stream_decoder> dec = tok ? std::make_unique<stream_decoder>(*tok) : nullptr;
    std::string pending;  // decoded text not yet streamed (possible start of a stop string)
    bool cancelled = false;
    // Called once per sampled token (with the text it completes, possibly empty) and once at the end for
    // held-back text (id -1), so id-only consumers see every token.
    auto emit = [&](const std::string& piece, int32_t id) {
        if (cancelled || (piece.empty() && id < 0)) return;
        r.text += piece;
        if (on_text && !on_text(piece, id)) cancelled = true;
    };
    const auto t_decode = clock_type::now();
    for (int i = 0; i < o.n_predict; i++) {
        const int32_t id = next_token();
        if (i == 0) r.ttft_ms = ms_since(t0);
        if (!o.ignore_eos && tok && tok->is_eog(id)) {
            r.stop_reason = "eos";
            break;
        }
        r.tokens.push_back(id);
        smp.accept(id);
        std::string piece = dec ? dec->push(id) : std::string();
        if (!o.stop.empty()) {
            pending += piece;
            size_t cut = std::string::npos;
            for (const auto& s : o.stop) cut = std::min(cut, pending.find(s));
            if (cut != std::string::npos) {
                emit(pending.substr(0, cut), id);
                pending.clear();
                r.stop_reason = "stop";
                break;
            }
            const size_t hold = held_suffix(pending, o.stop);
            piece = pending.substr(0, pending.size() - hold);
            pending.erase(0, pending.size() - hold);
        }
        emit(piece, id);
        if (cancelled) {
            r.stop_reason = "cancel";
            break;
        }
        if (i + 1 == o.n_predict) {
            r.stop_reason = "length";
            break;
        }
        if (ctx.used() >= ctx.n_ctx()) {
            r.stop_reason = "context";
            break;
        }
        advance(std::span<const int32_t>(&id, 1));
    }
    if (r.stop_reason.empty()) r.stop_reason = "length";
    if (r.stop_reason != "stop" && r.stop_reason != "cancel") emit(pending + (dec ? dec->flush() : ""), -1);
    r.decode_ms = ms_since(t_decode);
    return r;
}

}  // namespace memtile
