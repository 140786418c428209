// The pool's chunk hand-outs named on the benches' --split option (thread_pool::set_split): "i" = interleaved,
// "rN" = ranges with N chunks per thread, "hN" = halving with N chunks per thread.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/thread-pool.h"

struct split_variant {
    std::string name;  // empty: the pool's default, unnamed in tables
    memtile::thread_pool::split split = memtile::thread_pool::k_default_split;
    int chunks = memtile::thread_pool::k_default_range_chunks;
};

// "i,r4,h6" -> its variants; throws std::invalid_argument naming a bad entry.
inline std::vector<split_variant> parse_splits(const std::string& list) {
    using memtile::thread_pool;
    std::vector<split_variant> out;
    for (size_t p = 0; p <= list.size();) {
        const size_t e = std::min(list.find(',', p), list.size());
        const std::string v = list.substr(p, e - p);
        const bool counted = v.size() > 1 && (v[0] == 'r' || v[0] == 'h') &&
                             v.find_first_not_of("0123456789", 1) == std::string::npos && std::stoi(v.substr(1)) > 0;
        if (v == "i")
            out.push_back({v, thread_pool::split::interleaved, 8});
        else if (counted)
            out.push_back(
                {v, v[0] == 'r' ? thread_pool::split::ranges : thread_pool::split::halving, std::stoi(v.substr(1))});
        else
            throw std::invalid_argument("--split: '" + v + "' is not i, rN or hN (N >= 1), e.g. i,r4,h6");
        p = e + 1;
    }
    return out;
}
