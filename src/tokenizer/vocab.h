// Internal shapes shared by the tokenizer sources: the vocabulary and the model-specific encoders.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace memtile::tokenizer_detail {

struct vocab {
    std::vector<std::string> text;
    std::vector<float> score;
    std::vector<token_type> type;
    // Keys view into `text` (never resized after the index is built). On duplicate texts the lowest id wins,
    // e.g. deepseek's user-defined "ø" does not shadow the byte-level base token "ø".
    std::unordered_map<std::string_view, token_id> index;

    token_id find(std::string_view s) const {
        auto it = index.find(s);
        return it == index.end() ? k_no_token : it->second;
    }
    size_t size() const { return text.size(); }
};

// The model-specific half of a tokenizer. Special and user-defined tokens have been split off before encode()
// sees a fragment.
class encoder {
public:
    virtual ~encoder() = default;
    // Appends the ids of `fragment`. `after_special`: the fragment starts the text or follows a special token
    // (SPM prefixes a space there when add_space_prefix is set).
    virtual void encode(std::string_view fragment, bool after_special, std::vector<token_id>& out) const = 0;
    // Appends the decoded bytes of a normal, user-defined or byte token.
    virtual void append_piece(token_id id, std::string& out) const = 0;
};

std::unique_ptr<encoder> make_spm_encoder(const vocab& v, bool add_space_prefix, token_id unk);
// `merges`: "left right" strings, best (rank 0) first. Throws memtile::error for an unknown `pre`.
std::unique_ptr<encoder> make_bpe_encoder(const vocab& v, const std::vector<std::string_view>& merges,
                                          const std::string& pre, token_id unk);

struct state {
    std::string path;
    std::string model_name;
    std::string pre_name;
    tokenizer_model model = tokenizer_model::spm;
    vocab voc;
    std::unique_ptr<encoder> enc;

    token_id bos = k_no_token, eos = k_no_token, eot = k_no_token, eom = k_no_token;
    token_id unk = k_no_token, pad = k_no_token;
    bool add_bos = false, add_eos = false, add_space_prefix = false;
    std::vector<token_id> eog;

    // Special-token matcher: texts of control and user-defined tokens, and per first byte the distinct text
    // lengths starting with that byte (longest first), so a scan position costs a few hash lookups at most.
    std::unordered_map<std::string_view, token_id> specials;
    std::array<std::vector<uint32_t>, 256> special_lengths;
};

}  // namespace memtile::tokenizer_detail
