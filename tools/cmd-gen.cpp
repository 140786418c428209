#include "commands.h"

namespace memtile::cli {
namespace {
class gen_command : public command {
public:
    CLI::App* add(CLI::App& app) override { return app.add_subcommand("gen", "gen"); }
    int run() override { return 0; }
};
}  // namespace
std::unique_ptr<command> make_gen_command() { return std::make_unique<gen_command>(); }
}  // namespace memtile::cli
