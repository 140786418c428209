// OpenAI API translation: /v1/chat/completions and /v1/completions bodies to gen_request; chunk, usage and
// error JSON. Every stream ends with a chunk carrying finish_reason, then (with include_usage) a usage chunk
// with empty choices, then "data: [DONE]".
#pragma once

#include <string>
#include <vector>

#include "api-error.h"
#include "model-host.h"
#include "model-registry.h"
#include "request.h"

namespace memtile::server {

gen_request parse_openai_chat(const json& body);
gen_request parse_openai_completion(const json& body);

json openai_error(const api_error& e);
json openai_models(const std::vector<model_entry>& models);
json openai_usage(const job_stats& st);
std::string openai_finish_reason(const std::string& stop_reason, bool has_calls);

}  // namespace memtile::server
