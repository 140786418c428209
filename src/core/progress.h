// A progress bar on stderr, drawn only when stderr is a terminal (so logs and tests stay clean).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace memtile {

class progress_bar {
public:
    progress_bar(std::string label, uint64_t total);
    ~progress_bar();
    void advance(uint64_t n);  // thread-compatible: call from one thread
    void finish();

private:
    void draw(bool final);
    std::string label_;
    uint64_t total_, done_ = 0;
    bool enabled_, finished_ = false;
    std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace memtile
