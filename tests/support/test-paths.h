// Paths the tests use: the read-only shared data folder and a per-process scratch directory.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace memtile::test {

inline std::string shared_path(const std::string& rel) {
    return std::string(MEMTILE_SHARED_DIR) + "/" + rel;
}

inline std::filesystem::path scratch_dir() {
    static const std::filesystem::path dir = [] {
        auto d = std::filesystem::temp_directory_path() / ("memtile-test-" + std::to_string(::getpid()));
        std::filesystem::create_directories(d);
        return d;
    }();
    return dir;
}

inline std::string scratch(const std::string& name) {
    return (scratch_dir() / name).string();
}

}  // namespace memtile::test
