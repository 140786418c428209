// memtile gen --arch PRESET --type T --out FILE [--vocab VOCAB.gguf] [--seed S]
#include <fmt/core.h>

#include "commands.h"
#include "core/error.h"
#include "core/units.h"
#include "models/presets.h"
#include "models/synthetic-model.h"

namespace memtile::cli {
namespace {

class gen_command : public command {
public:
    CLI::App* add(CLI::App& app) override {
        std::string presets;
        for (const auto& p : model_presets()) presets += fmt::format("\n  {:<15} {}", p.name, p.description);
        auto* sub = app.add_subcommand("gen", "Write a synthetic model with random weights and real shapes");
        sub->footer("Presets:" + presets);
        sub->add_option("--arch", opts_.preset, "Architecture preset")->required();
        sub->add_option("--type", type_, "File type: f32, f16, bf16, q8_0, q4_0, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k")
            ->required();
        sub->add_option("--out,-o", out_, "Output GGUF file")->required();
        sub->add_option("--vocab", opts_.vocab_path, "Embed the tokenizer of this GGUF (vocab size follows it)")
            ->check(CLI::ExistingFile);
        sub->add_option("--seed", opts_.seed, "Random seed");
        sub->add_option("--threads,-t", opts_.threads, "Threads (default: physical cores)");
        return sub;
    }

    int run() override {
        const auto ft = file_type_from_name(type_);
        if (!ft) fail("gen", "unknown file type '{}' (writable: {})", type_, writable_file_types());
        opts_.type = *ft;
        const auto r = write_synthetic_model(opts_, out_);
        fmt::print("wrote {} ({} tensors, {})\n", out_, r.n_tensors, format_bytes(r.file_bytes));
        return 0;
    }

private:
    synthetic_options opts_;
    std::string type_, out_;
};

}  // namespace
std::unique_ptr<command> make_gen_command() {
    return std::make_unique<gen_command>();
}
}  // namespace memtile::cli
