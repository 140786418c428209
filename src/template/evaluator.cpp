#include "template/evaluator.h"

#include <cmath>
#include <limits>
#include <unordered_map>

#include "template/strings.h"

namespace memtile::jinja {

namespace {

// Variable scopes. `if` shares its scope; each loop iteration, macro call and call-block body gets a child
// scope, so assignments there do not leak out (Jinja's scoping rules; namespaces are the way out).
struct scope : std::enable_shared_from_this<scope> {
    std::unordered_map<std::string, value> vars;
    scope* parent = nullptr;

    const value* lookup(const std::string& name) const {
        for (const scope* s = this; s; s = s->parent) {
            auto it = s->vars.find(name);
            if (it != s->vars.end()) return &it->second;
        }
        return nullptr;
    }
};

using scope_ptr = std::shared_ptr<scope>;

enum class flow { normal, break_, continue_ };

class evaluator {
public:
    explicit evaluator(render_state& st) : st_(st) {}

    scope_ptr new_scope(scope* parent) {
        auto s = std::make_shared<scope>();
        s->parent = parent;
        return s;
    }

    flow exec_list(const stmt_list& body, scope& sc, std::string& out) {
        for (auto& s : body) {
            flow f = exec(*s, sc, out);
            if (f != flow::normal) return f;
        }
        return flow::normal;
    }

    int error_line = 0;  // innermost statement line of the first error, for the message

private:
    render_state& st_;
    // Scopes that macros were defined in; kept alive for the whole render (macros refer to them by pointer,
    // which avoids a reference cycle scope -> macro -> scope).
    std::vector<scope_ptr> pinned_;

    void emit(std::string& out, const std::string& s) {
        out += s;
        st_.check_size(out.size());
    }

    flow exec(const stmt& s, scope& sc, std::string& out) {
        st_.step();
        try {
            return exec_inner(s, sc, out);
        } catch (const std::exception&) {
            if (error_line == 0) error_line = s.line;
            throw;
        }
    }

    flow exec_inner(const stmt& s, scope& sc, std::string& out) {
        switch (s.kind) {
            case stmt_kind::text: emit(out, s.text); return flow::normal;
            case stmt_kind::output: emit(out, eval(*s.value_expr, sc).str()); return flow::normal;
            case stmt_kind::if_:
                for (auto& [cond, body] : s.branches)
                    if (!cond || eval(*cond, sc).truthy()) return exec_list(body, sc, out);
                return flow::normal;
            case stmt_kind::for_: exec_for(s, sc, out); return flow::normal;
            case stmt_kind::set: {
                value v = eval(*s.value_expr, sc);
                if (!s.attr.empty()) {
                    const value* target = sc.lookup(s.targets[0]);
                    if (!target || target->type() != kind::ns)
                        fail("template", "TemplateRuntimeError: cannot assign attribute on non-namespace object");
                    target->dict_ref().set(value::string(s.attr), std::move(v));
                } else {
                    assign(sc, s.targets, v);
                }
                return flow::normal;
            }
            case stmt_kind::set_block: {
                std::string body;
                exec_list(s.body, sc, body);
                sc.vars[s.targets[0]] = apply_filters(s.filters, value::string(std::move(body)), sc);
                return flow::normal;
            }
            case stmt_kind::filter_block: {
                std::string body;
                exec_list(s.body, sc, body);
                emit(out, apply_filters(s.filters, value::string(std::move(body)), sc).str());
                return flow::normal;
            }
            case stmt_kind::macro: sc.vars[s.name] = make_macro(s, sc); return flow::normal;
            case stmt_kind::call_block: {
                const expr& call = *s.value_expr;
                value fn = eval(*call.args[0], sc);
                call_args args = eval_args(call, sc);
                value caller = make_macro(s, sc);
                args.named.emplace_back("caller", caller);
                emit(out, call_value(fn, args).str());
                return flow::normal;
            }
            case stmt_kind::break_: return flow::break_;
            case stmt_kind::continue_: return flow::continue_;
            case stmt_kind::scope: return exec_list(s.body, sc, out);
        }
        return flow::normal;
    }

    void assign(scope& sc, const std::vector<std::string>& targets, const value& v) {
        if (targets.size() == 1) {
            sc.vars[targets[0]] = v;
            return;
        }
        std::vector<value> items = iterate(v);
        if (items.size() != targets.size())
            fail("template", "ValueError: {} values to unpack (expected {}, got {})",
                 items.size() > targets.size() ? "too many" : "not enough", targets.size(), items.size());
        for (size_t i = 0; i < targets.size(); ++i) sc.vars[targets[i]] = items[i];
    }

    value apply_filters(const std::vector<expr_ptr>& filters, value v, scope& sc) {
        for (auto& f : filters) {
            call_args args = eval_args(*f, sc);
            v = apply_filter(st_, f->name, v, args);
        }
        return v;
    }

    void exec_for(const stmt& s, scope& sc, std::string& out) {
        value seq = eval(*s.value_expr, sc);
        if (seq.is_none()) fail("template", "TypeError: 'NoneType' object is not iterable");
        std::vector<value> items = iterate(seq);
        if (s.cond) {
            std::vector<value> kept;
            for (auto& item : items) {
                auto is = new_scope(&sc);
                assign(*is, s.targets, item);
                if (eval(*s.cond, *is).truthy()) kept.push_back(item);
            }
            items = std::move(kept);
        }
        const size_t n = items.size();
        for (size_t i = 0; i < n; ++i) {
            st_.step();
            auto is = new_scope(&sc);
            assign(*is, s.targets, items[i]);
            is->vars["loop"] = loop_object(items, i);
            flow f = exec_list(s.body, *is, out);
            if (f == flow::break_) break;
        }
        if (n == 0 && !s.else_body.empty()) {
            auto es = new_scope(&sc);
            exec_list(s.else_body, *es, out);
        }
    }

    static value loop_object(const std::vector<value>& items, size_t i) {
        const int64_t n = static_cast<int64_t>(items.size()), k = static_cast<int64_t>(i);
        value loop = value::dict();
        auto& d = loop.dict_ref();
        auto put = [&](const char* name, value v) { d.items.emplace_back(value::string(name), std::move(v)); };
        put("index", value::integer(k + 1));
        put("index0", value::integer(k));
        put("revindex", value::integer(n - k));
        put("revindex0", value::integer(n - k - 1));
        put("first", value::boolean(k == 0));
        put("last", value::boolean(k == n - 1));
        put("length", value::integer(n));
        put("depth", value::integer(1));
        put("depth0", value::integer(0));
        put("previtem", k > 0 ? items[i - 1] : value::undefined("there is no previous item"));
        put("nextitem", k + 1 < n ? items[i + 1] : value::undefined("there is no next item"));
        put("cycle", value::callable("cycle", [k](call_args& a) {
                if (a.positional.empty()) fail("template", "TypeError: no items for cycling given");
                return a.positional[static_cast<size_t>(k) % a.positional.size()];
            }));
        return loop;
    }

    // Macros and call-block callers: a callable that renders `s.body` in a fresh scope below the defining one.
    value make_macro(const stmt& s, scope& sc) {
        pinned_.push_back(sc.shared_from_this());
        const stmt* m = &s;
        scope* parent = &sc;
        std::string name = s.kind == stmt_kind::macro ? s.name : "caller";
        return value::callable(name, [this, m, parent, name](call_args& a) { return call_macro(*m, parent, name, a); });
    }

    value call_macro(const stmt& m, scope* parent, const std::string& name, call_args& a) {
        if (++st_.depth > st_.opts.max_depth) {
            --st_.depth;
            fail("template", "render exceeded the recursion depth limit ({} nested macro calls)", st_.opts.max_depth);
        }
        struct depth_release {
            render_state& st;
            ~depth_release() { --st.depth; }
        } release{st_};
        auto ms = new_scope(parent);
        std::vector<value> varargs;
        for (size_t i = 0; i < a.positional.size(); ++i) {
            if (i < m.params.size())
                ms->vars[m.params[i].first] = a.positional[i];
            else
                varargs.push_back(a.positional[i]);
        }
        value kwargs = value::dict();
        for (auto& [k, v] : a.named) {
            bool is_param = false;
            for (auto& p : m.params) is_param = is_param || p.first == k;
            if (is_param || k == "caller")
                ms->vars[k] = v;
            else
                kwargs.dict_ref().set(value::string(k), v);
        }
        for (auto& [pname, def] : m.params) {
            if (ms->vars.count(pname)) continue;
            ms->vars[pname] =
                def ? eval(*def, *ms) : value::undefined(fmt::format("parameter '{}' was not provided", pname));
        }
        ms->vars["varargs"] = value::list(std::move(varargs));
        ms->vars["kwargs"] = kwargs;
        std::string out;
        exec_list(m.body, *ms, out);
        return value::string(std::move(out));
    }

    call_args eval_args(const expr& e, scope& sc) {
        call_args a;
        for (size_t i = 1; i < e.args.size(); ++i) a.positional.push_back(eval(*e.args[i], sc));
        for (auto& [k, v] : e.kwargs) a.named.emplace_back(k, eval(*v, sc));
        return a;
    }

public:
    value eval(const expr& e, scope& sc) {
        st_.step();
        switch (e.kind) {
            case expr_kind::literal: return e.lit;
            case expr_kind::name: {
                if (const value* v = sc.lookup(e.name)) return *v;
                return value::undefined(fmt::format("'{}' is undefined", e.name));
            }
            case expr_kind::list:
            case expr_kind::tuple: {
                std::vector<value> items;
                for (auto& a : e.args) items.push_back(eval(*a, sc));
                return e.kind == expr_kind::list ? value::list(std::move(items)) : value::tuple(std::move(items));
            }
            case expr_kind::dict: {
                value d = value::dict();
                for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
                    value k = eval(*e.args[i], sc);
                    d.dict_ref().set(k, eval(*e.args[i + 1], sc));
                }
                return d;
            }
            case expr_kind::getattr: return get_attr(eval(*e.args[0], sc), e.name);
            case expr_kind::getitem: {
                value obj = eval(*e.args[0], sc);
                return get_item(obj, eval(*e.args[1], sc));
            }
            case expr_kind::slice: {
                value obj = eval(*e.args[0], sc);
                value bounds[3];
                for (int i = 0; i < 3; ++i) bounds[i] = e.args[i + 1] ? eval(*e.args[i + 1], sc) : value::none();
                return slice_value(obj, bounds[0], bounds[1], bounds[2]);
            }
            case expr_kind::call: {
                value fn = eval(*e.args[0], sc);
                call_args a = eval_args(e, sc);
                value r = call_value(fn, a);
                st_.check_value(r);
                return r;
            }
            case expr_kind::filter: {
                value input = e.args[0] ? eval(*e.args[0], sc) : value();
                call_args a = eval_args(e, sc);
                value r = apply_filter(st_, e.name, input, a);
                st_.check_value(r);
                return r;
            }
            case expr_kind::test: {
                value v = eval(*e.args[0], sc);
                call_args a = eval_args(e, sc);
                return value::boolean(apply_test(st_, e.name, v, a) != e.negated);
            }
            case expr_kind::unary: {
                value v = eval(*e.args[0], sc);
                if (e.name == "not") return value::boolean(!v.truthy());
                if (v.is_undefined()) undefined_error(v);
                if (!v.is_number())
                    fail("template", "TypeError: bad operand type for unary {}: '{}'", e.name, v.py_type());
                if (e.name == "+") return v.type() == kind::floating ? v : value::integer(v.as_int());
                if (v.type() == kind::floating) return value::floating(-v.as_float());
                if (v.as_int() == std::numeric_limits<int64_t>::min()) fail("template", "integer overflow");
                return value::integer(-v.as_int());
            }
            case expr_kind::binary: {
                if (e.name == "and" || e.name == "or") {
                    value l = eval(*e.args[0], sc);
                    if (l.truthy() == (e.name == "or")) return l;
                    return eval(*e.args[1], sc);
                }
                value l = eval(*e.args[0], sc);
                value r = eval(*e.args[1], sc);
                return binary_op(st_, e.name, l, r);
            }
            case expr_kind::cond: {
                if (eval(*e.args[0], sc).truthy()) return eval(*e.args[1], sc);
                if (e.args[2]) return eval(*e.args[2], sc);
                return value::undefined("the inline if-expression evaluated to false and no else section was defined");
            }
        }
        return value();
    }
};

bool is_int(const value& v) {
    return v.type() == kind::integer || v.type() == kind::boolean;
}

[[noreturn]] void unsupported(const std::string& op, const value& a, const value& b) {
    fail("template", "TypeError: unsupported operand type(s) for {}: '{}' and '{}'", op, a.py_type(), b.py_type());
}

value arithmetic(const std::string& op, const value& a, const value& b) {
    if (!a.is_number() || !b.is_number()) unsupported(op, a, b);
    if (is_int(a) && is_int(b) && op != "/") {
        int64_t x = a.as_int(), y = b.as_int(), r = 0;
        bool overflow = false;
        if (op == "+") {
            overflow = __builtin_add_overflow(x, y, &r);
        } else if (op == "-") {
            overflow = __builtin_sub_overflow(x, y, &r);
        } else if (op == "*") {
            overflow = __builtin_mul_overflow(x, y, &r);
        } else if (op == "//" || op == "%") {
            if (y == 0) fail("template", "ZeroDivisionError: integer division or modulo by zero");
            if (x == std::numeric_limits<int64_t>::min() && y == -1) fail("template", "integer overflow");
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                --q;
                m += y;
            }
            r = op == "//" ? q : m;
        } else if (op == "**") {
            if (y < 0) return value::floating(std::pow(static_cast<double>(x), static_cast<double>(y)));
            r = 1;
            for (int64_t i = 0; i < y && !overflow; ++i) {
                overflow = __builtin_mul_overflow(r, x, &r);
                if (r == 0 || r == 1) break;
            }
            if (x == -1) r = (y % 2) ? -1 : 1;
        }
        if (overflow) fail("template", "integer overflow in '{}'", op);
        return value::integer(r);
    }
    double x = a.as_float(), y = b.as_float();
    if (op == "+") return value::floating(x + y);
    if (op == "-") return value::floating(x - y);
    if (op == "*") return value::floating(x * y);
    if (op == "**") return value::floating(std::pow(x, y));
    if (y == 0) fail("template", "ZeroDivisionError: float division by zero");
    if (op == "/") return value::floating(x / y);
    if (op == "//") return value::floating(std::floor(x / y));
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return value::floating(m);
}

value repeat(render_state& st, const value& seq, const value& count) {
    int64_t n = std::max<int64_t>(0, count.as_int());
    if (seq.is_string()) {
        st.check_size(seq.as_string().size() * static_cast<size_t>(n));
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += seq.as_string();
        return seq.is_markup() ? value::markup(std::move(out)) : value::string(std::move(out));
    }
    st.check_items(seq.items().size() * static_cast<size_t>(n));
    std::vector<value> out;
    for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
    return seq.type() == kind::tuple ? value::tuple(std::move(out)) : value::list(std::move(out));
}

bool contains(const value& container, const value& item) {
    switch (container.type()) {
        case kind::undefined: return false;
        case kind::string:
            if (!item.is_string())
                fail("template", "TypeError: 'in <string>' requires string as left operand, not {}", item.py_type());
            return container.as_string().find(item.as_string()) != std::string::npos;
        case kind::list:
        case kind::tuple:
            for (auto& v : iterate(container))
                if (py_equal(v, item)) return true;
            return false;
        case kind::dict:
        case kind::ns: return container.dict_ref().find(item) != nullptr;
        default: fail("template", "TypeError: argument of type '{}' is not iterable", container.py_type());
    }
}

}  // namespace

value binary_op(render_state& st, const std::string& op, const value& a, const value& b) {
    if (op == "~") {
        st.check_size(a.str().size() + b.str().size());
        return value::string(a.str() + b.str());
    }
    if (op == "==") return value::boolean(py_equal(a, b));
    if (op == "!=") return value::boolean(!py_equal(a, b));
    if (op == "in") return value::boolean(contains(b, a));
    if (op == "not in") return value::boolean(!contains(b, a));
    if (a.is_undefined()) undefined_error(a);
    if (b.is_undefined()) undefined_error(b);
    if (op == "<") return value::boolean(py_compare(a, b) < 0);
    if (op == "<=") return value::boolean(py_compare(a, b) <= 0);
    if (op == ">") return value::boolean(py_compare(a, b) > 0);
    if (op == ">=") return value::boolean(py_compare(a, b) >= 0);
    if (op == "+") {
        if (a.is_string() || b.is_string()) {
            if (!a.is_string() || !b.is_string()) {
                if (a.is_string())
                    fail("template", "TypeError: can only concatenate str (not \"{}\") to str", b.py_type());
                unsupported(op, a, b);
            }
            st.check_size(a.as_string().size() + b.as_string().size());
            if (a.is_markup() || b.is_markup()) {
                auto safe = [](const value& v) { return v.is_markup() ? v.as_string() : html_escape(v.as_string()); };
                return value::markup(safe(a) + safe(b));
            }
            return value::string(a.as_string() + b.as_string());
        }
        if (a.is_sequence_kind() || b.is_sequence_kind()) {
            if (a.type() != b.type() || a.is_iterator() || b.is_iterator()) {
                if (a.type() == kind::list && !a.is_iterator())
                    fail("template", "TypeError: can only concatenate list (not \"{}\") to list", b.py_type());
                unsupported(op, a, b);
            }
            st.check_items(a.items().size() + b.items().size());
            std::vector<value> items = a.items();
            items.insert(items.end(), b.items().begin(), b.items().end());
            return a.type() == kind::tuple ? value::tuple(std::move(items)) : value::list(std::move(items));
        }
        return arithmetic(op, a, b);
    }
    if (op == "*") {
        if ((a.is_string() || (a.is_sequence_kind() && !a.is_iterator())) && is_int(b)) return repeat(st, a, b);
        if ((b.is_string() || (b.is_sequence_kind() && !b.is_iterator())) && is_int(a)) return repeat(st, b, a);
    }
    return arithmetic(op, a, b);
}

std::string render_program(const program& prog, const std::vector<std::pair<std::string, value>>& globals,
                           const std::vector<std::pair<std::string, value>>& context, render_state& st) {
    evaluator ev(st);
    auto g = ev.new_scope(nullptr);
    for (auto& [k, v] : globals) g->vars[k] = v;
    auto root = ev.new_scope(g.get());
    for (auto& [k, v] : context) root->vars[k] = v;
    std::string out;
    try {
        ev.exec_list(prog.body, *root, out);
    } catch (const error& e) {
        std::string msg = e.what();
        const std::string prefix = "[template] ";
        if (msg.starts_with(prefix)) msg.erase(0, prefix.size());
        if (ev.error_line > 0 && !msg.starts_with("render exceeded"))
            fail("template", "{} (template line {})", msg, ev.error_line);
        fail("template", "{}", msg);
    }
    return out;
}

}  // namespace memtile::jinja
