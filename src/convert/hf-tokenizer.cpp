#include "convert/hf-tokenizer.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

#include "core/error.h"
#include "core/mapped-file.h"
#include "gguf/gguf-writer.h"

namespace memtile {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

enum tok_type : int32_t { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte_tok = 6 };

json read_json(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) fail("convert", "{}: cannot open", p.string());
    json j = json::parse(in, nullptr, false);
    if (j.is_discarded()) fail("convert", "{}: not valid JSON", p.string());
    return j;
}

// A special-token entry of tokenizer_config.json: a string or {"content": ...}.
std::string token_text(const json& j) {
    if (j.is_string()) return j.get<std::string>();
    if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
    return {};
}

// ---- SentencePiece protobuf -------------------------------------------------------------------------------

class pb_reader {
public:
    pb_reader(const uint8_t* p, size_t n, const std::string& path) : p_(p), end_(p + n), start_(p), path_(path) {}
    bool done() const { return p_ >= end_; }
    uint64_t varint() {
        uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (p_ >= end_) bad("truncated varint");
            const uint8_t b = *p_++;
            v |= uint64_t(b & 0x7f) << shift;
            if (!(b & 0x80)) return v;
        }
        bad("varint longer than 10 bytes");
    }
    std::pair<const uint8_t*, size_t> bytes() {
        const uint64_t n = varint();
        if (n > uint64_t(end_ - p_)) bad(fmt::format("length {} exceeds the {} bytes left", n, end_ - p_));
        auto r = std::make_pair(p_, size_t(n));
        p_ += n;
        return r;
    }
    uint32_t fixed32() {
        if (end_ - p_ < 4) bad("truncated fixed32");
        uint32_t v;
        std::memcpy(&v, p_, 4);
        p_ += 4;
        return v;
    }
    void skip(uint32_t wire) {
        switch (wire) {
            case 0: varint(); return;
            case 1:
                if (end_ - p_ < 8) bad("truncated fixed64");
                p_ += 8;
                return;
            case 2: bytes(); return;
            case 5: fixed32(); return;
            default: bad(fmt::format("unsupported wire type {}", wire));
        }
    }
    [[noreturn]] void bad(const std::string& what) const {
        fail("convert", "{}: malformed sentencepiece model at byte {}: {}", path_, p_ - start_, what);
    }

private:
    const uint8_t *p_, *end_, *start_;
    const std::string& path_;
};

// ---- helpers shared by the sources --------------------------------------------------------------------------

struct added_token {
    int64_t id;
    std::string content;
    bool special;
};

// Places `t` at its id (growing the table; holes are filled by finish_table).
void put_token(hf_vocab& v, int64_t id, const std::string& text, int32_t type, float score) {
    if (id < 0 || id > 0x7fffffff) fail("convert", "{}: token '{}' has id {} out of range", v.source, text, id);
    if (size_t(id) >= v.tokens.size()) {
        v.tokens.resize(size_t(id) + 1);
        v.types.resize(size_t(id) + 1, 0);
        v.scores.resize(size_t(id) + 1, 0.0f);
    }
    v.tokens[size_t(id)] = text;
    v.types[size_t(id)] = type;
    v.scores[size_t(id)] = score;
}

void finish_table(hf_vocab& v, uint32_t n_vocab) {
    if (n_vocab && v.tokens.size() > n_vocab)
        fail("convert", "{}: {} tokens, but config.json vocab_size is {}", v.source, v.tokens.size(), n_vocab);
    if (n_vocab) {
        v.tokens.resize(n_vocab);
        v.types.resize(n_vocab, 0);
        v.scores.resize(n_vocab, 0.0f);
    }
    // Holes (ids no file names, and rows of a padded embedding) become unused placeholder tokens.
    for (size_t i = 0; i < v.tokens.size(); i++)
        if (v.types[i] == 0) {
            v.tokens[i] = fmt::format("[PAD{}]", i);
            v.types[i] = unused;
        }
    if (v.model == "gpt2") v.scores.clear();
}

int64_t find_text(const hf_vocab& v, const std::string& text) {
    if (text.empty()) return -1;
    for (size_t i = v.tokens.size(); i-- > 0;)
        if (v.tokens[i] == text && v.types[i] != unused) return int64_t(i);
    return -1;
}

void apply_added(hf_vocab& v, const std::vector<added_token>& added, int64_t unk_id) {
    for (const auto& a : added) {
        int32_t type = a.special ? control : user_defined;
        if (a.id == unk_id) type = unknown;
        // Byte tokens listed as added (some SentencePiece conversions do so) keep their byte type.
        if (size_t(a.id) < v.types.size() && v.types[size_t(a.id)] == byte_tok) continue;
        put_token(v, a.id, a.content, type, 0.0f);
    }
}

std::vector<added_token> added_from_tokenizer_json(const json& tj) {
    std::vector<added_token> r;
    if (auto it = tj.find("added_tokens"); it != tj.end() && it->is_array())
        for (const auto& a : *it)
            if (a.is_object() && a.contains("id") && a["id"].is_number_integer() && a.contains("content"))
                r.push_back({a["id"].get<int64_t>(), a["content"].get<std::string>(), a.value("special", false)});
    return r;
}

// added_tokens.json ({"text": id}) with specialness from tokenizer_config.json's added_tokens_decoder.
std::vector<added_token> added_from_files(const fs::path& dir, const json& tc) {
    std::vector<added_token> r;
    std::map<int64_t, bool> special;
    if (auto it = tc.find("added_tokens_decoder"); it != tc.end() && it->is_object())
        for (auto& [id, info] : it->items()) {
            if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos || id.size() > 10)
                fail("convert", "{}: added_tokens_decoder key '{}' is not a token id", dir.string(), id);
            const int64_t i = std::stoll(id);
            special[i] = info.is_object() && info.value("special", false);
            if (info.is_object() && info.contains("content"))
                r.push_back({i, info["content"].get<std::string>(), special[i]});
        }
    if (fs::exists(dir / "added_tokens.json")) {
        const json a = read_json(dir / "added_tokens.json");
        for (auto& [text, id] : a.items()) {
            if (!id.is_number_integer()) fail("convert", "{}: id of '{}' is not an integer", dir.string(), text);
            const int64_t i = id.get<int64_t>();
            if (!special.count(i)) r.push_back({i, text, true});
        }
    }
    return r;
}

std::string merge_string(const json& m) {
    if (m.is_string()) return m.get<std::string>();
    if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
        return m[0].get<std::string>() + " " + m[1].get<std::string>();
    fail("convert", "tokenizer.json: merge {} is neither \"a b\" nor [\"a\", \"b\"]", m.dump());
}

// The pre-tokenizer name for a byte-level BPE: from the Split regex of tokenizer.json when there is one (the
// regex is what tokenization depends on), else from the model type.
std::string choose_pre(const json* pre_tok, const std::string& model_type, const std::string& where) {
    std::string regex;
    bool byte_level = false;
    std::function<void(const json&)> walk = [&](const json& p) {
        if (!p.is_object()) return;
        const std::string type = p.value("type", std::string());
        if (type == "Sequence" && p.contains("pretokenizers"))
            for (const auto& q : p["pretokenizers"]) walk(q);
        if (type == "Split" && p.contains("pattern") && p["pattern"].is_object() && p["pattern"].contains("Regex"))
            regex += p["pattern"]["Regex"].get<std::string>();
        if (type == "ByteLevel") byte_level = byte_level || p.value("use_regex", true);
    };
    if (pre_tok) walk(*pre_tok);
    if (!regex.empty()) {
        if (regex.find(R"(\p{N}{1,3})") != std::string::npos) return "llama-bpe";
        if (regex.find(R"(\p{L}+|\p{N}|)") != std::string::npos) return "qwen2";
        fail("convert", "{}: unsupported pre-tokenizer regex '{}' (known: GPT-2, Llama 3, Qwen2)", where, regex);
    }
    if (byte_level) return "gpt-2";
    if (model_type == "qwen2") return "qwen2";
    if (model_type == "llama" || model_type == "mistral") return "llama-bpe";
    if (model_type == "gpt2" || model_type.empty()) return "gpt-2";
    fail("convert", "{}: cannot choose a byte-level BPE pre-tokenizer for model type '{}'", where, model_type);
}

// ---- sources ------------------------------------------------------------------------------------------------

void from_tokenizer_json(hf_vocab& v, const fs::path& path, const hf_vocab_options& o, const json& tc) {
    const json tj = read_json(path);
    v.source = path.string();
    const json& m = tj.contains("model") ? tj["model"] : json();
    const std::string type = m.is_object() ? m.value("type", std::string()) : "";
    if (type != "BPE")
        fail("convert", "{}: tokenizer model type '{}' is not supported (supported: BPE)", v.source,
             type.empty() ? "(none)" : type);
    if (!m.contains("vocab") || !m["vocab"].is_object() || !m.contains("merges") || !m["merges"].is_array())
        fail("convert", "{}: BPE model needs a vocab object and a merges array", v.source);
    const json& vocab = m["vocab"];
    const bool spm = m.value("byte_fallback", false) || vocab.contains("<0x00>");
    v.model = spm ? "llama" : "gpt2";
    std::vector<std::string> merges;
    merges.reserve(m["merges"].size());
    for (const auto& x : m["merges"]) merges.push_back(merge_string(x));

    const std::string unk_text =
        m.contains("unk_token") && m["unk_token"].is_string() ? m["unk_token"].get<std::string>() : std::string();
    int64_t unk_id = -1;
    for (auto& [text, id] : vocab.items()) {
        if (!id.is_number_integer()) fail("convert", "{}: id of token '{}' is not an integer", v.source, text);
        int32_t t = normal;
        if (spm && text.size() == 6 && text.rfind("<0x", 0) == 0 && text[5] == '>') t = byte_tok;
        if (text == unk_text) t = unknown, unk_id = id.get<int64_t>();
        put_token(v, id.get<int64_t>(), text, t, 0.0f);
    }
    if (spm) {
        // SentencePiece merges the pair whose result scores highest; HF BPE merges the pair of lowest rank. A
        // token's score is minus the rank of the first merge producing it, so both orders agree.
        std::unordered_map<std::string, int64_t> ids;
        for (size_t i = 0; i < v.tokens.size(); i++) ids.emplace(v.tokens[i], int64_t(i));
        std::vector<bool> seen(v.tokens.size(), false);
        for (size_t r = 0; r < merges.size(); r++) {
            std::string joined = merges[r];
            const size_t sp = joined.find(' ');
            if (sp == std::string::npos) fail("convert", "{}: merge {} '{}' has no space", v.source, r, merges[r]);
            joined.erase(sp, 1);
            auto it = ids.find(joined);
            if (it == ids.end() || seen[size_t(it->second)]) continue;
            seen[size_t(it->second)] = true;
            v.scores[size_t(it->second)] = -float(r + 1);
        }
        // Single characters are never merge results; their score only orders them after every merged piece.
        for (size_t i = 0; i < v.tokens.size(); i++)
            if (!seen[i] && v.types[i] == normal) v.scores[i] = -float(merges.size() + i);
        v.add_space_prefix = tj.contains("normalizer") && tj["normalizer"].dump().find("Prepend") != std::string::npos;
        if (const auto& pt = tj.contains("pre_tokenizer") ? tj["pre_tokenizer"] : json(); pt.is_object())
            if (pt.value("type", std::string()) == "Metaspace")
                v.add_space_prefix =
                    pt.value("prepend_scheme", std::string("always")) != "never" && pt.value("add_prefix_space", true);
        v.pre = "default";
    } else {
        v.merges = std::move(merges);
        v.pre = choose_pre(tj.contains("pre_tokenizer") ? &tj["pre_tokenizer"] : nullptr, o.model_type, v.source);
    }
    apply_added(v, added_from_tokenizer_json(tj), unk_id);
    v.unk = unk_id;
    // add_bos from the post-processor when tokenizer_config.json does not state it (Llama 3 does so).
    if (!tc.contains("add_bos_token") && tj.contains("post_processor") && tj["post_processor"].is_object()) {
        const json& pp = tj["post_processor"];
        std::string single;
        if (pp.value("type", std::string()) == "TemplateProcessing") single = pp["single"].dump();
        if (pp.value("type", std::string()) == "Sequence" && pp.contains("processors"))
            for (const auto& p : pp["processors"])
                if (p.value("type", std::string()) == "TemplateProcessing") single = p["single"].dump();
        const std::string bos = tc.contains("bos_token") ? token_text(tc["bos_token"]) : "";
        if (!single.empty()) v.add_bos = !bos.empty() && single.find(json(bos).dump()) != std::string::npos;
    }
}

void from_vocab_merges(hf_vocab& v, const fs::path& dir, const hf_vocab_options& o, const json& tc) {
    v.source = (dir / "vocab.json").string();
    v.model = "gpt2";
    const json vocab = read_json(dir / "vocab.json");
    if (!vocab.is_object()) fail("convert", "{}: not a JSON object", v.source);
    for (auto& [text, id] : vocab.items()) {
        if (!id.is_number_integer()) fail("convert", "{}: id of token '{}' is not an integer", v.source, text);
        put_token(v, id.get<int64_t>(), text, normal, 0.0f);
    }
    std::ifstream in(dir / "merges.txt", std::ios::binary);
    if (!in) fail("convert", "{}: cannot open merges.txt", dir.string());
    std::string line;
    while (std::getline(in, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty() || line.rfind("#version", 0) == 0) continue;
        if (line.find(' ') == std::string::npos)
            fail("convert", "{}/merges.txt: line '{}' is not \"left right\"", dir.string(), line);
        v.merges.push_back(line);
    }
    v.pre = choose_pre(nullptr, o.model_type, v.source);
    apply_added(v, added_from_files(dir, tc), -1);
}

void from_spm_model(hf_vocab& v, const fs::path& dir, const json& tc) {
    const spm_model sp = read_spm_model((dir / "tokenizer.model").string());
    v.source = (dir / "tokenizer.model").string();
    v.model = "llama";
    v.pre = "default";
    for (size_t i = 0; i < sp.pieces.size(); i++) put_token(v, int64_t(i), sp.pieces[i], sp.types[i], sp.scores[i]);
    v.add_space_prefix = sp.add_dummy_prefix;
    v.unk = sp.unk_id;
    if (sp.bos_id >= 0) v.bos = sp.bos_id;
    if (sp.eos_id >= 0) v.eos = sp.eos_id;
    if (sp.pad_id >= 0) v.pad = sp.pad_id;
    // Tokens beyond the sentencepiece model (added_tokens.json) are appended; those inside it keep their type.
    std::vector<added_token> extra;
    for (const auto& a : added_from_files(dir, tc))
        if (size_t(a.id) >= sp.pieces.size()) extra.push_back(a);
    apply_added(v, extra, sp.unk_id);
}

}  // namespace

spm_model read_spm_model(const std::string& path) {
    auto f = mapped_file::open(path);
    spm_model m;
    pb_reader top(f->data(), f->size(), path);
    while (!top.done()) {
        const uint64_t key = top.varint();
        const uint32_t field = uint32_t(key >> 3), wire = uint32_t(key & 7);
        if (wire == 2 && (field == 1 || field == 2 || field == 3)) {
            auto [p, n] = top.bytes();
            pb_reader sub(p, n, path);
            std::string piece;
            float score = 0;
            int32_t type = normal;
            while (!sub.done()) {
                const uint64_t k = sub.varint();
                const uint32_t fld = uint32_t(k >> 3), w = uint32_t(k & 7);
                if (field == 1 && fld == 1 && w == 2) {
                    auto [q, len] = sub.bytes();
                    piece.assign(reinterpret_cast<const char*>(q), len);
                } else if (field == 1 && fld == 2 && w == 5) {
                    const uint32_t bits = sub.fixed32();
                    std::memcpy(&score, &bits, 4);
                } else if (field == 1 && fld == 3 && w == 0) {
                    type = int32_t(sub.varint());
                    if (type < 1 || type > 6) sub.bad(fmt::format("piece {} has type {}", m.pieces.size(), type));
                } else if (field == 2 && w == 0 && fld >= 40 && fld <= 43) {
                    const int64_t id = int64_t(sub.varint());  // negative ids arrive as 64-bit two's complement
                    (fld == 40 ? m.unk_id : fld == 41 ? m.bos_id : fld == 42 ? m.eos_id : m.pad_id) = id;
                } else if (field == 3 && fld == 3 && w == 0) {
                    m.add_dummy_prefix = sub.varint() != 0;
                } else {
                    sub.skip(w);
                }
            }
            if (field == 1) {
                m.pieces.push_back(std::move(piece));
                m.scores.push_back(score);
                m.types.push_back(type);
            }
        } else {
            top.skip(wire);
        }
    }
    if (m.pieces.empty()) fail("convert", "{}: no pieces (not a sentencepiece model?)", path);
    return m;
}

hf_vocab read_hf_vocab(const std::string& dir_s, const hf_vocab_options& o) {
    const fs::path dir(dir_s);
    const json tc =
        fs::exists(dir / "tokenizer_config.json") ? read_json(dir / "tokenizer_config.json") : json::object();
    hf_vocab v;
    std::string src = o.source;
    if (src == "auto") {
        if (fs::exists(dir / "tokenizer.json"))
            src = "tokenizer.json";
        else if (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt"))
            src = "vocab.json";
        else if (fs::exists(dir / "tokenizer.model"))
            src = "tokenizer.model";
        else
            fail("convert", "{}: no tokenizer (tokenizer.json, vocab.json + merges.txt or tokenizer.model)", dir_s);
    }
    if (src == "tokenizer.json")
        from_tokenizer_json(v, dir / "tokenizer.json", o, tc);
    else if (src == "vocab.json")
        from_vocab_merges(v, dir, o, tc);
    else if (src == "tokenizer.model")
        from_spm_model(v, dir, tc);
    else
        fail("convert", "unknown tokenizer source '{}' (auto, tokenizer.json, vocab.json, tokenizer.model)", src);
    finish_table(v, o.n_vocab);

    // Special tokens: tokenizer_config.json texts first, then the numeric ids of the configs.
    auto id_of = [&](const char* key) { return tc.contains(key) ? find_text(v, token_text(tc[key])) : int64_t(-1); };
    if (int64_t id = id_of("bos_token"); id >= 0) v.bos = id;
    if (int64_t id = id_of("eos_token"); id >= 0) v.eos = id;
    if (int64_t id = id_of("unk_token"); id >= 0) v.unk = id;
    if (int64_t id = id_of("pad_token"); id >= 0) v.pad = id;
    std::vector<int64_t> eos_ids = o.config_eos_ids;
    if (fs::exists(dir / "generation_config.json")) {
        const json g = read_json(dir / "generation_config.json");
        if (auto e = g.find("eos_token_id"); e != g.end()) {
            eos_ids.clear();
            if (e->is_number_integer()) eos_ids.push_back(e->get<int64_t>());
            if (e->is_array())
                for (const auto& x : *e)
                    if (x.is_number_integer()) eos_ids.push_back(x.get<int64_t>());
        }
        if (v.bos < 0 && g.contains("bos_token_id") && g["bos_token_id"].is_number_integer())
            v.bos = g["bos_token_id"].get<int64_t>();
    }
    if (v.eos < 0 && !eos_ids.empty()) v.eos = eos_ids[0];
    // Extra end-of-generation ids: by their text, the end-of-turn (eot) or end-of-message (eom) token.
    for (int64_t id : eos_ids) {
        if (id < 0 || size_t(id) >= v.tokens.size() || id == v.eos) continue;
        const std::string& t = v.tokens[size_t(id)];
        if (t == "<|eom_id|>")
            v.eom = id;
        else if (v.eot < 0 && (t == "<|eot_id|>" || t == "<|im_end|>" || t == "<|end|>" || t == "<end_of_turn>"))
            v.eot = id;
    }
    for (int64_t* id : {&v.bos, &v.eos, &v.unk, &v.pad})
        if (*id >= int64_t(v.tokens.size())) *id = -1;
    if (tc.contains("add_bos_token") && tc["add_bos_token"].is_boolean()) v.add_bos = tc["add_bos_token"].get<bool>();
    if (tc.contains("add_eos_token") && tc["add_eos_token"].is_boolean()) v.add_eos = tc["add_eos_token"].get<bool>();
    if (v.model == "llama" && v.add_bos < 0) v.add_bos = 1;  // LlamaTokenizer's defaults
    if (v.model == "llama" && v.add_eos < 0) v.add_eos = 0;
    if (auto ct = tc.find("chat_template"); ct != tc.end()) {
        if (ct->is_string()) v.chat_template = ct->get<std::string>();
        if (ct->is_array())  // named templates: [{"name": "default", "template": ...}, ...]
            for (const auto& t : *ct)
                if (t.is_object() && t.value("name", std::string()) == "default")
                    v.chat_template = t.value("template", std::string());
    }
    // Newer transformers versions save the template to its own file instead of tokenizer_config.json.
    if (v.chat_template.empty() && fs::exists(dir / "chat_template.jinja")) {
        std::ifstream f(dir / "chat_template.jinja", std::ios::binary);
        v.chat_template.assign(std::istreambuf_iterator<char>(f), {});
    }
    return v;
}

void write_hf_vocab(gguf_writer& w, const hf_vocab& v) {
    w.set("tokenizer.ggml.model", gguf_value::string(v.model));
    w.set("tokenizer.ggml.pre", gguf_value::string(v.pre));
    w.set("tokenizer.ggml.tokens", gguf_value::string_array(v.tokens));
    if (!v.scores.empty()) w.set("tokenizer.ggml.scores", gguf_value::f32_array(v.scores));
    w.set("tokenizer.ggml.token_type", gguf_value::i32_array(v.types));
    if (!v.merges.empty()) w.set("tokenizer.ggml.merges", gguf_value::string_array(v.merges));
    auto id = [&](const char* key, int64_t x) {
        if (x >= 0) w.set(key, gguf_value::u32(uint32_t(x)));
    };
    id("tokenizer.ggml.bos_token_id", v.bos);
    id("tokenizer.ggml.eos_token_id", v.eos);
    id("tokenizer.ggml.unknown_token_id", v.unk);
    id("tokenizer.ggml.padding_token_id", v.pad);
    id("tokenizer.ggml.eot_token_id", v.eot);
    id("tokenizer.ggml.eom_token_id", v.eom);
    if (v.add_bos >= 0) w.set("tokenizer.ggml.add_bos_token", gguf_value::boolean(v.add_bos == 1));
    if (v.add_eos >= 0) w.set("tokenizer.ggml.add_eos_token", gguf_value::boolean(v.add_eos == 1));
    if (v.model == "llama" && !v.add_space_prefix) w.set("tokenizer.ggml.add_space_prefix", gguf_value::boolean(false));
    if (!v.chat_template.empty()) w.set("tokenizer.chat_template", gguf_value::string(v.chat_template));
}

}  // namespace memtile
