#include "core/progress.h"

#include <fmt/core.h>
#include <unistd.h>

#include <cstdio>

#include "core/units.h"

namespace memtile {

progress_bar::progress_bar(std::string label, uint64_t total)
    : label_(std::move(label)), total_(total), enabled_(::isatty(STDERR_FILENO) == 1) {
    start_ = last_draw_ = std::chrono::steady_clock::now();
}

progress_bar::~progress_bar() {
    finish();
}

void progress_bar::advance(uint64_t n) {
    done_ += n;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_draw_ > std::chrono::milliseconds(100)) {
        last_draw_ = now;
        draw(false);
    }
}

void progress_bar::finish() {
    if (finished_) return;
    finished_ = true;
    draw(true);
}

void progress_bar::draw(bool final) {
    if (!enabled_) return;
    const double frac = total_ ? double(done_) / double(total_) : 1.0;
    const int width = 30, filled = int(frac * width);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    fmt::print(stderr, "\r{} [{}{}] {:5.1f}%  {} / {}  {:.1f}s{}", label_, std::string(filled, '#'),
               std::string(width - filled, ' '), frac * 100, format_bytes(done_), format_bytes(total_), secs,
               final ? "\n" : "");
    std::fflush(stderr);
}

}  // namespace memtile
