#include "request.h"

#include <atomic>
#include <chrono>
#include <random>

#include "api-error.h"
#include "core/rng.h"

namespace memtile::server {

const json* member(const json& obj, const char* key, json::value_t type, const char* type_name, bool required) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
        if (required) bad_request("'{}' is required", key);
        return nullptr;
    }
    const bool ok = type == json::value_t::number_float ? it->is_number() : it->type() == type;
    if (!ok) bad_request("'{}' must be {}", key, type_name);
    return &*it;
}

std::string string_member(const json& obj, const char* key, bool required) {
    const json* v = member(obj, key, json::value_t::string, "a string", required);
    return v ? v->get<std::string>() : std::string();
}

std::optional<double> number_member(const json& obj, const char* key) {
    const json* v = member(obj, key, json::value_t::number_float, "a number");
    if (!v) return std::nullopt;
    return v->get<double>();
}

std::optional<bool> bool_member(const json& obj, const char* key) {
    const json* v = member(obj, key, json::value_t::boolean, "a boolean");
    if (!v) return std::nullopt;
    return v->get<bool>();
}

std::vector<std::string> stop_member(const json& obj, const char* key) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return {};
    std::vector<std::string> out;
    if (it->is_string()) {
        out.push_back(it->get<std::string>());
    } else if (it->is_array()) {
        for (const auto& s : *it) {
            if (!s.is_string()) bad_request("'{}' must be a string or an array of strings", key);
            out.push_back(s.get<std::string>());
        }
    } else {
        bad_request("'{}' must be a string or an array of strings", key);
    }
    std::erase_if(out, [](const std::string& s) { return s.empty(); });
    return out;
}

namespace {

// Content as a string: a string, null, or an array of parts of which the text parts are joined.
std::string content_text(const json& m, size_t index) {
    auto it = m.find("content");
    if (it == m.end() || it->is_null()) return {};
    if (it->is_string()) return it->get<std::string>();
    if (!it->is_array()) bad_request("messages[{}].content must be a string, null or an array of parts", index);
    std::string out;
    for (const auto& part : *it) {
        if (part.is_string()) {
            out += part.get<std::string>();
            continue;
        }
        if (!part.is_object()) bad_request("messages[{}].content parts must be objects", index);
        const std::string type = string_member(part, "type");
        if (type != "text" && type != "input_text")
            bad_request("messages[{}]: content part type '{}' is not supported (text only)", index, type);
        out += string_member(part, "text", true);
    }
    return out;
}

json normalize_tool_calls(const json& calls, size_t index) {
    if (!calls.is_array()) bad_request("messages[{}].tool_calls must be an array", index);
    json out = json::array();
    for (const auto& c : calls) {
        if (!c.is_object()) bad_request("messages[{}].tool_calls entries must be objects", index);
        const json* fn = member(c, "function", json::value_t::object, "an object", true);
        json call = json::object();
        if (auto id = c.find("id"); id != c.end() && id->is_string()) call["id"] = *id;
        call["type"] = "function";
        json f = json::object();
        f["name"] = string_member(*fn, "name", true);
        json args = json::object();
        if (auto a = fn->find("arguments"); a != fn->end() && !a->is_null()) {
            if (a->is_string()) {
                args = json::parse(a->get<std::string>(), nullptr, false);
                if (args.is_discarded()) args = *a;  // not JSON: pass the text through
            } else {
                args = *a;
            }
        }
        f["arguments"] = args;
        call["function"] = f;
        out.push_back(call);
    }
    return out;
}

}  // namespace

json normalize_messages(const json& messages, std::vector<std::string>& notes) {
    if (!messages.is_array()) bad_request("'messages' must be an array");
    json out = json::array();
    for (size_t i = 0; i < messages.size(); i++) {
        const json& m = messages[i];
        if (!m.is_object()) bad_request("messages[{}] must be an object", i);
        const std::string role = string_member(m, "role", true);
        if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool")
            bad_request("messages[{}].role '{}' is not one of system, user, assistant, tool", i, role);
        json n = json::object();
        n["role"] = role == "developer" ? "system" : role;
        n["content"] = content_text(m, i);
        if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
            if (role != "assistant") bad_request("messages[{}]: only assistant messages carry tool_calls", i);
            n["tool_calls"] = normalize_tool_calls(*tc, i);
        }
        for (const char* k : {"tool_call_id", "tool_name", "name"})
            if (auto v = m.find(k); v != m.end() && v->is_string()) n[k] = *v;
        if (role == "tool" && !n.contains("name") && n.contains("tool_name")) n["name"] = n["tool_name"];
        out.push_back(std::move(n));
    }
    return out;
}

json merge_consecutive_users(const json& messages, size_t& merged) {
    json out = json::array();
    merged = 0;
    for (const auto& m : messages) {
        if (m["role"] == "user" && !out.empty() && out.back()["role"] == "user") {
            out.back()["content"] = out.back()["content"].get<std::string>() + "\n\n" + m["content"].get<std::string>();
            merged++;
            continue;
        }
        out.push_back(m);
    }
    return out;
}

json check_tools(const json& tools) {
    if (tools.is_null()) return json::array();
    if (!tools.is_array()) bad_request("'tools' must be an array");
    for (size_t i = 0; i < tools.size(); i++) {
        const json& t = tools[i];
        if (!t.is_object()) bad_request("tools[{}] must be an object", i);
        const std::string type = string_member(t, "type");
        if (!type.empty() && type != "function") bad_request("tools[{}].type '{}' is not supported", i, type);
        const json* fn = member(t, "function", json::value_t::object, "an object", true);
        string_member(*fn, "name", true);
    }
    return tools;
}

std::string dump_json(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string new_call_id() {
    static std::atomic<uint64_t> counter{0};
    static const uint64_t base =
        std::random_device{}() ^ uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    rng r(base + counter.fetch_add(1) * 0x9e3779b97f4a7c15ull);
    static constexpr char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::string id = "call_";
    for (int i = 0; i < 24; i++) id += alphabet[size_t(r.uniform() * 62) % 62];
    return id;
}

namespace {

std::vector<std::string_view> markers(chat::tool_call_format f) {
    switch (f) {
        case chat::tool_call_format::hermes: return {"<tool_call>"};
        case chat::tool_call_format::llama3: return {"<|python_tag|>"};
        case chat::tool_call_format::mistral: return {"[TOOL_CALLS]"};
        case chat::tool_call_format::deepseek_r1: return {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>"};
        case chat::tool_call_format::functionary_v3_1: return {"<function=", "<|python_tag|>"};
        case chat::tool_call_format::none: break;
    }
    return {};
}

}  // namespace

output_splitter::output_splitter(chat::tool_call_format format, bool tools_offered)
    : format_(format), active_(tools_offered && format != chat::tool_call_format::none) {}

std::string output_splitter::push(const std::string& piece) {
    all_ += piece;
    if (!active_) {
        emitted_ = all_.size();
        return piece;
    }
    if (in_call_) return {};
    // Llama 3 may answer with a bare JSON object: hold output that starts with '{'.
    if (format_ == chat::tool_call_format::llama3) {
        const size_t first = all_.find_first_not_of(" \t\r\n");
        if (first == std::string::npos) return {};
        if (all_[first] == '{' && emitted_ <= first) {
            in_call_ = true;
            return {};
        }
    }
    size_t cut = std::string::npos;
    for (auto m : markers(format_)) cut = std::min(cut, all_.find(m, emitted_ > m.size() ? emitted_ - m.size() : 0));
    size_t end = all_.size();
    if (cut != std::string::npos) {
        in_call_ = true;
        end = std::max(cut, emitted_);
    } else {
        size_t hold = 0;  // longest suffix that is a proper prefix of a marker
        for (auto m : markers(format_))
            for (size_t k = std::min(m.size() - 1, all_.size() - emitted_); k > hold; k--)
                if (all_.compare(all_.size() - k, k, m.data(), k) == 0) {
                    hold = k;
                    break;
                }
        end = all_.size() - hold;
    }
    std::string out = all_.substr(emitted_, end - emitted_);
    emitted_ = end;
    return out;
}

output_splitter::final_part output_splitter::finish() {
    final_part f;
    if (!active_) {
        content_ = all_;
        f.content = all_.substr(std::min(emitted_, all_.size()));
        return f;
    }
    chat::parsed_output p = chat::parse_tool_calls(all_, format_);
    if (p.calls.empty()) {
        content_ = all_;
        f.content = all_.substr(emitted_);
        return f;
    }
    content_ = p.content;
    f.calls = std::move(p.calls);
    if (content_.size() > emitted_ && content_.compare(0, emitted_, all_, 0, emitted_) == 0)
        f.content = content_.substr(emitted_);
    return f;
}

}  // namespace memtile::server
