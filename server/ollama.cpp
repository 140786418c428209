#include "ollama.h"

#include <fmt/chrono.h>
#include <fmt/core.h>

#include <chrono>

#include "api-error.h"
#include "gguf/gguf-file.h"
#include "models/transformer.h"
#include "quant/file-type.h"
#include "reply-writer.h"

namespace memtile::server {

std::string now_rfc3339() {
    const auto now = std::chrono::system_clock::now();
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
    return fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:06}Z", std::chrono::floor<std::chrono::seconds>(now), us);
}

namespace {

// Ollama's keep_alive: seconds as a number, or a duration string such as "5m", "30s", "1h", "-1" (forever).
std::optional<double> keep_alive(const json& body) {
    auto it = body.find("keep_alive");
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (it->is_number()) return it->get<double>() < 0 ? 1e12 : it->get<double>();
    if (!it->is_string()) bad_request("'keep_alive' must be a number or a duration string");
    const std::string s = it->get<std::string>();
    size_t used = 0;
    double v = 0;
    try {
        v = std::stod(s, &used);
    } catch (const std::exception&) {
        bad_request("'keep_alive' '{}' is not a duration", s);
    }
    const std::string unit = s.substr(used);
    if (v < 0) return 1e12;
    if (unit.empty() || unit == "s") return v;
    if (unit == "ms") return v / 1000;
    if (unit == "m") return v * 60;
    if (unit == "h") return v * 3600;
    bad_request("'keep_alive' '{}' has an unknown unit", s);
}

void read_options(const json& body, gen_request& r) {
    r.sampling.min_p = 0.0f;  // Ollama's default
    r.sampling.top_p = 0.9f;
    const json* o = member(body, "options", json::value_t::object, "an object");
    if (!o) return;
    if (auto v = number_member(*o, "temperature")) r.sampling.temperature = float(*v);
    if (auto v = number_member(*o, "top_p")) r.sampling.top_p = float(*v);
    if (auto v = number_member(*o, "top_k")) r.sampling.top_k = int(*v);
    if (auto v = number_member(*o, "min_p")) r.sampling.min_p = float(*v);
    if (auto v = number_member(*o, "repeat_penalty")) r.sampling.repeat_penalty = float(*v);
    if (auto v = number_member(*o, "repeat_last_n")) r.sampling.repeat_last_n = int(*v);
    if (auto v = number_member(*o, "presence_penalty")) r.sampling.presence_penalty = float(*v);
    if (auto v = number_member(*o, "frequency_penalty")) r.sampling.frequency_penalty = float(*v);
    if (auto v = number_member(*o, "seed")) {
        r.sampling.seed = uint64_t(int64_t(*v));
        r.seed_given = true;
    }
    if (auto v = number_member(*o, "num_predict")) r.n_predict = *v < 0 ? -1 : int(*v);
    if (o->contains("stop")) r.stop = stop_member(*o, "stop");
    if (auto v = number_member(*o, "num_ctx"))
        r.notes.push_back(fmt::format("num_ctx {} requested; slots have the context set by --ctx", int64_t(*v)));
}

void read_common(const json& body, gen_request& r) {
    if (!body.is_object()) bad_request("the request body must be a JSON object");
    r.model = string_member(body, "model", true);
    if (auto s = bool_member(body, "stream")) r.stream = *s;
    r.keep_alive_s = keep_alive(body);
    read_options(body, r);
    if (auto f = body.find("format"); f != body.end() && !f->is_null())
        r.notes.push_back("'format' is accepted but not enforced (no constrained decoding yet)");
    if (auto t = bool_member(body, "think"); t && *t)
        r.notes.push_back("'think' ignored: the model has no thinking mode");
}

}  // namespace

gen_request parse_ollama_chat(const json& body) {
    gen_request r;
    read_common(body, r);
    r.chat = true;
    auto it = body.find("messages");
    if (it == body.end() || it->is_null()) bad_request("'messages' is required");
    r.messages = normalize_messages(*it, r.notes);
    if (auto t = body.find("tools"); t != body.end()) r.tools = check_tools(*t);
    return r;
}

gen_request parse_ollama_generate(const json& body) {
    gen_request r;
    read_common(body, r);
    r.chat = false;
    r.prompt = string_member(body, "prompt");
    r.system = string_member(body, "system");
    if (auto raw = bool_member(body, "raw")) r.raw = *raw;
    if (body.contains("images")) bad_request("images are not supported by this model");
    return r;
}

json ollama_error(const std::string& message) {
    return json{{"error", message}};
}

namespace {

json details(const model_entry& e, const model_host* h) {
    json d = json::object();
    d["parent_model"] = "";
    d["format"] = "gguf";
    std::string family = "llama", quant = "unknown";
    uint64_t params = 0;
    if (h) {
        family = h->config().arch;
        quant = std::string(file_type_name(uint32_t(h->file().get_u64("general.file_type", 1000))));
        for (const auto& t : h->file().tensors()) params += t.n_elems;
    }
    d["family"] = family;
    d["families"] = json::array({family});
    d["parameter_size"] = params >= 1000000000 ? fmt::format("{:.1f}B", params / 1e9)
                          : params > 0         ? fmt::format("{:.1f}M", params / 1e6)
                                               : "";
    d["quantization_level"] = quant;
    return d;
}

}  // namespace

json ollama_tags(const std::vector<model_entry>& models) {
    json list = json::array();
    for (const auto& e : models) {
        json m = json::object();
        m["name"] = e.name;
        m["model"] = e.name;
        m["modified_at"] = e.modified_at;
        m["size"] = e.file_bytes;
        m["digest"] = e.digest;
        m["details"] = details(e, e.host.get());
        list.push_back(m);
    }
    return json{{"models", list}};
}

json ollama_show(const model_entry& e, const model_host& h) {
    const auto& cfg = h.config();
    json info = json::object();
    info["general.architecture"] = cfg.arch;
    info["general.name"] = cfg.name;
    uint64_t params = 0;
    for (const auto& t : h.file().tensors()) params += t.n_elems;
    info["general.parameter_count"] = params;
    info[cfg.arch + ".context_length"] = cfg.n_ctx_train;
    info[cfg.arch + ".embedding_length"] = cfg.n_embd;
    info[cfg.arch + ".block_count"] = cfg.n_layer;
    info[cfg.arch + ".attention.head_count"] = cfg.n_head;
    info[cfg.arch + ".attention.head_count_kv"] = cfg.n_head_kv;
    json caps = json::array({"completion"});
    if (h.template_handles_tools()) caps.push_back("tools");
    json r = json::object();
    r["license"] = "";
    r["modelfile"] = fmt::format("FROM {}\n", e.path);
    r["parameters"] = fmt::format("num_ctx {}", h.n_ctx());
    r["template"] = h.template_source();
    r["details"] = details(e, &h);
    r["model_info"] = info;
    r["capabilities"] = caps;
    r["modified_at"] = e.modified_at;
    return r;
}

json ollama_ps(const std::vector<model_entry>& models) {
    json list = json::array();
    for (const auto& e : models) {
        if (!e.host) continue;
        json m = json::object();
        m["name"] = e.name;
        m["model"] = e.name;
        m["size"] = e.host->resident_bytes();
        m["digest"] = e.digest;
        m["details"] = details(e, e.host.get());
        const auto left =
            std::chrono::duration_cast<std::chrono::seconds>(e.expires - std::chrono::steady_clock::now());
        const auto exp = std::chrono::system_clock::now() + (e.pinned ? std::chrono::hours(24 * 365 * 10) : left);
        m["expires_at"] = fmt::format("{:%Y-%m-%dT%H:%M:%S}Z", std::chrono::floor<std::chrono::seconds>(exp));
        m["size_vram"] = 0;
        m["context_length"] = e.host->n_ctx();
        list.push_back(m);
    }
    return json{{"models", list}};
}

json ollama_tool_calls(const std::vector<chat::tool_call>& calls) {
    json out = json::array();
    for (size_t i = 0; i < calls.size(); i++) {
        json fn = {{"index", i}, {"name", calls[i].name}, {"arguments", calls[i].arguments}};
        out.push_back(json{{"id", new_call_id()}, {"function", fn}});
    }
    return out;
}

std::string ollama_done_reason(const std::string& stop_reason) {
    if (stop_reason == "length" || stop_reason == "context") return "length";
    if (stop_reason == "cancel") return "cancel";
    return "stop";
}

namespace {

class ollama_writer : public reply_writer {
public:
    ollama_writer(bool chat, std::string model) : chat_(chat), model_(std::move(model)) {}

    const char* content_type(bool stream) const override {
        return stream ? "application/x-ndjson" : "application/json; charset=utf-8";
    }

    std::string delta(const std::string& text) override { return line(piece(text, {}), false); }

    std::string end(const output_splitter::final_part& f, const job_stats& st) override {
        std::string out;
        if (!f.content.empty() || !f.calls.empty()) out += line(piece(f.content, f.calls), false);
        json fin = piece("", {});
        add_stats(fin, st);
        return out + line(fin, true);
    }

    std::string error(const std::string& message) override { return dump_json(ollama_error(message)) + "\n"; }

    std::string whole(const std::string& content, const std::vector<chat::tool_call>& calls,
                      const job_stats& st) override {
        json j = piece(content, calls);
        add_stats(j, st);
        j["done"] = true;
        return dump_json(j);
    }

private:
    json piece(const std::string& text, const std::vector<chat::tool_call>& calls) const {
        json j = json::object();
        j["model"] = model_;
        j["created_at"] = now_rfc3339();
        if (chat_) {
            json m = {{"role", "assistant"}, {"content", text}};
            if (!calls.empty()) m["tool_calls"] = ollama_tool_calls(calls);
            j["message"] = m;
        } else {
            j["response"] = text;
        }
        j["done"] = false;
        return j;
    }
    static std::string line(json j, bool done) {
        j["done"] = done;
        return dump_json(j) + "\n";
    }
    static void add_stats(json& j, const job_stats& st) {
        j["done_reason"] = ollama_done_reason(st.stop_reason);
        j["total_duration"] = int64_t((st.queue_ms + st.prefill_ms + st.decode_ms) * 1e6);
        j["load_duration"] = 0;
        j["prompt_eval_count"] = st.n_prompt;
        j["prompt_cache_count"] = st.n_cached;
        j["prompt_eval_duration"] = int64_t(st.prefill_ms * 1e6);
        j["eval_count"] = st.n_generated;
        j["eval_duration"] = int64_t(st.decode_ms * 1e6);
    }
    bool chat_;
    std::string model_;
};

}  // namespace

std::unique_ptr<reply_writer> make_ollama_writer(bool chat, const std::string& model) {
    return std::make_unique<ollama_writer>(chat, model);
}

}  // namespace memtile::server
