// The generation loop: prefill the prompt as one batch, then decode token by token with a sampler,
// streaming text pieces (whole UTF-8 characters; text that may be the start of a stop string is held back
// until it is known not to be one). Timings are recorded for --verbose, bench and the server.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sampling/sampler.h"

namespace memtile {

class tokenizer;
class executor;

struct generate_options {
    int n_predict = 128;            // tokens to generate; 0 generates nothing (prefill only)
    std::vector<std::string> stop;  // generation ends before the first occurrence of any of these strings
    bool ignore_eos = false;
};

struct generation_result {
    std::vector<int32_t> tokens;  // generated ids (excluding the prompt)
    std::string text;             // generated text (cut before a stop string)
    std::string stop_reason;      // "eos", "stop", "length"
    int n_prompt = 0;
    double prefill_ms = 0, decode_ms = 0, ttft_ms = 0;  // ttft: start of prefill to first sampled token
    double prefill_tps() const { return prefill_ms > 0 ? n_prompt * 1000.0 / prefill_ms : 0; }
    double decode_tps() const {
        return decode_ms > 0 && tokens.size() > 1 ? double(tokens.size() - 1) * 1000.0 / decode_ms : 0;
    }
};

// on_text(piece, token) is called for each streamed piece; returning false stops generation ("cancel").
using text_callback = std::function<bool(const std::string& piece, int32_t token)>;

// Prompt tokens are appended to what the context already holds (multi-turn chat keeps its cache).
generation_result generate(executor& ctx, const tokenizer* tok, sampler& smp, const std::vector<int32_t>& prompt,
                           const generate_options& o, const text_callback& on_text);

}  // namespace memtile
