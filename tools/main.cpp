// memtile: one binary, one sub-command per verb (tools/cmd-<verb>.cpp). Errors from the library are
// printed here with a non-zero exit status.
#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <utility>

#include "commands.h"
#include "core/error.h"
#include "observe/backends.h"

int main(int argc, char** argv) {
    using namespace memtile::cli;
    CLI::App app{"memtile: run large language models at the speed the memory system allows"};
    app.set_version_flag("--version", [] {
        std::string v = std::string("memtile ") + MEMTILE_VERSION + "\nbackends:";
        for (const auto& b : memtile::list_backends())
            v += fmt::format("\n  {:<5} {:<15} {}: {}", b.name, b.compiled ? "compiled in" : "not compiled in",
                             b.device_present ? "device present" : "no usable device", b.detail);
        return v;
    });
    app.require_subcommand(1);

    std::vector<std::pair<CLI::App*, std::unique_ptr<command>>> cmds;
    for (auto make : {make_run_command, make_chat_command, make_serve_command, make_inspect_command, make_gen_command,
                      make_convert_command, make_quantize_command, make_tokenize_command, make_detokenize_command,
                      make_template_command, make_probe_command, make_bench_command, make_diag_command}) {
        auto c = make();
        CLI::App* sub = c->add(app);
        cmds.emplace_back(sub, std::move(c));
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    try {
        for (auto& [sub, c] : cmds)
            if (sub->parsed()) return c->run();
    } catch (const std::exception& e) {
        fmt::print(stderr, "error: {}\n", e.what());
        return 1;
    }
    return 0;
}
