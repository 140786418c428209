// Python str semantics used by template methods and filters. Case mapping is ASCII-only (non-ASCII letters
// are left unchanged); whitespace is ASCII whitespace plus the separators \x1c-\x1f, as str.split() sees them.
#pragma once

#include <string>
#include <vector>

namespace memtile::jinja {

// mode: 1 = left, 2 = right, 3 = both. chars null: whitespace.
std::string py_strip(const std::string& s, const std::string* chars, int mode);
std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit, bool from_right);
std::vector<std::string> py_splitlines(const std::string& s);
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);
size_t py_count(const std::string& s, const std::string& sub);
std::string ascii_upper(std::string s);
std::string ascii_lower(std::string s);
std::string py_title(const std::string& s);                      // str.title()
std::string py_capitalize(const std::string& s);                 // str.capitalize()
bool py_is(const std::string& s, const std::string& predicate);  // isdigit, isalpha, isalnum, isspace, isupper...
bool py_space(char32_t c);
// markupsafe.escape: & < > " ' as entities.
std::string html_escape(const std::string& s);

}  // namespace memtile::jinja
