// Chat templates: a Jinja2-subset interpreter that renders Hugging Face chat templates
// (tokenizer.chat_template) byte-identically to Python Jinja2 3.1 configured as transformers configures it:
// trim_blocks, lstrip_blocks, loop controls, an immutable sandbox, tojson with ensure_ascii=False, and the
// globals raise_exception(msg) and strftime_now(fmt).
//
// Contract: parsing and rendering throw memtile::error (subsystem "template") for syntax errors (with line and
// column), runtime errors (with the template line, worded like Python's: "UndefinedError: 'x' is undefined"),
// raise_exception() and exceeded limits. Rendering never loops forever or grows without bound: every
// statement and expression evaluation counts against max_steps, macro calls against max_depth, and the output
// and every string or list a template builds against max_output / max_items.
#pragma once

#include <nlohmann/json.hpp>

#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace memtile::jinja {

struct program;

struct render_options {
    size_t max_steps = 10'000'000;  // evaluated statements and expressions
    size_t max_depth = 200;         // nested macro calls (and parser nesting)
    size_t max_output = 16u << 20;  // bytes of output, and of any string built while rendering
    size_t max_items = 1u << 20;    // elements of any list built while rendering (range, *, +)
    std::function<std::tm()> now;   // local time for strftime_now; empty: the system clock
};

class chat_template {
public:
    // Parses `source`; throws memtile::error on syntax errors.
    explicit chat_template(std::string source, size_t max_depth = 256);

    // Renders with the JSON object `context` as the template's variables (messages, tools,
    // add_generation_prompt, bos_token, eos_token, ...). JSON key order is kept: tojson depends on it.
    std::string render(const nlohmann::ordered_json& context, const render_options& opts = {}) const;

    const std::string& source() const { return source_; }

private:
    std::string source_;
    std::shared_ptr<const program> program_;
};

// The template used for models whose GGUF has no tokenizer.chat_template: ChatML
// ("<|im_start|>role\ncontent<|im_end|>\n" per message, "<|im_start|>assistant\n" as the generation prompt),
// the most widely understood chat format among instruction-tuned models.
std::string_view chatml_template();

}  // namespace memtile::jinja
