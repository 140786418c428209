// memtile convert --from llama2c CHECKPOINT.bin --out FILE.gguf
// memtile convert --from hf CHECKPOINT_DIR --out FILE.gguf [--type T] [--vocab-only] [--tokenizer SOURCE]
#include <fmt/core.h>

#include "commands.h"
#include "convert/hf-import.h"
#include "core/error.h"
#include "core/units.h"
#include "models/llama2c-import.h"

namespace memtile::cli {
namespace {

class convert_command : public command {
public:
    CLI::App* add(CLI::App& app) override {
        auto* sub = app.add_subcommand("convert", "Convert a checkpoint of another format to GGUF");
        sub->add_option("--from", from_, "Source format: llama2c, hf (Hugging Face folder with safetensors)")
            ->required()
            ->check(CLI::IsMember({"llama2c", "hf"}));
        sub->add_option("input", in_, "Input checkpoint (file or folder)")->required();
        sub->add_option("--out,-o", out_, "Output GGUF file")->required();
        sub->add_option("--type", type_,
                        "hf: file type f32, f16 (default), bf16, q8_0, q4_0, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k");
        sub->add_flag("--vocab-only", hf_.vocab_only, "hf: write only the tokenizer metadata (no weights needed)");
        sub->add_option("--tokenizer", hf_.tokenizer_source,
                        "hf: tokenizer source: auto (default), tokenizer.json, vocab.json, tokenizer.model");
        sub->add_option("--threads,-t", hf_.threads, "Threads (default: physical cores)");
        return sub;
    }

    int run() override {
        if (from_ == "hf") return run_hf();
        const auto r = import_llama2c(in_, out_);
        fmt::print(
            "wrote {}: llama2.c model, dim {}, hidden {}, {} layers, {} heads ({} kv), vocab {}, context {}, "
            "{} classifier\n",
            out_, r.dim, r.hidden_dim, r.n_layers, r.n_heads, r.n_kv_heads, r.vocab_size, r.seq_len,
            r.shared_classifier ? "shared" : "separate");
        return 0;
    }

private:
    int run_hf() {
        const auto ft = file_type_from_name(type_);
        if (!ft || !file_type_writable(*ft))
            fail("convert", "unknown or unwritable file type '{}' (writable: {})", type_, writable_file_types());
        hf_.type = *ft;
        const auto r = import_hf(in_, out_, hf_);
        if (hf_.vocab_only)
            fmt::print("wrote {} ({}): vocabulary only, {} tokens, tokenizer {} (pre {}) from {}\n", out_,
                       format_bytes(r.file_bytes), r.n_vocab, r.tokenizer_model, r.tokenizer_pre, r.tokenizer_source);
        else
            fmt::print("wrote {} ({}): {} as {}, {}, {} tensors, {} tokens, tokenizer {} (pre {})\n", out_,
                       format_bytes(r.file_bytes), r.hf_arch, r.arch, file_type_name(hf_.type), r.n_tensors, r.n_vocab,
                       r.tokenizer_model, r.tokenizer_pre);
        return 0;
    }

    std::string from_, in_, out_, type_ = "f16";
    hf_import_options hf_;
};

}  // namespace
std::unique_ptr<command> make_convert_command() {
    return std::make_unique<convert_command>();
}
}  // namespace memtile::cli
