#include "commands.h"

namespace memtile::cli {
namespace {
class convert_command : public command {
public:
    CLI::App* add(CLI::App& app) override { return app.add_subcommand("convert", "convert"); }
    int run() override { return 0; }
};
}  // namespace
std::unique_ptr<command> make_convert_command() { return std::make_unique<convert_command>(); }
}  // namespace memtile::cli
