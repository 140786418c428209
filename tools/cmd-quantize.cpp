// memtile quantize IN.gguf OUT.gguf TYPE [--threads N]: re-encode a model into a file type's tensor mixture and
// print the RMS error each tensor picked up.
#include <fmt/core.h>

#include "commands.h"
#include "convert/quantize-model.h"
#include "core/error.h"
#include "core/units.h"

namespace memtile::cli {
namespace {

class quantize_command : public command {
public:
    CLI::App* add(CLI::App& app) override {
        auto* sub = app.add_subcommand("quantize", "Re-encode a GGUF model into another file type");
        sub->add_option("input", in_, "Input GGUF model")->required()->check(CLI::ExistingFile);
        sub->add_option("output", out_, "Output GGUF file")->required();
        sub->add_option("type", type_, "Q8_0, Q4_0, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, F16, BF16 (or F32)")
            ->required();
        sub->add_option("--threads,-t", opts_.threads, "Threads (default: physical cores)");
        sub->add_flag("--quiet,-q", quiet_, "Print only the summary line, not the per-tensor table");
        return sub;
    }

    int run() override {
        const auto ft = file_type_from_name(type_);
        if (!ft || !file_type_writable(*ft))
            fail("quantize", "unknown or unwritable file type '{}' (writable: {})", type_, writable_file_types());
        opts_.type = *ft;
        const auto r = quantize_model(in_, out_, opts_);
        if (!quiet_) {
            fmt::print("{:<32} {:>6} {:>6} {:>12} {:>11} {:>11} {:>9}\n", "tensor", "from", "to", "elements",
                       "rms(input)", "rms(error)", "rel.err");
            for (const auto& t : r.tensors)
                fmt::print("{:<32} {:>6} {:>6} {:>12} {:>11.4e} {:>11.4e} {:>8.3f}%\n", t.name, dtype_name(t.from),
                           dtype_name(t.to), t.n_elems, t.rms_input, t.rms_error,
                           t.rms_input > 0 ? 100.0 * t.rms_error / t.rms_input : 0.0);
        }
        fmt::print("wrote {} ({}, {} → {}, {} tensors)\n", out_, file_type_name(opts_.type), format_bytes(r.in_bytes),
                   format_bytes(r.out_bytes), r.tensors.size());
        return 0;
    }

private:
    std::string in_, out_, type_;
    bool quiet_ = false;
    quantize_options opts_;
};

}  // namespace
std::unique_ptr<command> make_quantize_command() {
    return std::make_unique<quantize_command>();
}
}  // namespace memtile::cli
