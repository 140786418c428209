#include "template/template.h"

#include <array>

#include "template/evaluator.h"
#include "template/interp.h"
#include "template/parser.h"

namespace memtile::jinja {

namespace {

std::tm system_now() {
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    return tm;
}

std::vector<std::pair<std::string, value>> make_globals(render_state& st) {
    std::vector<std::pair<std::string, value>> g;
    g.emplace_back("raise_exception", value::callable("raise_exception", [](call_args& a) -> value {
                       fail("template", "TemplateError: {}", arg(a, 0, "message", value::string("")).str());
                   }));
    g.emplace_back("strftime_now", value::callable("strftime_now", [&st](call_args& a) {
                       std::string fmt_str = arg(a, 0, "format", value::string("")).str();
                       std::tm tm = st.opts.now ? st.opts.now() : system_now();
                       std::array<char, 512> buf{};
                       size_t n = fmt_str.empty() ? 0 : std::strftime(buf.data(), buf.size(), fmt_str.c_str(), &tm);
                       if (n == 0 && !fmt_str.empty())
                           fail("template", "strftime_now: format too long or empty result");
                       return value::string(std::string(buf.data(), n));
                   }));
    g.emplace_back("range", value::callable("range", [&st](call_args& a) {
                       std::vector<int64_t> p;
                       for (auto& v : a.positional) {
                           if (!v.is_number() || v.type() == kind::floating)
                               fail("template", "TypeError: '{}' object cannot be interpreted as an integer",
                                    v.py_type());
                           p.push_back(v.as_int());
                       }
                       if (p.empty() || p.size() > 3) fail("template", "TypeError: range expects 1 to 3 arguments");
                       int64_t start = p.size() == 1 ? 0 : p[0], stop = p.size() == 1 ? p[0] : p[1];
                       int64_t step = p.size() == 3 ? p[2] : 1;
                       if (step == 0) fail("template", "ValueError: range() arg 3 must not be zero");
                       std::vector<value> out;
                       for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                           st.check_items(out.size() + 1);
                           out.push_back(value::integer(i));
                       }
                       return value::list(std::move(out));
                   }));
    auto fill = [](value target, call_args& a) {
        for (auto& p : a.positional) {
            if (p.is_mapping()) {
                for (auto& [k, v] : p.dict_ref().items) target.dict_ref().set(k, v);
            } else {
                for (auto& pair : iterate(p)) {
                    std::vector<value> kv = iterate(pair);
                    if (kv.size() != 2)
                        fail("template", "ValueError: dictionary update sequence element has wrong length");
                    target.dict_ref().set(kv[0], kv[1]);
                }
            }
        }
        for (auto& [k, v] : a.named) target.dict_ref().set(value::string(k), v);
        return target;
    };
    g.emplace_back("namespace", value::callable("namespace", [fill](call_args& a) { return fill(value::ns(), a); }));
    g.emplace_back("dict", value::callable("dict", [fill](call_args& a) { return fill(value::dict(), a); }));
    return g;
}

}  // namespace

chat_template::chat_template(std::string source, size_t max_depth)
    : source_(std::move(source)), program_(parse(source_, max_depth)) {}

std::string chat_template::render(const nlohmann::ordered_json& context, const render_options& opts) const {
    if (!context.is_object() && !context.is_null()) fail("template", "render context must be a JSON object");
    render_state st(opts);
    std::vector<std::pair<std::string, value>> vars;
    if (context.is_object())
        for (auto& [k, v] : context.items()) vars.emplace_back(k, value::from_json(v));
    return render_program(*program_, make_globals(st), vars, st);
}

std::string_view chatml_template() {
    return "{%- for message in messages -%}\n"
           "{{- '<|im_start|>' ~ message['role'] ~ '\\n' ~ (message['content'] or '') ~ '<|im_end|>\\n' -}}\n"
           "{%- endfor -%}\n"
           "{%- if add_generation_prompt -%}\n"
           "{{- '<|im_start|>assistant\\n' -}}\n"
           "{%- endif -%}\n";
}

}  // namespace memtile::jinja
