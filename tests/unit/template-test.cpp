// Chat-template interpreter: every case of shared/templates/expected.json (renderings by Python Jinja2 as
// Hugging Face configures it) must render byte-identically, or fail where the case expects an error.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "template/template.h"

using memtile::jinja::chat_template;
using memtile::jinja::render_options;
using json = nlohmann::ordered_json;

namespace {

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

render_options fixed_clock() {
    render_options o;
    o.now = [] {
        std::tm tm{};
        tm.tm_year = 2024 - 1900;
        tm.tm_mon = 6;
        tm.tm_mday = 26;
        tm.tm_hour = 9;
        tm.tm_min = 30;
        tm.tm_wday = 5;
        tm.tm_yday = 207;
        return tm;
    };
    return o;
}

// First differing byte with some context on both sides, for readable failures.
std::string describe_diff(const std::string& want, const std::string& got) {
    size_t i = 0;
    while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
    size_t from = i > 60 ? i - 60 : 0;
    return "first difference at byte " + std::to_string(i) + "\n  expected: " + json(want.substr(from, 120)).dump() +
           "\n  got:      " + json(got.substr(from, 120)).dump();
}

}  // namespace

TEST(template_expected, all_cases) {
    const std::string dir = std::string(MEMTILE_SHARED_DIR) + "/templates/";
    json doc = json::parse(read_file(dir + "expected.json"));
    size_t passed = 0, total = 0;
    for (auto& c : doc["cases"]) {
        ++total;
        std::string name = c["template"].get<std::string>() + " / " + c["conversation"].get<std::string>() + " / #" +
                           std::to_string(total - 1);
        json ctx = json::object();
        for (auto& [k, v] : c.items())
            if (k != "template" && k != "conversation" && k != "expected" && k != "expected_error" &&
                !(k == "tools" && v.is_null()))
                ctx[k] = v;  // no tools: the variable is left undefined, as transformers does
        std::string got, err;
        try {
            got = chat_template(read_file(dir + c["template"].get<std::string>())).render(ctx, fixed_clock());
        } catch (const memtile::error& e) {
            err = e.what();
        }
        if (c.contains("expected_error")) {
            if (err.empty())
                ADD_FAILURE() << name << ": expected error " << c["expected_error"] << ", rendered instead";
            else
                ++passed;
            continue;
        }
        std::string want = c["expected"].get<std::string>();
        if (!err.empty()) {
            ADD_FAILURE() << name << ": unexpected error: " << err;
        } else if (got != want) {
            ADD_FAILURE() << name << ": " << describe_diff(want, got);
        } else {
            ++passed;
        }
    }
    std::cout << "template cases passed: " << passed << " / " << total << "\n";
    EXPECT_EQ(passed, total);
}
