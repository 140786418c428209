// Jinja's built-in filters, with Hugging Face's tojson override. Filters that return Python iterators in Jinja
// (map, select, reject, selectattr, rejectattr, unique, items, reverse of a list) return iterator values here,
// so that e.g. `x | map(...) | tojson` fails exactly as it does in Python.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "template/interp.h"
#include "template/strings.h"

namespace memtile::jinja {

namespace {

using filter_fn = value (*)(render_state&, const value&, call_args&);

std::string text(const value& v) {
    return v.str();
}

// Jinja's attribute getter: "a.b.0" looks up each part with item-then-attribute semantics.
value attr_path(const value& v, const std::string& path) {
    value cur = v;
    size_t start = 0;
    for (;;) {
        size_t dot = path.find('.', start);
        std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        bool numeric =
            !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (cur.is_undefined()) undefined_error(cur);
        cur = get_item(cur, numeric ? value::integer(std::stoll(part)) : value::string(part));
        if (dot == std::string::npos) return cur;
        start = dot + 1;
    }
}

value maybe_attr(const value& v, const value& attribute) {
    if (attribute.is_undefined() || attribute.is_none()) return v;
    if (attribute.is_number()) return get_item(v, attribute);
    return attr_path(v, attribute.as_string());
}

value sort_key(const value& v, bool case_sensitive) {
    if (!case_sensitive && v.is_string()) return value::string(ascii_lower(v.as_string()));
    return v;
}

int64_t int_arg(const value& v, const char* what) {
    if (!v.is_number() || v.type() == kind::floating) fail("template", "TypeError: {} must be an integer", what);
    return v.as_int();
}

value f_abs(render_state&, const value& v, call_args&) {
    if (v.type() == kind::floating) return value::floating(std::fabs(v.as_float()));
    if (!v.is_number()) fail("template", "TypeError: bad operand type for abs(): '{}'", v.py_type());
    return value::integer(std::llabs(v.as_int()));
}

value f_attr(render_state&, const value& v, call_args& a) {
    return get_attr(v, text(arg(a, 0, "name")));
}

value f_capitalize(render_state&, const value& v, call_args&) {
    return value::string(py_capitalize(text(v)));
}

value f_center(render_state& st, const value& v, call_args& a) {
    std::u32string s = utf8_decode(text(v));
    int64_t width = int_arg(arg(a, 0, "width", value::integer(80)), "width");
    st.check_size(static_cast<size_t>(std::max<int64_t>(width, 0)));
    if (width <= static_cast<int64_t>(s.size())) return value::string(text(v));
    size_t pad = static_cast<size_t>(width) - s.size();
    size_t left = pad / 2 + (pad & static_cast<size_t>(width) & 1);
    return value::string(std::string(left, ' ') + text(v) + std::string(pad - left, ' '));
}

value f_default(render_state&, const value& v, call_args& a) {
    bool boolean = arg(a, 1, "boolean", value::boolean(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return arg(a, 0, "default_value", value::string(""));
    return v;
}

value f_dictsort(render_state&, const value& v, call_args& a) {
    if (!v.is_mapping()) fail("template", "TypeError: dictsort expects a mapping");
    bool cs = arg(a, 0, "case_sensitive", value::boolean(false)).truthy();
    std::string by = text(arg(a, 1, "by", value::string("key")));
    bool reverse = arg(a, 2, "reverse", value::boolean(false)).truthy();
    std::vector<value> pairs;
    for (auto& [k, x] : v.dict_ref().items) pairs.push_back(value::tuple({k, x}));
    size_t idx = by == "value" ? 1 : 0;
    std::stable_sort(pairs.begin(), pairs.end(), [&](const value& x, const value& y) {
        int c = py_compare(sort_key(x.items()[idx], cs), sort_key(y.items()[idx], cs));
        return reverse ? c > 0 : c < 0;
    });
    return value::list(std::move(pairs));
}

value f_escape(render_state&, const value& v, call_args&) {
    return v.is_markup() ? v : value::markup(html_escape(text(v)));
}

value f_first(render_state&, const value& v, call_args&) {
    std::vector<value> items = iterate(v);
    if (items.empty()) return value::undefined("No first item, sequence was empty.");
    return items.front();
}

value f_last(render_state&, const value& v, call_args&) {
    if (v.is_iterator()) fail("template", "TypeError: '{}' object is not reversible", v.py_type());
    std::vector<value> items = iterate(v);
    if (items.empty()) return value::undefined("No last item, sequence was empty.");
    return items.back();
}

value f_float(render_state&, const value& v, call_args& a) {
    value def = arg(a, 0, "default", value::floating(0.0));
    if (v.is_number()) return value::floating(v.as_float());
    if (v.is_string()) {
        std::string s = py_strip(v.as_string(), nullptr, 3);
        try {
            size_t used = 0;
            double d = std::stod(s, &used);
            if (used == s.size()) return value::floating(d);
        } catch (const std::exception&) {
        }
    }
    return def;
}

value f_int(render_state&, const value& v, call_args& a) {
    value def = arg(a, 0, "default", value::integer(0));
    int base = static_cast<int>(arg(a, 1, "base", value::integer(10)).as_int());
    if (v.type() == kind::floating) {
        double d = v.as_float();
        if (!std::isfinite(d) || std::fabs(d) > 9.2e18) return def;
        return value::integer(static_cast<int64_t>(d));
    }
    if (v.is_number()) return value::integer(v.as_int());
    if (v.is_string()) {
        std::string s = py_strip(v.as_string(), nullptr, 3);
        std::string digits;
        for (char c : s)
            if (c != '_') digits += c;
        try {
            size_t used = 0;
            long long i = std::stoll(digits, &used, base);
            if (used == digits.size() && !digits.empty()) return value::integer(i);
        } catch (const std::exception&) {
        }
        try {
            size_t used = 0;
            double d = std::stod(s, &used);
            if (used == s.size() && std::isfinite(d) && std::fabs(d) < 9.2e18)
                return value::integer(static_cast<int64_t>(d));
        } catch (const std::exception&) {
        }
    }
    return def;
}

value f_indent(render_state& st, const value& v, call_args& a) {
    value width = arg(a, 0, "width", value::integer(4));
    bool first = arg(a, 1, "first", value::boolean(false)).truthy();
    bool blank = arg(a, 2, "blank", value::boolean(false)).truthy();
    std::string ind = width.is_string()
                          ? width.as_string()
                          : std::string(static_cast<size_t>(std::max<int64_t>(0, int_arg(width, "width"))), ' ');
    st.check_size(ind.size());
    std::vector<std::string> lines = py_splitlines(text(v) + "\n");
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) {
        if (i > 0) out += "\n";
        if (i > 0 && (blank || !lines[i].empty())) out += ind;
        out += lines[i];
        st.check_size(out.size());
    }
    if (first) out = ind + out;
    return value::string(std::move(out));
}

value f_items(render_state&, const value& v, call_args&) {
    if (v.is_undefined()) return value::iterator({});
    if (!v.is_mapping()) fail("template", "TypeError: can only get item pairs from a mapping.");
    std::vector<value> out;
    for (auto& [k, x] : v.dict_ref().items) out.push_back(value::tuple({k, x}));
    return value::iterator(std::move(out));
}

value f_join(render_state& st, const value& v, call_args& a) {
    std::string sep = text(arg(a, 0, "d", value::string("")));
    value attribute = arg(a, 1, "attribute", value::none());
    std::string out;
    bool first = true;
    for (auto& item : iterate(v)) {
        if (!first) out += sep;
        first = false;
        out += text(maybe_attr(item, attribute));
        st.check_size(out.size());
    }
    return value::string(std::move(out));
}

value f_length(render_state&, const value& v, call_args&) {
    return value::integer(static_cast<int64_t>(v.length()));
}

value f_list(render_state&, const value& v, call_args&) {
    return value::list(iterate(v));
}

value f_lower(render_state&, const value& v, call_args&) {
    return value::string(ascii_lower(text(v)));
}

value f_upper(render_state&, const value& v, call_args&) {
    return value::string(ascii_upper(text(v)));
}

value f_map(render_state& st, const value& v, call_args& a) {
    std::vector<value> out;
    if (!v.truthy()) return value::iterator({});
    if (const value* attribute = a.get_named("attribute")) {
        value def = arg(a, 99, "default");
        for (auto& item : iterate(v)) {
            value x = maybe_attr(item, *attribute);
            out.push_back(x.is_undefined() && !def.is_undefined() ? def : x);
        }
        return value::iterator(std::move(out));
    }
    if (a.positional.empty()) fail("template", "FilterArgumentError: map requires a filter argument");
    std::string name = text(a.positional[0]);
    call_args rest;
    rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    rest.named = a.named;
    for (auto& item : iterate(v)) out.push_back(apply_filter(st, name, item, rest));
    return value::iterator(std::move(out));
}

value select_impl(render_state& st, const value& v, call_args& a, bool by_attr, bool keep) {
    size_t first_arg = by_attr ? 1 : 0;
    value attribute = by_attr ? arg(a, 0, "attribute") : value();
    std::string test = a.positional.size() > first_arg ? text(a.positional[first_arg]) : "";
    call_args rest;
    if (a.positional.size() > first_arg + 1)
        rest.positional.assign(a.positional.begin() + first_arg + 1, a.positional.end());
    std::vector<value> out;
    if (!v.truthy()) return value::iterator({});  // Jinja: `if seq:` guards the loop, so None selects nothing
    for (auto& item : iterate(v)) {
        value x = by_attr ? attr_path(item, text(attribute)) : item;
        bool ok = test.empty() ? x.truthy() : apply_test(st, test, x, rest);
        if (ok == keep) out.push_back(item);
    }
    return value::iterator(std::move(out));
}

value f_select(render_state& st, const value& v, call_args& a) {
    return select_impl(st, v, a, false, true);
}
value f_reject(render_state& st, const value& v, call_args& a) {
    return select_impl(st, v, a, false, false);
}
value f_selectattr(render_state& st, const value& v, call_args& a) {
    return select_impl(st, v, a, true, true);
}
value f_rejectattr(render_state& st, const value& v, call_args& a) {
    return select_impl(st, v, a, true, false);
}

value f_minmax(const value& v, call_args& a, bool want_max) {
    bool cs = arg(a, 0, "case_sensitive", value::boolean(false)).truthy();
    value attribute = arg(a, 1, "attribute", value::none());
    std::vector<value> items = iterate(v);
    if (items.empty()) return value::undefined("No aggregated item, sequence was empty.");
    size_t best = 0;
    for (size_t i = 1; i < items.size(); ++i) {
        int c =
            py_compare(sort_key(maybe_attr(items[i], attribute), cs), sort_key(maybe_attr(items[best], attribute), cs));
        if (want_max ? c > 0 : c < 0) best = i;
    }
    return items[best];
}

value f_max(render_state&, const value& v, call_args& a) {
    return f_minmax(v, a, true);
}
value f_min(render_state&, const value& v, call_args& a) {
    return f_minmax(v, a, false);
}

value f_replace(render_state& st, const value& v, call_args& a) {
    value count = arg(a, 2, "count", value::none());
    std::string out = py_replace(text(v), text(arg(a, 0, "old")), text(arg(a, 1, "new")),
                                 count.is_none() ? -1 : int_arg(count, "count"));
    st.check_size(out.size());
    return value::string(std::move(out));
}

value f_reverse(render_state&, const value& v, call_args&) {
    if (v.is_string()) {
        std::u32string s = utf8_decode(v.as_string());
        std::reverse(s.begin(), s.end());
        return value::string(utf8_encode(s));
    }
    bool was_iterator = v.is_iterator();
    std::vector<value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return was_iterator ? value::list(std::move(items)) : value::iterator(std::move(items));
}

// Python's round(): ties to even, applied to the decimal value.
value f_round(render_state&, const value& v, call_args& a) {
    int64_t precision = int_arg(arg(a, 0, "precision", value::integer(0)), "precision");
    std::string method = text(arg(a, 1, "method", value::string("common")));
    if (!v.is_number()) fail("template", "TypeError: round() needs a number, not {}", v.py_type());
    double scale = std::pow(10.0, static_cast<double>(precision));
    double x = v.as_float() * scale;
    double r;
    if (method == "common")
        r = std::nearbyint(x);
    else if (method == "ceil")
        r = std::ceil(x);
    else if (method == "floor")
        r = std::floor(x);
    else
        fail("template", "FilterArgumentError: method must be common, ceil or floor");
    if (method == "common" && v.type() != kind::floating) return value::integer(v.as_int());
    return value::floating(r / scale);
}

value f_safe(render_state&, const value& v, call_args&) {
    return value::markup(text(v));
}

value f_sort(render_state&, const value& v, call_args& a) {
    bool reverse = arg(a, 0, "reverse", value::boolean(false)).truthy();
    bool cs = arg(a, 1, "case_sensitive", value::boolean(false)).truthy();
    value attribute = arg(a, 2, "attribute", value::none());
    std::vector<value> items = iterate(v);
    std::stable_sort(items.begin(), items.end(), [&](const value& x, const value& y) {
        int c = py_compare(sort_key(maybe_attr(x, attribute), cs), sort_key(maybe_attr(y, attribute), cs));
        return reverse ? c > 0 : c < 0;
    });
    return value::list(std::move(items));
}

value f_string(render_state&, const value& v, call_args&) {
    return value::string(text(v));
}

value f_sum(render_state& st, const value& v, call_args& a) {
    value attribute = arg(a, 0, "attribute", value::none());
    value total = arg(a, 1, "start", value::integer(0));
    for (auto& item : iterate(v)) total = binary_op(st, "+", total, maybe_attr(item, attribute));
    return total;
}

// Jinja's title filter: capitalise each word, words being split at whitespace and -([{<.
value f_title(render_state&, const value& v, call_args&) {
    std::string s = text(v), out;
    bool start = true;
    for (char c : s) {
        bool sep = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == '-' || c == '(' ||
                   c == '{' || c == '[' || c == '<';
        if (sep) {
            out += c;
            start = true;
        } else {
            out += start ? ascii_upper(std::string(1, c)) : ascii_lower(std::string(1, c));
            start = false;
        }
    }
    return value::string(std::move(out));
}

// Hugging Face: json.dumps(x, ensure_ascii=False, indent=indent, separators=None, sort_keys=False).
value f_tojson(render_state& st, const value& v, call_args& a) {
    value ensure_ascii = arg(a, 0, "ensure_ascii", value::boolean(false));
    value indent = arg(a, 1, "indent", value::none());
    value sort_keys = arg(a, 3, "sort_keys", value::boolean(false));
    if (ensure_ascii.truthy() || sort_keys.truthy() || a.get_named("separators"))
        fail("template", "tojson: ensure_ascii, separators and sort_keys are not supported");
    int ind = indent.is_none() || indent.is_undefined() ? -1 : static_cast<int>(int_arg(indent, "indent"));
    if (ind > 64) fail("template", "tojson: indent too large");
    std::string out = v.to_json(ind);
    st.check_size(out.size());
    return value::string(std::move(out));
}

value f_trim(render_state&, const value& v, call_args& a) {
    value chars = arg(a, 0, "chars", value::none());
    return value::string(py_strip(text(v), chars.is_string() ? &chars.as_string() : nullptr, 3));
}

value f_unique(render_state&, const value& v, call_args& a) {
    bool cs = arg(a, 0, "case_sensitive", value::boolean(false)).truthy();
    value attribute = arg(a, 1, "attribute", value::none());
    std::vector<value> out, seen;
    for (auto& item : iterate(v)) {
        value key = sort_key(maybe_attr(item, attribute), cs);
        bool dup = false;
        for (auto& s : seen) dup = dup || py_equal(s, key);
        if (dup) continue;
        seen.push_back(key);
        out.push_back(item);
    }
    return value::iterator(std::move(out));
}

value f_wordcount(render_state&, const value& v, call_args&) {
    int64_t n = 0;
    bool in_word = false;
    for (char c : text(v)) {
        unsigned char u = static_cast<unsigned char>(c);
        bool w = std::isalnum(u) || c == '_' || u >= 0x80;
        if (w && !in_word) ++n;
        in_word = w;
    }
    return value::integer(n);
}

const std::unordered_map<std::string, filter_fn>& filter_table() {
    static const std::unordered_map<std::string, filter_fn> table = {
        {"abs", f_abs},
        {"attr", f_attr},
        {"capitalize", f_capitalize},
        {"center", f_center},
        {"count", f_length},
        {"d", f_default},
        {"default", f_default},
        {"dictsort", f_dictsort},
        {"e", f_escape},
        {"escape", f_escape},
        {"first", f_first},
        {"float", f_float},
        {"indent", f_indent},
        {"int", f_int},
        {"items", f_items},
        {"join", f_join},
        {"last", f_last},
        {"length", f_length},
        {"list", f_list},
        {"lower", f_lower},
        {"map", f_map},
        {"max", f_max},
        {"min", f_min},
        {"reject", f_reject},
        {"rejectattr", f_rejectattr},
        {"replace", f_replace},
        {"reverse", f_reverse},
        {"round", f_round},
        {"safe", f_safe},
        {"select", f_select},
        {"selectattr", f_selectattr},
        {"sort", f_sort},
        {"string", f_string},
        {"sum", f_sum},
        {"title", f_title},
        {"tojson", f_tojson},
        {"trim", f_trim},
        {"unique", f_unique},
        {"upper", f_upper},
        {"wordcount", f_wordcount},
    };
    return table;
}

}  // namespace

value apply_filter(render_state& st, const std::string& name, const value& input, call_args& args) {
    st.step();
    auto& table = filter_table();
    auto it = table.find(name);
    if (it == table.end()) fail("template", "TemplateAssertionError: no filter named '{}'", name);
    return it->second(st, input, args);
}

}  // namespace memtile::jinja
