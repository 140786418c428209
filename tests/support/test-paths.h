// Paths the tests use: the read-only shared data folder and a per-process scratch directory.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace memtile::test {

inline std::string shared_path(const std::string& rel) {
    return std::string(MEMTILE_SHARED_DIR) + "/" + rel;
}

// Created on first use and removed with its contents when the test process exits (ctest runs each test in a
// process of its own, so leaving them behind filled /tmp with thousands of folders, some of 350 MB).
class scratch_folder {
public:
    scratch_folder() : path_(std::filesystem::temp_directory_path() / ("memtile-test-" + std::to_string(::getpid()))) {
        std::filesystem::create_directories(path_);
    }
    ~scratch_folder() {
        std::error_code ec;  // best effort: a destructor at exit must not throw
        std::filesystem::remove_all(path_, ec);
    }
    scratch_folder(const scratch_folder&) = delete;
    scratch_folder& operator=(const scratch_folder&) = delete;
    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
};

inline std::filesystem::path scratch_dir() {
    static const scratch_folder dir;
    return dir.path();
}

inline std::string scratch(const std::string& name) {
    return (scratch_dir() / name).string();
}

}  // namespace memtile::test
