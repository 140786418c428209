#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pre-tokenizer.h"

#include <pcre2.h>

#include <map>
#include <span>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace memtile::tokenizer_detail {

struct pre_tokenizer::compiled {
    pcre2_code* code = nullptr;
    ~compiled() { pcre2_code_free(code); }
};

namespace {

// GPT-2's ByteLevel regex (also the regex of ByteLevel(use_regex=true) in other models).
const char* const k_gpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama 3 (tokenizer.json Split pattern); Qwen2 is the same with single digits.
const char* const k_llama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const k_qwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// DeepSeek LLM's letter class (cased scripts), written with code point escapes.
const char* const k_deepseek_letters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF})"
    R"(\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})"
    R"(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5})"
    R"(\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A})"
    R"(\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B})"
    R"(\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC})"
    R"(\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
    R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134})"
    R"(\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787})"
    R"(\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A})"
    R"(\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
    R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
const char* const k_deepseek_punct =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
const char* const k_cjk = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

const std::map<std::string, std::vector<std::string>, std::less<>>& pattern_table() {
    static const std::map<std::string, std::vector<std::string>, std::less<>> table = [] {
        std::map<std::string, std::vector<std::string>, std::less<>> t;
        // ByteLevel(use_regex=true) alone: GPT-2, GPT-NeoX (MPT), OLMo.
        for (const char* name : {"default", "gpt-2", "gpt2", "mpt", "olmo", "jais"}) t[name] = {k_gpt2};
        for (const char* name : {"llama-bpe", "llama3", "dbrx", "smaug-bpe"}) t[name] = {k_llama3};
        t["qwen2"] = {k_qwen2};
        // Sequence[Split x5 (Isolated), Digits(individual_digits=true), ByteLevel(use_regex=false)].
        t["deepseek-llm"] = {R"([\r\n])", k_deepseek_letters, k_deepseek_punct, R"(\s+$)", k_cjk, R"(\p{N})"};
        t["deepseek-coder"] = {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", k_cjk, R"(\p{N})"};
        // Sequence[Punctuation(Contiguous), ByteLevel(use_regex=true), Digits(individual_digits=false),
        // Split("[0-9][0-9][0-9]")]. Punctuation is Unicode P plus the ASCII symbols Rust counts as punctuation;
        // Digits runs on byte-mapped text, where only ASCII digits are still digits.
        t["falcon"] = {R"([\p{P}$+<=>^`|~]+)", k_gpt2, R"([0-9]+)", R"([0-9][0-9][0-9])"};
        // Sequence[Digits(individual_digits=true), ByteLevel(use_regex=true)].
        for (const char* name : {"starcoder", "refact"}) t[name] = {R"(\p{N})", k_gpt2};
        return t;
    }();
    return table;
}

}  // namespace

const std::vector<std::string>* pre_tokenizer_patterns(std::string_view pre) {
    const auto& t = pattern_table();
    auto it = t.find(pre);
    return it == t.end() ? nullptr : &it->second;
}

pre_tokenizer::pre_tokenizer(const std::vector<std::string>& patterns) {
    for (const std::string& p : patterns) {
        int err = 0;
        PCRE2_SIZE err_off = 0;
        auto c = std::make_unique<compiled>();
        // MATCH_INVALID_UTF: arbitrary bytes are valid subjects; invalid sequences simply never match.
        c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                                PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, nullptr);
        if (!c->code) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            fail("tokenizer", "pre-tokenizer regex does not compile at offset {}: {} (pattern {})", err_off,
                 reinterpret_cast<const char*>(msg), p);
        }
        pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when JIT is unavailable
        patterns_.push_back(std::move(c));
    }
}

pre_tokenizer::~pre_tokenizer() = default;

namespace {

struct match_data_deleter {
    void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};

struct split_pattern {
    pcre2_code* code;
    pcre2_match_data* md;
};

// The first pattern cuts `piece`; each part goes through the next patterns at once (depth first), which yields
// the parts in the same order as applying every pattern to the whole text in turn, without holding them all.
void split_with(std::span<const split_pattern> patterns, std::string_view piece,
                const std::function<void(std::string_view)>& emit) {
    if (patterns.empty()) {
        emit(piece);
        return;
    }
    const split_pattern& p = patterns[0];
    const auto rest = patterns.subspan(1);
    auto subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
    size_t pos = 0, last = 0;
    while (pos < piece.size()) {
        int rc = pcre2_match(p.code, subject, piece.size(), pos, 0, p.md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) fail("tokenizer", "pre-tokenizer regex match failed (PCRE2 error {})", rc);
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(p.md);
        size_t start = ov[0], end = ov[1];
        if (end == start) {  // empty match: not a piece, retry from the next character
            if (start >= piece.size()) break;
            pos = start + utf8_len(static_cast<unsigned char>(piece[start]));
            continue;
        }
        if (start > last) split_with(rest, piece.substr(last, start - last), emit);
        split_with(rest, piece.substr(start, end - start), emit);
        last = pos = end;
    }
    if (last < piece.size()) split_with(rest, piece.substr(last), emit);
}

}  // namespace

void pre_tokenizer::for_each_piece(std::string_view text, const std::function<void(std::string_view)>& emit) const {
    if (text.empty()) return;
    std::vector<std::unique_ptr<pcre2_match_data, match_data_deleter>> owned;
    std::vector<split_pattern> patterns;
    for (const auto& pat : patterns_) {
        owned.emplace_back(pcre2_match_data_create_from_pattern(pat->code, nullptr));
        patterns.push_back({pat->code, owned.back().get()});
    }
    split_with(patterns, text, emit);
}

void pre_tokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
    for_each_piece(text, [&](std::string_view piece) { pieces.push_back(piece); });
}

}  // namespace memtile::tokenizer_detail
