// Tool-call extraction from generated text, one test per template family, malformed output included.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "template/tool-calls.h"

using namespace memtile::chat;
using json = nlohmann::ordered_json;

namespace {

std::string shared_template(const std::string& name) {
    std::ifstream f(std::string(MEMTILE_SHARED_DIR) + "/templates/" + name);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

}  // namespace

TEST(tool_calls, detects_format_from_template_markers) {
    EXPECT_EQ(detect_tool_call_format(shared_template("Qwen-Qwen2.5-7B-Instruct.jinja")), tool_call_format::hermes);
    EXPECT_EQ(detect_tool_call_format(shared_template("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja")),
              tool_call_format::hermes);
    EXPECT_EQ(detect_tool_call_format(shared_template("meta-llama-Llama-3.1-8B-Instruct.jinja")),
              tool_call_format::llama3);
    EXPECT_EQ(detect_tool_call_format(shared_template("meta-llama-Llama-3.2-3B-Instruct.jinja")),
              tool_call_format::llama3);
    EXPECT_EQ(detect_tool_call_format(shared_template("llama-cpp-deepseek-r1.jinja")), tool_call_format::deepseek_r1);
    EXPECT_EQ(detect_tool_call_format(shared_template("meetkai-functionary-medium-v3.1.jinja")),
              tool_call_format::functionary_v3_1);
    EXPECT_EQ(detect_tool_call_format(shared_template("microsoft-Phi-3.5-mini-instruct.jinja")),
              tool_call_format::none);
    EXPECT_EQ(detect_tool_call_format("{{ '[TOOL_CALLS]' }}"), tool_call_format::mistral);
    EXPECT_EQ(tool_call_format_from_name("deepseek-r1"), tool_call_format::deepseek_r1);
    EXPECT_FALSE(tool_call_format_from_name("bogus"));
}

TEST(tool_calls, hermes) {
    auto r = parse_tool_calls(
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
        "<tool_call>{\"name\": \"get_time\", \"arguments\": \"{\\\"tz\\\": \\\"CET\\\"}\"}</tool_call>",
        tool_call_format::hermes);
    ASSERT_EQ(r.calls.size(), 2u);
    EXPECT_EQ(r.calls[0].name, "get_weather");
    EXPECT_EQ(r.calls[0].arguments, json({{"city", "Paris"}}));
    EXPECT_EQ(r.calls[1].arguments, json({{"tz", "CET"}}));
    EXPECT_EQ(r.content, "Let me check.");
    // Malformed JSON and an unterminated tag stay text.
    auto bad = parse_tool_calls("<tool_call>{\"name\": \"x\", \"arguments\": {</tool_call>", tool_call_format::hermes);
    EXPECT_TRUE(bad.calls.empty());
    EXPECT_EQ(bad.content, "<tool_call>{\"name\": \"x\", \"arguments\": {</tool_call>");
    EXPECT_TRUE(parse_tool_calls("<tool_call>{\"name\": \"x\"", tool_call_format::hermes).calls.empty());
}

TEST(tool_calls, llama3) {
    auto r = parse_tool_calls("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
                              tool_call_format::llama3);
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.calls[0].name, "get_weather");
    EXPECT_EQ(r.calls[0].arguments, json({{"city", "Paris"}}));
    EXPECT_EQ(r.content, "");
    auto tagged = parse_tool_calls("<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", tool_call_format::llama3);
    ASSERT_EQ(tagged.calls.size(), 1u);
    EXPECT_EQ(tagged.calls[0].name, "f");
    auto builtin =
        parse_tool_calls("<|python_tag|>brave_search.call(query=\"weather Paris\")", tool_call_format::llama3);
    ASSERT_EQ(builtin.calls.size(), 1u);
    EXPECT_EQ(builtin.calls[0].name, "brave_search");
    EXPECT_EQ(builtin.calls[0].arguments, json({{"query", "weather Paris"}}));
    // Prose that merely contains JSON, and truncated JSON, stay text.
    EXPECT_TRUE(parse_tool_calls("Use {\"name\": \"f\", \"parameters\": {}} like this", tool_call_format::llama3)
                    .calls.empty());
    auto bad = parse_tool_calls("{\"name\": \"f\", \"parameters\": {", tool_call_format::llama3);
    EXPECT_TRUE(bad.calls.empty());
    EXPECT_EQ(bad.content, "{\"name\": \"f\", \"parameters\": {");
}

TEST(tool_calls, mistral) {
    auto r = parse_tool_calls(
        "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]",
        tool_call_format::mistral);
    ASSERT_EQ(r.calls.size(), 2u);
    EXPECT_EQ(r.calls[0].arguments, json({{"x", 1}}));
    EXPECT_EQ(r.calls[1].name, "b");
    EXPECT_EQ(r.content, "");
    auto bad = parse_tool_calls("[TOOL_CALLS][{\"name\": \"a\", \"arguments\": ", tool_call_format::mistral);
    EXPECT_TRUE(bad.calls.empty());
    EXPECT_EQ(bad.content, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": ");
    EXPECT_TRUE(parse_tool_calls("[TOOL_CALLS][{\"arguments\": {}}]", tool_call_format::mistral).calls.empty());
}

TEST(tool_calls, deepseek_r1) {
    auto r = parse_tool_calls(
        "<think>need weather</think>\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
        "```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n"
        "```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        tool_call_format::deepseek_r1);
    ASSERT_EQ(r.calls.size(), 2u);
    EXPECT_EQ(r.calls[0].name, "get_weather");
    EXPECT_EQ(r.calls[0].arguments, json({{"city", "Paris"}}));
    EXPECT_EQ(r.calls[1].name, "get_time");
    EXPECT_EQ(r.content, "<think>need weather</think>");
    std::string broken =
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": \n```<｜tool▁call▁end｜>";
    auto bad = parse_tool_calls(broken, tool_call_format::deepseek_r1);
    EXPECT_TRUE(bad.calls.empty());
    EXPECT_EQ(bad.content, broken);
}

TEST(tool_calls, functionary_v3_1) {
    auto r = parse_tool_calls("Sure.<function=get_weather>{\"city\": \"Paris\"}</function><function=f>{}</function>",
                              tool_call_format::functionary_v3_1);
    ASSERT_EQ(r.calls.size(), 2u);
    EXPECT_EQ(r.calls[0].name, "get_weather");
    EXPECT_EQ(r.calls[0].arguments, json({{"city", "Paris"}}));
    EXPECT_EQ(r.calls[1].name, "f");
    EXPECT_EQ(r.content, "Sure.");
    auto code = parse_tool_calls("<|python_tag|>print(1)", tool_call_format::functionary_v3_1);
    ASSERT_EQ(code.calls.size(), 1u);
    EXPECT_EQ(code.calls[0].arguments, json({{"code", "print(1)"}}));
    auto bad = parse_tool_calls("<function=f>{not json}</function>", tool_call_format::functionary_v3_1);
    EXPECT_TRUE(bad.calls.empty());
    EXPECT_EQ(bad.content, "<function=f>{not json}</function>");
}

TEST(tool_calls, none_keeps_text) {
    auto r = parse_tool_calls("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", tool_call_format::none);
    EXPECT_TRUE(r.calls.empty());
    EXPECT_EQ(r.content, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>");
}
