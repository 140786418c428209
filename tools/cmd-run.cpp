#include "commands.h"

namespace memtile::cli {
namespace {
class run_command : public command {
public:
    CLI::App* add(CLI::App& app) override { return app.add_subcommand("run", "run"); }
    int run() override { return 0; }
};
}  // namespace
std::unique_ptr<command> make_run_command() { return std::make_unique<run_command>(); }
}  // namespace memtile::cli
