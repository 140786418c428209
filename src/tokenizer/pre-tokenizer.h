// Regex pre-tokenizers of byte-level BPE models (internal), compiled with PCRE2 (UTF, UCP, JIT).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace memtile::tokenizer_detail {

// A sequence of split patterns, each applied to every piece the previous one produced. Matches and the text
// between matches both become pieces (Hugging Face's "Isolated" split behaviour), so nothing is dropped and the
// pieces concatenate back to the input. Patterns see one piece as their whole subject: `$` and lookaheads stop at
// the piece's end. Invalid UTF-8 is tolerated: bytes no pattern can match end up in pieces of their own.
class pre_tokenizer {
public:
    explicit pre_tokenizer(const std::vector<std::string>& patterns);
    ~pre_tokenizer();
    pre_tokenizer(const pre_tokenizer&) = delete;
    pre_tokenizer& operator=(const pre_tokenizer&) = delete;

    void split(std::string_view text, std::vector<std::string_view>& pieces) const;
    // The same pieces, in the same order, handed to `emit` one at a time (no list of them is built: a 1 MB
    // prompt would need several MB of fresh pages for it on every call).
    void for_each_piece(std::string_view text, const std::function<void(std::string_view)>& emit) const;

private:
    struct compiled;
    std::vector<std::unique_ptr<compiled>> patterns_;
};

// Split patterns for a `tokenizer.ggml.pre` name, transcribed from the models' tokenizer.json pre_tokenizer
// definitions; nullptr for names not known here.
const std::vector<std::string>* pre_tokenizer_patterns(std::string_view pre);

}  // namespace memtile::tokenizer_detail
