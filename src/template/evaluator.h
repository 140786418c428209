// Tree-walking evaluator for parsed templates (ast.h).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "template/ast.h"
#include "template/interp.h"

namespace memtile::jinja {

// Renders `prog` with `globals` (built-in functions) below `context` (the caller's variables).
// Runtime errors are rethrown with the template line where they happened.
std::string render_program(const program& prog, const std::vector<std::pair<std::string, value>>& globals,
                           const std::vector<std::pair<std::string, value>>& context, render_state& st);

}  // namespace memtile::jinja
