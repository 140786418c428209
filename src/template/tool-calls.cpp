#include "template/tool-calls.h"

namespace memtile::chat {

namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view ds_calls_begin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view ds_calls_end = "<｜tool▁calls▁end｜>";
constexpr std::string_view ds_call_begin = "<｜tool▁call▁begin｜>";
constexpr std::string_view ds_call_end = "<｜tool▁call▁end｜>";
constexpr std::string_view ds_sep = "<｜tool▁sep｜>";
constexpr std::string_view python_tag = "<|python_tag|>";

std::string trim(std::string_view s) {
    size_t b = s.find_first_not_of(" \t\r\n");
    if (b == std::string_view::npos) return "";
    size_t e = s.find_last_not_of(" \t\r\n");
    return std::string(s.substr(b, e - b + 1));
}

// End (one past) of the JSON object or array starting at `start`, by bracket matching outside strings;
// npos if unbalanced. The text is then validated by a real parse.
size_t json_extent(std::string_view s, size_t start) {
    int depth = 0;
    bool in_string = false;
    for (size_t i = start; i < s.size(); ++i) {
        char c = s[i];
        if (in_string) {
            if (c == '\\')
                ++i;
            else if (c == '"')
                in_string = false;
            continue;
        }
        if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            ++depth;
        } else if (c == '}' || c == ']') {
            if (--depth == 0) return i + 1;
            if (depth < 0) return std::string_view::npos;
        }
    }
    return std::string_view::npos;
}

std::optional<json> parse_json(std::string_view s) {
    json j = json::parse(s.begin(), s.end(), nullptr, false);
    if (j.is_discarded()) return std::nullopt;
    return j;
}

// Arguments may be an object or a string holding one (OpenAI style).
std::optional<json> as_arguments(const json& a) {
    if (a.is_object()) return a;
    if (a.is_string()) {
        auto inner = parse_json(a.get<std::string>());
        if (inner && inner->is_object()) return inner;
    }
    return std::nullopt;
}

// {"name": "...", "<args_key>": {...}} -> call.
std::optional<tool_call> call_from_object(const json& j, std::initializer_list<const char*> args_keys) {
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
    for (const char* key : args_keys) {
        if (!j.contains(key)) continue;
        auto args = as_arguments(j[key]);
        if (!args) return std::nullopt;
        return tool_call{j["name"].get<std::string>(), *args};
    }
    return std::nullopt;
}

parsed_output plain(std::string_view text) {
    return parsed_output{std::string(text), {}};
}

parsed_output parse_hermes(std::string_view text) {
    parsed_output out;
    size_t pos = 0;
    for (;;) {
        size_t b = text.find("<tool_call>", pos);
        if (b == std::string_view::npos) break;
        size_t body = b + std::string_view("<tool_call>").size();
        size_t e = text.find("</tool_call>", body);
        if (e == std::string_view::npos) break;
        auto j = parse_json(trim(text.substr(body, e - body)));
        auto call = j ? call_from_object(*j, {"arguments", "parameters"}) : std::nullopt;
        size_t after = e + std::string_view("</tool_call>").size();
        if (call) {
            out.content += text.substr(pos, b - pos);
            out.calls.push_back(std::move(*call));
        } else {
            out.content += text.substr(pos, after - pos);
        }
        pos = after;
    }
    out.content += text.substr(pos);
    if (!out.calls.empty()) out.content = trim(out.content);
    return out;
}

// Builtin-tool form of Llama 3.1: name.call(key="value", ...).
std::optional<tool_call> parse_python_call(std::string_view s) {
    std::string t = trim(s);
    size_t dot = t.find(".call(");
    if (dot == std::string::npos || t.back() != ')') return std::nullopt;
    tool_call c{t.substr(0, dot), json::object()};
    for (char ch : c.name)
        if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_')) return std::nullopt;
    std::string_view args = std::string_view(t).substr(dot + 6, t.size() - dot - 7);
    size_t i = 0;
    while (i < args.size()) {
        while (i < args.size() && (args[i] == ' ' || args[i] == ',')) ++i;
        if (i >= args.size()) break;
        size_t eq = args.find('=', i);
        if (eq == std::string_view::npos) return std::nullopt;
        std::string key = trim(args.substr(i, eq - i));
        i = eq + 1;
        while (i < args.size() && args[i] == ' ') ++i;
        if (i >= args.size() || (args[i] != '"' && args[i] != '\'')) return std::nullopt;
        char q = args[i++];
        std::string val;
        while (i < args.size() && args[i] != q) {
            if (args[i] == '\\' && i + 1 < args.size()) ++i;
            val += args[i++];
        }
        if (i >= args.size()) return std::nullopt;
        ++i;
        c.arguments[key] = val;
    }
    return c;
}

parsed_output parse_llama3(std::string_view text) {
    size_t tag = text.find(python_tag);
    std::string_view body = tag == std::string_view::npos ? text : text.substr(tag + python_tag.size());
    std::string prefix = tag == std::string_view::npos ? "" : trim(text.substr(0, tag));
    std::string t = trim(body);
    parsed_output out;
    out.content = prefix;
    // One JSON object, or several separated by ';' (as Llama 3.1 sometimes emits).
    size_t pos = 0;
    while (pos < t.size() && t[pos] == '{') {
        size_t end = json_extent(t, pos);
        if (end == std::string::npos) break;
        auto j = parse_json(std::string_view(t).substr(pos, end - pos));
        auto call = j ? call_from_object(*j, {"parameters", "arguments"}) : std::nullopt;
        if (!call) break;
        out.calls.push_back(std::move(*call));
        pos = end;
        while (pos < t.size() && (t[pos] == ';' || t[pos] == ' ' || t[pos] == '\n')) ++pos;
    }
    if (!out.calls.empty() && pos >= t.size()) return out;
    if (tag != std::string_view::npos) {
        if (auto c = parse_python_call(body)) return parsed_output{prefix, {std::move(*c)}};
    }
    return plain(text);
}

parsed_output parse_mistral(std::string_view text) {
    size_t tag = text.find("[TOOL_CALLS]");
    if (tag == std::string_view::npos) return plain(text);
    size_t start = text.find_first_not_of(" \t\r\n", tag + std::string_view("[TOOL_CALLS]").size());
    if (start == std::string_view::npos || text[start] != '[') return plain(text);
    size_t end = json_extent(text, start);
    if (end == std::string_view::npos) return plain(text);
    auto j = parse_json(text.substr(start, end - start));
    if (!j || !j->is_array() || j->empty()) return plain(text);
    parsed_output out;
    for (auto& item : *j) {
        auto call = call_from_object(item, {"arguments", "parameters"});
        if (!call) return plain(text);
        out.calls.push_back(std::move(*call));
    }
    out.content = trim(std::string(text.substr(0, tag)) + std::string(text.substr(end)));
    return out;
}

parsed_output parse_deepseek_r1(std::string_view text) {
    size_t begin = text.find(ds_calls_begin);
    if (begin == std::string_view::npos) return plain(text);
    size_t pos = begin + ds_calls_begin.size();
    parsed_output out;
    for (;;) {
        size_t p = text.find_first_not_of(" \t\r\n", pos);
        if (p == std::string_view::npos || text.substr(p, ds_call_begin.size()) != ds_call_begin) break;
        p += ds_call_begin.size();
        size_t sep = text.find(ds_sep, p);
        size_t end = text.find(ds_call_end, p);
        if (sep == std::string_view::npos || end == std::string_view::npos || sep > end) return plain(text);
        std::string_view rest = text.substr(sep + ds_sep.size(), end - sep - ds_sep.size());
        size_t nl = rest.find('\n');
        if (nl == std::string_view::npos) return plain(text);
        std::string name = trim(rest.substr(0, nl));
        std::string body = trim(rest.substr(nl + 1));
        if (body.starts_with("```json"))
            body.erase(0, 7);
        else if (body.starts_with("```"))
            body.erase(0, 3);
        if (body.ends_with("```")) body.erase(body.size() - 3);
        auto j = parse_json(trim(body));
        auto args = j ? as_arguments(*j) : std::nullopt;
        if (name.empty() || !args) return plain(text);
        out.calls.push_back(tool_call{name, *args});
        pos = end + ds_call_end.size();
    }
    if (out.calls.empty()) return plain(text);
    size_t close = text.find(ds_calls_end, pos);
    size_t after = close == std::string_view::npos ? pos : close + ds_calls_end.size();
    out.content = trim(std::string(text.substr(0, begin)) + std::string(text.substr(after)));
    return out;
}

parsed_output parse_functionary(std::string_view text) {
    parsed_output out;
    size_t pos = 0;
    for (;;) {
        size_t b = text.find("<function=", pos);
        if (b == std::string_view::npos) break;
        size_t name_start = b + std::string_view("<function=").size();
        size_t gt = text.find('>', name_start);
        size_t e = text.find("</function>", name_start);
        if (gt == std::string_view::npos || e == std::string_view::npos || gt > e) break;
        std::string name = trim(text.substr(name_start, gt - name_start));
        auto j = parse_json(trim(text.substr(gt + 1, e - gt - 1)));
        auto args = j ? as_arguments(*j) : std::nullopt;
        size_t after = e + std::string_view("</function>").size();
        if (!name.empty() && args) {
            out.content += text.substr(pos, b - pos);
            out.calls.push_back(tool_call{name, *args});
        } else {
            out.content += text.substr(pos, after - pos);
        }
        pos = after;
    }
    std::string_view rest = text.substr(pos);
    size_t tag = rest.find(python_tag);
    if (tag != std::string_view::npos) {
        // Functionary's code interpreter: everything after the tag is Python source.
        out.content += rest.substr(0, tag);
        out.calls.push_back(tool_call{"python", json{{"code", std::string(rest.substr(tag + python_tag.size()))}}});
    } else {
        out.content += rest;
    }
    if (!out.calls.empty()) out.content = trim(out.content);
    return out;
}

}  // namespace

tool_call_format detect_tool_call_format(std::string_view src) {
    auto has = [&](std::string_view m) { return src.find(m) != std::string_view::npos; };
    if (has(ds_calls_begin)) return tool_call_format::deepseek_r1;
    if (has("[TOOL_CALLS]")) return tool_call_format::mistral;
    if (has("<function=")) return tool_call_format::functionary_v3_1;
    if (has("<tool_call>")) return tool_call_format::hermes;
    if (has(python_tag) || (has("<|start_header_id|>") && has("\"parameters\""))) return tool_call_format::llama3;
    return tool_call_format::none;
}

std::optional<tool_call_format> tool_call_format_from_name(std::string_view name) {
    for (auto f : {tool_call_format::none, tool_call_format::hermes, tool_call_format::llama3,
                   tool_call_format::mistral, tool_call_format::deepseek_r1, tool_call_format::functionary_v3_1})
        if (tool_call_format_name(f) == name) return f;
    return std::nullopt;
}

std::string_view tool_call_format_name(tool_call_format f) {
    switch (f) {
        case tool_call_format::none: return "none";
        case tool_call_format::hermes: return "hermes";
        case tool_call_format::llama3: return "llama3";
        case tool_call_format::mistral: return "mistral";
        case tool_call_format::deepseek_r1: return "deepseek-r1";
        case tool_call_format::functionary_v3_1: return "functionary-v3.1";
    }
    return "none";
}

parsed_output parse_tool_calls(std::string_view text, tool_call_format format) {
    switch (format) {
        case tool_call_format::hermes: return parse_hermes(text);
        case tool_call_format::llama3: return parse_llama3(text);
        case tool_call_format::mistral: return parse_mistral(text);
        case tool_call_format::deepseek_r1: return parse_deepseek_r1(text);
        case tool_call_format::functionary_v3_1: return parse_functionary(text);
        case tool_call_format::none: break;
    }
    return plain(text);
}

}  // namespace memtile::chat
