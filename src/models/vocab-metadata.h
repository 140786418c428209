// Tokenizer metadata (`tokenizer.ggml.*`) for files memtile writes.
#pragma once

#include <cstdint>

namespace memtile {

class gguf_writer;
class gguf_file;

// A placeholder vocabulary for token-ID models (synthetic or imported without a tokenizer), SentencePiece
// style so that llama.cpp loads it: 0 <unk>, 1 <s>, 2 </s>, then (when n_vocab > 259) the 256 byte tokens
// <0x00>..<0xFF>, then pieces "<N>" for every remaining id N. With byte_tokens = false every id N is "<N>".
void write_placeholder_vocab(gguf_writer& w, uint32_t n_vocab, bool byte_tokens = true);

// Copies every tokenizer.* key of `vocab` (a vocab-only or full GGUF) and returns its token count.
uint32_t copy_tokenizer_metadata(gguf_writer& w, const gguf_file& vocab);

}  // namespace memtile
