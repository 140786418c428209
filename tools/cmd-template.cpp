// memtile template: render a chat template (from a GGUF's tokenizer.chat_template or a .jinja file) over a
// JSON message list, printing the prompt exactly as the model would see it (no newline added).
#include <fmt/core.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include "commands.h"
#include "core/error.h"
#include "gguf/gguf-file.h"
#include "template/template.h"

namespace memtile::cli {
namespace {

std::string read_text(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("template", "cannot open {}", path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

nlohmann::ordered_json read_json(const std::string& path) {
    auto j = nlohmann::ordered_json::parse(read_text(path), nullptr, false);
    if (j.is_discarded()) fail("template", "{}: invalid JSON", path);
    return j;
}

// Token string for tokenizer.ggml.<which>_token_id, if the GGUF has both the id and the vocabulary.
std::optional<std::string> special_token(const gguf_file& g, const std::string& which) {
    const std::string key = "tokenizer.ggml." + which + "_token_id";
    const gguf_value* tokens = g.find("tokenizer.ggml.tokens");
    if (!g.has(key) || !tokens || !tokens->is_array()) return std::nullopt;
    uint64_t id = g.get_u64(key, 0);
    if (id >= tokens->array_size() || tokens->elem_type() != gguf_type::string) return std::nullopt;
    return std::string(tokens->string_at(id));
}

class template_command : public command {
public:
    CLI::App* add(CLI::App& app) override {
        CLI::App* sub = app.add_subcommand("template", "render a chat template over a conversation");
        sub->add_option("model", model_, "GGUF model whose tokenizer.chat_template to use");
        sub->add_option("--template", template_file_, "Jinja chat template file (instead of a model)");
        sub->add_option("--messages", messages_file_, "JSON file with the message list")->required();
        sub->add_option("--tools", tools_file_, "JSON file with the tool list");
        sub->add_flag("--add-generation-prompt", add_generation_prompt_, "end with the assistant turn header");
        sub->add_option("--bos-token", bos_, "BOS token string (default: from the model, else empty)");
        sub->add_option("--eos-token", eos_, "EOS token string (default: from the model, else empty)");
        return sub;
    }

    int run() override {
        if (model_.empty() == template_file_.empty()) fail("template", "give either MODEL.gguf or --template FILE");
        std::string source;
        std::string bos, eos;
        if (!template_file_.empty()) {
            source = read_text(template_file_);
        } else {
            auto g = gguf_file::open(model_);
            source = g->get_string("tokenizer.chat_template");
            if (source.empty()) {
                fmt::print(stderr, "note: {} has no tokenizer.chat_template; using the ChatML fallback\n", model_);
                source = std::string(jinja::chatml_template());
            }
            bos = special_token(*g, "bos").value_or("");
            eos = special_token(*g, "eos").value_or("");
        }
        if (bos_) bos = *bos_;
        if (eos_) eos = *eos_;
        nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
        ctx["messages"] = read_json(messages_file_);
        if (!ctx["messages"].is_array()) fail("template", "{}: expected a JSON array of messages", messages_file_);
        if (!tools_file_.empty()) ctx["tools"] = read_json(tools_file_);
        ctx["add_generation_prompt"] = add_generation_prompt_;
        ctx["bos_token"] = bos;
        ctx["eos_token"] = eos;
        std::string out = jinja::chat_template(std::move(source)).render(ctx);
        std::fwrite(out.data(), 1, out.size(), stdout);
        std::fflush(stdout);
        return 0;
    }

private:
    std::string model_, template_file_, messages_file_, tools_file_;
    bool add_generation_prompt_ = false;
    std::optional<std::string> bos_, eos_;
};

}  // namespace

std::unique_ptr<command> make_template_command() {
    return std::make_unique<template_command>();
}

}  // namespace memtile::cli
