// "1,2,4" -> {1, 2, 4}: the benches' list options (--threads, --rounds ...); std::stoi throws on a bad entry.
#pragma once

#include <string>
#include <vector>

inline std::vector<int> parse_list(const std::string& s) {
    std::vector<int> v;
    size_t a = 0;
    while (a < s.size()) {
        size_t b = s.find(',', a);
        if (b == std::string::npos) b = s.size();
        v.push_back(std::stoi(s.substr(a, b - a)));
        a = b + 1;
    }
    return v;
}
