// Small UTF-8 helpers shared by the tokenizer sources (internal).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace memtile::tokenizer_detail {

// Length of the sequence a lead byte announces; 1 for ASCII and for bytes that cannot start a sequence, so that
// invalid input advances one byte at a time.
inline size_t utf8_len(unsigned char lead) {
    if (lead < 0xC0) return 1;
    if (lead < 0xE0) return 2;
    if (lead < 0xF0) return 3;
    if (lead < 0xF8) return 4;
    return 1;
}

inline void append_utf8(uint32_t cp, std::string& out) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    }
}

// Decodes the code point at s[i] (i advanced past it); invalid sequences yield 0xFFFFFFFF and advance one byte.
inline uint32_t next_code_point(std::string_view s, size_t& i) {
    unsigned char c = s[i];
    size_t n = utf8_len(c);
    if (n == 1) {
        ++i;
        return c < 0x80 ? c : 0xFFFFFFFF;
    }
    if (i + n > s.size()) {
        ++i;
        return 0xFFFFFFFF;
    }
    uint32_t cp = c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
        unsigned char cc = s[i + k];
        if ((cc & 0xC0) != 0x80) {
            ++i;
            return 0xFFFFFFFF;
        }
        cp = (cp << 6) | (cc & 0x3F);
    }
    i += n;
    return cp;
}

}  // namespace memtile::tokenizer_detail
