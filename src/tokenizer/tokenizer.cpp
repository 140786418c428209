// Loading a tokenizer from GGUF metadata, special-token splitting, and detokenization (streaming included).
#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "gguf/gguf-file.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

namespace memtile {

using tokenizer_detail::state;

namespace {

token_id read_token_id(const gguf_file& f, const std::string& key, size_t n_vocab) {
    if (!f.has(key)) return k_no_token;
    uint64_t id = f.get_u64(key, 0);
    // Some converters write -1 (as a huge unsigned value) for "none".
    if (id == 0xFFFFFFFFull || id == ~0ull) return k_no_token;
    if (id >= n_vocab)
        fail("tokenizer", "{}: {} = {} is outside the vocabulary ({} tokens)", f.path(), key, id, n_vocab);
    return static_cast<token_id>(id);
}

// Texts that mark the end of a turn in common chat formats; counted as end-of-generation when present as
// control (or user-defined) tokens.
constexpr std::string_view k_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "<|end_of_text|>",
};
// Texts that may serve as end-of-turn when the metadata names no eot token.
constexpr std::string_view k_eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>"};

void load_vocab(const gguf_file& f, state& s) {
    const gguf_value& tokens = f.require("tokenizer.ggml.tokens");
    const size_t n = tokens.array_size();
    if (n == 0) fail("tokenizer", "{}: tokenizer.ggml.tokens is empty", f.path());
    if (n > 0x7FFFFFFF) fail("tokenizer", "{}: {} tokens do not fit 32-bit ids", f.path(), n);
    auto& v = s.voc;
    try {
        for (size_t i = 0; i < n; ++i) v.add_text(tokens.string_at(i));
    } catch (const error& e) {
        fail("tokenizer", "{}: tokenizer.ggml.tokens: {}", f.path(), e.what());
    }

    v.score.assign(n, 0.0f);
    if (const gguf_value* scores = f.find("tokenizer.ggml.scores")) {
        if (scores->array_size() != n)
            fail("tokenizer", "{}: tokenizer.ggml.scores has {} entries for {} tokens", f.path(), scores->array_size(),
                 n);
        for (size_t i = 0; i < n; ++i) v.score[i] = static_cast<float>(scores->f64_at(i));
    }
    v.type.assign(n, token_type::normal);
    if (const gguf_value* types = f.find("tokenizer.ggml.token_type")) {
        if (types->array_size() != n)
            fail("tokenizer", "{}: tokenizer.ggml.token_type has {} entries for {} tokens", f.path(),
                 types->array_size(), n);
        for (size_t i = 0; i < n; ++i) {
            int64_t t = types->i64_at(i);
            if (t < 0 || t > 6) fail("tokenizer", "{}: token {} has invalid type {}", f.path(), i, t);
            v.type[i] = static_cast<token_type>(t);
        }
    }
    v.build_index();
}

void build_specials(state& s) {
    const auto& v = s.voc;
    for (size_t i = 0; i < v.size(); ++i) {
        token_type t = v.type[i];
        const std::string_view text = v.text(static_cast<token_id>(i));
        if ((t != token_type::control && t != token_type::user_defined) || text.empty()) continue;
        auto [it, inserted] = s.specials.try_emplace(text, static_cast<token_id>(i));
        if (!inserted) continue;
        auto& lengths = s.special_lengths[static_cast<unsigned char>(text[0])];
        uint32_t len = static_cast<uint32_t>(text.size());
        if (std::find(lengths.begin(), lengths.end(), len) == lengths.end()) lengths.push_back(len);
    }
    for (auto& lengths : s.special_lengths) std::sort(lengths.rbegin(), lengths.rend());
}

void build_eog(state& s) {
    const auto& v = s.voc;
    if (s.eot == k_no_token) {
        for (std::string_view t : k_eot_texts) {
            token_id id = v.find(t);
            if (id != k_no_token && v.type[id] == token_type::control) {
                s.eot = id;
                break;
            }
        }
    }
    for (token_id id : {s.eos, s.eot, s.eom})
        if (id != k_no_token) s.eog.push_back(id);
    for (std::string_view t : k_eog_texts) {
        token_id id = v.find(t);
        if (id != k_no_token && (v.type[id] == token_type::control || v.type[id] == token_type::user_defined))
            s.eog.push_back(id);
    }
    std::sort(s.eog.begin(), s.eog.end());
    s.eog.erase(std::unique(s.eog.begin(), s.eog.end()), s.eog.end());
}

}  // namespace

namespace tokenizer_detail {

void vocab::add_text(std::string_view t) {
    if (arena_.size() + t.size() > 0xFFFFFFFFull) fail("tokenizer", "the token texts exceed 4 GiB");
    arena_.append(t);
    offs_.push_back(static_cast<uint32_t>(arena_.size()));
}

void vocab::build_index() {
    arena_.shrink_to_fit();
    offs_.shrink_to_fit();
    size_t cap = 16;
    while (cap < 2 * size()) cap *= 2;
    slots_.assign(cap, slot{0, k_no_token});
    mask_ = cap - 1;
    for (size_t id = 0; id < size(); ++id) {
        const std::string_view s = text(static_cast<token_id>(id));
        const uint64_t h = std::hash<std::string_view>{}(s);
        const uint32_t tag = static_cast<uint32_t>(h >> 32);
        for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
            slot& e = slots_[i];
            if (e.id == k_no_token) {
                e = {tag, static_cast<token_id>(id)};
                break;
            }
            if (e.tag == tag && text(e.id) == s) break;  // a duplicate: the lower id keeps the text
        }
    }
}

}  // namespace tokenizer_detail

std::shared_ptr<const tokenizer> tokenizer::from_gguf(const gguf_file& f) {
    auto s = std::make_unique<state>();
    s->path = f.path();
    s->model_name = f.get_string("tokenizer.ggml.model");
    if (s->model_name.empty()) fail("tokenizer", "{}: no tokenizer.ggml.model in the metadata", f.path());
    if (s->model_name == "llama") {
        s->model = tokenizer_model::spm;
    } else if (s->model_name == "gpt2") {
        s->model = tokenizer_model::bpe;
    } else {
        fail("tokenizer", "{}: unsupported tokenizer model '{}' (supported: 'llama' (SPM), 'gpt2' (BPE))", f.path(),
             s->model_name);
    }
    s->pre_name = f.get_string("tokenizer.ggml.pre", "default");
    load_vocab(f, *s);
    size_t n = s->voc.size();
    s->bos = read_token_id(f, "tokenizer.ggml.bos_token_id", n);
    s->eos = read_token_id(f, "tokenizer.ggml.eos_token_id", n);
    s->eot = read_token_id(f, "tokenizer.ggml.eot_token_id", n);
    s->eom = read_token_id(f, "tokenizer.ggml.eom_token_id", n);
    s->unk = read_token_id(f, "tokenizer.ggml.unknown_token_id", n);
    s->pad = read_token_id(f, "tokenizer.ggml.padding_token_id", n);
    bool spm = s->model == tokenizer_model::spm;
    s->add_bos = f.get_bool("tokenizer.ggml.add_bos_token", spm) && s->bos != k_no_token;
    s->add_eos = f.get_bool("tokenizer.ggml.add_eos_token", false) && s->eos != k_no_token;
    s->add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix", spm);

    if (spm) {
        s->enc = tokenizer_detail::make_spm_encoder(s->voc, s->add_space_prefix, s->unk);
    } else {
        const gguf_value& merges = f.require("tokenizer.ggml.merges");
        try {
            s->enc = tokenizer_detail::make_bpe_encoder(s->voc, merges, s->pre_name, s->unk);
        } catch (const error& e) {
            fail("tokenizer", "{}: {}", f.path(), e.what());
        }
    }
    build_specials(*s);
    build_eog(*s);
    return std::shared_ptr<const tokenizer>(new tokenizer(std::move(s)));
}

std::shared_ptr<const tokenizer> tokenizer::open(const std::string& gguf_path) {
    return from_gguf(*gguf_file::open(gguf_path));
}

tokenizer::tokenizer(std::unique_ptr<state> s) : s_(std::move(s)) {}
tokenizer::~tokenizer() = default;

std::vector<token_id> tokenizer::tokenize(std::string_view text, const tokenize_options& opts) const {
    std::vector<token_id> out;
    out.reserve(text.size() / 3 + 2);
    if (opts.add_special && s_->add_bos) out.push_back(s_->bos);

    // Scan for special-token texts (longest match at the leftmost position); the text between them goes to the
    // model's encoder.
    bool after_special = true;
    size_t frag_start = 0;
    for (size_t pos = 0; pos < text.size();) {
        const auto& lengths = s_->special_lengths[static_cast<unsigned char>(text[pos])];
        token_id found = k_no_token;
        size_t found_len = 0;
        for (uint32_t len : lengths) {
            if (pos + len > text.size()) continue;
            auto it = s_->specials.find(text.substr(pos, len));
            if (it == s_->specials.end()) continue;
            if (!opts.parse_special && s_->voc.type[it->second] == token_type::control) continue;
            found = it->second;
            found_len = len;
            break;
        }
        if (found == k_no_token) {
            ++pos;
            continue;
        }
        if (pos > frag_start) s_->enc->encode(text.substr(frag_start, pos - frag_start), after_special, out);
        out.push_back(found);
        after_special = true;
        pos += found_len;
        frag_start = pos;
    }
    if (frag_start < text.size()) s_->enc->encode(text.substr(frag_start), after_special, out);

    if (opts.add_special && s_->add_eos) out.push_back(s_->eos);
    return out;
}

std::string tokenizer::token_to_piece(token_id id, bool render_special) const {
    std::string out;
    bool at_start = false;
    append_decoded(id, render_special, at_start, out);
    return out;
}

void tokenizer::append_decoded(token_id id, bool render_special, bool& at_start, std::string& out) const {
    if (id < 0 || static_cast<size_t>(id) >= s_->voc.size())
        fail("tokenizer", "{}: token id {} is outside the vocabulary ({} tokens)", s_->path, id, s_->voc.size());
    switch (s_->voc.type[id]) {
        case token_type::control:
        case token_type::unknown:
        case token_type::unused:
            if (render_special) out += s_->voc.text(id);
            return;
        default: break;
    }
    size_t before = out.size();
    s_->enc->append_piece(id, out);
    if (out.size() == before) return;
    // SPM adds one space in front of the text (add_space_prefix); the first text piece gives it back.
    if (at_start && s_->model == tokenizer_model::spm && s_->add_space_prefix && out[before] == ' ')
        out.erase(before, 1);
    at_start = false;
}

std::string tokenizer::detokenize(std::span<const token_id> ids, bool render_special) const {
    std::string out;
    bool at_start = true;
    for (token_id id : ids) append_decoded(id, render_special, at_start, out);
    return out;
}

tokenizer_model tokenizer::model() const {
    return s_->model;
}
const std::string& tokenizer::model_name() const {
    return s_->model_name;
}
const std::string& tokenizer::pre_name() const {
    return s_->pre_name;
}
size_t tokenizer::n_vocab() const {
    return s_->voc.size();
}
std::string_view tokenizer::token_text(token_id id) const {
    if (id < 0 || static_cast<size_t>(id) >= s_->voc.size())
        fail("tokenizer", "{}: token id {} is outside the vocabulary ({} tokens)", s_->path, id, s_->voc.size());
    return s_->voc.text(id);
}
token_type tokenizer::type(token_id id) const {
    return s_->voc.type.at(static_cast<size_t>(id));
}
float tokenizer::score(token_id id) const {
    return s_->voc.score.at(static_cast<size_t>(id));
}
token_id tokenizer::find_token(std::string_view text) const {
    return s_->voc.find(text);
}
token_id tokenizer::bos() const {
    return s_->bos;
}
token_id tokenizer::eos() const {
    return s_->eos;
}
token_id tokenizer::eot() const {
    return s_->eot;
}
token_id tokenizer::eom() const {
    return s_->eom;
}
token_id tokenizer::unk() const {
    return s_->unk;
}
token_id tokenizer::pad() const {
    return s_->pad;
}
bool tokenizer::add_bos() const {
    return s_->add_bos;
}
bool tokenizer::add_eos() const {
    return s_->add_eos;
}
bool tokenizer::add_space_prefix() const {
    return s_->add_space_prefix;
}
bool tokenizer::is_eog(token_id id) const {
    return std::binary_search(s_->eog.begin(), s_->eog.end(), id);
}
const std::vector<token_id>& tokenizer::eog_ids() const {
    return s_->eog;
}

std::string stream_decoder::push(token_id id) {
    tok_.append_decoded(id, render_special_, at_start_, pending_);
    // Hold back a trailing lead byte whose sequence is not complete yet; everything before it is emitted.
    // Bytes that cannot be part of a valid sequence are emitted as they are.
    size_t n = pending_.size();
    size_t keep_from = n;
    for (size_t back = 1; back <= 3 && back <= n; ++back) {
        unsigned char c = pending_[n - back];
        if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back for its lead
        size_t need = tokenizer_detail::utf8_len(c);
        if (c >= 0xC0 && need > back) keep_from = n - back;
        break;
    }
    std::string ready = pending_.substr(0, keep_from);
    pending_.erase(0, keep_from);
    return ready;
}

std::string stream_decoder::flush() {
    std::string rest;
    rest.swap(pending_);
    return rest;
}

}  // namespace memtile
