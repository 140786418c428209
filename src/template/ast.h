// Syntax tree of a parsed template, produced by parser.cpp and walked by evaluator.cpp. Nodes are generic
// (kind + operands) rather than one class per construct: the set of constructs is closed and small.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace memtile::jinja {

enum class expr_kind {
    literal,  // lit
    name,     // name
    list,     // args: items
    tuple,    // args: items
    dict,     // args: key0, value0, key1, value1...
    getattr,  // args[0].name
    getitem,  // args[0][args[1]]
    slice,    // args[0][args[1]:args[2]:args[3]], absent bounds are null
    call,     // args[0](args[1..], kwargs)
    filter,   // args[0] | name(args[1..], kwargs); args[0] is null inside filter blocks
    test,     // args[0] is [not] name(args[1..], kwargs)
    unary,    // op args[0]: "-", "+", "not"
    binary,   // args[0] op args[1]: arithmetic, "~", comparisons, "in", "not in", "and", "or"
    cond,     // args[1] if args[0] else args[2] (args[2] null: undefined)
};

struct expr;
using expr_ptr = std::unique_ptr<expr>;

struct expr {
    expr_kind kind;
    int line = 0;
    value lit;
    std::string name;      // variable, attribute, filter or test name, or operator
    bool negated = false;  // `is not`
    std::vector<expr_ptr> args;
    std::vector<std::pair<std::string, expr_ptr>> kwargs;
};

enum class stmt_kind {
    text,          // text
    output,        // {{ value }}
    if_,           // branches
    for_,          // for targets in value [if cond]: body [else else_body]
    set,           // set targets = value, or set targets[0].attr = value when attr is non-empty
    set_block,     // set targets[0] | filters: body
    macro,         // macro name(params): body
    call_block,    // call(params) value: body
    filter_block,  // filter filters: body
    break_,
    continue_,
    scope,  // body in a plain sequence (generation blocks)
};

struct stmt;
using stmt_ptr = std::unique_ptr<stmt>;
using stmt_list = std::vector<stmt_ptr>;

struct stmt {
    stmt_kind kind;
    int line = 0;
    std::string text;
    std::string name;
    std::string attr;
    expr_ptr value_expr;
    expr_ptr cond;
    std::vector<std::string> targets;
    std::vector<std::pair<expr_ptr, stmt_list>> branches;  // if / elif / else (else: null condition)
    stmt_list body;
    stmt_list else_body;
    std::vector<std::pair<std::string, expr_ptr>> params;  // macro and call-block parameters with defaults
    std::vector<expr_ptr> filters;                         // filter nodes applied to the rendered body
};

struct program {
    stmt_list body;
};

}  // namespace memtile::jinja
