// Template lexer: splits source into text and tag tokens, applying Jinja's whitespace rules as Hugging Face
// configures them (trim_blocks, lstrip_blocks, keep_trailing_newline=False) and the `-`/`+` modifiers, and
// tokenizes the expressions inside tags. Errors carry line and column.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace memtile::jinja {

enum class tok {
    text,
    var_begin,    // {{
    var_end,      // }}
    block_begin,  // {%
    block_end,    // %}
    name,
    string,
    integer,
    floating,
    op,  // punctuation and operators: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : |
    eof,
};

struct token {
    tok type;
    std::string text;  // literal text, name, unescaped string, number spelling or operator
    int line = 1;
    int column = 1;
};

std::vector<token> lex(std::string_view source);

}  // namespace memtile::jinja
