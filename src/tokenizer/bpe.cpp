// Byte-level BPE (GPT-2 family). Text is cut into words by the pre-tokenizer; each word's bytes are mapped to
// the printable stand-in characters of GPT-2's byte↔unicode table (the form vocab and merges are stored in), and
// adjacent symbols are merged lowest rank first (leftmost on ties) until no ranked pair remains.
//
// Merges are looked up on token-id pairs, not strings, and results are cached per word, so typical prose costs
// one regex pass plus one hash lookup per word.
#include <array>
#include <mutex>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/pre-tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

namespace memtile::tokenizer_detail {
namespace {

// GPT-2's table: printable Latin-1 bytes stand for themselves, the other 68 bytes map to U+0100.. in byte order.
std::array<uint32_t, 256> byte_to_code_point() {
    std::array<uint32_t, 256> map{};
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        map[b] = printable ? b : next++;
    }
    return map;
}

struct merge_result {
    uint32_t rank;
    token_id merged;
};

class bpe_encoder final : public encoder {
public:
    bpe_encoder(const vocab& v, const gguf_value& merges, const std::string& pre, token_id unk) : v_(v), unk_(unk) {
        const std::vector<std::string>* patterns = pre_tokenizer_patterns(pre);
        if (!patterns) fail("tokenizer", "unsupported BPE pre-tokenizer '{}' (tokenizer.ggml.pre)", pre);
        pre_ = std::make_unique<pre_tokenizer>(*patterns);
        // Llama 3's tokenizer.json sets ignore_merges: a word that is itself a token is not re-merged.
        ignore_merges_ = pre == "llama-bpe" || pre == "llama3";

        auto cp = byte_to_code_point();
        code_point_byte_.assign(324, -1);
        for (int b = 0; b < 256; ++b) {
            std::string s;
            append_utf8(cp[b], s);
            byte_token_[b] = v.find(s);
            code_point_byte_[cp[b]] = static_cast<int16_t>(b);
        }

        const size_t n_merges = merges.array_size();
        size_t cap = 16;
        while (cap * 3 < n_merges * 4) cap *= 2;  // at most 3/4 full
        merges_.assign(cap, merge_slot{k_empty_key, {}});
        merge_mask_ = cap - 1;
        std::string joined;
        for (size_t rank = 0; rank < n_merges; ++rank) {
            std::string_view m = merges.string_at(rank);
            size_t sp = m.find(' ', 1);  // a part is never empty; the separator is the first space after it
            if (sp == std::string_view::npos) fail("tokenizer", "merge {} has no separator: '{}'", rank, m);
            std::string_view a = m.substr(0, sp), b = m.substr(sp + 1);
            joined.assign(a).append(b);
            token_id ia = v.find(a), ib = v.find(b), im = v.find(joined);
            if (ia == k_no_token || ib == k_no_token || im == k_no_token) continue;  // unusable, as in HF
            add_merge(pair_key(ia, ib), merge_result{static_cast<uint32_t>(rank), im});
        }
    }

    void encode(std::string_view fragment, bool, std::vector<token_id>& out) const override {
        pre_->for_each_piece(fragment, [&](std::string_view w) { encode_word(w, out); });
    }

    void append_piece(token_id id, std::string& out) const override {
        const std::string_view t = v_.text(id);
        if (v_.type[id] == token_type::user_defined) {  // stored as raw text, not byte-mapped
            out += t;
            return;
        }
        for (size_t i = 0; i < t.size();) {
            size_t start = i;
            uint32_t cp = next_code_point(t, i);
            if (cp < code_point_byte_.size() && code_point_byte_[cp] >= 0)
                out += static_cast<char>(code_point_byte_[cp]);
            else
                out.append(t, start, i - start);  // not a byte stand-in: keep the text
        }
    }

private:
    static uint64_t pair_key(token_id a, token_id b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }
    // Ids are below 2^31, so no pair of them has this key.
    static constexpr uint64_t k_empty_key = ~uint64_t(0);
    static uint64_t slot_of(uint64_t key) { return (key * 0x9E3779B97F4A7C15ull) >> 32; }

    // The first (best) merge of a pair wins, as try_emplace did.
    void add_merge(uint64_t key, merge_result r) {
        for (uint64_t i = slot_of(key) & merge_mask_;; i = (i + 1) & merge_mask_) {
            if (merges_[i].key == key) return;
            if (merges_[i].key == k_empty_key) {
                merges_[i] = {key, r};
                return;
            }
        }
    }
    const merge_result* find_merge(uint64_t key) const {
        for (uint64_t i = slot_of(key) & merge_mask_;; i = (i + 1) & merge_mask_) {
            if (merges_[i].key == key) return &merges_[i].result;
            if (merges_[i].key == k_empty_key) return nullptr;
        }
    }

    void encode_word(std::string_view word, std::vector<token_id>& out) const {
        constexpr size_t k_max_cached_len = 64;
        constexpr size_t k_max_cache_entries = 1 << 16;
        bool cacheable = word.size() <= k_max_cached_len;
        if (cacheable) {
            std::lock_guard lock(cache_mutex_);
            auto it = cache_.find(std::string(word));
            if (it != cache_.end()) {
                out.insert(out.end(), it->second.begin(), it->second.end());
                return;
            }
        }
        size_t first = out.size();
        merge_word(word, out);
        if (cacheable) {
            std::lock_guard lock(cache_mutex_);
            if (cache_.size() >= k_max_cache_entries) cache_.clear();  // bounded memory on adversarial input
            cache_.try_emplace(std::string(word), out.begin() + first, out.end());
        }
    }

    void merge_word(std::string_view word, std::vector<token_id>& out) const {
        if (word.empty()) return;
        if (ignore_merges_) {
            std::string mapped;
            auto cp = byte_to_code_point_cached();
            for (unsigned char b : word) append_utf8(cp[b], mapped);
            token_id whole = v_.find(mapped);
            if (whole != k_no_token) {
                out.push_back(whole);
                return;
            }
        }
        struct symbol {
            int prev, next;
            token_id id;  // k_no_token: a byte without a base token (emitted as unknown)
        };
        std::vector<symbol> syms(word.size());
        for (size_t i = 0; i < word.size(); ++i)
            syms[i] = {static_cast<int>(i) - 1, static_cast<int>(i) + 1,
                       byte_token_[static_cast<unsigned char>(word[i])]};
        syms.back().next = -1;

        // A candidate is still valid iff both symbols still hold the ids it was made from and are adjacent.
        struct candidate {
            uint32_t rank;
            int left, right;
            token_id left_id, right_id, merged;
        };
        auto worse = [](const candidate& a, const candidate& b) {
            return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
        };
        std::priority_queue<candidate, std::vector<candidate>, decltype(worse)> queue(worse);
        auto try_pair = [&](int l, int r) {
            if (l < 0 || r < 0 || syms[l].id == k_no_token || syms[r].id == k_no_token) return;
            const merge_result* m = find_merge(pair_key(syms[l].id, syms[r].id));
            if (!m) return;
            queue.push({m->rank, l, r, syms[l].id, syms[r].id, m->merged});
        };
        for (size_t i = 0; i + 1 < syms.size(); ++i) try_pair(static_cast<int>(i), static_cast<int>(i + 1));
        while (!queue.empty()) {
            candidate c = queue.top();
            queue.pop();
            symbol& l = syms[c.left];
            if (l.next != c.right || l.id != c.left_id || syms[c.right].id != c.right_id) continue;
            symbol& r = syms[c.right];
            l.id = c.merged;
            l.next = r.next;
            r.id = k_no_token;
            r.next = -2;  // dead: no candidate can name it as left with a matching next
            if (l.next >= 0) syms[l.next].prev = c.left;
            try_pair(l.prev, c.left);
            try_pair(c.left, l.next);
        }
        for (int i = 0; i >= 0; i = syms[i].next) {
            if (syms[i].id != k_no_token)
                out.push_back(syms[i].id);
            else if (unk_ != k_no_token)
                out.push_back(unk_);
        }
    }

    static const std::array<uint32_t, 256>& byte_to_code_point_cached() {
        static const std::array<uint32_t, 256> map = byte_to_code_point();
        return map;
    }

    const vocab& v_;
    token_id unk_;
    bool ignore_merges_ = false;
    std::unique_ptr<pre_tokenizer> pre_;
    std::array<token_id, 256> byte_token_{};
    std::vector<int16_t> code_point_byte_;  // stand-in code point → byte, -1 elsewhere
    struct merge_slot {
        uint64_t key;  // pair_key(left, right), k_empty_key: empty
        merge_result result;
    };
    std::vector<merge_slot> merges_;  // open addressing: a power of two, at most 3/4 full
    uint64_t merge_mask_ = 0;
    mutable std::mutex cache_mutex_;
    mutable std::unordered_map<std::string, std::vector<token_id>> cache_;
};

}  // namespace

std::unique_ptr<encoder> make_bpe_encoder(const vocab& v, const gguf_value& merges, const std::string& pre,
                                          token_id unk) {
    return std::make_unique<bpe_encoder>(v, merges, pre, unk);
}

}  // namespace memtile::tokenizer_detail
