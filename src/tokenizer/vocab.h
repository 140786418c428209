// Internal shapes shared by the tokenizer sources: the vocabulary and the model-specific encoders.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf/gguf-value.h"
#include "tokenizer/tokenizer.h"

namespace memtile::tokenizer_detail {

// Token texts live in one arena (a vocabulary of 128k tokens: a few bytes of overhead per token instead of a
// std::string and a hash node each); `index` is an open-addressing table over the ids.
class vocab {
public:
    std::vector<float> score;
    std::vector<token_type> type;

    // Appends the next id's text; then build_index() once all are in.
    void add_text(std::string_view t);
    // On duplicate texts the lowest id wins, e.g. deepseek's user-defined "ø" does not shadow the byte-level
    // base token "ø".
    void build_index();

    std::string_view text(token_id id) const {
        return {arena_.data() + offs_[size_t(id)], offs_[size_t(id) + 1] - offs_[size_t(id)]};
    }
    token_id find(std::string_view s) const {
        if (slots_.empty()) return k_no_token;
        const uint64_t h = std::hash<std::string_view>{}(s);
        const uint32_t tag = static_cast<uint32_t>(h >> 32);
        for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
            const slot& e = slots_[i];
            if (e.id == k_no_token) return k_no_token;
            if (e.tag == tag && text(e.id) == s) return e.id;
        }
    }
    size_t size() const { return offs_.size() - 1; }

private:
    struct slot {
        uint32_t tag;  // high half of the text's hash: most mismatches end here, without touching the text
        token_id id;   // k_no_token: empty
    };
    std::string arena_;
    std::vector<uint32_t> offs_{0};  // size() + 1: text of id i is arena_[offs_[i], offs_[i + 1])
    std::vector<slot> slots_;        // a power of two, at most half full
    uint64_t mask_ = 0;
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
// `merges`: an array of "left right" strings, best (rank 0) first. Throws memtile::error for an unknown `pre`.
std::unique_ptr<encoder> make_bpe_encoder(const vocab& v, const gguf_value& merges, const std::string& pre,
                                          token_id unk);

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
