#include "template/value.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"

namespace memtile::jinja {

namespace {

// Bounds the recursion of repr, JSON and comparisons: templates can build arbitrarily nested lists through a
// namespace, and a stack overflow must become an error instead.
struct nest_guard {
    static inline thread_local int depth = 0;
    nest_guard() {
        if (++depth > 512) {
            --depth;
            fail("template", "value nested too deeply (more than 512 levels)");
        }
    }
    ~nest_guard() { --depth; }
    nest_guard(const nest_guard&) = delete;
    nest_guard& operator=(const nest_guard&) = delete;
};

}  // namespace

const value* dict_data::find(const value& key) const {
    for (auto& [k, v] : items)
        if (py_equal(k, key)) return &v;
    return nullptr;
}

const value* dict_data::find(const std::string& key) const {
    for (auto& [k, v] : items)
        if (k.is_string() && k.as_string() == key) return &v;
    return nullptr;
}

void dict_data::set(const value& key, value v) {
    for (auto& [k, old] : items)
        if (py_equal(k, key)) {
            old = std::move(v);
            return;
        }
    items.emplace_back(key, std::move(v));
}

const value* call_args::get_named(const std::string& name) const {
    for (auto& [k, v] : named)
        if (k == name) return &v;
    return nullptr;
}

value value::undefined(std::string hint) {
    value v;
    v.s_ = std::move(hint);
    return v;
}

value value::none() {
    value v;
    v.kind_ = kind::none;
    return v;
}

value value::boolean(bool b) {
    value v;
    v.kind_ = kind::boolean;
    v.b_ = b;
    return v;
}

value value::integer(int64_t i) {
    value v;
    v.kind_ = kind::integer;
    v.i_ = i;
    return v;
}

value value::floating(double f) {
    value v;
    v.kind_ = kind::floating;
    v.f_ = f;
    return v;
}

value value::string(std::string s) {
    value v;
    v.kind_ = kind::string;
    v.s_ = std::move(s);
    return v;
}

value value::markup(std::string s) {
    value v = string(std::move(s));
    v.b_ = true;
    return v;
}

value value::list(std::vector<value> items) {
    value v;
    v.kind_ = kind::list;
    v.list_ = std::make_shared<list_data>();
    v.list_->items = std::move(items);
    return v;
}

value value::iterator(std::vector<value> items) {
    value v = list(std::move(items));
    v.list_->iterator = true;
    return v;
}

value value::tuple(std::vector<value> items) {
    value v = list(std::move(items));
    v.kind_ = kind::tuple;
    return v;
}

value value::dict() {
    value v;
    v.kind_ = kind::dict;
    v.dict_ = std::make_shared<dict_data>();
    return v;
}

value value::ns() {
    value v = dict();
    v.kind_ = kind::ns;
    return v;
}

value value::callable(std::string name, std::function<value(call_args&)> fn) {
    value v;
    v.kind_ = kind::callable;
    v.fn_ = std::make_shared<callable_data>(callable_data{std::move(name), std::move(fn)});
    return v;
}

value value::from_json(const nlohmann::ordered_json& j) {
    switch (j.type()) {
        case nlohmann::ordered_json::value_t::null: return none();
        case nlohmann::ordered_json::value_t::boolean: return boolean(j.get<bool>());
        case nlohmann::ordered_json::value_t::number_integer: return integer(j.get<int64_t>());
        case nlohmann::ordered_json::value_t::number_unsigned: {
            auto u = j.get<uint64_t>();
            if (u > static_cast<uint64_t>(INT64_MAX)) return floating(static_cast<double>(u));
            return integer(static_cast<int64_t>(u));
        }
        case nlohmann::ordered_json::value_t::number_float: return floating(j.get<double>());
        case nlohmann::ordered_json::value_t::string: return string(j.get<std::string>());
        case nlohmann::ordered_json::value_t::array: {
            std::vector<value> items;
            for (auto& e : j) items.push_back(from_json(e));
            return list(std::move(items));
        }
        case nlohmann::ordered_json::value_t::object: {
            value d = dict();
            for (auto& [k, e] : j.items()) d.dict_->items.emplace_back(string(k), from_json(e));
            return d;
        }
        default: return none();
    }
}

double value::as_float() const {
    if (kind_ == kind::floating) return f_;
    return static_cast<double>(as_int());
}

bool value::truthy() const {
    switch (kind_) {
        case kind::undefined:
        case kind::none: return false;
        case kind::boolean: return b_;
        case kind::integer: return i_ != 0;
        case kind::floating: return f_ != 0.0;
        case kind::string: return !s_.empty();
        case kind::list:
        case kind::tuple: return list_->iterator || !list_->items.empty();
        case kind::dict: return !dict_->items.empty();
        case kind::ns:
        case kind::callable: return true;
    }
    return false;
}

std::string format_float(double f) {
    if (std::isnan(f)) return "nan";
    if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
    if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
    std::string sci(buf, res.ptr);
    std::string sign;
    if (sci[0] == '-') {
        sign = "-";
        sci.erase(0, 1);
    }
    auto epos = sci.find('e');
    int exp = std::stoi(sci.substr(epos + 1));
    std::string digits;
    for (char c : sci.substr(0, epos))
        if (c != '.') digits += c;
    if (exp >= -4 && exp < 16) {
        std::string out;
        if (exp < 0) {
            out = "0." + std::string(-exp - 1, '0') + digits;
        } else if (static_cast<size_t>(exp + 1) >= digits.size()) {
            out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
        } else {
            out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
        }
        return sign + out;
    }
    std::string mant = digits.substr(0, 1);
    if (digits.size() > 1) mant += "." + digits.substr(1);
    return fmt::format("{}{}e{}{:02d}", sign, mant, exp < 0 ? '-' : '+', std::abs(exp));
}

static std::string repr_string(const std::string& s) {
    char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
    std::string out(1, q);
    for (unsigned char c : s) {
        if (c == '\\') {
            out += "\\\\";
        } else if (c == static_cast<unsigned char>(q)) {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c < 0x20 || c == 0x7f) {
            out += fmt::format("\\x{:02x}", c);
        } else {
            out += static_cast<char>(c);
        }
    }
    out += q;
    return out;
}

std::string value::str() const {
    switch (kind_) {
        case kind::undefined: return "";
        case kind::string: return s_;
        default: return repr();
    }
}

std::string value::repr() const {
    nest_guard guard;
    switch (kind_) {
        case kind::undefined: return "Undefined";
        case kind::none: return "None";
        case kind::boolean: return b_ ? "True" : "False";
        case kind::integer: return std::to_string(i_);
        case kind::floating: return format_float(f_);
        case kind::string: return repr_string(s_);
        case kind::list:
        case kind::tuple: {
            if (list_->iterator) return "<generator object>";
            bool tup = kind_ == kind::tuple;
            std::string out = tup ? "(" : "[";
            for (size_t i = 0; i < list_->items.size(); ++i) {
                if (i) out += ", ";
                out += list_->items[i].repr();
            }
            if (tup && list_->items.size() == 1) out += ",";
            return out + (tup ? ")" : "]");
        }
        case kind::dict:
        case kind::ns: {
            std::string out = kind_ == kind::ns ? "<Namespace {" : "{";
            for (size_t i = 0; i < dict_->items.size(); ++i) {
                if (i) out += ", ";
                out += dict_->items[i].first.repr() + ": " + dict_->items[i].second.repr();
            }
            return out + (kind_ == kind::ns ? "}>" : "}");
        }
        case kind::callable: return fmt::format("<function {}>", fn_->name);
    }
    return "";
}

static void json_string(std::string& out, const std::string& s) {
    out += '"';
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20)
                    out += fmt::format("\\u{:04x}", c);
                else
                    out += static_cast<char>(c);
        }
    }
    out += '"';
}

static std::string json_key(const value& k) {
    switch (k.type()) {
        case kind::string: return k.as_string();
        case kind::integer: return std::to_string(k.as_int());
        case kind::floating: return format_float(k.as_float());
        case kind::boolean: return k.as_bool() ? "true" : "false";
        case kind::none: return "null";
        default: fail("template", "TypeError: keys must be str, int, float, bool or None, not {}", k.py_type());
    }
}

static void json_dump(std::string& out, const value& v, int indent, int level) {
    nest_guard guard;
    auto newline = [&](int lvl) {
        out += '\n';
        out.append(static_cast<size_t>(indent * lvl), ' ');
    };
    switch (v.type()) {
        case kind::none: out += "null"; return;
        case kind::boolean: out += v.as_bool() ? "true" : "false"; return;
        case kind::integer: out += std::to_string(v.as_int()); return;
        case kind::floating: {
            double f = v.as_float();
            if (std::isnan(f))
                out += "NaN";
            else if (std::isinf(f))
                out += f < 0 ? "-Infinity" : "Infinity";
            else
                out += format_float(f);
            return;
        }
        case kind::string: json_string(out, v.as_string()); return;
        case kind::list:
        case kind::tuple: {
            if (v.is_iterator()) fail("template", "TypeError: Object of type generator is not JSON serializable");
            auto& items = v.items();
            if (items.empty()) {
                out += "[]";
                return;
            }
            out += '[';
            for (size_t i = 0; i < items.size(); ++i) {
                if (i) out += indent >= 0 ? "," : ", ";
                if (indent >= 0) newline(level + 1);
                json_dump(out, items[i], indent, level + 1);
            }
            if (indent >= 0) newline(level);
            out += ']';
            return;
        }
        case kind::dict: {
            auto& items = v.dict_ref().items;
            if (items.empty()) {
                out += "{}";
                return;
            }
            out += '{';
            for (size_t i = 0; i < items.size(); ++i) {
                if (i) out += indent >= 0 ? "," : ", ";
                if (indent >= 0) newline(level + 1);
                json_string(out, json_key(items[i].first));
                out += ": ";
                json_dump(out, items[i].second, indent, level + 1);
            }
            if (indent >= 0) newline(level);
            out += '}';
            return;
        }
        default: fail("template", "TypeError: Object of type {} is not JSON serializable", v.py_type());
    }
}

std::string value::to_json(int indent) const {
    std::string out;
    json_dump(out, *this, indent, 0);
    return out;
}

std::string value::py_type() const {
    switch (kind_) {
        case kind::undefined: return "Undefined";
        case kind::none: return "NoneType";
        case kind::boolean: return "bool";
        case kind::integer: return "int";
        case kind::floating: return "float";
        case kind::string: return "str";
        case kind::list: return list_->iterator ? "generator" : "list";
        case kind::tuple: return "tuple";
        case kind::dict: return "dict";
        case kind::ns: return "Namespace";
        case kind::callable: return "function";
    }
    return "object";
}

std::string value::type_name() const {
    if (kind_ == kind::none) return "None";
    return py_type() + " object";
}

size_t value::length() const {
    switch (kind_) {
        case kind::undefined: return 0;
        case kind::string: return utf8_decode(s_).size();
        case kind::list:
        case kind::tuple:
            if (list_->iterator) break;
            return list_->items.size();
        case kind::dict: return dict_->items.size();
        default: break;
    }
    fail("template", "TypeError: object of type '{}' has no len()", py_type());
}

bool value::same_as(const value& o) const {
    if (kind_ != o.kind_) return false;
    switch (kind_) {
        case kind::list:
        case kind::tuple: return list_ == o.list_;
        case kind::dict:
        case kind::ns: return dict_ == o.dict_;
        case kind::callable: return fn_ == o.fn_;
        default: return py_equal(*this, o);
    }
}

bool py_equal(const value& a, const value& b) {
    nest_guard guard;
    if (a.is_number() && b.is_number()) {
        if (a.type() == kind::floating || b.type() == kind::floating) return a.as_float() == b.as_float();
        return a.as_int() == b.as_int();
    }
    if (a.type() != b.type()) return false;
    switch (a.type()) {
        case kind::undefined:
        case kind::none: return true;
        case kind::string: return a.as_string() == b.as_string();
        case kind::list:
        case kind::tuple: {
            if (a.is_iterator() || b.is_iterator()) return a.same_as(b);
            auto &x = a.items(), &y = b.items();
            if (x.size() != y.size()) return false;
            for (size_t i = 0; i < x.size(); ++i)
                if (!py_equal(x[i], y[i])) return false;
            return true;
        }
        case kind::dict: {
            auto &x = a.dict_ref().items, &y = b.dict_ref().items;
            if (x.size() != y.size()) return false;
            for (auto& [k, v] : x) {
                const value* o = b.dict_ref().find(k);
                if (!o || !py_equal(v, *o)) return false;
            }
            return true;
        }
        default: return a.same_as(b);
    }
}

int py_compare(const value& a, const value& b) {
    nest_guard guard;
    if (a.is_number() && b.is_number()) {
        if (a.type() == kind::floating || b.type() == kind::floating) {
            double x = a.as_float(), y = b.as_float();
            return x < y ? -1 : (x > y ? 1 : 0);
        }
        int64_t x = a.as_int(), y = b.as_int();
        return x < y ? -1 : (x > y ? 1 : 0);
    }
    if (a.is_string() && b.is_string()) {
        int c = a.as_string().compare(b.as_string());
        return c < 0 ? -1 : (c > 0 ? 1 : 0);
    }
    if (a.type() == b.type() && a.is_sequence_kind() && !a.is_iterator() && !b.is_iterator()) {
        auto &x = a.items(), &y = b.items();
        for (size_t i = 0; i < x.size() && i < y.size(); ++i)
            if (int c = py_compare(x[i], y[i])) return c;
        return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
    }
    fail("template", "TypeError: '<' not supported between instances of '{}' and '{}'", a.py_type(), b.py_type());
}

std::u32string utf8_decode(const std::string& s) {
    std::u32string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
        if (n < 0 || i + static_cast<size_t>(n) >= s.size()) {
            out += static_cast<char32_t>(c);  // invalid byte: keep it as a code point of its own
            ++i;
            continue;
        }
        char32_t cp = n == 0 ? c : (c & (0x3f >> n));
        bool ok = true;
        for (int k = 1; k <= n; ++k) {
            unsigned char cc = static_cast<unsigned char>(s[i + k]);
            if ((cc >> 6) != 2) ok = false;
            cp = (cp << 6) | (cc & 0x3f);
        }
        if (!ok) {
            out += static_cast<char32_t>(c);
            ++i;
            continue;
        }
        out += cp;
        i += static_cast<size_t>(n) + 1;
    }
    return out;
}

std::string utf8_encode(const std::u32string& s) {
    std::string out;
    out.reserve(s.size());
    for (char32_t cp : s) {
        if (cp < 0x80) {
            out += static_cast<char>(cp);
        } else if (cp < 0x800) {
            out += static_cast<char>(0xc0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            out += static_cast<char>(0xe0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
            out += static_cast<char>(0x80 | (cp & 0x3f));
        } else {
            out += static_cast<char>(0xf0 | (cp >> 18));
            out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
            out += static_cast<char>(0x80 | (cp & 0x3f));
        }
    }
    return out;
}

}  // namespace memtile::jinja
