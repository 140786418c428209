// Internal interface between the evaluator, the filters and the value operations of the template interpreter.
#pragma once

#include <string>
#include <vector>

#include "core/error.h"
#include "template/template.h"
#include "template/value.h"

namespace memtile::jinja {

// Per-render counters and limits (see render_options).
class render_state {
public:
    explicit render_state(const render_options& o) : opts(o) {}
    const render_options& opts;
    size_t steps = 0;
    size_t depth = 0;

    void step() {
        if (++steps > opts.max_steps)
            fail("template", "render exceeded the step limit ({} steps): runaway loop?", opts.max_steps);
    }
    void check_size(size_t bytes) const {
        if (bytes > opts.max_output)
            fail("template", "render exceeded the output size limit ({} bytes)", opts.max_output);
    }
    void check_items(size_t n) const {
        if (n > opts.max_items) fail("template", "render exceeded the list size limit ({} items)", opts.max_items);
    }
    // Checks a freshly built value against the size limits.
    void check_value(const value& v) const {
        if (v.is_string()) check_size(v.as_string().size());
        if (v.is_sequence_kind()) check_items(v.items().size());
    }
};

[[noreturn]] void undefined_error(const value& u);

// Jinja's attribute and item lookup (sandboxed): a.b tries the attribute (methods) then the item, a[b] the
// item then the attribute. Missing ones give undefined values carrying an explanation.
value get_attr(const value& obj, const std::string& name);
value get_item(const value& obj, const value& key);
value slice_value(const value& obj, const value& start, const value& stop, const value& step);
// Python's iter(): strings give characters, dicts keys, undefined nothing; consumes iterators.
std::vector<value> iterate(const value& v);
value call_value(const value& fn, call_args& args);

value apply_filter(render_state& st, const std::string& name, const value& input, call_args& args);
bool apply_test(render_state& st, const std::string& name, const value& v, call_args& args);

value binary_op(render_state& st, const std::string& op, const value& a, const value& b);

// Argument helper for built-ins: positional index `i` or keyword `name`, else `def`.
value arg(const call_args& a, size_t i, const char* name, value def = value());

}  // namespace memtile::jinja
