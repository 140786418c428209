// Tokenizer throughput (not a test): tokenizes reproducible English-like text of 10 KB, 100 KB and 1 MB with the
// GPT-2 vocabulary and prints ms and MB/s per size, cold (empty word cache, fresh tokenizer) and warm (best of 3).
// Linear scaling shows as a constant MB/s across sizes. Times are CPU time of the (one) tokenizing thread, so other
// jobs on a busy host count little; "load ms" is the CPU time of tokenizer::open (fresh per size).
// Usage: bench-tokenize-speed [VOCAB.gguf]
#include <fmt/core.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "guarded-main.h"
#include "thread-clock.h"
#include "tokenizer/tokenizer.h"

namespace {

// A few hundred distinct words; sentences are drawn from them with a fixed seed so every run sees the same text.
const char* const k_corpus =
    "the memory system sets the speed of inference because every generated token reads all weights once so a "
    "model of seven billion parameters in four bit form moves about four gigabytes per token and the bandwidth "
    "of the machine divided by that size bounds the tokens per second anyone can reach tokenizers on the other "
    "hand are rarely the bottleneck but a slow one shows up in long prompts retrieval pipelines and batch jobs "
    "where megabytes of documents are cut into pieces before the first layer runs byte pair encoding starts from "
    "single bytes and merges the most frequent adjacent pairs in the order they were learned while sentence piece "
    "uses scores and falls back to raw bytes for characters it has never seen numbers like 1234 or 3.14159 and "
    "dates such as 2024-06-01 appear in real text together with names like Alice Bob Carol and punctuation "
    "quotes don't won't it's we'll they've I'm you'd parentheses (like these) brackets [1] and braces {x} "
    "weather kitchen mountain river library painting violin orchestra telescope galaxy molecule protein "
    "algorithm compiler database network protocol encryption keyboard monitor satellite hurricane volcano "
    "democracy parliament economy inflation agriculture harvest festival tradition language grammar poetry";

std::vector<std::string> words() {
    std::vector<std::string> w;
    std::string cur;
    for (const char* p = k_corpus;; ++p) {
        if (*p == ' ' || *p == 0) {
            if (!cur.empty()) w.push_back(cur);
            cur.clear();
            if (*p == 0) break;
        } else {
            cur += *p;
        }
    }
    return w;
}

std::string make_text(size_t bytes, uint32_t seed) {
    static const std::vector<std::string> vocab = words();
    std::mt19937 rng(seed);
    std::uniform_int_distribution<size_t> pick(0, vocab.size() - 1), len(6, 24);
    std::string text;
    while (text.size() < bytes) {
        size_t n = len(rng);
        for (size_t i = 0; i < n; ++i) {
            std::string w = vocab[pick(rng)];
            if (i == 0) w[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(w[0])));
            text += w;
            text += i + 1 == n ? ". " : (rng() % 9 == 0 ? ", " : " ");
        }
        if (rng() % 5 == 0) text += "\n\n";
    }
    text.resize(bytes);
    return text;
}

double time_ms(const memtile::tokenizer& tok, const std::string& text, size_t* n_tokens) {
    const double t0 = thread_seconds();
    auto ids = tok.tokenize(text, {.add_special = false});
    const double t1 = thread_seconds();
    *n_tokens = ids.size();
    return (t1 - t0) * 1e3;
}

}  // namespace

static int bench_main(int argc, char** argv) {
    std::string path = argc > 1 ? argv[1] : std::string(MEMTILE_SHARED_DIR) + "/vocab/ggml-vocab-gpt-2.gguf";
    fmt::print("vocab: {}\n", path);
    fmt::print("{:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "size", "tokens", "load ms", "cold ms", "cold MB/s",
               "warm ms", "warm MB/s");
    for (size_t size : {size_t(10) << 10, size_t(100) << 10, size_t(1) << 20}) {
        std::string text = make_text(size, 42);
        const double l0 = thread_seconds();
        auto tok = memtile::tokenizer::open(path);  // fresh word cache
        const double load_ms = (thread_seconds() - l0) * 1e3;
        size_t n_tokens = 0;
        double cold = time_ms(*tok, text, &n_tokens);
        double warm = 1e30;
        for (int i = 0; i < 3; ++i) warm = std::min(warm, time_ms(*tok, text, &n_tokens));
        double mb = static_cast<double>(size) / 1e6;
        fmt::print("{:>8}K {:>9} {:>10.2f} {:>10.2f} {:>10.1f} {:>10.2f} {:>10.1f}\n", size >> 10, n_tokens, load_ms,
                   cold, mb / (cold / 1e3), warm, mb / (warm / 1e3));
    }
    return 0;
}

int main(int argc, char** argv) {
    return memtile::bench::guarded_main(argc, argv, bench_main);
}
