// Observability: forward-pass profiling hooks, the machine profile, diag warnings, nvidia-smi parsing, SVG
// output and huge-page loading. Nothing here depends on timing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <stack>

#include "core/error.h"
#include "core/thread-pool.h"
#include "gguf/gguf-file.h"
#include "models/synthetic-model.h"
#include "models/transformer.h"
#include "observe/bandwidth.h"
#include "observe/diagnostics.h"
#include "observe/forward-profile.h"
#include "observe/gpu-info.h"
#include "observe/machine-profile.h"
#include "observe/memory-model.h"
#include "observe/perf-counters.h"
#include "observe/svg-charts.h"
#include "observe/svg.h"
#include "quant/file-type.h"
#include "support/test-paths.h"

namespace memtile {
namespace {

std::string fixture(const std::string& name) {
    return std::string(MEMTILE_SOURCE_DIR) + "/tests/fixtures/proc/" + name;
}

// Well-formedness of the XML our SVG writer emits: balanced tags, quoted attributes, only the five predefined
// entities. A small checker, not a full XML parser (the CLI tests also parse with python3's xml module).
bool well_formed(const std::string& x, std::string& why) {
    std::stack<std::string> open;
    size_t i = 0;
    if (x.rfind("<?xml", 0) == 0) i = x.find("?>") + 2;
    bool root_seen = false;
    while (i < x.size()) {
        if (x[i] == '<') {
            const size_t end = x.find('>', i);
            if (end == std::string::npos) return why = "unterminated tag", false;
            std::string tag = x.substr(i + 1, end - i - 1);
            if (tag.empty()) return why = "empty tag", false;
            size_t quotes = 0;
            for (char c : tag) quotes += c == '"';
            if (quotes % 2) return why = "odd quotes in <" + tag + ">", false;
            if (tag[0] == '/') {
                const std::string name = tag.substr(1);
                if (open.empty() || open.top() != name) return why = "mismatched </" + name + ">", false;
                open.pop();
            } else if (tag.back() != '/') {
                const std::string name = tag.substr(0, tag.find_first_of(" \n\t"));
                if (open.empty() && root_seen) return why = "two root elements", false;
                open.push(name);
                root_seen = true;
            }
            i = end + 1;
        } else if (x[i] == '&') {
            const size_t semi = x.find(';', i);
            const std::string ent = x.substr(i, semi - i + 1);
            if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;" && ent != "&apos;")
                return why = "bad entity " + ent, false;
            i = semi + 1;
        } else {
            i++;
        }
    }
    if (!open.empty()) return why = "unclosed <" + open.top() + ">", false;
    return root_seen || (why = "no root", false);
}

// The decode-pattern read covers every byte whatever its run count: its value equals the XOR of the zero-padded
// 64-bit words, computed here byte by byte, for lengths around the 128-byte steps and unaligned starts.
TEST(observe_read, xor_runs_reads_every_byte_with_any_run_count) {
    std::vector<uint8_t> buf(70000);
    uint32_t x = 12345;
    for (auto& b : buf) b = uint8_t((x = x * 1664525u + 1013904223u) >> 24);
    for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(127), size_t(128), size_t(129), size_t(1000),
                     size_t(4096 + 13), size_t(65536 + 77)})
        for (size_t off : {size_t(0), size_t(3)}) {
            const uint8_t* p = buf.data() + off;
            uint64_t ref = 0;
            for (size_t i = 0; i < n; i++) ref ^= uint64_t(p[i]) << (8 * (i % 8));
            for (int s = 1; s <= 8; s++)
                EXPECT_EQ(xor_runs(p, n, s), ref) << "n " << n << " offset " << off << " runs " << s;
        }
    EXPECT_THROW(xor_runs(buf.data(), 256, 0), error);
    EXPECT_THROW(xor_runs(buf.data(), 256, 9), error);
}

TEST(observe_svg, escapes_text_and_checker_catches_errors) {
    EXPECT_EQ(xml_escape("a<b & \"c\" 'd'>\x01"), "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;");
    std::string why;
    EXPECT_FALSE(well_formed("<svg><g></svg>", why));
    EXPECT_FALSE(well_formed("<svg>a & b</svg>", why));
    EXPECT_TRUE(well_formed("<svg><text>a &amp; b</text></svg>", why)) << why;
}

TEST(observe_svg, charts_are_well_formed) {
    probe_result r;
    r.threads = 2;
    r.bandwidth = {
        {"read", 1, 12.5, 0, 1 << 30, ""}, {"read", 2, 20, 0, 1 << 30, ""}, {"random", 1, 1.5, 40, 1, "<&>"}};
    for (uint64_t b = 4096; b <= (uint64_t(1) << 30); b *= 2) r.ladder.push_back({b, 1.0 + double(b >> 20)});
    std::vector<cache_info> caches = {{1, "Data", 32768, 1, 2}, {3, "Unified", 32 << 20, 2, 1}};
    std::string why;
    EXPECT_TRUE(well_formed(probe_svg(r, caches), why)) << why;
    EXPECT_TRUE(well_formed(probe_svg(probe_result{}, {}), why)) << why;
    EXPECT_TRUE(well_formed(roofline_svg("a <model> & \"b\"", {{"tg128, 1 thread", 10, 14}, {"pp512", 3, 0}}), why))
        << why;
    std::vector<soak_sample> s(5);
    for (size_t i = 0; i < s.size(); i++) s[i].t_s = double(i + 1), s[i].tokens_per_second = 10 + double(i);
    const std::string soak = soak_svg("soak", s);
    EXPECT_TRUE(well_formed(soak, why)) << why;
    EXPECT_NE(soak.find("unavailable on this machine"), std::string::npos);  // no MHz or temperature in samples
}

TEST(observe_profile, roundtrip_and_thread_interpolation) {
    const std::string dir = test::scratch("xdg");
    ::setenv("XDG_CACHE_HOME", dir.c_str(), 1);
    probe_result r;
    r.threads = 4;
    r.bandwidth = {{"read", 1, 10, 0, 0, ""}, {"read", 4, 40, 0, 0, ""}};
    const std::string path = save_machine_profile(r, "Test CPU");
    EXPECT_EQ(path, dir + "/memtile/machine.json");
    const auto p = load_machine_profile();
    ::unsetenv("XDG_CACHE_HOME");
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(p->cpu_model, "Test CPU");
    EXPECT_DOUBLE_EQ(p->read_gbps_for(1), 10);
    EXPECT_DOUBLE_EQ(p->read_gbps_for(2), 20);
    EXPECT_DOUBLE_EQ(p->read_gbps_for(8), 40);
    EXPECT_FALSE(parse_machine_profile(nlohmann::json::parse(R"({"sequential_read_gbps": "fast"})")).has_value());
    EXPECT_FALSE(parse_machine_profile(nlohmann::json::parse(R"({"sequential_read_gbps": 0})")).has_value());
}

TEST(observe_diag, warnings_on_the_odd_fixture) {
    diag_input d;
    d.sys = read_system_info(fixture("hybrid-odd"));
    d.model_path = "big.gguf";
    d.model_bytes = uint64_t(4) << 30;  // more than MemFree (MemAvailable is missing there)
    d.backends = {{"cpu", true, true, ""}, {"cuda", false, true, ""}};
    const auto w = diag_warnings(d);
    auto has = [&](const char* s) {
        return std::any_of(w.begin(), w.end(), [&](const std::string& x) { return x.find(s) != std::string::npos; });
    };
    EXPECT_TRUE(has("swap in use"));
    EXPECT_TRUE(has("transparent huge pages disabled"));
    EXPECT_TRUE(has("powersave"));
    EXPECT_TRUE(has("throttling has happened 5 times"));
    EXPECT_TRUE(has("98 degC"));
    EXPECT_TRUE(has("larger than available memory"));
    EXPECT_TRUE(has("no machine profile"));
    EXPECT_TRUE(has("lacks the cuda backend"));
    EXPECT_TRUE(has("DAMON pages out"));  // damon_reclaim enabled (its kdamond's own scheme is off)
    const auto j = diag_to_json(d);
    EXPECT_EQ(j["cpu"]["core_kinds"]["efficiency"], 5);
    EXPECT_TRUE(j["memory"]["available_bytes"].is_null());
    EXPECT_EQ(j["warnings"].size(), w.size());

    // The development VM: nothing wrong but DAMON's pageout scheme, which it runs.
    diag_input quiet;
    quiet.sys = read_system_info(fixture("epyc-kvm"));
    quiet.profile = machine_profile{};
    const auto qw = diag_warnings(quiet);
    ASSERT_EQ(qw.size(), 1u);
    EXPECT_NE(qw[0].find("DAMON pages out"), std::string::npos);
    EXPECT_EQ(diag_to_json(quiet)["damon_actions"], nlohmann::json::array({"pageout"}));
    quiet.sys.damon_actions = {"lru_deprio"};
    EXPECT_TRUE(diag_warnings(quiet).empty());
}

TEST(observe_gpu, nvidia_smi_csv) {
    const auto g = parse_nvidia_smi_csv("NVIDIA H200, 143771, 0, 345, 1980, 31\nNVIDIA T4, [N/A], 12, x\n\n");
    ASSERT_EQ(g.size(), 2u);
    EXPECT_EQ(g[0].name, "NVIDIA H200");
    EXPECT_DOUBLE_EQ(g[0].memory_total_mib.value(), 143771);
    EXPECT_DOUBLE_EQ(g[0].celsius.value(), 31);
    EXPECT_FALSE(g[1].memory_total_mib.has_value());
    EXPECT_DOUBLE_EQ(g[1].memory_used_mib.value(), 12);
    EXPECT_FALSE(g[1].sm_clock_mhz.has_value());
    EXPECT_FALSE(g[1].celsius.has_value());
    EXPECT_TRUE(parse_nvidia_smi_csv("").empty());
}

TEST(observe_backends, cpu_always_listed_and_compiled) {
    const auto b = list_backends();
    ASSERT_GE(b.size(), 2u);
    EXPECT_EQ(b[0].name, "cpu");
    EXPECT_TRUE(b[0].compiled);
    EXPECT_EQ(b[1].name, "cuda");
}

class observe_forward : public ::testing::Test {
protected:
    static std::string model_path() {
        static const std::string path = [] {
            const std::string p = test::scratch("observe-tiny-q8.gguf");
            synthetic_options o;
            o.preset = "tiny";
            o.type = file_type::q8_0;
            o.progress = false;
            write_synthetic_model(o, p);
            return p;
        }();
        return path;
    }
};

TEST_F(observe_forward, observer_sees_every_weight_byte_and_changes_nothing) {
    auto m = transformer::load(model_path());
    const memory_model mm = compute_memory_model(m->file(), dtype::f16);
    thread_pool pool(2);
    forward_context plain(*m, 16, dtype::f16, pool), observed(*m, 16, dtype::f16, pool);
    forward_profile fp;
    observed.set_observer(&fp);
    const std::vector<int32_t> prompt = {1, 5, 9};
    (void)plain.forward(prompt);
    const auto la = plain.forward(std::span<const int32_t>(&prompt[0], 1));
    const std::vector<float> va(la.begin(), la.end());
    (void)observed.forward(prompt);
    fp.reset();
    const auto lb = observed.forward(std::span<const int32_t>(&prompt[0], 1));
    EXPECT_EQ(va, std::vector<float>(lb.begin(), lb.end()));

    // One decoded token: the observer's weight bytes are the memory model's streamed bytes (norm vectors
    // included; the embedding contributes one gathered row; with tied embeddings the table is also streamed as
    // the output matrix).
    const auto* emb = m->file().find_tensor("token_embd.weight");
    const uint64_t expected = mm.streamed_bytes_per_token + (mm.tied_embeddings ? emb->row_size() : 0);
    EXPECT_EQ(fp.total().weight_bytes, expected);
    const auto& c = m->config();
    const uint64_t kv_row = uint64_t(c.kv_dim()) * 2;  // f16
    EXPECT_EQ(fp.total().kv_write_bytes, 2 * kv_row * c.n_layer);
    EXPECT_EQ(fp.total().kv_read_bytes, 2 * kv_row * 4 * c.n_layer);  // 4 positions: 3 prompt + itself
    EXPECT_EQ(fp.by_layer().size(), size_t(c.n_layer));
    EXPECT_TRUE(fp.by_class().count("attention"));
    EXPECT_TRUE(fp.by_class().count("matmul Q8_0"));
    EXPECT_GT(fp.total().ns, 0);
}

TEST_F(observe_forward, streamed_weights_are_the_matrices_decode_reads_and_can_be_read_back) {
    auto m = transformer::load(model_path());
    const memory_model mm = compute_memory_model(m->file(), dtype::f16);
    uint64_t matrices = 0;  // every 2-D weight but the embedding table (a gathered row), plus it again if tied
    for (const auto& t : m->file().tensors())
        if (t.dims.size() == 2 && t.name != "token_embd.weight") matrices += t.n_bytes;
    if (mm.tied_embeddings) matrices += m->file().find_tensor("token_embd.weight")->n_bytes;
    const auto ranges = m->streamed_weights();
    uint64_t total = 0;
    for (const auto& r : ranges) total += r.size();
    EXPECT_EQ(total, matrices);
    EXPECT_LE(total, mm.streamed_bytes_per_token);
    thread_pool pool(2);
    EXPECT_GT(measure_read_gbps(pool, ranges, 1), 0.0);
    EXPECT_GT(measure_decode_read_gbps(pool, ranges, 2, 1), 0.0);
    const std::vector<std::span<const uint8_t>> tiny = {ranges[0].first(64)};
    EXPECT_THROW(measure_read_gbps(pool, tiny, 1), error);
    EXPECT_THROW(measure_decode_read_gbps(pool, tiny, 2, 1), error);
    EXPECT_THROW(measure_decode_read_gbps(pool, ranges, 0, 1), error);
}

TEST_F(observe_forward, hugepage_load_gives_the_same_bytes) {
    load_options lo;
    lo.hugepages = true;
    auto f = mapped_file::open(model_path(), lo);
    auto g = mapped_file::open(model_path());
    EXPECT_TRUE(f->memory_mode() == "thp" || f->memory_mode() == "hugetlbfs");
    EXPECT_EQ(reinterpret_cast<uintptr_t>(f->data()) % (2 << 20), 0u);
    ASSERT_EQ(f->size(), g->size());
    EXPECT_TRUE(std::equal(f->bytes().begin(), f->bytes().end(), g->bytes().begin()));
    model_options mo;
    mo.load.hugepages = true;
    mo.load.prefault = true;
    auto m = transformer::load(model_path(), mo);
    thread_pool pool(1);
    forward_context ctx(*m, 4, dtype::f16, pool);
    EXPECT_EQ(ctx.forward(std::vector<int32_t>{1, 2}).size(), m->config().n_vocab);
}

}  // namespace
}  // namespace memtile

namespace memtile {
namespace {

TEST(observe_perf, software_events_count_page_faults_and_never_fail) {
    perf_counters c;
    EXPECT_EQ(c.hardware_available(), c.hardware_reason().empty());
    c.start();
    std::vector<char> touched(size_t(32) << 20);
    for (size_t i = 0; i < touched.size(); i += 4096) touched[i] = char(i);
    c.stop();
    const auto r = c.read();
    const auto pf = std::find_if(r.begin(), r.end(), [](const counter_reading& x) { return x.name == "page-faults"; });
    ASSERT_NE(pf, r.end());
    ASSERT_TRUE(pf->value.has_value()) << c.software_source();
    EXPECT_GE(*pf->value, 1000u);  // 8192 fresh 4 KiB pages (fewer faults with huge pages or fault-around)
    EXPECT_EQ(touched[4096], char(4096));
}

}  // namespace
}  // namespace memtile
