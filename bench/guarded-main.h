// Entry of the bench programs: runs body(argc, argv) and turns an exception (a bad argument, a missing or corrupt
// model file) into one line on stderr and exit status 1, instead of std::terminate's abort.
#pragma once

#include <cstdio>
#include <exception>

namespace memtile::bench {

template <class F>
int guarded_main(int argc, char** argv, F&& body) {
    try {
        return body(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", argc > 0 ? argv[0] : "bench", e.what());
        return 1;
    }
}

}  // namespace memtile::bench
