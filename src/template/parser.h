// Template parser: tokens (lexer.h) to a syntax tree (ast.h). Syntax errors name line and column.
// `max_depth` bounds the nesting of expressions and blocks so that hostile input cannot overflow the stack.
#pragma once

#include <memory>
#include <string_view>

#include "template/ast.h"

namespace memtile::jinja {

std::shared_ptr<program> parse(std::string_view source, size_t max_depth = 256);

}  // namespace memtile::jinja
