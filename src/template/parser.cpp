#include "template/parser.h"

#include <charconv>
#include <set>

#include "core/error.h"
#include "template/lexer.h"

namespace memtile::jinja {

namespace {

class parser {
public:
    parser(std::vector<token> toks, size_t max_depth) : toks_(std::move(toks)), max_depth_(max_depth) {}

    std::shared_ptr<program> run() {
        auto prog = std::make_shared<program>();
        std::string end = parse_body(prog->body, {});
        (void)end;
        return prog;
    }

private:
    std::vector<token> toks_;
    size_t pos_ = 0;
    size_t depth_ = 0;
    size_t max_depth_;

    struct depth_guard {
        parser& p;
        explicit depth_guard(parser& p_) : p(p_) {
            if (++p.depth_ > p.max_depth_) p.error("nesting too deep");
        }
        ~depth_guard() { --p.depth_; }
    };

    const token& cur() const { return toks_[pos_]; }
    const token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
    const token& next() {
        const token& t = toks_[pos_];
        if (pos_ + 1 < toks_.size()) ++pos_;
        return t;
    }

    [[noreturn]] void error(const std::string& msg) const {
        fail("template", "syntax error at line {}, column {}: {}", cur().line, cur().column, msg);
    }

    static std::string describe(const token& t) {
        switch (t.type) {
            case tok::eof: return "end of template";
            case tok::var_end: return "'}}'";
            case tok::block_end: return "'%}'";
            case tok::text: return "text";
            default: return "'" + t.text + "'";
        }
    }

    bool is_op(const char* op) const { return cur().type == tok::op && cur().text == op; }
    bool is_name(const char* n) const { return cur().type == tok::name && cur().text == n; }
    bool accept_op(const char* op) {
        if (!is_op(op)) return false;
        next();
        return true;
    }
    bool accept_name(const char* n) {
        if (!is_name(n)) return false;
        next();
        return true;
    }
    void expect_op(const char* op) {
        if (!accept_op(op)) error(std::string("expected '") + op + "', got " + describe(cur()));
    }
    std::string expect_name() {
        if (cur().type != tok::name) error("expected a name, got " + describe(cur()));
        return next().text;
    }
    void expect_block_end() {
        if (cur().type != tok::block_end) error("expected '%}', got " + describe(cur()));
        next();
    }

    expr_ptr node(expr_kind k, int line) {
        auto e = std::make_unique<expr>();
        e->kind = k;
        e->line = line;
        return e;
    }

    stmt_ptr make_stmt(stmt_kind k, int line) {
        auto s = std::make_unique<stmt>();
        s->kind = k;
        s->line = line;
        return s;
    }

    // Parses statements until a block whose keyword is in `ends` (consumed up to the keyword; the caller
    // parses the rest of that tag). Returns the keyword, or "" at end of input when `ends` is empty.
    std::string parse_body(stmt_list& body, const std::set<std::string>& ends) {
        depth_guard g(*this);
        for (;;) {
            const token& t = cur();
            if (t.type == tok::eof) {
                if (!ends.empty()) error("unexpected end of template, expected " + *ends.begin());
                return "";
            }
            if (t.type == tok::text) {
                auto s = make_stmt(stmt_kind::text, t.line);
                s->text = t.text;
                body.push_back(std::move(s));
                next();
            } else if (t.type == tok::var_begin) {
                auto s = make_stmt(stmt_kind::output, t.line);
                next();
                s->value_expr = parse_expression();
                if (cur().type != tok::var_end) error("expected '}}', got " + describe(cur()));
                next();
                body.push_back(std::move(s));
            } else if (t.type == tok::block_begin) {
                next();
                if (cur().type != tok::name) error("expected a statement keyword, got " + describe(cur()));
                std::string kw = cur().text;
                if (ends.count(kw)) {
                    next();
                    return kw;
                }
                body.push_back(parse_statement());
            } else {
                error("unexpected " + describe(t));
            }
        }
    }

    stmt_ptr parse_statement() {
        const token& t = cur();
        int line = t.line;
        std::string kw = next().text;
        if (kw == "if") return parse_if(line);
        if (kw == "for") return parse_for(line);
        if (kw == "set") return parse_set(line);
        if (kw == "macro") return parse_macro(line);
        if (kw == "call") return parse_call_block(line);
        if (kw == "filter") {
            auto s = make_stmt(stmt_kind::filter_block, line);
            parse_filter_chain(s->filters);
            expect_block_end();
            parse_body(s->body, {"endfilter"});
            expect_block_end();
            return s;
        }
        if (kw == "break" || kw == "continue") {
            expect_block_end();
            return make_stmt(kw == "break" ? stmt_kind::break_ : stmt_kind::continue_, line);
        }
        if (kw == "generation") {
            // Hugging Face's assistant-mask extension: renders its body unchanged.
            auto s = make_stmt(stmt_kind::scope, line);
            expect_block_end();
            parse_body(s->body, {"endgeneration"});
            expect_block_end();
            return s;
        }
        fail("template", "syntax error at line {}, column {}: unknown statement '{}'", t.line, t.column, kw);
    }

    stmt_ptr parse_if(int line) {
        auto s = make_stmt(stmt_kind::if_, line);
        expr_ptr cond = parse_expression();
        expect_block_end();
        for (;;) {
            stmt_list body;
            std::string end = parse_body(body, {"elif", "else", "endif"});
            s->branches.emplace_back(std::move(cond), std::move(body));
            if (end == "endif") break;
            if (end == "else") {
                expect_block_end();
                stmt_list else_body;
                parse_body(else_body, {"endif"});
                s->branches.emplace_back(nullptr, std::move(else_body));
                break;
            }
            cond = parse_expression();
            expect_block_end();
        }
        expect_block_end();
        return s;
    }

    std::vector<std::string> parse_targets() {
        std::vector<std::string> targets;
        bool paren = accept_op("(");
        do {
            targets.push_back(expect_name());
        } while (accept_op(","));
        if (paren) expect_op(")");
        return targets;
    }

    stmt_ptr parse_for(int line) {
        auto s = make_stmt(stmt_kind::for_, line);
        s->targets = parse_targets();
        if (!accept_name("in")) error("expected 'in', got " + describe(cur()));
        s->value_expr = parse_tuple_or_expr(false);
        if (accept_name("if")) s->cond = parse_expression();
        if (accept_name("recursive")) error("recursive loops are not supported");
        expect_block_end();
        std::string end = parse_body(s->body, {"else", "endfor"});
        if (end == "else") {
            expect_block_end();
            parse_body(s->else_body, {"endfor"});
        }
        expect_block_end();
        return s;
    }

    stmt_ptr parse_set(int line) {
        std::string first = expect_name();
        if (accept_op(".")) {
            auto s = make_stmt(stmt_kind::set, line);
            s->targets.push_back(first);
            s->attr = expect_name();
            expect_op("=");
            s->value_expr = parse_tuple_or_expr();
            expect_block_end();
            return s;
        }
        std::vector<std::string> targets{first};
        while (accept_op(",")) targets.push_back(expect_name());
        if (accept_op("=")) {
            auto s = make_stmt(stmt_kind::set, line);
            s->targets = std::move(targets);
            s->value_expr = parse_tuple_or_expr();
            expect_block_end();
            return s;
        }
        if (targets.size() != 1) error("expected '='");
        auto s = make_stmt(stmt_kind::set_block, line);
        s->targets = std::move(targets);
        if (is_op("|")) parse_filter_chain(s->filters);
        expect_block_end();
        parse_body(s->body, {"endset"});
        expect_block_end();
        return s;
    }

    void parse_params(std::vector<std::pair<std::string, expr_ptr>>& params) {
        expect_op("(");
        while (!accept_op(")")) {
            if (!params.empty()) expect_op(",");
            if (accept_op(")")) break;
            std::string n = expect_name();
            expr_ptr def;
            if (accept_op("=")) def = parse_expression();
            params.emplace_back(std::move(n), std::move(def));
        }
    }

    stmt_ptr parse_macro(int line) {
        auto s = make_stmt(stmt_kind::macro, line);
        s->name = expect_name();
        parse_params(s->params);
        expect_block_end();
        parse_body(s->body, {"endmacro"});
        if (cur().type == tok::name) next();  // `{% endmacro name %}`
        expect_block_end();
        return s;
    }

    stmt_ptr parse_call_block(int line) {
        auto s = make_stmt(stmt_kind::call_block, line);
        if (is_op("(")) parse_params(s->params);
        s->value_expr = parse_expression();
        if (s->value_expr->kind != expr_kind::call) error("expected a macro call");
        expect_block_end();
        parse_body(s->body, {"endcall"});
        expect_block_end();
        return s;
    }

    // `| f(args) | g` or, after `filter`, `f(args) | g`: filter nodes whose input is supplied at run time.
    void parse_filter_chain(std::vector<expr_ptr>& filters) {
        bool first = !is_op("|");
        while (first || accept_op("|")) {
            first = false;
            filters.push_back(parse_filter(nullptr));
        }
    }

    // ---- expressions -------------------------------------------------------------------------------------

    // `a, b` tuples of assignments and loops; a loop's iterable has no inline if (its `if` filters the loop).
    expr_ptr parse_tuple_or_expr(bool with_condexpr = true) {
        int line = cur().line;
        auto item = [&] { return with_condexpr ? parse_expression() : parse_or(); };
        expr_ptr first = item();
        if (!is_op(",")) return first;
        auto t = node(expr_kind::tuple, line);
        t->args.push_back(std::move(first));
        while (accept_op(",")) {
            if (cur().type == tok::block_end || cur().type == tok::var_end || is_name("if")) break;
            t->args.push_back(item());
        }
        return t;
    }

    expr_ptr parse_expression() {
        depth_guard g(*this);
        int line = cur().line;
        expr_ptr e = parse_or();
        while (is_name("if")) {
            next();
            auto c = node(expr_kind::cond, line);
            expr_ptr condition = parse_or();
            expr_ptr otherwise = accept_name("else") ? parse_expression() : nullptr;
            c->args.push_back(std::move(condition));
            c->args.push_back(std::move(e));
            c->args.push_back(std::move(otherwise));
            e = std::move(c);
        }
        return e;
    }

    expr_ptr binary(const std::string& op, expr_ptr l, expr_ptr r, int line) {
        auto b = node(expr_kind::binary, line);
        b->name = op;
        b->args.push_back(std::move(l));
        b->args.push_back(std::move(r));
        return b;
    }

    expr_ptr parse_or() {
        int line = cur().line;
        expr_ptr l = parse_and();
        while (accept_name("or")) l = binary("or", std::move(l), parse_and(), line);
        return l;
    }

    expr_ptr parse_and() {
        int line = cur().line;
        expr_ptr l = parse_not();
        while (accept_name("and")) l = binary("and", std::move(l), parse_not(), line);
        return l;
    }

    expr_ptr parse_not() {
        if (is_name("not")) {
            depth_guard g(*this);
            auto n = node(expr_kind::unary, cur().line);
            next();
            n->name = "not";
            n->args.push_back(parse_not());
            return n;
        }
        return parse_compare();
    }

    expr_ptr parse_compare() {
        int line = cur().line;
        expr_ptr l = parse_math1();
        for (;;) {
            std::string op;
            if (cur().type == tok::op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                          cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
                op = next().text;
            } else if (is_name("in")) {
                next();
                op = "in";
            } else if (is_name("not") && peek().type == tok::name && peek().text == "in") {
                next();
                next();
                op = "not in";
            } else {
                return l;
            }
            // Chained comparisons (a < b < c) are rare in templates; they evaluate left to right here.
            l = binary(op, std::move(l), parse_math1(), line);
        }
    }

    expr_ptr parse_math1() {
        int line = cur().line;
        expr_ptr l = parse_concat();
        while (is_op("+") || is_op("-")) {
            std::string op = next().text;
            l = binary(op, std::move(l), parse_concat(), line);
        }
        return l;
    }

    expr_ptr parse_concat() {
        int line = cur().line;
        expr_ptr l = parse_math2();
        while (accept_op("~")) l = binary("~", std::move(l), parse_math2(), line);
        return l;
    }

    expr_ptr parse_math2() {
        int line = cur().line;
        expr_ptr l = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            std::string op = next().text;
            l = binary(op, std::move(l), parse_pow(), line);
        }
        return l;
    }

    expr_ptr parse_pow() {
        int line = cur().line;
        expr_ptr l = parse_unary(true);
        while (accept_op("**")) l = binary("**", std::move(l), parse_unary(true), line);
        return l;
    }

    expr_ptr parse_unary(bool with_filter) {
        depth_guard g(*this);
        int line = cur().line;
        expr_ptr e;
        if (is_op("-") || is_op("+")) {
            e = node(expr_kind::unary, line);
            e->name = next().text;
            e->args.push_back(parse_unary(false));
        } else {
            e = parse_primary();
        }
        e = parse_postfix(std::move(e));
        if (with_filter) e = parse_filter_expr(std::move(e));
        return e;
    }

    expr_ptr parse_primary() {
        const token& t = cur();
        int line = t.line;
        switch (t.type) {
            case tok::name: {
                next();
                auto e = node(expr_kind::literal, line);
                if (t.text == "true" || t.text == "True") {
                    e->lit = value::boolean(true);
                } else if (t.text == "false" || t.text == "False") {
                    e->lit = value::boolean(false);
                } else if (t.text == "none" || t.text == "None") {
                    e->lit = value::none();
                } else {
                    e->kind = expr_kind::name;
                    e->name = t.text;
                }
                return e;
            }
            case tok::string: {
                std::string s;
                while (cur().type == tok::string) s += next().text;
                auto e = node(expr_kind::literal, line);
                e->lit = value::string(std::move(s));
                return e;
            }
            case tok::integer: {
                next();
                auto e = node(expr_kind::literal, line);
                int64_t v = 0;
                auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
                if (r.ec != std::errc()) error("integer literal out of range");
                e->lit = value::integer(v);
                return e;
            }
            case tok::floating: {
                next();
                auto e = node(expr_kind::literal, line);
                e->lit = value::floating(std::stod(t.text));
                return e;
            }
            case tok::op:
                if (t.text == "(") {
                    next();
                    if (accept_op(")")) return node(expr_kind::tuple, line);
                    expr_ptr first = parse_expression();
                    if (accept_op(")")) return first;
                    auto tup = node(expr_kind::tuple, line);
                    tup->args.push_back(std::move(first));
                    while (accept_op(",")) {
                        if (is_op(")")) break;
                        tup->args.push_back(parse_expression());
                    }
                    expect_op(")");
                    return tup;
                }
                if (t.text == "[") {
                    next();
                    auto l = node(expr_kind::list, line);
                    while (!accept_op("]")) {
                        if (!l->args.empty()) {
                            expect_op(",");
                            if (accept_op("]")) break;
                        }
                        l->args.push_back(parse_expression());
                    }
                    return l;
                }
                if (t.text == "{") {
                    next();
                    auto d = node(expr_kind::dict, line);
                    while (!accept_op("}")) {
                        if (!d->args.empty()) {
                            expect_op(",");
                            if (accept_op("}")) break;
                        }
                        d->args.push_back(parse_expression());
                        expect_op(":");
                        d->args.push_back(parse_expression());
                    }
                    return d;
                }
                break;
            default: break;
        }
        error("unexpected " + describe(t));
    }

    void parse_call_args(expr& call) {
        expect_op("(");
        bool first = true;
        while (!accept_op(")")) {
            if (!first) {
                expect_op(",");
                if (accept_op(")")) break;
            }
            first = false;
            if (cur().type == tok::name && peek().type == tok::op && peek().text == "=") {
                std::string n = next().text;
                next();
                call.kwargs.emplace_back(std::move(n), parse_expression());
            } else {
                if (!call.kwargs.empty()) error("positional argument after keyword argument");
                call.args.push_back(parse_expression());
            }
        }
    }

    expr_ptr parse_postfix(expr_ptr e) {
        for (;;) {
            int line = cur().line;
            if (accept_op(".")) {
                auto g = node(expr_kind::getattr, line);
                if (cur().type == tok::integer) {
                    g->kind = expr_kind::getitem;
                    auto idx = node(expr_kind::literal, line);
                    idx->lit = value::integer(std::stoll(next().text));
                    g->args.push_back(std::move(e));
                    g->args.push_back(std::move(idx));
                } else {
                    g->name = expect_name();
                    g->args.push_back(std::move(e));
                }
                e = std::move(g);
            } else if (accept_op("[")) {
                e = parse_subscript(std::move(e), line);
            } else if (is_op("(")) {
                auto c = node(expr_kind::call, line);
                c->args.push_back(std::move(e));
                parse_call_args(*c);
                e = std::move(c);
            } else {
                return e;
            }
        }
    }

    expr_ptr parse_subscript(expr_ptr target, int line) {
        expr_ptr parts[3];
        bool is_slice = false;
        for (int i = 0; i < 3; ++i) {
            if (!is_op(":") && !is_op("]")) parts[i] = parse_expression();
            if (i < 2 && accept_op(":")) {
                is_slice = true;
                continue;
            }
            break;
        }
        expect_op("]");
        auto s = node(is_slice ? expr_kind::slice : expr_kind::getitem, line);
        s->args.push_back(std::move(target));
        if (!is_slice) {
            if (!parts[0]) error("empty subscript");
            s->args.push_back(std::move(parts[0]));
        } else {
            for (auto& p : parts) s->args.push_back(std::move(p));
        }
        return s;
    }

    expr_ptr parse_filter(expr_ptr input) {
        int line = cur().line;
        auto f = node(expr_kind::filter, line);
        f->name = expect_name();
        while (accept_op(".")) {
            f->name += '.';
            f->name += expect_name();
        }
        f->args.push_back(std::move(input));
        if (is_op("(")) parse_call_args(*f);
        return f;
    }

    expr_ptr parse_filter_expr(expr_ptr e) {
        for (;;) {
            int line = cur().line;
            if (accept_op("|")) {
                e = parse_filter(std::move(e));
            } else if (is_name("is")) {
                next();
                auto t = node(expr_kind::test, line);
                t->negated = accept_name("not");
                t->name = expect_name();
                while (accept_op(".")) {
                    t->name += '.';
                    t->name += expect_name();
                }
                t->args.push_back(std::move(e));
                if (is_op("(")) {
                    parse_call_args(*t);
                } else if ((cur().type == tok::name || cur().type == tok::string || cur().type == tok::integer ||
                            cur().type == tok::floating || is_op("[") || is_op("{")) &&
                           !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if")) {
                    if (is_name("is")) error("unexpected 'is'");
                    t->args.push_back(parse_postfix(parse_primary()));
                }
                e = std::move(t);
            } else if (is_op("(")) {
                auto c = node(expr_kind::call, line);
                c->args.push_back(std::move(e));
                parse_call_args(*c);
                e = std::move(c);
            } else {
                return e;
            }
        }
    }
};

}  // namespace

std::shared_ptr<program> parse(std::string_view source, size_t max_depth) {
    return parser(lex(source), max_depth).run();
}

}  // namespace memtile::jinja
