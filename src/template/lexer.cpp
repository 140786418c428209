#include "template/lexer.h"

#include <cctype>

#include "core/error.h"
#include "template/value.h"

namespace memtile::jinja {

namespace {

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

class lexer {
public:
    explicit lexer(std::string_view src) : src_(src) {}

    std::vector<token> run() {
        // Jinja drops a single trailing newline of the template (keep_trailing_newline=False).
        if (src_.ends_with("\r\n"))
            src_.remove_suffix(2);
        else if (src_.ends_with("\n") || src_.ends_with("\r"))
            src_.remove_suffix(1);
        bool line_starting = true;  // the text about to be read begins a line (for lstrip_blocks)
        while (pos_ < src_.size()) {
            size_t tag = find_tag(pos_);
            std::string text(src_.substr(pos_, tag - pos_));
            int text_line = line_, text_col = col_;
            if (tag < src_.size()) {
                char kind = src_[tag + 1];
                char mod = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
                if (mod == '-') {
                    while (!text.empty() && is_space(text.back())) text.pop_back();
                } else if (kind != '{' && mod != '+') {
                    // lstrip_blocks: drop spaces and tabs between the start of the line and a block or comment.
                    size_t nl = text.rfind('\n');
                    size_t start = nl == std::string::npos ? 0 : nl + 1;
                    if ((nl != std::string::npos || line_starting) &&
                        text.find_first_not_of(" \t", start) == std::string::npos)
                        text.erase(start);
                }
            }
            advance_to(tag);
            if (!text.empty()) push(tok::text, normalize_newlines(text), text_line, text_col);
            if (tag >= src_.size()) break;
            line_starting = lex_tag();
        }
        push(tok::eof, "", line_, col_);
        return std::move(out_);
    }

private:
    std::string_view src_;
    size_t pos_ = 0;
    int line_ = 1, col_ = 1;
    std::vector<token> out_;

    [[noreturn]] void error(const std::string& msg, int line, int col) {
        fail("template", "syntax error at line {}, column {}: {}", line, col, msg);
    }

    static std::string normalize_newlines(const std::string& s) {
        std::string out;
        out.reserve(s.size());
        for (size_t i = 0; i < s.size(); ++i) {
            if (s[i] == '\r') {
                out += '\n';
                if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
            } else {
                out += s[i];
            }
        }
        return out;
    }

    size_t find_tag(size_t from) const {
        for (size_t i = from; i + 1 < src_.size(); ++i)
            if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
        return src_.size();
    }

    void advance_to(size_t p) {
        for (; pos_ < p && pos_ < src_.size(); ++pos_) {
            if (src_[pos_] == '\n') {
                ++line_;
                col_ = 1;
            } else {
                ++col_;
            }
        }
    }

    void push(tok t, std::string text, int line, int col) { out_.push_back(token{t, std::move(text), line, col}); }

    // After a tag ends: `-` strips all following whitespace; trim_blocks drops one newline after a block or
    // comment unless `+` is given. Returns whether the consumed text ended with a newline.
    bool after_tag(bool strip, bool trim_newline) {
        bool newline = false;
        if (strip) {
            while (pos_ < src_.size() && is_space(src_[pos_])) {
                newline = src_[pos_] == '\n';
                advance_to(pos_ + 1);
            }
        } else if (trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
            advance_to(pos_ + 1);
            newline = true;
        }
        return newline;
    }

    bool lex_tag() {
        int line = line_, col = col_;
        char kind = src_[pos_ + 1];
        advance_to(pos_ + 2);
        if (pos_ < src_.size() && (src_[pos_] == '-' || src_[pos_] == '+')) advance_to(pos_ + 1);
        if (kind == '#') {
            size_t end = src_.find("#}", pos_);
            if (end == std::string_view::npos) error("unterminated comment", line, col);
            bool strip = end > pos_ && src_[end - 1] == '-';
            bool keep = end > pos_ && src_[end - 1] == '+';
            advance_to(end + 2);
            return after_tag(strip, !keep);
        }
        if (kind == '%' && is_raw()) return lex_raw(line, col);
        push(kind == '{' ? tok::var_begin : tok::block_begin, "", line, col);
        const char close = kind == '{' ? '}' : '%';
        for (;;) {
            while (pos_ < src_.size() && is_space(src_[pos_])) advance_to(pos_ + 1);
            if (pos_ >= src_.size()) error(kind == '{' ? "unterminated '{{'" : "unterminated '{%'", line, col);
            char c = src_[pos_];
            char n = pos_ + 1 < src_.size() ? src_[pos_ + 1] : '\0';
            char n2 = pos_ + 2 < src_.size() ? src_[pos_ + 2] : '\0';
            bool strip = false, keep = false, end = false;
            if (c == close && n == '}') {
                end = true;
            } else if ((c == '-' || c == '+') && n == close && n2 == '}') {
                end = true;
                strip = c == '-';
                keep = c == '+';
                advance_to(pos_ + 1);
            }
            if (end) {
                push(kind == '{' ? tok::var_end : tok::block_end, "", line_, col_);
                advance_to(pos_ + 2);
                return after_tag(strip, kind == '%' && !keep);
            }
            lex_expr_token();
        }
    }

    // `{% raw %}...{% endraw %}`: the body is literal text.
    bool is_raw() const {
        size_t p = pos_;
        while (p < src_.size() && is_space(src_[p])) ++p;
        if (src_.substr(p, 3) != "raw") return false;
        p += 3;
        while (p < src_.size() && is_space(src_[p])) ++p;
        return src_.substr(p, 2) == "%}" || src_.substr(p, 3) == "-%}";
    }

    bool lex_raw(int line, int col) {
        size_t close = src_.find("%}", pos_);
        bool strip_after = src_[close - 1] == '-';
        advance_to(close + 2);
        if (strip_after)
            after_tag(true, false);
        else
            after_tag(false, true);
        size_t search = pos_;
        for (;;) {
            size_t tag = src_.find("{%", search);
            if (tag == std::string_view::npos) error("missing endraw", line, col);
            size_t p = tag + 2;
            bool strip_before = p < src_.size() && src_[p] == '-';
            if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
            while (p < src_.size() && is_space(src_[p])) ++p;
            if (src_.substr(p, 6) != "endraw") {
                search = tag + 2;
                continue;
            }
            p += 6;
            while (p < src_.size() && is_space(src_[p])) ++p;
            bool strip = p < src_.size() && src_[p] == '-';
            if (strip) ++p;
            if (src_.substr(p, 2) != "%}") error("malformed endraw", line_, col_);
            std::string body(src_.substr(pos_, tag - pos_));
            if (strip_before)
                while (!body.empty() && is_space(body.back())) body.pop_back();
            if (!body.empty()) push(tok::text, normalize_newlines(body), line_, col_);
            advance_to(p + 2);
            return after_tag(strip, true);
        }
    }

    void lex_expr_token() {
        int line = line_, col = col_;
        char c = src_[pos_];
        if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
            size_t e = pos_;
            while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
            push(tok::name, std::string(src_.substr(pos_, e - pos_)), line, col);
            advance_to(e);
            return;
        }
        if (std::isdigit(static_cast<unsigned char>(c))) {
            size_t e = pos_;
            bool is_float = false;
            auto digits = [&] {
                while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
            };
            digits();
            if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
                is_float = true;
                ++e;
                digits();
            }
            if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
                size_t f = e + 1;
                if (f < src_.size() && (src_[f] == '+' || src_[f] == '-')) ++f;
                if (f < src_.size() && std::isdigit(static_cast<unsigned char>(src_[f]))) {
                    is_float = true;
                    e = f;
                    digits();
                }
            }
            std::string num;
            for (char d : src_.substr(pos_, e - pos_))
                if (d != '_') num += d;
            push(is_float ? tok::floating : tok::integer, num, line, col);
            advance_to(e);
            return;
        }
        if (c == '\'' || c == '"') {
            push(tok::string, lex_string(c), line, col);
            return;
        }
        static const char* const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                          ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|", ";"};
        for (const char* op : ops) {
            std::string_view o(op);
            if (src_.substr(pos_, o.size()) == o) {
                push(tok::op, std::string(o), line, col);
                advance_to(pos_ + o.size());
                return;
            }
        }
        error(std::string("unexpected character '") + c + "'", line, col);
    }

    // Python string literal escapes, as Jinja unescapes its string tokens.
    std::string lex_string(char quote) {
        int line = line_, col = col_;
        advance_to(pos_ + 1);
        std::string out;
        for (;;) {
            if (pos_ >= src_.size()) error("unterminated string", line, col);
            char c = src_[pos_];
            if (c == quote) {
                advance_to(pos_ + 1);
                return normalize_newlines(out);
            }
            if (c != '\\') {
                out += c;
                advance_to(pos_ + 1);
                continue;
            }
            if (pos_ + 1 >= src_.size()) error("unterminated string", line, col);
            char e = src_[pos_ + 1];
            advance_to(pos_ + 2);
            switch (e) {
                case 'n': out += '\n'; break;
                case 't': out += '\t'; break;
                case 'r': out += '\r'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'v': out += '\v'; break;
                case 'a': out += '\a'; break;
                case '0': out += '\0'; break;
                case '\\': out += '\\'; break;
                case '\'': out += '\''; break;
                case '"': out += '"'; break;
                case '\n': break;
                case 'x':
                case 'u':
                case 'U': {
                    size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                    if (pos_ + n > src_.size()) error("truncated escape", line_, col_);
                    std::string hex(src_.substr(pos_, n));
                    for (char h : hex)
                        if (!std::isxdigit(static_cast<unsigned char>(h))) error("bad escape", line_, col_);
                    char32_t cp = static_cast<char32_t>(std::stoul(hex, nullptr, 16));
                    if (cp > 0x10ffff) error("escape out of range", line_, col_);
                    out += utf8_encode(std::u32string(1, cp));
                    advance_to(pos_ + n);
                    break;
                }
                default: out += '\\'; out += e;
            }
        }
    }
};

}  // namespace

std::vector<token> lex(std::string_view source) {
    return lexer(source).run();
}

}  // namespace memtile::jinja
