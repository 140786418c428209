// SPM (SentencePiece BPE as stored in llama-style GGUF files): spaces become "▁" (U+2581), the text is split into
// UTF-8 characters, and adjacent symbols are merged greedily by the score of the merged piece (highest first,
// leftmost on ties) until no adjacent pair forms a vocabulary piece. Characters without a piece fall back to
// their `<0xNN>` byte tokens, or to the unknown token when the vocabulary has no byte tokens.
//
// Cost: O(n log n) in the fragment length; each merge pushes at most two new candidate pairs, and stale queue
// entries are detected in O(1) instead of being removed.
#include <array>
#include <cstdio>
#include <queue>

#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

namespace memtile::tokenizer_detail {
namespace {

constexpr std::string_view k_space_marker = "\xE2\x96\x81";  // ▁

class spm_encoder final : public encoder {
public:
    spm_encoder(const vocab& v, bool add_space_prefix, token_id unk)
        : v_(v), add_space_prefix_(add_space_prefix), unk_(unk) {
        byte_token_.fill(k_no_token);
        byte_value_.assign(v.size(), -1);
        char name[8];
        for (int b = 0; b < 256; ++b) {
            std::snprintf(name, sizeof name, "<0x%02X>", b);
            token_id id = v.find(name);
            if (id != k_no_token && v.type[id] == token_type::byte) {
                byte_token_[b] = id;
                byte_value_[id] = b;
            }
        }
    }

    void encode(std::string_view fragment, bool after_special, std::vector<token_id>& out) const override {
        std::string text;
        text.reserve(fragment.size() + fragment.size() / 2 + 3);
        if (add_space_prefix_ && after_special) text += k_space_marker;
        for (char c : fragment) {
            if (c == ' ')
                text += k_space_marker;
            else
                text += c;
        }
        if (text.empty()) return;

        // Doubly linked list of symbols over `text`; a merged symbol keeps the left position and grows.
        struct symbol {
            int prev, next;
            uint32_t start, len;  // len == 0: absorbed into its left neighbour
        };
        std::vector<symbol> syms;
        syms.reserve(text.size());
        for (size_t i = 0; i < text.size();) {
            size_t n = std::min(utf8_len(static_cast<unsigned char>(text[i])), text.size() - i);
            int k = static_cast<int>(syms.size());
            syms.push_back({k - 1, k + 1, static_cast<uint32_t>(i), static_cast<uint32_t>(n)});
            i += n;
        }
        syms.back().next = -1;

        // A candidate records the merged length: lengths only grow, so a mismatch at pop time means one side
        // changed since the candidate was pushed.
        struct candidate {
            float score;
            int left;
            uint32_t len;
        };
        auto worse = [](const candidate& a, const candidate& b) {
            return a.score < b.score || (a.score == b.score && a.left > b.left);
        };
        std::priority_queue<candidate, std::vector<candidate>, decltype(worse)> queue(worse);
        auto try_pair = [&](int l, int r) {
            if (l < 0 || r < 0) return;
            std::string_view merged(text.data() + syms[l].start, syms[l].len + syms[r].len);
            token_id id = v_.find(merged);
            if (id == k_no_token || !mergeable(id)) return;
            queue.push({v_.score[id], l, static_cast<uint32_t>(merged.size())});
        };
        for (size_t i = 0; i + 1 < syms.size(); ++i) try_pair(static_cast<int>(i), static_cast<int>(i + 1));

        while (!queue.empty()) {
            candidate c = queue.top();
            queue.pop();
            symbol& left = syms[c.left];
            if (left.len == 0 || left.next < 0) continue;
            symbol& right = syms[left.next];
            if (left.len + right.len != c.len) continue;
            left.len += right.len;
            right.len = 0;
            left.next = right.next;
            if (left.next >= 0) syms[left.next].prev = c.left;
            try_pair(left.prev, c.left);
            try_pair(c.left, left.next);
        }

        for (int i = 0; i >= 0; i = syms[i].next) {
            std::string_view piece(text.data() + syms[i].start, syms[i].len);
            token_id id = v_.find(piece);
            if (id != k_no_token && mergeable(id)) {
                out.push_back(id);
                continue;
            }
            for (unsigned char b : piece) {
                if (byte_token_[b] != k_no_token) {
                    out.push_back(byte_token_[b]);
                } else {
                    if (unk_ != k_no_token) out.push_back(unk_);
                    break;  // one unknown token per character
                }
            }
        }
    }

    void append_piece(token_id id, std::string& out) const override {
        if (byte_value_[id] >= 0) {
            out += static_cast<char>(byte_value_[id]);
            return;
        }
        std::string_view t = v_.text(id);
        for (size_t i = 0; i < t.size();) {
            if (t.substr(i, 3) == k_space_marker) {
                out += ' ';
                i += 3;
            } else {
                out += t[i++];
            }
        }
    }

private:
    // SentencePiece segments text with normal and user-defined pieces only; control, unknown, unused and byte
    // pieces never result from merging characters.
    bool mergeable(token_id id) const {
        token_type t = v_.type[id];
        return t == token_type::normal || t == token_type::user_defined || t == token_type::undefined;
    }

    const vocab& v_;
    bool add_space_prefix_;
    token_id unk_;
    std::array<token_id, 256> byte_token_;
    std::vector<int16_t> byte_value_;  // per token: the byte of a <0xNN> token, else -1
};

}  // namespace

std::unique_ptr<encoder> make_spm_encoder(const vocab& v, bool add_space_prefix, token_id unk) {
    return std::make_unique<spm_encoder>(v, add_space_prefix, unk);
}

}  // namespace memtile::tokenizer_detail
