// memtile convert --from llama2c CHECKPOINT.bin --out FILE.gguf
#include <fmt/core.h>

#include "commands.h"
#include "core/error.h"
#include "models/llama2c-import.h"

namespace memtile::cli {
namespace {

class convert_command : public command {
public:
    CLI::App* add(CLI::App& app) override {
        auto* sub = app.add_subcommand("convert", "Convert a checkpoint of another format to GGUF");
        sub->add_option("--from", from_, "Source format: llama2c")->required()->check(CLI::IsMember({"llama2c"}));
        sub->add_option("input", in_, "Input checkpoint (file or folder)")->required();
        sub->add_option("--out,-o", out_, "Output GGUF file")->required();
        return sub;
    }

    int run() override {
        const auto r = import_llama2c(in_, out_);
        fmt::print(
            "wrote {}: llama2.c model, dim {}, hidden {}, {} layers, {} heads ({} kv), vocab {}, context {}, "
            "{} classifier\n",
            out_, r.dim, r.hidden_dim, r.n_layers, r.n_heads, r.n_kv_heads, r.vocab_size, r.seq_len,
            r.shared_classifier ? "shared" : "separate");
        return 0;
    }

private:
    std::string from_, in_, out_;
};

}  // namespace
std::unique_ptr<command> make_convert_command() {
    return std::make_unique<convert_command>();
}
}  // namespace memtile::cli
