// The HTTP side of `memtile serve`: routes of the Ollama API (/api/*), the OpenAI API (/v1/*), /metrics and
// /health on cpp-httplib; authentication (--api-key, bearer token), body-size limit, error shapes per API,
// streaming of jobs (NDJSON or SSE) with cancellation when the client goes away, and one access-log line
// per request.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "model-registry.h"

namespace memtile::server {

struct server_options {
    std::string host = "127.0.0.1";
    int port = 11434;  // 0: any free port (see bound_port)
    std::string api_key;
    size_t max_body = size_t(32) << 20;
    int http_threads = 16;
    bool quiet = false;  // no access log
};

class http_server {
public:
    http_server(model_registry& models, server_options o);
    ~http_server();
    // Binds; throws memtile::error when the address is unavailable. Returns the bound port.
    int bind();
    void serve();  // blocks until stop()
    void stop();

private:
    struct impl;
    std::unique_ptr<impl> p_;
};

}  // namespace memtile::server
