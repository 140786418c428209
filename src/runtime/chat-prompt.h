// Turns a conversation (OpenAI-style messages JSON, optional tools) into prompt tokens using the model's
// chat template (tokenizer.chat_template, or the documented ChatML fallback), as Hugging Face transformers
// would: render, then tokenize with special-token parsing. BOS is prepended when the tokenizer asks for it
// and the template did not already render it.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "template/template.h"
#include "template/tool-calls.h"

namespace memtile {

class gguf_file;
class tokenizer;

class chat_prompt {
public:
    // template_override: Jinja source to use instead of the model's (empty: the model's, else ChatML).
    chat_prompt(const gguf_file& g, std::shared_ptr<const tokenizer> tok, const std::string& template_override = {});

    bool model_has_template() const { return model_has_template_; }
    const std::string& template_source() const { return tmpl_->source(); }
    chat::tool_call_format tool_format() const { return tool_format_; }
    // Whether the template renders the tools it is given (a tool-capable model).
    bool supports_tools() const;

    std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                       bool add_generation_prompt) const;
    std::vector<int32_t> tokenize(const std::string& rendered) const;

private:
    std::shared_ptr<const tokenizer> tok_;
    std::unique_ptr<jinja::chat_template> tmpl_;
    bool model_has_template_ = false;
    chat::tool_call_format tool_format_;
    std::string bos_text_, eos_text_;
};

}  // namespace memtile
