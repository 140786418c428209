// Chat-template interpreter features, each compared with Python Jinja2 3.1 configured as Hugging Face does
// (expected strings were produced by that reference), plus errors and the resource limits.
#include <gtest/gtest.h>

#include "core/error.h"
#include "template/template.h"

using memtile::jinja::chat_template;
using memtile::jinja::render_options;
using json = nlohmann::ordered_json;

namespace {

render_options fixed_clock() {
    render_options o;
    o.now = [] {
        std::tm tm{};
        tm.tm_year = 2024 - 1900;
        tm.tm_mon = 6;
        tm.tm_mday = 26;
        tm.tm_hour = 9;
        tm.tm_min = 30;
        return tm;
    };
    return o;
}

std::string render(const std::string& src, const json& ctx = json::object(), const render_options& o = fixed_clock()) {
    return chat_template(src).render(ctx, o);
}

std::string error_of(const std::string& src, const json& ctx = json::object(),
                     const render_options& o = fixed_clock()) {
    try {
        render(src, ctx, o);
    } catch (const memtile::error& e) {
        return e.what();
    }
    return "";
}

// Generated with Python Jinja2 3.1.6, ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
// extensions=[loopcontrols]) and transformers' tojson.
const char* const reference_cases = R"cases([
 {
  "src": "{{ [1, 2.0, 'a', none, true, {'k': [1]}] }}",
  "ctx": {},
  "out": "[1, 2.0, 'a', None, True, {'k': [1]}]"
 },
 {
  "src": "{{ 'abc'[::-1] }}|{{ [1,2,3,4][1:3] }}|{{ [1,2,3,4][::-2] }}|{{ 'héllo'[1:3] }}",
  "ctx": {},
  "out": "cba|[2, 3]|[4, 2]|él"
 },
 {
  "src": "{% for x in [1,2,3,4] if x != 2 %}{{ loop.index }}/{{ loop.length }}:{{ x }}{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %} {% else %}none{% endfor %}",
  "ctx": {},
  "out": "1/3:1F 2/3:3 3/3:4L "
 },
 {
  "src": "{% for x in [] %}x{% else %}empty{% endfor %}",
  "ctx": {},
  "out": "empty"
 },
 {
  "src": "{% for x in range(10) %}{% if x == 5 %}{% break %}{% endif %}{% if x is odd %}{% continue %}{% endif %}{{ x }}{% endfor %}",
  "ctx": {},
  "out": "024"
 },
 {
  "src": "{% set ns = namespace(n=0) %}{% for x in range(4) %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}",
  "ctx": {},
  "out": "6"
 },
 {
  "src": "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', greeting='Hi') }}",
  "ctx": {},
  "out": "Hello, Ann! Hi, Bob!"
 },
 {
  "src": "{% macro wrap() %}[{{ caller() }}]{% endmacro %}{% call wrap() %}inner{% endcall %}",
  "ctx": {},
  "out": "[inner]"
 },
 {
  "src": "{% set x %}  block {{ 1 + 1 }}  {% endset %}[{{ x }}]{% filter upper %}shout{% endfilter %}",
  "ctx": {},
  "out": "[  block 2  ]SHOUT"
 },
 {
  "src": "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ 'ü\"\\n' | tojson }}",
  "ctx": {
   "d": {
    "b": 1,
    "a": [
     1.5,
     null,
     true
    ],
    "c": {}
   }
  },
  "out": "{\"b\": 1, \"a\": [1.5, null, true], \"c\": {}}|{\n  \"b\": 1,\n  \"a\": [\n    1.5,\n    null,\n    true\n  ],\n  \"c\": {}\n}|\"ü\\\"\\n\""
 },
 {
  "src": "{{ '  x  ' | trim }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'Hello World'.lower() }}|{{ 'hello world' | title }}|{{ 'hello'.startswith('he') }}|{{ 'x' ~ 1 ~ none }}",
  "ctx": {},
  "out": "x|['a', 'b', '', 'c']|['a', 'b']|hello world|Hello World|True|x1None"
 },
 {
  "src": "{{ users | selectattr('admin') | map(attribute='name') | join(', ') }}|{{ users | rejectattr('admin') | map(attribute='name') | list }}|{{ users | length }}",
  "ctx": {
   "users": [
    {
     "name": "a",
     "admin": true
    },
    {
     "name": "b",
     "admin": false
    },
    {
     "name": "c",
     "admin": true
    }
   ]
  },
  "out": "a, c|['b']|3"
 },
 {
  "src": "{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 's' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 1 is number }}{{ 'a' is sequence }}{{ true is true }}{{ 0 is false }}",
  "ctx": {
   "x": 1
  },
  "out": "TrueTrueTrueTrueTrueTrueTrueTrueTrueFalse"
 },
 {
  "src": "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2.0 }} {{ 10 / 5 }} {{ 3 * 'ab' }}",
  "ctx": {},
  "out": "3 -4 2 3.5 1024 3.0 2.0 ababab"
 },
 {
  "src": "{{ 'yes' if x else 'no' }}|{{ undefined_thing | default('dflt') }}|{{ '' | default('empty', true) }}|{{ [3,1,2] | sort }}|{{ [1,2,2,3] | unique | list }}|{{ [1,2,3] | reverse | list }}|{{ 'a b c' | wordcount }}",
  "ctx": {
   "x": 0
  },
  "out": "no|dflt|empty|[1, 2, 3]|[1, 2, 3]|[3, 2, 1]|3"
 },
 {
  "src": "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 3.7 | int }}|{{ '42' | int }}|{{ 'x' | int }}|{{ 2 | float }}|{{ -3 | abs }}|{{ 2.5 | round }}|{{ 2.567 | round(2) }}",
  "ctx": {},
  "out": "a\n  b\n\n  c|  a\n  b|3|42|0|2.0|3|2.0|2.57"
 },
 {
  "src": "{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}{{ d.keys() | list }}{{ d.get('zz', 'none') }}{{ 'a' in d }}{{ 'q' not in d }}",
  "ctx": {
   "d": {
    "a": 1,
    "b": 2
   }
  },
  "out": "a=1;b=2;['a', 'b']noneTrueTrue"
 },
 {
  "src": "  {% if true %}\n  text\n  {% endif %}\n{{- ' after' }}\n{#- comment -#}\n  end",
  "ctx": {},
  "out": "  text\n afterend"
 },
 {
  "src": "{% set a, b = 1, 2 %}{{ a }}{{ b }}{{ (1, 2) }}{{ [1] + [2] }}{{ dict(x=1, y='z') }}",
  "ctx": {},
  "out": "12(1, 2)[1, 2]{'x': 1, 'y': 'z'}"
 },
 {
  "src": "{{ strftime_now('%Y-%m-%d %H:%M') }}",
  "ctx": {},
  "out": "2024-07-26 09:30"
 },
 {
  "src": "{% raw %}{{ not rendered }}{% endraw %}",
  "ctx": {},
  "out": "{{ not rendered }}"
 },
 {
  "src": "{{ 1 == 1.0 }}{{ true == 1 }}{{ [1, 2] == [1, 2] }}{{ 'b' > 'a' }}{{ none }}{{ 1e20 }}{{ 0.1 + 0.2 }}{{ 1e-7 }}",
  "ctx": {},
  "out": "TrueTrueTrueTrueNone1e+200.300000000000000041e-07"
 }
])cases";

}  // namespace

TEST(template_engine, matches_python_reference) {
    for (auto& c : json::parse(reference_cases)) {
        std::string src = c["src"].get<std::string>();
        std::string got;
        try {
            got = render(src, c["ctx"]);
        } catch (const memtile::error& e) {
            got = std::string("error: ") + e.what();
        }
        EXPECT_EQ(got, c["out"].get<std::string>()) << "template: " << src;
    }
}

TEST(template_engine, syntax_errors_have_line_and_column) {
    std::string e = error_of("line one\n{% if x %}\n{{ 1 + }}\n{% endif %}");
    EXPECT_NE(e.find("[template] syntax error at line 3, column"), std::string::npos) << e;
    EXPECT_NE(error_of("{% for x in y %}no end").find("unexpected end of template"), std::string::npos);
    EXPECT_NE(error_of("{% frobnicate %}").find("unknown statement 'frobnicate'"), std::string::npos);
    EXPECT_NE(error_of("{{ 'unterminated }}").find("unterminated string"), std::string::npos);
}

TEST(template_engine, runtime_errors) {
    std::string e = error_of("{{ raise_exception('bad role') }}");
    EXPECT_NE(e.find("bad role"), std::string::npos) << e;
    e = error_of("\n{{ x.y }}");
    EXPECT_NE(e.find("UndefinedError: 'x' is undefined (template line 2)"), std::string::npos) << e;
    EXPECT_NE(error_of("{{ 'a' + d }}", {{"d", json::object()}}).find("can only concatenate str (not \"dict\") to str"),
              std::string::npos);
    EXPECT_NE(error_of("{{ undefined_fn() }}").find("UndefinedError"), std::string::npos);
    EXPECT_NE(error_of("{{ [1] | map('upper') | tojson }}").find("generator is not JSON serializable"),
              std::string::npos);
    EXPECT_NE(error_of("{{ [].append(1) }}").find("SecurityError"), std::string::npos);
    EXPECT_NE(error_of("{{ x | nosuchfilter }}").find("no filter named 'nosuchfilter'"), std::string::npos);
    // Undefined renders empty, is falsy and iterates as empty.
    EXPECT_EQ(render("[{{ nothing }}]{% if nothing %}x{% endif %}{% for a in nothing %}y{% endfor %}"), "[]");
}

TEST(template_engine, step_limit_stops_runaway_loops) {
    render_options o = fixed_clock();
    o.max_steps = 10000;
    std::string e = error_of("{% for a in range(1000) %}{% for b in range(1000) %}{% endfor %}{% endfor %}", {}, o);
    EXPECT_NE(e.find("step limit"), std::string::npos) << e;
}

TEST(template_engine, depth_limit_stops_runaway_recursion) {
    std::string e = error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
    EXPECT_NE(e.find("recursion depth limit"), std::string::npos) << e;
    std::string deep = std::string(10000, '(') + "1" + std::string(10000, ')');
    EXPECT_NE(error_of("{{ " + deep + " }}").find("nesting too deep"), std::string::npos);
}

TEST(template_engine, deeply_nested_values_fail_cleanly) {
    const std::string build =
        "{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}";
    EXPECT_NE(error_of(build + "{{ ns.x }}").find("nested too deeply"), std::string::npos);
    EXPECT_NE(error_of(build + "{{ ns.x | tojson }}").find("nested too deeply"), std::string::npos);
    EXPECT_NE(error_of(build + "{{ ns.x == ns.x[0] }}").find("nested too deeply"), std::string::npos);
}

TEST(template_engine, output_limit_stops_memory_exhaustion) {
    render_options o = fixed_clock();
    o.max_output = 1 << 16;
    EXPECT_NE(error_of("{% for i in range(100000) %}xxxxxxxx{% endfor %}", {}, o).find("output size limit"),
              std::string::npos);
    EXPECT_NE(error_of("{{ 'x' * 100000000 }}", {}, o).find("output size limit"), std::string::npos);
    EXPECT_NE(error_of("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
                       "{% endfor %}",
                       {}, o)
                  .find("output size limit"),
              std::string::npos);
    EXPECT_NE(error_of("{{ range(100000000) | length }}").find("list size limit"), std::string::npos);
}

TEST(template_engine, chatml_fallback) {
    json ctx = {{"messages",
                 json::array({{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}})},
                {"add_generation_prompt", true}};
    EXPECT_EQ(chat_template(std::string(memtile::jinja::chatml_template())).render(ctx),
              "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}
