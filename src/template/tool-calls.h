// Tool-call extraction from generated assistant text. Each chat-template family teaches its model a different
// way of writing function calls; this turns the model's output back into structured calls (name + JSON object
// arguments) plus the remaining plain content. Anything that does not parse cleanly stays plain content:
// a malformed call is never half-applied.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace memtile::chat {

enum class tool_call_format {
    none,     // no tool calls: everything is content
    hermes,   // Hermes 2/3, Qwen 2.5/3: <tool_call>{"name": .., "arguments": ..}</tool_call> (repeatable)
    llama3,   // Llama 3.1/3.2: {"name": .., "parameters": ..} or <|python_tag|>{..} / name.call(k="v")
    mistral,  // [TOOL_CALLS][{"name": .., "arguments": ..}, ...]
    deepseek_r1,  // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{..}\n```...
    functionary_v3_1,  // <function=NAME>{..}</function> (repeatable), <|python_tag|>code
};

struct tool_call {
    std::string name;
    nlohmann::ordered_json arguments;  // always a JSON object
};

struct parsed_output {
    std::string content;
    std::vector<tool_call> calls;
};

// Picks the format whose markers appear in a chat template's source; `none` when there are none.
tool_call_format detect_tool_call_format(std::string_view template_source);
// "hermes", "llama3", "mistral", "deepseek-r1", "functionary-v3.1", "none" (for an explicit override).
std::optional<tool_call_format> tool_call_format_from_name(std::string_view name);
std::string_view tool_call_format_name(tool_call_format f);

parsed_output parse_tool_calls(std::string_view text, tool_call_format format);

}  // namespace memtile::chat
