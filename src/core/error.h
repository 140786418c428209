// Library errors: one exception type carrying the subsystem and context in its message, e.g.
// "[gguf] model.gguf: tensor 'blk.3.attn_q.weight' extends past end of file (offset 1234)".
// Boundaries (CLI, server) catch memtile::error and turn it into an exit status or an HTTP error.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace memtile {

class error : public std::runtime_error {
public:
    error(std::string_view subsystem, const std::string& message)
        : std::runtime_error(fmt::format("[{}] {}", subsystem, message)) {}
};

template <typename... Args>
[[noreturn]] void fail(std::string_view subsystem, fmt::format_string<Args...> f, Args&&... args) {
    throw error(subsystem, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace memtile
