// Registration of CLI verbs. Each tools/cmd-<verb>.cpp defines a command whose add() creates its CLI11
// sub-command (binding options to the command's own fields) and whose run() executes it and returns the
// process exit status. Library errors (memtile::error) propagate to main, which prints them.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <vector>

namespace memtile::cli {

class command {
public:
    virtual ~command() = default;
    virtual CLI::App* add(CLI::App& app) = 0;
    virtual int run() = 0;
};

std::unique_ptr<command> make_inspect_command();
std::unique_ptr<command> make_gen_command();
std::unique_ptr<command> make_convert_command();
std::unique_ptr<command> make_quantize_command();
std::unique_ptr<command> make_run_command();
std::unique_ptr<command> make_chat_command();
std::unique_ptr<command> make_tokenize_command();
std::unique_ptr<command> make_detokenize_command();
std::unique_ptr<command> make_template_command();
std::unique_ptr<command> make_serve_command();
std::unique_ptr<command> make_probe_command();
std::unique_ptr<command> make_bench_command();
std::unique_ptr<command> make_diag_command();

}  // namespace memtile::cli
