// `memtile tokenize MODEL.gguf TEXT|--file F` and `memtile detokenize MODEL.gguf ID...`: the model's tokenizer on
// the command line, for debugging prompts and comparing against other implementations.
#include <fmt/core.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace memtile::cli {
namespace {

// A piece as a double-quoted, escaped string: valid UTF-8 is kept, control and invalid bytes become escapes.
std::string quote_piece(const std::string& s) {
    std::string out = "\"";
    for (size_t i = 0; i < s.size();) {
        unsigned char c = s[i];
        size_t n = c < 0x80 ? 1 : c < 0xC0 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF8 ? 4 : 0;
        bool valid = n > 0 && i + n <= s.size();
        for (size_t k = 1; valid && k < n; ++k) valid = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
        if (!valid) {
            out += fmt::format("\\x{:02x}", c);
            ++i;
            continue;
        }
        if (n > 1) {
            out.append(s, i, n);
        } else if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c < 0x20 || c == 0x7F) {
            out += fmt::format("\\x{:02x}", c);
        } else {
            out += static_cast<char>(c);
        }
        i += n;
    }
    return out + "\"";
}

class tokenize_command : public command {
public:
    CLI::App* add(CLI::App& app) override {
        auto* sub = app.add_subcommand("tokenize", "Print the token ids and pieces of a text");
        sub->add_option("model", model_, "GGUF file (a vocab-only file is enough)")->required();
        sub->add_option("text", text_, "Text to tokenize");
        sub->add_option("--file", file_, "Read the text from a file instead");
        sub->add_flag("--json", json_, "Print {\"ids\":[...],\"pieces\":[...]}");
        sub->add_flag("--no-bos", no_bos_, "Do not add BOS/EOS even if the model asks for them");
        sub->add_flag("--parse-special", parse_special_, "Recognise control tokens such as <|im_end|> in the text");
        return sub;
    }

    int run() override {
        std::string text = text_;
        if (!file_.empty()) {
            std::ifstream in(file_, std::ios::binary);
            if (!in) fail("tokenize", "cannot read {}", file_);
            std::ostringstream ss;
            ss << in.rdbuf();
            text = ss.str();
        }
        auto tok = tokenizer::open(model_);
        tokenize_options opts;
        opts.add_special = !no_bos_;
        opts.parse_special = parse_special_;
        std::vector<token_id> ids = tok->tokenize(text, opts);
        if (json_) {
            nlohmann::json j;
            j["ids"] = ids;
            j["pieces"] = nlohmann::json::array();
            for (token_id id : ids) j["pieces"].push_back(tok->token_to_piece(id, true));
            fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        } else {
            for (token_id id : ids) fmt::print("{}\t{}\n", id, quote_piece(tok->token_to_piece(id, true)));
        }
        return 0;
    }

private:
    std::string model_, text_, file_;
    bool json_ = false, no_bos_ = false, parse_special_ = false;
};

class detokenize_command : public command {
public:
    CLI::App* add(CLI::App& app) override {
        auto* sub = app.add_subcommand("detokenize", "Print the text of token ids");
        sub->add_option("model", model_, "GGUF file (a vocab-only file is enough)")->required();
        sub->add_option("ids", ids_, "Token ids")->required();
        sub->add_flag("--render-special", render_special_, "Print the text of control tokens too");
        return sub;
    }

    int run() override {
        auto tok = tokenizer::open(model_);
        std::string text = tok->detokenize(ids_, render_special_);
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fputc('\n', stdout);
        return 0;
    }

private:
    std::string model_;
    std::vector<token_id> ids_;
    bool render_special_ = false;
};

}  // namespace

std::unique_ptr<command> make_tokenize_command() {
    return std::make_unique<tokenize_command>();
}
std::unique_ptr<command> make_detokenize_command() {
    return std::make_unique<detokenize_command>();
}

}  // namespace memtile::cli
