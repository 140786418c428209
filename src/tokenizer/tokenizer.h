// Text ↔ token ids for the tokenizers GGUF files describe in `tokenizer.ggml.*` metadata:
//   - SPM (`tokenizer.ggml.model = llama`): SentencePiece-style score-driven merges with `<0xNN>` byte fallback;
//   - BPE (`gpt2`): byte-level BPE with ranked merges after a regex pre-tokenizer chosen by `tokenizer.ggml.pre`.
// Other models (e.g. `bert`) are rejected at load time with a memtile::error.
//
// A tokenizer is immutable after construction except for an internal, mutex-guarded word cache, so one instance
// can be shared between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace memtile {

class gguf_file;

using token_id = int32_t;
inline constexpr token_id k_no_token = -1;

// Values of `tokenizer.ggml.token_type` (shared with llama.cpp's GGUF files).
enum class token_type : uint8_t {
    undefined = 0,
    normal = 1,
    unknown = 2,
    control = 3,
    user_defined = 4,
    unused = 5,
    byte = 6,
};

enum class tokenizer_model { spm, bpe };

struct tokenize_options {
    bool add_special = true;     // prepend BOS / append EOS where the metadata asks for them
    bool parse_special = false;  // recognise the text of control tokens (e.g. "<|im_end|>") in the input;
                                 // user-defined tokens are always recognised
};

namespace tokenizer_detail {
struct state;
}

class tokenizer {
public:
    // Throws memtile::error naming the file for missing/inconsistent metadata or an unsupported model.
    static std::shared_ptr<const tokenizer> from_gguf(const gguf_file& file);
    static std::shared_ptr<const tokenizer> open(const std::string& gguf_path);
    ~tokenizer();
    tokenizer(const tokenizer&) = delete;
    tokenizer& operator=(const tokenizer&) = delete;

    std::vector<token_id> tokenize(std::string_view text, const tokenize_options& opts = {}) const;

    // Exact inverse of tokenize for lossless inputs: byte tokens become their bytes (the result may hold invalid
    // UTF-8 if the ids do), control tokens are dropped unless `render_special`, and for SPM with add_space_prefix
    // the one space tokenize added in front of the first text piece is removed again.
    std::string detokenize(std::span<const token_id> ids, bool render_special = false) const;
    // Bytes of one token as it appears in decoded text (no leading-space removal).
    std::string token_to_piece(token_id id, bool render_special = false) const;

    tokenizer_model model() const;
    const std::string& model_name() const;  // "llama" or "gpt2"
    const std::string& pre_name() const;    // tokenizer.ggml.pre ("default" when absent)
    size_t n_vocab() const;
    std::string_view token_text(token_id id) const;  // as stored in the vocabulary (e.g. "▁the", "Ġthe")
    token_type type(token_id id) const;
    float score(token_id id) const;
    token_id find_token(std::string_view text) const;  // k_no_token when absent

    token_id bos() const;
    token_id eos() const;
    token_id eot() const;
    token_id eom() const;
    token_id unk() const;
    token_id pad() const;
    bool add_bos() const;
    bool add_eos() const;
    bool add_space_prefix() const;

    // End-of-generation: eos, eot, eom and control tokens such as <|im_end|>, <|eot_id|>, <|end|>, <end_of_turn>.
    bool is_eog(token_id id) const;
    const std::vector<token_id>& eog_ids() const;

private:
    friend class stream_decoder;
    explicit tokenizer(std::unique_ptr<tokenizer_detail::state> s);
    // Appends the piece of `id`; `at_start` tracks whether any text piece was emitted yet (SPM space removal).
    void append_decoded(token_id id, bool render_special, bool& at_start, std::string& out) const;
    std::unique_ptr<tokenizer_detail::state> s_;
};

// Incremental detokenizer for streaming generation: push() returns only complete UTF-8 characters and holds back
// a trailing incomplete sequence until the tokens completing it arrive. Bytes that can never become valid UTF-8
// are passed through unchanged. Output concatenated with flush() equals detokenize() of all pushed ids.
class stream_decoder {
public:
    explicit stream_decoder(const tokenizer& tok, bool render_special = false)
        : tok_(tok), render_special_(render_special) {}
    std::string push(token_id id);
    std::string flush();  // returns whatever is held back, complete or not (end of stream)

private:
    const tokenizer& tok_;
    bool render_special_;
    bool at_start_ = true;
    std::string pending_;
};

}  // namespace memtile
