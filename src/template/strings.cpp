#include "template/strings.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "template/value.h"

namespace memtile::jinja {

bool py_space(char32_t c) {
    return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

std::string py_strip(const std::string& s, const std::string* chars, int mode) {
    std::u32string cps = utf8_decode(s);
    std::u32string set = chars ? utf8_decode(*chars) : std::u32string();
    auto strip = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : py_space(c); };
    size_t b = 0, e = cps.size();
    if (mode & 1)
        while (b < e && strip(cps[b])) ++b;
    if (mode & 2)
        while (e > b && strip(cps[e - 1])) --e;
    return utf8_encode(cps.substr(b, e - b));
}

std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit, bool from_right) {
    std::vector<std::string> out;
    if (sep) {
        if (sep->empty()) fail("template", "ValueError: empty separator");
        if (!from_right) {
            size_t pos = 0;
            for (;;) {
                size_t p = s.find(*sep, pos);
                if (p == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit)) break;
                out.push_back(s.substr(pos, p - pos));
                pos = p + sep->size();
            }
            out.push_back(s.substr(pos));
        } else {
            size_t end = s.size();
            for (;;) {
                if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) break;
                if (end < sep->size()) break;
                size_t p = s.rfind(*sep, end - sep->size());
                if (p == std::string::npos) break;
                out.push_back(s.substr(p + sep->size(), end - p - sep->size()));
                end = p;
            }
            out.push_back(s.substr(0, end));
            std::reverse(out.begin(), out.end());
        }
        return out;
    }
    std::u32string cps = utf8_decode(s);
    if (!from_right) {
        size_t i = 0, n = cps.size();
        while (i < n) {
            while (i < n && py_space(cps[i])) ++i;
            if (i >= n) break;
            if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
                size_t e = n;
                while (e > i && py_space(cps[e - 1])) --e;
                out.push_back(utf8_encode(cps.substr(i, e - i)));
                break;
            }
            size_t j = i;
            while (j < n && !py_space(cps[j])) ++j;
            out.push_back(utf8_encode(cps.substr(i, j - i)));
            i = j;
        }
        return out;
    }
    size_t e = cps.size();
    while (e > 0) {
        while (e > 0 && py_space(cps[e - 1])) --e;
        if (e == 0) break;
        if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
            size_t b = 0;
            while (b < e && py_space(cps[b])) ++b;
            out.push_back(utf8_encode(cps.substr(b, e - b)));
            break;
        }
        size_t b = e;
        while (b > 0 && !py_space(cps[b - 1])) --b;
        out.push_back(utf8_encode(cps.substr(b, e - b)));
        e = b;
    }
    std::reverse(out.begin(), out.end());
    return out;
}

std::vector<std::string> py_splitlines(const std::string& s) {
    std::vector<std::string> out;
    std::u32string cps = utf8_decode(s);
    size_t start = 0;
    for (size_t i = 0; i < cps.size(); ++i) {
        char32_t c = cps[i];
        bool brk = c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e) || c == 0x85 ||
                   c == 0x2028 || c == 0x2029;
        if (!brk) continue;
        out.push_back(utf8_encode(cps.substr(start, i - start)));
        if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
        start = i + 1;
    }
    if (start < cps.size()) out.push_back(utf8_encode(cps.substr(start)));
    return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
    std::string out;
    int64_t done = 0;
    if (old.empty()) {
        std::u32string cps = utf8_decode(s);
        for (size_t i = 0; i <= cps.size(); ++i) {
            if (count < 0 || done < count) {
                out += repl;
                ++done;
            }
            if (i < cps.size()) out += utf8_encode(cps.substr(i, 1));
        }
        return out;
    }
    size_t pos = 0;
    for (;;) {
        size_t p = s.find(old, pos);
        if (p == std::string::npos || (count >= 0 && done >= count)) break;
        out.append(s, pos, p - pos);
        out += repl;
        pos = p + old.size();
        ++done;
    }
    out.append(s, pos, std::string::npos);
    return out;
}

size_t py_count(const std::string& s, const std::string& sub) {
    if (sub.empty()) return utf8_decode(s).size() + 1;
    size_t n = 0;
    for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
    return n;
}

std::string ascii_upper(std::string s) {
    for (char& c : s)
        if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
    return s;
}

std::string ascii_lower(std::string s) {
    for (char& c : s)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    return s;
}

static bool ascii_alpha(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

std::string py_title(const std::string& s) {
    std::string out = s;
    bool prev_cased = false;
    for (char& c : out) {
        if (ascii_alpha(c)) {
            c = prev_cased ? static_cast<char>(std::tolower(static_cast<unsigned char>(c)))
                           : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
            prev_cased = true;
        } else {
            prev_cased = static_cast<unsigned char>(c) >= 0x80 && prev_cased;
        }
    }
    return out;
}

std::string py_capitalize(const std::string& s) {
    std::string out = ascii_lower(s);
    if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 32);
    return out;
}

std::string html_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&#34;"; break;
            case '\'': out += "&#39;"; break;
            default: out += c;
        }
    }
    return out;
}

bool py_is(const std::string& s, const std::string& predicate) {
    if (s.empty()) return false;
    if (predicate == "isspace") {
        for (char32_t c : utf8_decode(s))
            if (!py_space(c)) return false;
        return true;
    }
    if (predicate == "isupper" || predicate == "islower") {
        bool cased = false;
        for (char c : s) {
            if (!ascii_alpha(c)) continue;
            cased = true;
            if ((predicate == "isupper") != (c >= 'A' && c <= 'Z')) return false;
        }
        return cased;
    }
    for (char c : s) {
        bool digit = c >= '0' && c <= '9';
        bool ok = predicate == "isdigit" ? digit : predicate == "isalpha" ? ascii_alpha(c) : digit || ascii_alpha(c);
        if (!ok) return false;
    }
    return true;
}

}  // namespace memtile::jinja
