#include "commands.h"

namespace memtile::cli {
namespace {
class inspect_command : public command {
public:
    CLI::App* add(CLI::App& app) override { return app.add_subcommand("inspect", "inspect"); }
    int run() override { return 0; }
};
}  // namespace
std::unique_ptr<command> make_inspect_command() { return std::make_unique<inspect_command>(); }
}  // namespace memtile::cli
