// Attribute and item access, iteration, calls, the Python methods templates call on str, dict and list
// values, and Jinja's tests (`is defined`, `is string`...).
#include <algorithm>
#include <cmath>

#include "template/interp.h"
#include "template/strings.h"

namespace memtile::jinja {

void undefined_error(const value& u) {
    const std::string& hint = u.undefined_hint();
    if (hint.starts_with("SecurityError")) fail("template", "{}", hint);
    fail("template", "UndefinedError: {}", hint.empty() ? std::string("value is undefined") : hint);
}

value arg(const call_args& a, size_t i, const char* name, value def) {
    if (i < a.positional.size()) return a.positional[i];
    if (const value* v = a.get_named(name)) return *v;
    return def;
}

static value missing_attr(const value& obj, const std::string& name) {
    return value::undefined(fmt::format("'{}' has no attribute '{}'", obj.type_name(), name));
}

static value unsafe(const value& obj, const std::string& name) {
    return value::undefined(
        fmt::format("SecurityError: access to attribute '{}' of '{}' object is unsafe.", name, obj.py_type()));
}

static value method(std::string name, std::function<value(call_args&)> fn) {
    return value::callable(std::move(name), std::move(fn));
}

static std::string str_arg(const call_args& a, size_t i, const char* name, const char* method_name) {
    value v = arg(a, i, name);
    if (!v.is_string()) fail("template", "TypeError: {}() argument must be str, not {}", method_name, v.py_type());
    return v.as_string();
}

static value string_method(const value& obj, const std::string& name) {
    const std::string s = obj.as_string();
    auto strip_like = [s](int mode) {
        return [s, mode](call_args& a) {
            value chars = arg(a, 0, "chars", value::none());
            return value::string(py_strip(s, chars.is_string() ? &chars.as_string() : nullptr, mode));
        };
    };
    if (name == "strip") return method(name, strip_like(3));
    if (name == "lstrip") return method(name, strip_like(1));
    if (name == "rstrip") return method(name, strip_like(2));
    if (name == "split" || name == "rsplit") {
        bool right = name == "rsplit";
        return method(name, [s, right](call_args& a) {
            value sep = arg(a, 0, "sep", value::none());
            int64_t maxsplit = arg(a, 1, "maxsplit", value::integer(-1)).as_int();
            std::vector<std::string> parts = py_split(s, sep.is_string() ? &sep.as_string() : nullptr, maxsplit, right);
            std::vector<value> out;
            for (auto& p : parts) out.push_back(value::string(std::move(p)));
            return value::list(std::move(out));
        });
    }
    if (name == "startswith" || name == "endswith") {
        bool starts = name == "startswith";
        return method(name, [s, starts](call_args& a) {
            value p = arg(a, 0, "prefix");
            std::vector<value> options = p.type() == kind::tuple ? p.items() : std::vector<value>{p};
            for (auto& o : options) {
                if (!o.is_string())
                    fail("template", "TypeError: {} first arg must be str or a tuple of str, not {}",
                         starts ? "startswith" : "endswith", o.py_type());
                if (starts ? std::string_view(s).starts_with(o.as_string())
                           : std::string_view(s).ends_with(o.as_string()))
                    return value::boolean(true);
            }
            return value::boolean(false);
        });
    }
    if (name == "upper") return method(name, [s](call_args&) { return value::string(ascii_upper(s)); });
    if (name == "lower") return method(name, [s](call_args&) { return value::string(ascii_lower(s)); });
    if (name == "title") return method(name, [s](call_args&) { return value::string(py_title(s)); });
    if (name == "capitalize") return method(name, [s](call_args&) { return value::string(py_capitalize(s)); });
    if (name == "replace")
        return method(name, [s](call_args& a) {
            return value::string(py_replace(s, str_arg(a, 0, "old", "replace"), str_arg(a, 1, "new", "replace"),
                                            arg(a, 2, "count", value::integer(-1)).as_int()));
        });
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
        return method(name, [s, name](call_args& a) {
            std::string sub = str_arg(a, 0, "sub", name.c_str());
            if (name == "count") return value::integer(static_cast<int64_t>(py_count(s, sub)));
            size_t p = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
            if (p == std::string::npos) {
                if (name == "index" || name == "rindex") fail("template", "ValueError: substring not found");
                return value::integer(-1);
            }
            return value::integer(static_cast<int64_t>(utf8_decode(s.substr(0, p)).size()));
        });
    }
    if (name == "join")
        return method(name, [s](call_args& a) {
            std::string out;
            bool first = true;
            for (auto& v : iterate(arg(a, 0, "iterable"))) {
                if (!v.is_string())
                    fail("template", "TypeError: sequence item: expected str instance, {} found", v.py_type());
                if (!first) out += s;
                first = false;
                out += v.as_string();
            }
            return value::string(std::move(out));
        });
    if (name == "splitlines")
        return method(name, [s](call_args&) {
            std::vector<value> out;
            for (auto& l : py_splitlines(s)) out.push_back(value::string(l));
            return value::list(std::move(out));
        });
    if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "isupper" ||
        name == "islower")
        return method(name, [s, name](call_args&) { return value::boolean(py_is(s, name)); });
    return missing_attr(obj, name);
}

static value dict_method(const value& obj, const std::string& name) {
    if (name == "items")
        return method(name, [obj](call_args&) {
            std::vector<value> out;
            for (auto& [k, v] : obj.dict_ref().items) out.push_back(value::tuple({k, v}));
            return value::list(std::move(out));
        });
    if (name == "keys" || name == "values")
        return method(name, [obj, name](call_args&) {
            std::vector<value> out;
            for (auto& [k, v] : obj.dict_ref().items) out.push_back(name == "keys" ? k : v);
            return value::list(std::move(out));
        });
    if (name == "get")
        return method(name, [obj](call_args& a) {
            const value* v = obj.dict_ref().find(arg(a, 0, "key"));
            return v ? *v : arg(a, 1, "default", value::none());
        });
    if (name == "copy")
        return method(name, [obj](call_args&) {
            value d = value::dict();
            d.dict_ref().items = obj.dict_ref().items;
            return d;
        });
    if (name == "update" || name == "pop" || name == "popitem" || name == "setdefault" || name == "clear")
        return unsafe(obj, name);
    return value();
}

static value list_method(const value& obj, const std::string& name) {
    if (name == "index" || name == "count")
        return method(name, [obj, name](call_args& a) {
            value x = arg(a, 0, "value");
            int64_t n = 0;
            for (size_t i = 0; i < obj.items().size(); ++i) {
                if (!py_equal(obj.items()[i], x)) continue;
                if (name == "index") return value::integer(static_cast<int64_t>(i));
                ++n;
            }
            if (name == "index") fail("template", "ValueError: {} is not in list", x.repr());
            return value::integer(n);
        });
    if (obj.type() == kind::list && (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
                                     name == "remove" || name == "reverse" || name == "sort" || name == "clear"))
        return unsafe(obj, name);
    return value();
}

value get_attr(const value& obj, const std::string& name) {
    switch (obj.type()) {
        case kind::undefined: undefined_error(obj);
        case kind::string: return string_method(obj, name);
        case kind::dict: {
            value m = dict_method(obj, name);
            if (m.type() != kind::undefined || !m.undefined_hint().empty()) return m;
            if (const value* v = obj.dict_ref().find(name)) return *v;
            return missing_attr(obj, name);
        }
        case kind::ns: {
            if (const value* v = obj.dict_ref().find(name)) return *v;
            return missing_attr(obj, name);
        }
        case kind::list:
        case kind::tuple: {
            if (obj.is_iterator()) return missing_attr(obj, name);
            value m = list_method(obj, name);
            if (m.type() != kind::undefined || !m.undefined_hint().empty()) return m;
            return missing_attr(obj, name);
        }
        case kind::floating:
            if (name == "is_integer")
                return method(
                    name, [obj](call_args&) { return value::boolean(std::floor(obj.as_float()) == obj.as_float()); });
            return missing_attr(obj, name);
        default: return missing_attr(obj, name);
    }
}

static bool normalize_index(int64_t& i, size_t n) {
    if (i < 0) i += static_cast<int64_t>(n);
    return i >= 0 && static_cast<size_t>(i) < n;
}

value get_item(const value& obj, const value& key) {
    switch (obj.type()) {
        case kind::undefined: undefined_error(obj);
        case kind::dict:
        case kind::ns:
            if (const value* v = obj.dict_ref().find(key)) return *v;
            break;
        case kind::list:
        case kind::tuple:
            if (!obj.is_iterator() && key.is_number() && key.type() != kind::floating) {
                int64_t i = key.as_int();
                if (normalize_index(i, obj.items().size())) return obj.items()[static_cast<size_t>(i)];
            }
            break;
        case kind::string:
            if (key.is_number() && key.type() != kind::floating) {
                std::u32string cps = utf8_decode(obj.as_string());
                int64_t i = key.as_int();
                if (normalize_index(i, cps.size()))
                    return value::string(utf8_encode(cps.substr(static_cast<size_t>(i), 1)));
            }
            break;
        default: break;
    }
    if (key.is_string() && obj.type() != kind::ns) {
        value a = get_attr(obj, key.as_string());
        if (!a.is_undefined()) return a;
    }
    if (key.is_string()) return missing_attr(obj, key.as_string());
    return value::undefined(fmt::format("'{}' has no element {}", obj.type_name(), key.repr()));
}

value slice_value(const value& obj, const value& start, const value& stop, const value& step) {
    if (obj.is_undefined()) undefined_error(obj);
    auto as_index = [](const value& v, const char* what) -> std::optional<int64_t> {
        if (v.is_none() || v.is_undefined()) return std::nullopt;
        if (!v.is_number() || v.type() == kind::floating)
            fail("template", "TypeError: slice {} must be integers or None", what);
        return v.as_int();
    };
    int64_t st = as_index(step, "indices").value_or(1);
    if (st == 0) fail("template", "ValueError: slice step cannot be zero");
    std::u32string cps;
    size_t n;
    if (obj.is_string()) {
        cps = utf8_decode(obj.as_string());
        n = cps.size();
    } else if (obj.is_sequence_kind() && !obj.is_iterator()) {
        n = obj.items().size();
    } else {
        fail("template", "TypeError: '{}' object is not subscriptable", obj.py_type());
    }
    int64_t len = static_cast<int64_t>(n);
    auto clamp = [&](std::optional<int64_t> v, int64_t def) {
        if (!v) return def;
        int64_t i = *v;
        if (i < 0) i += len;
        if (st > 0) return std::clamp<int64_t>(i, 0, len);
        return std::clamp<int64_t>(i, -1, len - 1);
    };
    int64_t b = clamp(as_index(start, "indices"), st > 0 ? 0 : len - 1);
    int64_t e = clamp(as_index(stop, "indices"), st > 0 ? len : -1);
    std::vector<size_t> picks;
    for (int64_t i = b; st > 0 ? i < e : i > e; i += st) picks.push_back(static_cast<size_t>(i));
    if (obj.is_string()) {
        std::u32string out;
        for (size_t i : picks) out += cps[i];
        return value::string(utf8_encode(out));
    }
    std::vector<value> out;
    for (size_t i : picks) out.push_back(obj.items()[i]);
    return obj.type() == kind::tuple ? value::tuple(std::move(out)) : value::list(std::move(out));
}

std::vector<value> iterate(const value& v) {
    switch (v.type()) {
        case kind::undefined: return {};
        case kind::string: {
            std::vector<value> out;
            for (char32_t c : utf8_decode(v.as_string()))
                out.push_back(value::string(utf8_encode(std::u32string(1, c))));
            return out;
        }
        case kind::list:
        case kind::tuple:
            if (v.is_iterator()) return std::exchange(v.items(), {});
            return v.items();
        case kind::dict: {
            std::vector<value> out;
            for (auto& [k, x] : v.dict_ref().items) out.push_back(k);
            return out;
        }
        default: fail("template", "TypeError: '{}' object is not iterable", v.py_type());
    }
}

value call_value(const value& fn, call_args& args) {
    if (fn.is_undefined()) undefined_error(fn);
    if (fn.type() != kind::callable) fail("template", "TypeError: '{}' object is not callable", fn.py_type());
    return fn.callable_ref().fn(args);
}

bool apply_test(render_state& st, const std::string& name, const value& v, call_args& a) {
    st.step();
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "boolean") return v.type() == kind::boolean;
    if (name == "true") return v.type() == kind::boolean && v.as_bool();
    if (name == "false") return v.type() == kind::boolean && !v.as_bool();
    if (name == "integer") return v.type() == kind::integer;
    if (name == "float") return v.type() == kind::floating;
    if (name == "number") return v.is_number();
    if (name == "string") return v.is_string();
    if (name == "mapping") return v.is_mapping();
    if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_sequence_kind() || v.is_mapping();
    if (name == "sequence") return v.is_string() || (v.is_sequence_kind() && !v.is_iterator()) || v.is_mapping();
    if (name == "callable") return v.type() == kind::callable;
    if (name == "escaped") return v.is_markup();
    if (name == "lower") return v.str() == ascii_lower(v.str());
    if (name == "upper") return v.str() == ascii_upper(v.str());
    if (name == "odd" || name == "even") {
        if (v.type() != kind::integer && v.type() != kind::boolean)
            fail("template", "TypeError: test '{}' needs an integer", name);
        return (v.as_int() % 2 != 0) == (name == "odd");
    }
    if (name == "divisibleby") {
        value d = arg(a, 0, "num");
        if (d.as_int() == 0) fail("template", "ZeroDivisionError: integer modulo by zero");
        return v.as_int() % d.as_int() == 0;
    }
    if (name == "sameas") return v.same_as(arg(a, 0, "other"));
    if (name == "in") return binary_op(st, "in", v, arg(a, 0, "seq")).truthy();
    static const std::pair<const char*, const char*> comparisons[] = {
        {"eq", "=="}, {"equalto", "=="},    {"==", "=="}, {"ne", "!="}, {"!=", "!="},
        {"lt", "<"},  {"lessthan", "<"},    {"<", "<"},   {"le", "<="}, {"<=", "<="},
        {"gt", ">"},  {"greaterthan", ">"}, {">", ">"},   {"ge", ">="}, {">=", ">="},
    };
    for (auto& [test, op] : comparisons)
        if (name == test) return binary_op(st, op, v, arg(a, 0, "other")).truthy();
    fail("template", "TemplateAssertionError: no test named '{}'", name);
}

}  // namespace memtile::jinja
