// Values of the chat-template interpreter: a small model of the Python data model that Jinja templates see.
// Lists, dicts and namespaces have reference semantics (shared_ptr), as in Python, so `set ns.x = ...` inside
// a macro or loop is visible to the caller. Dicts keep insertion order (Python 3.7+), which tojson relies on.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace memtile::jinja {

class value;

enum class kind { undefined, none, boolean, integer, floating, string, list, tuple, dict, ns, callable };

// Sequences. `iterator` marks the result of lazy Python iterators (map, select, items, reverse...): those
// cannot be measured, indexed or serialised, and are consumed by the first iteration, as in Jinja.
struct list_data {
    std::vector<value> items;
    bool iterator = false;
};

// Insertion-ordered mapping; keys compare with Python equality. Linear lookup: template dicts are tiny.
struct dict_data {
    std::vector<std::pair<value, value>> items;
    const value* find(const value& key) const;
    const value* find(const std::string& key) const;
    void set(const value& key, value v);
};

// Arguments of a call: positional and keyword arguments in source order.
struct call_args {
    std::vector<value> positional;
    std::vector<std::pair<std::string, value>> named;
    const value* get_named(const std::string& name) const;
};

struct callable_data {
    std::string name;
    std::function<value(call_args&)> fn;
};

class value {
public:
    value() = default;  // undefined
    static value undefined(std::string hint = {});
    static value none();
    static value boolean(bool b);
    static value integer(int64_t i);
    static value floating(double f);
    static value string(std::string s);
    // markupsafe.Markup: a string marked safe (|safe, |escape). `+` with a plain str HTML-escapes the plain one,
    // which some templates rely on by accident (Functionary v3.1 escapes its tool JSON this way).
    static value markup(std::string s);
    static value list(std::vector<value> items = {});
    static value iterator(std::vector<value> items);
    static value tuple(std::vector<value> items);
    static value dict();
    static value ns();
    static value callable(std::string name, std::function<value(call_args&)> fn);
    static value from_json(const nlohmann::ordered_json& j);

    kind type() const { return kind_; }
    bool is_undefined() const { return kind_ == kind::undefined; }
    bool is_none() const { return kind_ == kind::none; }
    bool is_string() const { return kind_ == kind::string; }
    bool is_markup() const { return kind_ == kind::string && b_; }
    bool is_number() const { return kind_ == kind::integer || kind_ == kind::floating || kind_ == kind::boolean; }
    bool is_sequence_kind() const { return kind_ == kind::list || kind_ == kind::tuple; }
    bool is_iterator() const { return kind_ == kind::list && list_->iterator; }
    bool is_mapping() const { return kind_ == kind::dict; }

    bool as_bool() const { return b_; }
    int64_t as_int() const { return kind_ == kind::boolean ? (b_ ? 1 : 0) : i_; }
    double as_float() const;
    const std::string& as_string() const { return s_; }
    // Undefined: the reason it is undefined, e.g. "'x' is undefined"; used in UndefinedError messages.
    const std::string& undefined_hint() const { return s_; }
    std::vector<value>& items() const { return list_->items; }
    list_data& list_ref() const { return *list_; }
    dict_data& dict_ref() const { return *dict_; }
    const callable_data& callable_ref() const { return *fn_; }

    // Python truthiness (undefined is falsy).
    bool truthy() const;
    // str(x) and repr(x) as Python prints them (None, True, 1.0, ['a', 1], {'k': 'v'}); undefined is "".
    std::string str() const;
    std::string repr() const;
    // json.dumps(x, ensure_ascii=False, indent=indent, sort_keys=False) with Python's default separators.
    // Throws for values JSON cannot express (undefined, iterators, callables), like Python's TypeError.
    std::string to_json(int indent = -1) const;
    // Python type name ("dict", "str", "NoneType", "generator") and Jinja's wording of it in undefined-attribute
    // errors ("dict object", "None").
    std::string py_type() const;
    std::string type_name() const;
    // Python's `len`; throws for values without a length.
    size_t length() const;
    // Python identity for mutable containers, equality for scalars (the `is sameas` test).
    bool same_as(const value& o) const;

private:
    kind kind_ = kind::undefined;
    bool b_ = false;
    int64_t i_ = 0;
    double f_ = 0;
    std::string s_;
    std::shared_ptr<list_data> list_;
    std::shared_ptr<dict_data> dict_;
    std::shared_ptr<callable_data> fn_;
};

// Python `==` (1 == 1.0 == True; deep for lists and dicts) and the ordering used by `<` and sort.
bool py_equal(const value& a, const value& b);
// Returns <0, 0, >0; throws a TypeError-like error for unorderable pairs.
int py_compare(const value& a, const value& b);
// Python float repr: shortest round-trip digits, exponent form below 1e-4 and from 1e16 on.
std::string format_float(double f);
// UTF-8 <-> code points, for Python string semantics of len, indexing and slicing.
std::u32string utf8_decode(const std::string& s);
std::string utf8_encode(const std::u32string& s);

}  // namespace memtile::jinja
