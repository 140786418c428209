// How one API spells a generation reply, streamed or whole. The route layer drives a writer with the job's
// text (already separated from tool calls by output_splitter) and sends what it returns.
#pragma once

#include <string>
#include <vector>

#include "model-host.h"
#include "request.h"

namespace memtile::server {

class reply_writer {
public:
    virtual ~reply_writer() = default;
    virtual const char* content_type(bool stream) const = 0;
    virtual std::string begin() { return {}; }                     // stream: bytes before the first delta
    virtual std::string delta(const std::string& text) = 0;        // stream: one content delta
    virtual std::string end(const output_splitter::final_part& f,  // stream: tool calls, final chunk(s)
                            const job_stats& st) = 0;
    virtual std::string error(const std::string& message) = 0;  // stream: an error after the headers
    virtual std::string whole(const std::string& content, const std::vector<chat::tool_call>& calls,
                              const job_stats& st) = 0;  // non-streaming body
};

std::unique_ptr<reply_writer> make_ollama_writer(bool chat, const std::string& model);
std::unique_ptr<reply_writer> make_openai_writer(bool chat, const std::string& model, bool include_usage);

}  // namespace memtile::server
