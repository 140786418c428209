// Errors at the HTTP boundary: each carries the status to answer with and an OpenAI-style code/type; the
// route layer renders them in the error shape of the API that was called (Ollama: {"error": msg}; OpenAI:
// {"error": {message, type, param, code}}).
#pragma once

#include <fmt/core.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace memtile::server {

struct api_error : std::runtime_error {
    api_error(int status_, std::string code_, const std::string& message)
        : std::runtime_error(message), status(status_), code(std::move(code_)) {}
    int status;
    std::string code;  // e.g. "invalid_request", "model_not_found", "context_length_exceeded"

    std::string type() const {
        if (status == 401) return "authentication_error";
        if (status == 404) return "not_found_error";
        if (status == 503) return "server_overloaded";
        return status >= 500 ? "server_error" : "invalid_request_error";
    }
};

template <typename... Args>
[[noreturn]] void bad_request(fmt::format_string<Args...> f, Args&&... args) {
    throw api_error(400, "invalid_request", fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace memtile::server
