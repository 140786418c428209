#include "runtime/chat-prompt.h"

#include "core/error.h"
#include "gguf/gguf-file.h"
#include "tokenizer/tokenizer.h"

namespace memtile {

chat_prompt::chat_prompt(const gguf_file& g, std::shared_ptr<const tokenizer> tok, const std::string& template_override)
    : tok_(std::move(tok)) {
    std::string source = template_override;
    if (source.empty()) {
        source = g.get_string("tokenizer.chat_template");
        model_has_template_ = !source.empty();
    }
    if (source.empty()) source = std::string(jinja::chatml_template());
    tmpl_ = std::make_unique<jinja::chat_template>(source);
    tool_format_ = chat::detect_tool_call_format(source);
    if (tok_->bos() >= 0) bos_text_ = tok_->token_text(tok_->bos());
    if (tok_->eos() >= 0) eos_text_ = tok_->token_text(tok_->eos());
}

bool chat_prompt::supports_tools() const {
    // A template handles tools when rendering with a tool list differs from rendering without one.
    const nlohmann::ordered_json msgs = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "x"}}});
    const nlohmann::ordered_json tools = nlohmann::ordered_json::array(
        {{{"type", "function"},
          {"function",
           {{"name", "probe_tool_name"},
            {"description", "d"},
            {"parameters", {{"type", "object"}, {"properties", nlohmann::ordered_json::object()}}}}}}});
    try {
        return render(msgs, tools, true).find("probe_tool_name") != std::string::npos;
    } catch (const error&) {
        return false;
    }
}

std::string chat_prompt::render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                bool add_generation_prompt) const {
    nlohmann::ordered_json ctx;
    ctx["messages"] = messages;
    if (tools.is_array() && !tools.empty()) ctx["tools"] = tools;
    ctx["add_generation_prompt"] = add_generation_prompt;
    ctx["bos_token"] = bos_text_;
    ctx["eos_token"] = eos_text_;
    return tmpl_->render(ctx);
}

std::vector<int32_t> chat_prompt::tokenize(const std::string& rendered) const {
    tokenize_options o;
    o.add_special = false;
    o.parse_special = true;
    std::vector<int32_t> ids = tok_->tokenize(rendered, o);
    if (tok_->add_bos() && tok_->bos() >= 0 && (ids.empty() || ids.front() != tok_->bos()))
        ids.insert(ids.begin(), tok_->bos());
    return ids;
}

}  // namespace memtile
