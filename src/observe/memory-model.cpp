#include "observe/memory-model.h"

#include "gguf/gguf-file.h"

namespace memtile {

memory_model compute_memory_model(const gguf_file& g, dtype kv_type) {
    memory_model m;
    const auto* emb = g.find_tensor("token_embd.weight");
    m.tied_embeddings = emb && !g.find_tensor("output.weight");
    for (const auto& t : g.tensors()) {
        m.weight_bytes += t.n_bytes;
        m.bytes_by_type[t.type] += t.n_bytes;
        m.count_by_type[t.type]++;
        if (&t == emb)
            m.streamed_bytes_per_token += m.tied_embeddings ? t.n_bytes : t.row_size();
        else
            m.streamed_bytes_per_token += t.n_bytes;
    }
    const std::string arch = g.get_string("general.architecture");
    if (arch.empty()) return m;
    const uint64_t n_layer = g.get_u64(arch + ".block_count", 0);
    const uint64_t n_embd = g.get_u64(arch + ".embedding_length", 0);
    const uint64_t n_head = g.get_u64(arch + ".attention.head_count", 0);
    const uint64_t n_head_kv = g.get_u64(arch + ".attention.head_count_kv", n_head);
    const uint64_t n_ff = g.get_u64(arch + ".feed_forward_length", 0);
    if (!n_head) return m;
    const uint64_t head_dim = g.get_u64(arch + ".attention.key_length", n_embd / n_head);
    const uint64_t elem = row_bytes(kv_type, 1);
    m.kv_bytes_per_token = 2 * n_layer * n_head_kv * head_dim * elem;
    uint64_t n_vocab = emb && emb->dims.size() == 2 ? emb->dims[1] : 0;
    // f32 scratch of one decode step: residual, normed input, q, attention out, two FFN halves, logits.
    m.activation_bytes = 4 * (3 * n_embd + n_head * head_dim * 2 + 2 * n_ff + n_vocab);
    return m;
}

}  // namespace memtile
