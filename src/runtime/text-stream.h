// The text side of generation, one sampled token at a time, for callers that run the forward passes themselves
// (the server batches the decode steps of many sequences). It applies the same rules as generate():
// end-of-generation tokens end the stream ("eos"), text is released in whole UTF-8 characters, text that may be
// the start of a stop string is held back, and the first stop string found ends the stream ("stop") with the
// text before it; n_predict tokens end it with "length".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/generator.h"

namespace memtile {

class tokenizer;
class stream_decoder;

// Length of the longest suffix of `text` that is a proper prefix of some stop string: the bytes that must be
// held back because a later token may complete a stop string.
size_t held_suffix(const std::string& text, const std::vector<std::string>& stops);

class text_stream {
public:
    text_stream(const tokenizer& tok, const generate_options& o);
    ~text_stream();

    // Feeds one sampled token and appends the text now safe to stream to `out`. Returns false when the
    // stream has ended (stop_reason() says why); the token that ended it is not part of the output.
    bool push(int32_t token, std::string& out);
    // Ends the stream (reason "length", "cancel", ... unless already ended) and appends the held-back text;
    // nothing is appended after a stop string or a cancel.
    void finish(const std::string& reason, std::string& out);

    bool ended() const { return !reason_.empty(); }
    const std::string& stop_reason() const { return reason_; }
    int n_generated() const { return n_generated_; }  // tokens accepted as output (not the ending one)

private:
    const tokenizer& tok_;
    generate_options o_;
    std::unique_ptr<stream_decoder> dec_;
    std::string pending_;
    std::string reason_;
    int n_generated_ = 0;
};

}  // namespace memtile
