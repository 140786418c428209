// The API-neutral form of a generation request, built by ollama.cpp and openai.cpp from their JSON bodies,
// and the helpers both translations share: chat-message normalisation (content parts, null content, string
// tool-call arguments, consecutive user messages) and the streaming separation of content from tool calls.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "sampling/sampler.h"
#include "template/tool-calls.h"

namespace memtile::server {

using json = nlohmann::ordered_json;

struct gen_request {
    std::string model;
    bool chat = true;               // chat messages through the template, or a plain prompt
    json messages = json::array();  // normalised (see normalize_messages)
    json tools = json::array();     // OpenAI/Ollama function tools, passed to the template
    std::string prompt;             // !chat: the prompt text
    bool raw = false;               // !chat: use the prompt as is (else wrap it as one user message)
    std::string system;             // Ollama generate: system message when !raw
    sampling_params sampling;
    bool seed_given = false;
    int n_predict = -1;  // -1: until end of generation or the context is full
    std::vector<std::string> stop;
    bool stream = true;
    bool include_usage = false;  // OpenAI stream_options.include_usage
    std::optional<double> keep_alive_s;
    std::vector<std::string> notes;  // adaptations made to the request, logged by the route
};

// Reads a required/optional JSON member with a type check; errors are 400s naming the field.
const json* member(const json& obj, const char* key, json::value_t type, const char* type_name, bool required = false);
std::string string_member(const json& obj, const char* key, bool required = false);
std::optional<double> number_member(const json& obj, const char* key);
std::optional<bool> bool_member(const json& obj, const char* key);
// A stop list given as a string or an array of strings.
std::vector<std::string> stop_member(const json& obj, const char* key);

// Turns API chat messages into what chat templates expect: string content (text parts joined, null -> ""),
// tool-call arguments as JSON objects (OpenAI sends them as a string), "developer" as "system". Throws
// api_error 400 for malformed messages.
json normalize_messages(const json& messages, std::vector<std::string>& notes);
// Joins each run of consecutive user messages into one (blank line between), for templates that demand
// strict alternation. The server first renders the messages as sent, since merging changes the token prefix
// that the prefix cache matches across an agent's turns, and merges only when the template refuses.
json merge_consecutive_users(const json& messages, size_t& merged);
// Validates a tools array (each {type:"function", function:{name,...}}); returns it unchanged.
json check_tools(const json& tools);

// Compact JSON text; invalid UTF-8 in model output is replaced (U+FFFD) rather than failing the reply.
std::string dump_json(const json& j);

// A fresh tool-call id: "call_" and 24 alphanumerics.
std::string new_call_id();

// Separates streamed model output into content deltas and tool calls. While tools are offered, text from
// the first tool-call marker of the template's format on is held back (as is a partial marker at the end);
// at the end the whole output is parsed, and what remains of the content is released with the calls.
class output_splitter {
public:
    output_splitter(chat::tool_call_format format, bool tools_offered);
    std::string push(const std::string& piece);  // content safe to stream now
    struct final_part {
        std::string content;  // content not yet streamed
        std::vector<chat::tool_call> calls;
    };
    final_part finish();
    const std::string& full_text() const { return all_; }
    // The whole content (for non-streaming replies) after finish().
    const std::string& content() const { return content_; }

private:
    chat::tool_call_format format_;
    bool active_;
    bool in_call_ = false;
    std::string all_, content_;
    size_t emitted_ = 0;
};

}  // namespace memtile::server
