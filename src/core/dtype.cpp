#include "core/dtype.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "core/error.h"

namespace memtile {
namespace {

constexpr std::array<dtype_traits, 20> k_table{{
    {dtype::f32, "F32", 1, 4, false},      {dtype::f16, "F16", 1, 2, false},      {dtype::q4_0, "Q4_0", 32, 18, true},
    {dtype::q4_1, "Q4_1", 32, 20, true},   {dtype::q5_0, "Q5_0", 32, 22, true},   {dtype::q5_1, "Q5_1", 32, 24, true},
    {dtype::q8_0, "Q8_0", 32, 34, true},   {dtype::q8_1, "Q8_1", 32, 36, true},   {dtype::q2_k, "Q2_K", 256, 84, true},
    {dtype::q3_k, "Q3_K", 256, 110, true}, {dtype::q4_k, "Q4_K", 256, 144, true}, {dtype::q5_k, "Q5_K", 256, 176, true},
    {dtype::q6_k, "Q6_K", 256, 210, true}, {dtype::q8_k, "Q8_K", 256, 292, true}, {dtype::i8, "I8", 1, 1, false},
    {dtype::i16, "I16", 1, 2, false},      {dtype::i32, "I32", 1, 4, false},      {dtype::i64, "I64", 1, 8, false},
    {dtype::f64, "F64", 1, 8, false},      {dtype::bf16, "BF16", 1, 2, false},
}};

}  // namespace

const dtype_traits* find_dtype(uint32_t raw_id) {
    for (const auto& row : k_table)
        if (static_cast<uint32_t>(row.type) == raw_id) return &row;
    return nullptr;
}

const dtype_traits& traits(dtype t) {
    const dtype_traits* row = find_dtype(static_cast<uint32_t>(t));
    if (!row) fail("dtype", "unknown tensor type id {}", static_cast<uint32_t>(t));
    return *row;
}

std::optional<dtype> dtype_from_name(std::string_view name) {
    for (const auto& row : k_table) {
        if (row.name.size() != name.size()) continue;
        if (std::equal(name.begin(), name.end(), row.name.begin(),
                       [](char a, char b) { return std::toupper(uint8_t(a)) == std::toupper(uint8_t(b)); }))
            return row.type;
    }
    return std::nullopt;
}

}  // namespace memtile
