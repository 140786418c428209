#include "runtime/text-stream.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace memtile {
size_t held_suffix(const std::string& text, const std::vector<std::string>& stops) {
    size_t best = 0;
    for (const auto& s : stops)
        for (size_t k = std::min(s.size() - 1, text.size()); k > best; k--)
            if (text.compare(text.size() - k, k, s, 0, k) == 0) {
                best = k;
                break;
            }
    return best;
}

text_stream::text_stream(const tokenizer& tok, const generate_options& o)
    : tok_(tok), o_(o), dec_(std::make_unique<stream_decoder>(tok)) {
    for (const auto& s : o_.stop)
        if (s.empty()) fail("generate", "empty stop string");
    if (o_.n_predict <= 0) reason_ = "length";
}

text_stream::~text_stream() = default;

bool text_stream::push(int32_t token, std::string& out) {
    if (ended()) return false;
    if (!o_.ignore_eos && tok_.is_eog(token)) {
        finish("eos", out);
        return false;
    }
    n_generated_++;
    std::string piece = dec_->push(token);
    if (!o_.stop.empty()) {
        pending_ += piece;
        size_t cut = std::string::npos;
        for (const auto& s : o_.stop) cut = std::min(cut, pending_.find(s));
        if (cut != std::string::npos) {
            out += pending_.substr(0, cut);
            pending_.clear();
            reason_ = "stop";
            return false;
        }
        const size_t hold = held_suffix(pending_, o_.stop);
        piece = pending_.substr(0, pending_.size() - hold);
        pending_.erase(0, pending_.size() - hold);
    }
    out += piece;
    if (n_generated_ >= o_.n_predict) {
        finish("length", out);
        return false;
    }
    return true;
}

void text_stream::finish(const std::string& reason, std::string& out) {
    if (reason_ == "stop" || reason_ == "cancel") return;
    const bool was_ended = ended();
    if (!was_ended) reason_ = reason;
    if (reason_ == "cancel") return;
    out += pending_ + dec_->flush();
    pending_.clear();
}

}  // namespace memtile
