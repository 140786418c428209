// safetensors reader: valid files, sharded folders, and hostile headers (each rejected with a clear error).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>

#include "convert/safetensors.h"
#include "core/error.h"
#include "support/hf-fixture.h"
#include "support/test-paths.h"

namespace {

using namespace memtile;

std::shared_ptr<mapped_file> memory(const std::string& name, const std::string& bytes) {
    static std::vector<std::string> keep;  // from_memory does not copy
    keep.push_back(bytes);
    const auto& b = keep.back();
    return mapped_file::from_memory(name, {reinterpret_cast<const uint8_t*>(b.data()), b.size()});
}

// A file with one F32 tensor "w" of shape [2, 3] and a hand-written header.
std::string with_header(const std::string& header, size_t data_bytes = 24) {
    std::string out(8, '\0');
    const uint64_t n = header.size();
    std::memcpy(out.data(), &n, 8);
    return out + header + std::string(data_bytes, '\x01');
}

void expect_error(const std::string& bytes, const std::string& needle) {
    try {
        safetensors_file::parse(memory("bad.safetensors", bytes));
        FAIL() << "expected an error containing '" << needle << "'";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("bad.safetensors"), std::string::npos) << e.what();
    }
}

TEST(safetensors, reads_values_of_every_float_dtype) {
    const std::string p = test::scratch("st-basic.safetensors");
    test::write_safetensors(p, {{"a", "F32", {2, 2}, {1, -2, 3.5f, 4}},
                                {"b", "BF16", {3}, {1, 0.5f, -8}},
                                {"c", "F16", {1, 2}, {0.25f, 65504}}});
    auto f = safetensors_file::open(p);
    ASSERT_EQ(f->tensors().size(), 3u);
    EXPECT_EQ(f->tensors()[0].shape, (std::vector<uint64_t>{2, 2}));
    EXPECT_EQ(f->metadata().at("format"), "pt");
    for (const auto& t : f->tensors()) {
        std::vector<float> v(t.n_elems);
        t.to_f32(0, t.n_elems, v.data());
        const std::map<std::string, std::vector<float>> expect = {
            {"a", {1, -2, 3.5f, 4}}, {"b", {1, 0.5f, -8}}, {"c", {0.25f, 65504}}};
        EXPECT_EQ(v, expect.at(t.name)) << t.name;
    }
}

TEST(safetensors, corrupt_files_give_clear_errors) {
    const std::string good = R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";
    EXPECT_NO_THROW(safetensors_file::parse(memory("good.safetensors", with_header(good))));
    expect_error("abc", "too short");
    expect_error(with_header(good).substr(0, 40), "header length");  // truncated in the header
    expect_error(with_header(good, 10), "out of range");             // truncated in the data
    std::string huge = with_header(good);
    const uint64_t n = ~0ull - 3;
    std::memcpy(huge.data(), &n, 8);
    expect_error(huge, "header length");
    expect_error(with_header(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,9999]}})"), "out of range");
    expect_error(with_header(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[8,4]}})"), "out of range");
    expect_error(with_header(R"({"w":{"dtype":"F32","shape":[2,4],"data_offsets":[0,24]}})"), "need 32");
    expect_error(with_header(R"({"w":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,24]}})"), "non-negative");
    expect_error(with_header(R"({"w":{"dtype":"Q9","shape":[2,3],"data_offsets":[0,24]}})"), "unknown dtype 'Q9'");
    expect_error(with_header(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,24]}})"),
                 "larger than the file");
    expect_error(with_header(R"({"w":{"dtype":"F32","shape":[2,3]}})"), "data_offsets");
    expect_error(with_header(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                             R"("v":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})"),
                 "overlap");
    expect_error(with_header("not json at all"), "not a JSON object");
}

TEST(safetensors, sharded_folder_uses_the_index) {
    const auto dir = test::scratch_dir() / "st-sharded";
    std::filesystem::create_directories(dir);
    test::write_safetensors((dir / "s1.safetensors").string(), {{"x", "F32", {1}, {1}}});
    test::write_safetensors((dir / "s2.safetensors").string(), {{"y", "BF16", {2}, {2, 3}}});
    std::ofstream(dir / "model.safetensors.index.json")
        << R"({"weight_map": {"x": "s1.safetensors", "y": "s2.safetensors"}})";
    auto set = safetensors_set::open_dir(dir.string());
    EXPECT_EQ(set.names(), (std::vector<std::string>{"x", "y"}));
    EXPECT_EQ(set.require("y").file, (dir / "s2.safetensors").string());
    EXPECT_THROW(set.require("z"), error);
    std::ofstream(dir / "model.safetensors.index.json")
        << R"({"weight_map": {"x": "s1.safetensors", "y": "s1.safetensors"}})";
    try {
        safetensors_set::open_dir(dir.string());
        FAIL();
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("does not contain it"), std::string::npos) << e.what();
    }
    std::ofstream(dir / "model.safetensors.index.json") << R"({"weight_map": {"x": "../etc/passwd"}})";
    EXPECT_THROW(safetensors_set::open_dir(dir.string()), error);
}

}  // namespace
