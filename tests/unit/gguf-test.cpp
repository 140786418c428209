#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include "core/error.h"
#include "gguf/gguf-file.h"
#include "gguf/gguf-writer.h"
#include "support/test-paths.h"

using namespace memtile;

namespace {

std::vector<uint8_t> read_all(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
}

// A small file with every metadata type, nested arrays and tensors of several formats.
std::string write_sample(const std::string& name, uint32_t alignment = 32) {
    gguf_writer w(alignment);
    if (alignment != 32) w.set("general.alignment", gguf_value::u32(alignment));
    w.set("general.architecture", gguf_value::string("llama"));
    w.set("t.u8", gguf_value::u8(200));
    w.set("t.i8", gguf_value::i8(-100));
    w.set("t.u16", gguf_value::u16(60000));
    w.set("t.i16", gguf_value::i16(-30000));
    w.set("t.u32", gguf_value::u32(4000000000u));
    w.set("t.i32", gguf_value::i32(-2000000000));
    w.set("t.u64", gguf_value::u64(1ull << 60));
    w.set("t.i64", gguf_value::i64(-(1ll << 60)));
    w.set("t.f32", gguf_value::f32(1.5f));
    w.set("t.f64", gguf_value::f64(-2.25));
    w.set("t.bool", gguf_value::boolean(true));
    w.set("t.str", gguf_value::string("héllo\nworld"));
    w.set("t.strs", gguf_value::string_array({"a", "", "ccc"}));
    w.set("t.nested", gguf_value::array(gguf_type::array, {gguf_value::i32_array({1, 2}), gguf_value::i32_array({})}));
    w.set("t.u8s", gguf_value::array(gguf_type::u8, {gguf_value::u8(0), gguf_value::u8(255)}));
    w.set("t.i16s", gguf_value::array(gguf_type::i16, {gguf_value::i16(-30000), gguf_value::i16(7)}));
    w.set("t.u64s", gguf_value::array(gguf_type::u64, {gguf_value::u64(1ull << 63)}));
    w.set("t.f64s", gguf_value::array(gguf_type::f64, {gguf_value::f64(-0.125), gguf_value::f64(1e300)}));
    w.set("t.f32s", gguf_value::f32_array({0.5f, -3.0f}));
    w.set("t.bools", gguf_value::array(gguf_type::boolean, {gguf_value::boolean(false), gguf_value::boolean(true)}));
    w.add_tensor("a", dtype::f32, {3, 2});
    w.add_tensor("b", dtype::f16, {5});
    w.add_tensor("c", dtype::q8_0, {64, 2});
    std::vector<uint8_t> a(24), b(10), c(136);
    for (size_t i = 0; i < a.size(); i++) a[i] = uint8_t(i);
    for (size_t i = 0; i < b.size(); i++) b[i] = uint8_t(100 + i);
    for (size_t i = 0; i < c.size(); i++) c[i] = uint8_t(7 * i);
    const std::string path = test::scratch(name);
    w.write_file(path, {a, b, c});
    return path;
}

}  // namespace

TEST(gguf, round_trip_all_value_types) {
    for (uint32_t al : {32u, 64u, 8u}) {
        const auto path = write_sample("rt-" + std::to_string(al) + ".gguf", al);
        for (bool use_mmap : {true, false}) {
            load_options o;
            o.use_mmap = use_mmap;
            auto g = gguf_file::open(path, o);
            EXPECT_EQ(g->version(), 3u);
            EXPECT_EQ(g->alignment(), al);
            EXPECT_EQ(g->data_offset() % al, 0u);
            EXPECT_EQ(g->get_string("general.architecture"), "llama");
            EXPECT_EQ(g->require("t.u8").as_u64(), 200u);
            EXPECT_EQ(g->require("t.i8").as_i64(), -100);
            EXPECT_EQ(g->require("t.u16").as_u64(), 60000u);
            EXPECT_EQ(g->require("t.i16").as_i64(), -30000);
            EXPECT_EQ(g->require("t.u32").as_u64(), 4000000000u);
            EXPECT_EQ(g->require("t.i32").as_i64(), -2000000000);
            EXPECT_EQ(g->require("t.u64").as_u64(), 1ull << 60);
            EXPECT_EQ(g->require("t.i64").as_i64(), -(1ll << 60));
            EXPECT_EQ(g->require("t.f32").as_f64(), 1.5);
            EXPECT_EQ(g->require("t.f64").as_f64(), -2.25);
            EXPECT_TRUE(g->require("t.bool").as_bool());
            EXPECT_EQ(g->require("t.str").as_string(), "héllo\nworld");
            const auto& strs = g->require("t.strs");
            ASSERT_EQ(strs.array_size(), 3u);
            EXPECT_EQ(strs.string_at(2), "ccc");
            EXPECT_EQ(strs.string_at(1), "");
            EXPECT_EQ(strs.at(0), gguf_value::string("a"));
            EXPECT_EQ(strs, gguf_value::string_array({"a", "", "ccc"}));
            const auto& nested = g->require("t.nested");
            ASSERT_EQ(nested.array_size(), 2u);
            EXPECT_EQ(nested.at(0).at(1).as_i64(), 2);
            EXPECT_EQ(nested.at(0).i64_at(0), 1);
            EXPECT_EQ(nested.at(1).array_size(), 0u);
            EXPECT_EQ(g->require("t.u8s").at(1).as_u64(), 255u);
            EXPECT_EQ(g->require("t.u8s").at(1).type(), gguf_type::u8);
            EXPECT_EQ(g->require("t.i16s").i64_at(0), -30000);
            EXPECT_EQ(g->require("t.i16s").at(1), gguf_value::i16(7));
            EXPECT_EQ(g->require("t.u64s").at(0).as_u64(), 1ull << 63);
            EXPECT_EQ(g->require("t.f64s").f64_at(0), -0.125);
            EXPECT_EQ(g->require("t.f64s").f64_at(1), 1e300);
            EXPECT_EQ(g->require("t.f32s").f64_at(1), -3.0);
            EXPECT_EQ(g->require("t.f32s"), gguf_value::f32_array({0.5f, -3.0f}));
            EXPECT_FALSE(g->require("t.bools").at(0).as_bool());
            EXPECT_TRUE(g->require("t.bools").at(1).as_bool());
            ASSERT_EQ(g->tensors().size(), 3u);
            const auto* c = g->find_tensor("c");
            ASSERT_NE(c, nullptr);
            EXPECT_EQ(c->type, dtype::q8_0);
            EXPECT_EQ(c->n_bytes, 136u);
            EXPECT_EQ(c->dims, (std::vector<uint64_t>{64, 2}));
            for (size_t i = 0; i < 136; i++) ASSERT_EQ(c->data[i], uint8_t(7 * i));
            EXPECT_EQ(g->find_tensor("b")->data[9], 109);
            for (const auto& t : g->tensors()) EXPECT_EQ(t.offset % al, 0u);
        }
        // write → read → write again gives identical bytes
        auto g = gguf_file::open(path);
        gguf_writer w2(g->alignment());
        for (const auto& [k, v] : g->metadata()) w2.set(k, v);
        std::vector<std::span<const uint8_t>> data;
        for (const auto& t : g->tensors()) {
            w2.add_tensor(t.name, t.type, t.dims);
            data.emplace_back(t.data, t.n_bytes);
        }
        const auto path2 = test::scratch("rt2.gguf");
        w2.write_file(path2, data);
        EXPECT_EQ(read_all(path), read_all(path2));
    }
}

TEST(gguf, array_values_outlive_their_file_and_check_their_use) {
    const auto path = write_sample("arrays.gguf");
    gguf_value strs, nested;
    {
        auto g = gguf_file::open(path);
        strs = g->require("t.strs");  // views the mapping and keeps it alive
        nested = g->require("t.nested");
    }
    EXPECT_EQ(strs.string_at(2), "ccc");
    EXPECT_EQ(strs.to_display(), "[3 x string] [\"a\", \"\", \"ccc\"]");
    EXPECT_EQ(nested.at(0).at(0).as_i64(), 1);
    EXPECT_THROW(strs.at(3), error);
    EXPECT_THROW(strs.i64_at(0), error);
    EXPECT_THROW(nested.string_at(0), error);
    EXPECT_THROW(gguf_value::u8(1).array_size(), error);
    EXPECT_NE(strs, gguf_value::string_array({"a", "", "cc"}));
    EXPECT_NE(strs, gguf_value::string_array({"a", "", "ccc", ""}));
    EXPECT_THROW(gguf_value::array(gguf_type::u8, {gguf_value::i8(1)}), error);
}

TEST(gguf, reads_every_shared_file) {
    for (const char* rel : {"quant/tiny-llama-Q4_K_M.gguf", "quant/tiny-llama-f32.gguf", "vocab/ggml-vocab-gpt-2.gguf",
                            "vocab/ggml-vocab-llama-spm.gguf"}) {
        auto g = gguf_file::open(test::shared_path(rel));
        EXPECT_FALSE(g->metadata().empty()) << rel;
        EXPECT_TRUE(g->version() == 2 || g->version() == 3) << rel;
    }
    auto g = gguf_file::open(test::shared_path("quant/tiny-llama-Q4_K_M.gguf"));
    EXPECT_EQ(g->get_string("general.architecture"), "llama");
    ASSERT_NE(g->find_tensor("token_embd.weight"), nullptr);
}

namespace {

// Parses `bytes`; returns the error message ("" when it parsed).
std::string parse_error(const std::vector<uint8_t>& bytes) {
    try {
        gguf_file::parse(mapped_file::from_memory("corrupt.gguf", bytes));
        return "";
    } catch (const error& e) {
        return e.what();
    }
}

}  // namespace

TEST(gguf, truncation_at_many_offsets_is_a_clean_error) {
    const auto bytes = read_all(test::shared_path("quant/tiny-llama-Q4_K_M.gguf"));
    auto g = gguf_file::parse(mapped_file::from_memory("full", bytes));
    const uint64_t data_off = g->data_offset();
    // 50 cut points spread over the header (where parsing happens) plus some inside the tensor data.
    for (int i = 0; i < 50; i++) {
        const size_t cut =
            i < 40 ? size_t(data_off * i / 40) : size_t(data_off + (bytes.size() - data_off) * (i - 39) / 12);
        if (cut >= bytes.size()) continue;
        std::vector<uint8_t> t(bytes.begin(), bytes.begin() + cut);
        const std::string msg = parse_error(t);
        ASSERT_FALSE(msg.empty()) << "truncated at " << cut << " parsed without error";
        EXPECT_NE(msg.find("corrupt.gguf"), std::string::npos) << msg;
        EXPECT_NE(msg.find("offset"), std::string::npos) << msg;
    }
}

TEST(gguf, corrupt_fields_are_named) {
    const auto path = write_sample("corrupt-base.gguf");
    const auto base = read_all(path);
    auto set64 = [](std::vector<uint8_t>& b, size_t at, uint64_t v) { std::memcpy(&b[at], &v, 8); };
    auto set32 = [](std::vector<uint8_t>& b, size_t at, uint32_t v) { std::memcpy(&b[at], &v, 4); };
    struct mutation {
        const char* expect;
        std::function<void(std::vector<uint8_t>&)> apply;
    };
    // The elements of t.bools (after its type, element type and count) and of t.strs.
    auto after = [&](const std::string& key) {
        const std::string needle = key;
        auto it = std::search(base.begin(), base.end(), needle.begin(), needle.end());
        EXPECT_NE(it, base.end());
        return size_t(it - base.begin()) + key.size() + 4 + 4 + 8;
    };
    const size_t b_at = after("t.bools"), s_at = after("t.strs");
    // Header: magic(0) version(4) n_tensors(8) n_kv(16); first key length at 24.
    std::vector<mutation> cases = {
        {"not a GGUF file", [&](auto& b) { b[0] = 'X'; }},
        {"unsupported GGUF version", [&](auto& b) { set32(b, 4, 99); }},
        {"version 1", [&](auto& b) { set32(b, 4, 1); }},
        {"tensor count", [&](auto& b) { set64(b, 8, 1ull << 62); }},
        {"metadata count", [&](auto& b) { set64(b, 16, ~0ull); }},
        {"string length", [&](auto& b) { set64(b, 24, 1ull << 40); }},
        {"invalid value type", [&](auto& b) { set32(b, 24 + 8 + 20, 77); }},     // after "general.architecture"
        {"bool value 2 is neither 0 nor 1", [&](auto& b) { b[b_at + 1] = 2; }},  // t.bools' second element
        {"string length", [&](auto& b) { set64(b, s_at + 9, 1ull << 40); }},     // t.strs' second element
    };
    for (const auto& c : cases) {
        auto b = base;
        c.apply(b);
        const std::string msg = parse_error(b);
        EXPECT_NE(msg.find(c.expect), std::string::npos) << "expected '" << c.expect << "', got: " << msg;
    }
    // Tensor-info fields: locate tensor "c" by its name in the header and corrupt what follows.
    auto g = gguf_file::parse(mapped_file::from_memory("x", base));
    const std::string needle = std::string("\x01\0\0\0\0\0\0\0c", 9);
    auto it = std::search(base.begin(), base.end(), needle.begin(), needle.end());
    ASSERT_NE(it, base.end());
    const size_t ndims_at = size_t(it - base.begin()) + 9;
    const size_t dim0_at = ndims_at + 4, type_at = dim0_at + 16, off_at = type_at + 4;
    std::vector<mutation> tcases = {
        {"dimensions", [&](auto& b) { set32(b, ndims_at, 9); }},
        {"zero or overflows", [&](auto& b) { set64(b, dim0_at + 8, 1ull << 62); }},
        {"unknown tensor type", [&](auto& b) { set32(b, type_at, 1234); }},
        {"not a multiple of the Q8_0 block size", [&](auto& b) { set64(b, dim0_at, 33); }},
        {"not a multiple of the alignment", [&](auto& b) { set64(b, off_at, 33); }},
        {"extends past end of file", [&](auto& b) { set64(b, off_at, 1ull << 40); }},
    };
    for (const auto& c : tcases) {
        auto b = base;
        c.apply(b);
        const std::string msg = parse_error(b);
        EXPECT_NE(msg.find(c.expect), std::string::npos) << "expected '" << c.expect << "', got: " << msg;
        EXPECT_NE(msg.find("tensor 'c'"), std::string::npos) << msg;
    }
}

TEST(gguf, random_byte_flips_never_crash) {
    const auto base = read_all(write_sample("flip-base.gguf"));
    auto g = gguf_file::parse(mapped_file::from_memory("x", base));
    std::mt19937 rng(1234);
    int errors = 0;
    for (int i = 0; i < 3000; i++) {
        auto b = base;
        const size_t at = rng() % g->data_offset();
        b[at] ^= uint8_t(1 + rng() % 255);
        if (!parse_error(b).empty()) errors++;
    }
    EXPECT_GT(errors, 100);  // most header flips are detected; the rest must simply parse
}

TEST(gguf, missing_file_names_path) {
    try {
        gguf_file::open("/nonexistent/model.gguf");
        FAIL();
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("/nonexistent/model.gguf"), std::string::npos);
    }
}
