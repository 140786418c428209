// Ollama API translation: request bodies of /api/chat and /api/generate to gen_request, and the JSON of
// /api/tags, /api/show, /api/ps. Replies follow Ollama's field names (done, done_reason, prompt_eval_count,
// eval_count, *_duration in nanoseconds); prompt_eval_count counts the whole prompt and prompt_cache_count
// the part of it reused from the KV cache (so prompt_eval_count - prompt_cache_count tokens were computed).
#pragma once

#include <string>
#include <vector>

#include "model-registry.h"
#include "request.h"

namespace memtile::server {

gen_request parse_ollama_chat(const json& body);
gen_request parse_ollama_generate(const json& body);

json ollama_error(const std::string& message);
json ollama_tags(const std::vector<model_entry>& models);
json ollama_show(const model_entry& e, const model_host& h);
json ollama_ps(const std::vector<model_entry>& models);
json ollama_tool_calls(const std::vector<chat::tool_call>& calls);
std::string ollama_done_reason(const std::string& stop_reason);
std::string now_rfc3339();

}  // namespace memtile::server
