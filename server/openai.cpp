#include "openai.h"

#include <fmt/core.h>

#include <chrono>

#include "reply-writer.h"

namespace memtile::server {

namespace {

void read_common(const json& body, gen_request& r) {
    if (!body.is_object()) bad_request("the request body must be a JSON object");
    r.model = string_member(body, "model", true);
    r.stream = bool_member(body, "stream").value_or(false);
    // OpenAI's defaults: temperature 1, top_p 1, no top-k or min-p.
    r.sampling.temperature = 1.0f;
    r.sampling.top_p = 1.0f;
    r.sampling.top_k = 0;
    r.sampling.min_p = 0.0f;
    if (auto v = number_member(body, "temperature")) r.sampling.temperature = float(*v);
    if (auto v = number_member(body, "top_p")) r.sampling.top_p = float(*v);
    if (auto v = number_member(body, "presence_penalty")) r.sampling.presence_penalty = float(*v);
    if (auto v = number_member(body, "frequency_penalty")) r.sampling.frequency_penalty = float(*v);
    if (auto v = number_member(body, "seed")) {
        r.sampling.seed = uint64_t(int64_t(*v));
        r.seed_given = true;
    }
    if (auto v = number_member(body, "max_tokens")) r.n_predict = int(*v);
    if (auto v = number_member(body, "max_completion_tokens")) r.n_predict = int(*v);
    if (r.n_predict < -1 || (r.n_predict == 0 && body.contains("max_tokens") && !body["max_tokens"].is_null()))
        bad_request("'max_tokens' must be positive");
    r.stop = stop_member(body, "stop");
    if (auto n = number_member(body, "n"); n && *n != 1) bad_request("'n' must be 1 (one choice per request)");
    if (const json* so = member(body, "stream_options", json::value_t::object, "an object"))
        r.include_usage = bool_member(*so, "include_usage").value_or(false);
}

}  // namespace

gen_request parse_openai_chat(const json& body) {
    gen_request r;
    read_common(body, r);
    r.chat = true;
    auto it = body.find("messages");
    if (it == body.end() || it->is_null()) bad_request("'messages' is required");
    r.messages = normalize_messages(*it, r.notes);
    if (r.messages.empty()) bad_request("'messages' must not be empty");
    if (auto t = body.find("tools"); t != body.end()) r.tools = check_tools(*t);
    if (auto tc = body.find("tool_choice"); tc != body.end() && !tc->is_null()) {
        if (tc->is_string()) {
            const std::string v = tc->get<std::string>();
            if (v == "none") {
                r.tools = json::array();
            } else if (v != "auto" && v != "required") {
                bad_request("'tool_choice' must be none, auto, required or a function object");
            } else if (v == "required") {
                r.notes.push_back("tool_choice 'required' is not enforced (no constrained decoding yet)");
            }
        } else if (tc->is_object()) {
            r.notes.push_back("a forced tool_choice is not enforced (no constrained decoding yet)");
        } else {
            bad_request("'tool_choice' must be a string or an object");
        }
    }
    if (auto rf = body.find("response_format"); rf != body.end() && !rf->is_null())
        r.notes.push_back("'response_format' is accepted but not enforced (no constrained decoding yet)");
    return r;
}

gen_request parse_openai_completion(const json& body) {
    gen_request r;
    read_common(body, r);
    r.chat = false;
    r.raw = true;
    if (r.n_predict < 0) r.n_predict = 16;  // the API's default max_tokens
    auto it = body.find("prompt");
    if (it == body.end() || it->is_null()) bad_request("'prompt' is required");
    if (it->is_string()) {
        r.prompt = it->get<std::string>();
    } else if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
        r.prompt = (*it)[0].get<std::string>();
    } else {
        bad_request("'prompt' must be a string (or an array of one string)");
    }
    if (auto e = bool_member(body, "echo"); e && *e) bad_request("'echo' is not supported");
    return r;
}

json openai_error(const api_error& e) {
    json err = json::object();
    err["message"] = e.what();
    err["type"] = e.type();
    err["param"] = nullptr;
    err["code"] = e.code;
    return json{{"error", err}};
}

json openai_models(const std::vector<model_entry>& models) {
    json list = json::array();
    for (const auto& e : models) {
        for (const std::string& id : {e.name, canonical_model_name(e.name)}) {
            json m = {{"id", id}, {"object", "model"}, {"created", 0}, {"owned_by", "memtile"}};
            list.push_back(m);
            if (id == canonical_model_name(e.name)) break;
        }
    }
    return json{{"object", "list"}, {"data", list}};
}

json openai_usage(const job_stats& st) {
    json u = json::object();
    u["prompt_tokens"] = st.n_prompt;
    u["completion_tokens"] = st.n_generated;
    u["total_tokens"] = st.n_prompt + st.n_generated;
    u["prompt_tokens_details"] = json{{"cached_tokens", st.n_cached}};
    return u;
}

std::string openai_finish_reason(const std::string& stop_reason, bool has_calls) {
    if (has_calls) return "tool_calls";
    if (stop_reason == "length" || stop_reason == "context") return "length";
    return "stop";
}

namespace {

class openai_writer : public reply_writer {
public:
    openai_writer(bool chat, std::string model, bool include_usage)
        : chat_(chat),
          model_(std::move(model)),
          include_usage_(include_usage),
          id_((chat ? "chatcmpl-" : "cmpl-") + new_call_id().substr(5)),
          created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                       .count()) {}

    const char* content_type(bool stream) const override {
        return stream ? "text/event-stream" : "application/json; charset=utf-8";
    }

    std::string begin() override {
        if (!chat_) return {};
        return event(chunk(json{{"role", "assistant"}, {"content", ""}}, nullptr));
    }

    std::string delta(const std::string& text) override {
        if (!chat_) return event(chunk(text, nullptr));
        return event(chunk(json{{"content", text}}, nullptr));
    }

    std::string end(const output_splitter::final_part& f, const job_stats& st) override {
        std::string out;
        if (!f.content.empty()) out += delta(f.content);
        if (chat_) {
            for (size_t i = 0; i < f.calls.size(); i++) {
                // Name first, then the arguments in fragments, as OpenAI streams them.
                const std::string args = dump_json(f.calls[i].arguments);
                json head = {{"index", i},
                             {"id", new_call_id()},
                             {"type", "function"},
                             {"function", {{"name", f.calls[i].name}, {"arguments", ""}}}};
                out += event(chunk(json{{"tool_calls", json::array({head})}}, nullptr));
                for (size_t at = 0; at < args.size(); at += 16) {
                    json frag = {{"index", i}, {"function", {{"arguments", args.substr(at, 16)}}}};
                    out += event(chunk(json{{"tool_calls", json::array({frag})}}, nullptr));
                }
            }
        }
        const std::string reason = openai_finish_reason(st.stop_reason, !f.calls.empty());
        out += event(chat_ ? chunk(json::object(), reason) : chunk(std::string(), reason));
        if (include_usage_) {
            json u = base(chat_ ? "chat.completion.chunk" : "text_completion");
            u["choices"] = json::array();
            u["usage"] = openai_usage(st);
            out += event(u);
        }
        return out + "data: [DONE]\n\n";
    }

    std::string error(const std::string& message) override {
        return event(openai_error(api_error(500, "generation_failed", message))) + "data: [DONE]\n\n";
    }

    std::string whole(const std::string& content, const std::vector<chat::tool_call>& calls,
                      const job_stats& st) override {
        json j = base(chat_ ? "chat.completion" : "text_completion");
        json choice = json::object();
        choice["index"] = 0;
        if (chat_) {
            json m = json::object();
            m["role"] = "assistant";
            m["content"] = content.empty() && !calls.empty() ? json(nullptr) : json(content);
            if (!calls.empty()) {
                json tc = json::array();
                for (const auto& c : calls)
                    tc.push_back({{"id", new_call_id()},
                                  {"type", "function"},
                                  {"function", {{"name", c.name}, {"arguments", dump_json(c.arguments)}}}});
                m["tool_calls"] = tc;
            }
            choice["message"] = m;
        } else {
            choice["text"] = content;
        }
        choice["logprobs"] = nullptr;
        choice["finish_reason"] = openai_finish_reason(st.stop_reason, !calls.empty());
        j["choices"] = json::array({choice});
        j["usage"] = openai_usage(st);
        return dump_json(j);
    }

private:
    json base(const char* object) const {
        json j = json::object();
        j["id"] = id_;
        j["object"] = object;
        j["created"] = created_;
        j["model"] = model_;
        j["system_fingerprint"] = "memtile";
        return j;
    }
    // Chat: `d` is the delta object; completions: `d` is the text.
    json chunk(const json& d, const json& finish_reason) const {
        json j = base(chat_ ? "chat.completion.chunk" : "text_completion");
        json c = json::object();
        c["index"] = 0;
        if (chat_)
            c["delta"] = d;
        else
            c["text"] = d;
        c["logprobs"] = nullptr;
        c["finish_reason"] = finish_reason;
        j["choices"] = json::array({c});
        return j;
    }
    static std::string event(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

    bool chat_;
    std::string model_;
    bool include_usage_;
    std::string id_;
    int64_t created_;
};

}  // namespace

std::unique_ptr<reply_writer> make_openai_writer(bool chat, const std::string& model, bool include_usage) {
    return std::make_unique<openai_writer>(chat, model, include_usage);
}

}  // namespace memtile::server
