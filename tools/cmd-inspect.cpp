// memtile inspect FILE [--json] [--ctx N] [--kv-type T]: what a GGUF file holds and what it costs to run.
#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "core/units.h"
#include "gguf/gguf-file.h"
#include "models/model-config.h"
#include "models/tensor-table.h"
#include "observe/memory-model.h"
#include "quant/file-type.h"

namespace memtile::cli {
namespace {

constexpr uint32_t k_default_ctx = 4096;

class inspect_command : public command {
public:
    CLI::App* add(CLI::App& app) override {
        auto* sub = app.add_subcommand("inspect", "Show a GGUF file's architecture, tensors and memory model");
        sub->add_option("file", path_, "GGUF file")->required();
        sub->add_flag("--json", json_, "Print one JSON object");
        sub->add_option("--ctx", ctx_, "Context length for the KV-cache and resident-memory estimate")
            ->check(CLI::Range(1u, 1u << 24));
        sub->add_option("--kv-type", kv_type_, "KV-cache element type (f16 or f32)")
            ->check(CLI::IsMember({"f16", "f32", "F16", "F32"}));
        sub->add_flag("--metadata", show_metadata_, "Also list every metadata key");
        sub->add_flag("--tensors", show_tensors_, "Also list every tensor");
        return sub;
    }

    int run() override {
        auto g = gguf_file::open(path_);
        const dtype kv = *dtype_from_name(kv_type_);
        const memory_model mm = compute_memory_model(*g, kv);
        nlohmann::ordered_json j;
        j["file"] = path_;
        j["gguf_version"] = g->version();
        j["file_bytes"] = g->file().size();
        const std::string arch = g->get_string("general.architecture");
        j["architecture"] = arch.empty() ? nlohmann::json() : nlohmann::json(arch);
        j["name"] = g->get_string("general.name");
        if (g->has("general.file_type")) j["file_type"] = file_type_name(uint32_t(g->get_u64("general.file_type", 0)));

        std::string config_error;
        std::optional<model_config> cfg;
        if (!arch.empty()) {
            try {
                cfg = read_model_config(*g);
                if (arch_supported(arch)) check_tensors(*g, *cfg);
            } catch (const error& e) {
                config_error = e.what();
            }
        }
        const uint32_t ctx = ctx_ ? ctx_ : (cfg ? std::min(cfg->n_ctx_train, k_default_ctx) : k_default_ctx);
        if (cfg) {
            const auto& c = *cfg;
            j["hparams"] = {{"n_vocab", c.n_vocab},
                            {"context_length", c.n_ctx_train},
                            {"n_embd", c.n_embd},
                            {"n_layer", c.n_layer},
                            {"n_head", c.n_head},
                            {"n_head_kv", c.n_head_kv},
                            {"head_dim", c.head_dim},
                            {"n_ff", c.n_ff},
                            {"n_rot", c.n_rot},
                            {"rope_freq_base", c.rope_freq_base},
                            {"rope_style", c.rope == rope_style::neox ? "neox" : "normal"},
                            {"norm_eps", c.norm_eps},
                            {"tied_embeddings", c.tied_embeddings},
                            {"rope_freqs", c.has_rope_freqs}};
            j["moe"] = c.expert_count ? nlohmann::json{{"expert_count", c.expert_count},
                                                       {"expert_used_count", c.expert_used_count}}
                                      : nlohmann::json("dense");
        }
        if (!config_error.empty()) j["config_error"] = config_error;
        if (arch.empty() || arch_supported(arch)) {
            j["supported"] = !arch.empty() && config_error.empty();
        } else {
            j["supported"] = false;
        }

        const auto* toks = g->find("tokenizer.ggml.tokens");
        j["tokenizer"] = {{"model", g->get_string("tokenizer.ggml.model")},
                          {"pre", g->get_string("tokenizer.ggml.pre")},
                          {"vocab_size", toks && toks->is_array() ? toks->array_size() : 0}};
        j["chat_template"] = g->has("tokenizer.chat_template");

        nlohmann::ordered_json types = nlohmann::ordered_json::object();
        for (const auto& [t, bytes] : mm.bytes_by_type)
            types[std::string(dtype_name(t))] = {{"tensors", mm.count_by_type.at(t)}, {"bytes", bytes}};
        j["tensor_count"] = g->tensors().size();
        j["tensor_types"] = types;
        j["memory"] = {{"weight_bytes", mm.weight_bytes},
                       {"streamed_bytes_per_token", mm.streamed_bytes_per_token},
                       {"tied_embeddings", mm.tied_embeddings},
                       {"kv_type", std::string(dtype_name(kv))},
                       {"kv_bytes_per_token", mm.kv_bytes_per_token},
                       {"ctx", ctx},
                       {"kv_bytes", mm.kv_bytes(ctx)},
                       {"activation_bytes", mm.activation_bytes},
                       {"resident_bytes", mm.resident_bytes(ctx)}};
        if (json_) {
            if (show_metadata_) j["metadata"] = metadata_json(*g);
            fmt::print("{}\n", j.dump(2));
            return 0;
        }
        print_text(*g, j, mm, ctx, kv);
        return 0;
    }

private:
    static nlohmann::ordered_json metadata_json(const gguf_file& g) {
        nlohmann::ordered_json m = nlohmann::ordered_json::object();
        for (const auto& [k, v] : g.metadata()) m[k] = v.to_display();
        return m;
    }

    void print_text(const gguf_file& g, const nlohmann::ordered_json& j, const memory_model& mm, uint32_t ctx,
                    dtype kv) const {
        fmt::print("file:          {} (GGUF v{}, {})\n", path_, g.version(), format_bytes(g.file().size()));
        const std::string arch = j["architecture"].is_null() ? "(none)" : j["architecture"].get<std::string>();
        fmt::print("architecture:  {}{}\n", arch, j["supported"].get<bool>() ? "" : "  (not runnable by memtile)");
        if (!j["name"].get<std::string>().empty()) fmt::print("name:          {}\n", j["name"].get<std::string>());
        if (j.contains("file_type")) fmt::print("file type:     {}\n", j["file_type"].get<std::string>());
        if (j.contains("config_error")) fmt::print("problem:       {}\n", j["config_error"].get<std::string>());
        if (j.contains("hparams")) {
            const auto& h = j["hparams"];
            fmt::print(
                "hparams:       n_embd {}, n_layer {}, n_head {} (kv {}), head_dim {}, n_ff {}, n_vocab {}, "
                "context {}\n",
                h["n_embd"].get<int>(), h["n_layer"].get<int>(), h["n_head"].get<int>(), h["n_head_kv"].get<int>(),
                h["head_dim"].get<int>(), h["n_ff"].get<int>(), h["n_vocab"].get<int>(),
                h["context_length"].get<int>());
            fmt::print("rope:          {}, {} dims, freq_base {:g}{}\n", h["rope_style"].get<std::string>(),
                       h["n_rot"].get<int>(), h["rope_freq_base"].get<double>(),
                       h["rope_freqs"].get<bool>() ? ", frequency factors" : "");
            fmt::print("moe:           {}\n",
                       j["moe"].is_string()
                           ? std::string("dense")
                           : fmt::format("{} experts, {} used per token", j["moe"]["expert_count"].get<int>(),
                                         j["moe"]["expert_used_count"].get<int>()));
        }
        const auto& tok = j["tokenizer"];
        fmt::print("tokenizer:     {}{}, {} tokens; chat template: {}\n",
                   tok["model"].get<std::string>().empty() ? "(none)" : tok["model"].get<std::string>(),
                   tok["pre"].get<std::string>().empty() ? "" : " (pre: " + tok["pre"].get<std::string>() + ")",
                   tok["vocab_size"].get<size_t>(), j["chat_template"].get<bool>() ? "yes" : "no");
        fmt::print("tensors:       {}\n", g.tensors().size());
        for (const auto& [t, bytes] : mm.bytes_by_type)
            fmt::print("  {:<6} {:>5} tensors  {:>12}\n", dtype_name(t), mm.count_by_type.at(t), format_bytes(bytes));
        fmt::print("memory model:\n");
        fmt::print("  weights                      {:>12}\n", format_bytes(mm.weight_bytes));
        fmt::print("  streamed per generated token {:>12}  ({})\n", format_bytes(mm.streamed_bytes_per_token),
                   mm.tied_embeddings ? "all weights; the tied embedding table is read in full as the output matrix"
                                      : "all weights except the token-embedding table, of which one row is read");
        if (mm.kv_bytes_per_token) {
            fmt::print("  KV cache per token ({})     {:>12}\n", dtype_name(kv), format_bytes(mm.kv_bytes_per_token));
            fmt::print("  KV cache for {} tokens {:>12}\n", fmt::format("{:<7}", ctx), format_bytes(mm.kv_bytes(ctx)));
            fmt::print("  resident at ctx {:<7}     {:>12}  (weights + KV cache + scratch)\n", ctx,
                       format_bytes(mm.resident_bytes(ctx)));
        }
        if (show_metadata_) {
            fmt::print("metadata:\n");
            for (const auto& [k, v] : g.metadata()) fmt::print("  {} = {}\n", k, v.to_display());
        }
        if (show_tensors_) {
            fmt::print("tensor list:\n");
            for (const auto& t : g.tensors())
                fmt::print("  {:<32} {:<6} {:<20} {:>12}\n", t.name, dtype_name(t.type), dims_to_string(t.dims),
                           format_bytes(t.n_bytes));
        }
    }

    std::string path_;
    bool json_ = false;
    bool show_metadata_ = false;
    bool show_tensors_ = false;
    uint32_t ctx_ = 0;
    std::string kv_type_ = "f16";
};

}  // namespace
std::unique_ptr<command> make_inspect_command() {
    return std::make_unique<inspect_command>();
}
}  // namespace memtile::cli
