// API translation of memtile serve: request parsing (both APIs), message normalisation, tool-call
// separation of streamed output and the reply shapes clients read.
#include <gtest/gtest.h>

#include "server/api-error.h"
#include "server/ollama.h"
#include "server/openai.h"
#include "server/reply-writer.h"
#include "server/request.h"

using namespace memtile;
using namespace memtile::server;

namespace {

json parse(const std::string& s) {
    return json::parse(s);
}

int status_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const api_error& e) {
        return e.status;
    }
    return 0;
}

// Splits an SSE body into the JSON of its data events (without [DONE]); `done` tells whether it was there.
std::vector<json> sse_events(const std::string& body, bool& done) {
    std::vector<json> out;
    done = false;
    size_t at = 0;
    while ((at = body.find("data: ", at)) != std::string::npos) {
        const size_t end = body.find("\n\n", at);
        const std::string data = body.substr(at + 6, end - at - 6);
        if (data == "[DONE]")
            done = true;
        else
            out.push_back(json::parse(data));
        at = end;
    }
    return out;
}

}  // namespace

TEST(server_request, openai_chat_fields) {
    auto r = parse_openai_chat(parse(R"({"model":"m","stream":true,"stream_options":{"include_usage":true},
        "max_completion_tokens":7,"temperature":0.5,"top_p":0.9,"seed":3,"stop":"END",
        "messages":[{"role":"system","content":"S"},{"role":"user","content":"a"}]})"));
    EXPECT_EQ(r.model, "m");
    EXPECT_TRUE(r.stream);
    EXPECT_TRUE(r.include_usage);
    EXPECT_EQ(r.n_predict, 7);
    EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
    EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
    EXPECT_TRUE(r.seed_given);
    EXPECT_EQ(r.sampling.seed, 3u);
    ASSERT_EQ(r.stop.size(), 1u);
    EXPECT_EQ(r.messages.size(), 2u);
}

TEST(server_request, content_parts_null_content_and_string_arguments) {
    auto r = parse_openai_chat(parse(R"({"model":"m","messages":[
        {"role":"user","content":[{"type":"text","text":"hel"},{"type":"text","text":"lo"}]},
        {"role":"assistant","content":null,"tool_calls":[{"id":"callfake1","type":"function",
            "function":{"name":"read","arguments":"{\"path\":\"hello.txt\"}"}}]},
        {"role":"tool","tool_call_id":"callfake1","content":"secret"}]})"));
    ASSERT_EQ(r.messages.size(), 3u);
    EXPECT_EQ(r.messages[0]["content"], "hello");
    EXPECT_EQ(r.messages[1]["content"], "");
    EXPECT_EQ(r.messages[1]["tool_calls"][0]["function"]["arguments"]["path"], "hello.txt");
    EXPECT_EQ(r.messages[1]["tool_calls"][0]["id"], "callfake1");
    EXPECT_EQ(r.messages[2]["tool_call_id"], "callfake1");
}

TEST(server_request, consecutive_user_messages_can_be_merged) {
    auto r = parse_ollama_chat(parse(R"({"model":"m","messages":[{"role":"system","content":"S"},
        {"role":"user","content":"one"},{"role":"user","content":"two"},{"role":"assistant","content":"a"},
        {"role":"user","content":"three"}]})"));
    ASSERT_EQ(r.messages.size(), 5u);  // kept as sent: merging is the fallback for strict templates
    size_t merged = 0;
    json m = merge_consecutive_users(r.messages, merged);
    EXPECT_EQ(merged, 1u);
    ASSERT_EQ(m.size(), 4u);
    EXPECT_EQ(m[1]["content"], "one\n\ntwo");
    EXPECT_EQ(m[3]["content"], "three");
}

TEST(server_request, ollama_options_and_tool_messages) {
    auto r = parse_ollama_chat(parse(R"({"model":"m:latest","stream":false,"options":{"num_ctx":32768,
        "temperature":0,"top_k":5,"min_p":0.1,"seed":9,"num_predict":12,"stop":["x","y"],"repeat_penalty":1.1},
        "keep_alive":"1m","tools":[{"type":"function","function":{"name":"read","parameters":{}}}],
        "messages":[{"role":"user","content":"hi"},
        {"role":"assistant","content":"","tool_calls":[{"function":{"name":"read","arguments":{"path":"a"}}}]},
        {"role":"tool","content":"r","tool_name":"read"}]})"));
    EXPECT_FALSE(r.stream);
    EXPECT_EQ(r.n_predict, 12);
    EXPECT_EQ(r.sampling.top_k, 5);
    EXPECT_FLOAT_EQ(r.sampling.temperature, 0.0f);
    EXPECT_EQ(r.stop.size(), 2u);
    EXPECT_DOUBLE_EQ(*r.keep_alive_s, 60.0);
    EXPECT_EQ(r.tools.size(), 1u);
    EXPECT_EQ(r.messages[2]["name"], "read");
    EXPECT_FALSE(r.notes.empty());  // num_ctx note
    EXPECT_EQ(canonical_model_name(r.model), "m");
}

TEST(server_request, malformed_requests_are_400) {
    EXPECT_EQ(status_of([] { parse_openai_chat(parse(R"({"messages":[]})")); }), 400);
    EXPECT_EQ(status_of([] { parse_openai_chat(parse(R"({"model":1,"messages":[]})")); }), 400);
    EXPECT_EQ(status_of([] { parse_openai_chat(parse(R"({"model":"m","messages":"hi"})")); }), 400);
    EXPECT_EQ(status_of([] { parse_openai_chat(parse(R"({"model":"m","messages":[{"role":"x","content":""}]})")); }),
              400);
    EXPECT_EQ(status_of([] { parse_openai_chat(parse(R"({"model":"m","messages":[{"content":"a"}]})")); }), 400);
    EXPECT_EQ(status_of([] { parse_openai_chat(parse(R"({"model":"m","temperature":"hot","messages":[]})")); }), 400);
    EXPECT_EQ(status_of([] { parse_openai_chat(parse(R"({"model":"m","n":2,"messages":[{"role":"user"}]})")); }), 400);
    EXPECT_EQ(status_of([] { parse_ollama_chat(parse(R"({"model":"m","stream":"yes","messages":[]})")); }), 400);
    EXPECT_EQ(status_of([] { parse_ollama_chat(parse(R"({"model":"m","options":[],"messages":[]})")); }), 400);
    EXPECT_EQ(status_of([] { parse_ollama_chat(parse(R"({"model":"m","tools":{},"messages":[]})")); }), 400);
    EXPECT_EQ(status_of([] { parse_openai_completion(parse(R"({"model":"m"})")); }), 400);
    EXPECT_EQ(status_of([] { parse_ollama_chat(parse(R"([1,2])")); }), 400);
}

TEST(server_request, tool_choice_none_drops_tools) {
    auto r = parse_openai_chat(parse(R"({"model":"m","tool_choice":"none","messages":[{"role":"user","content":"a"}],
        "tools":[{"type":"function","function":{"name":"f"}}]})"));
    EXPECT_TRUE(r.tools.empty());
}

TEST(server_splitter, streams_content_and_holds_tool_calls) {
    output_splitter s(chat::tool_call_format::hermes, true);
    std::string streamed;
    for (std::string piece : {"Let me ", "look.<to", "ol_call>\n{\"name\": \"read\", ",
                              "\"arguments\": {\"path\": ", "\"a.txt\"}}\n</tool_call>"})
        streamed += s.push(piece);
    EXPECT_EQ(streamed, "Let me look.");
    auto f = s.finish();
    ASSERT_EQ(f.calls.size(), 1u);
    EXPECT_EQ(f.calls[0].name, "read");
    EXPECT_EQ(f.calls[0].arguments["path"], "a.txt");
    EXPECT_EQ(f.content, "");
}

TEST(server_splitter, releases_a_false_marker_prefix) {
    output_splitter s(chat::tool_call_format::hermes, true);
    EXPECT_EQ(s.push("a <to"), "a ");
    EXPECT_EQ(s.push("p"), "<top");
    auto f = s.finish();
    EXPECT_TRUE(f.calls.empty());
    EXPECT_EQ(f.content, "");
    EXPECT_EQ(s.content(), "a <top");
}

TEST(server_splitter, without_tools_everything_is_content) {
    output_splitter s(chat::tool_call_format::hermes, false);
    const std::string text = "<tool_call>{\"name\":\"x\",\"arguments\":{}}</tool_call>";
    EXPECT_EQ(s.push(text), text);
    EXPECT_TRUE(s.finish().calls.empty());
}

TEST(server_reply, openai_stream_has_tool_call_deltas_finish_reason_usage_and_done) {
    auto w = make_openai_writer(true, "m", true);
    std::string body = w->begin() + w->delta("Hi");
    output_splitter::final_part f;
    f.calls.push_back({"read", json{{"path", "a-rather-long-file-name.txt"}}});
    job_stats st;
    st.n_prompt = 10;
    st.n_cached = 4;
    st.n_generated = 3;
    st.stop_reason = "eos";
    body += w->end(f, st);
    bool done = false;
    auto ev = sse_events(body, done);
    EXPECT_TRUE(done);
    EXPECT_EQ(ev[0]["choices"][0]["delta"]["role"], "assistant");
    EXPECT_EQ(ev[1]["choices"][0]["delta"]["content"], "Hi");
    const auto& head = ev[2]["choices"][0]["delta"]["tool_calls"][0];
    EXPECT_EQ(head["index"], 0);
    EXPECT_EQ(head["function"]["name"], "read");
    EXPECT_TRUE(head["id"].get<std::string>().rfind("call_", 0) == 0);
    std::string args;
    size_t i = 2;
    for (; ev[i]["choices"].size() && ev[i]["choices"][0]["finish_reason"].is_null(); i++)
        args += ev[i]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].get<std::string>();
    EXPECT_EQ(json::parse(args)["path"], "a-rather-long-file-name.txt");
    EXPECT_EQ(ev[i]["choices"][0]["finish_reason"], "tool_calls");
    EXPECT_TRUE(ev[i + 1]["choices"].empty());
    EXPECT_EQ(ev[i + 1]["usage"]["prompt_tokens"], 10);
    EXPECT_EQ(ev[i + 1]["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
    EXPECT_EQ(ev[i + 1]["usage"]["total_tokens"], 13);
}

TEST(server_reply, openai_whole_reply_with_tool_call_has_null_content) {
    auto w = make_openai_writer(true, "m", false);
    job_stats st;
    st.stop_reason = "eos";
    auto j = parse(w->whole("", {{"read", json{{"path", "x"}}}}, st));
    EXPECT_TRUE(j["choices"][0]["message"]["content"].is_null());
    EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
    EXPECT_EQ(json::parse(j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
              json({{"path", "x"}}));
    auto t = parse(make_openai_writer(true, "m", false)->whole("hi", {}, job_stats{0, 0, 1, "length"}));
    EXPECT_EQ(t["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(t["choices"][0]["message"]["content"], "hi");
}

TEST(server_reply, ollama_stream_lines_and_final_done) {
    auto w = make_ollama_writer(true, "m:latest");
    std::string body = w->delta("Hel");
    output_splitter::final_part f;
    f.calls.push_back({"read", json{{"path", "x"}}});
    job_stats st{20, 15, 2, "eos"};
    body += w->end(f, st);
    std::vector<json> lines;
    size_t at = 0, nl;
    while ((nl = body.find('\n', at)) != std::string::npos) {
        lines.push_back(json::parse(body.substr(at, nl - at)));
        at = nl + 1;
    }
    ASSERT_EQ(lines.size(), 3u);
    EXPECT_EQ(lines[0]["message"]["content"], "Hel");
    EXPECT_EQ(lines[0]["done"], false);
    EXPECT_EQ(lines[1]["message"]["tool_calls"][0]["function"]["arguments"]["path"], "x");
    EXPECT_EQ(lines[2]["done"], true);
    EXPECT_EQ(lines[2]["done_reason"], "stop");
    EXPECT_EQ(lines[2]["prompt_eval_count"], 20);
    EXPECT_EQ(lines[2]["prompt_cache_count"], 15);
    EXPECT_EQ(lines[2]["eval_count"], 2);
    EXPECT_TRUE(lines[2].contains("eval_duration"));
}

TEST(server_reply, error_shapes) {
    api_error e(400, "context_length_exceeded", "too long");
    auto o = openai_error(e);
    EXPECT_EQ(o["error"]["code"], "context_length_exceeded");
    EXPECT_EQ(o["error"]["type"], "invalid_request_error");
    EXPECT_EQ(o["error"]["message"], "too long");
    EXPECT_EQ(ollama_error("too long")["error"], "too long");
}
