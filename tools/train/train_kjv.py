#!/usr/bin/env python3
"""Train memtile's default model: a small Llama on the King James Bible.

Reproducible end to end (seeded): corpus preparation, a byte-level BPE tokenizer (Hugging Face `tokenizers`),
a ~15 M-parameter LlamaForCausalLM (transformers), training with AdamW on 512-token windows, selection of the
checkpoint with the best validation loss, export in Hugging Face format (BF16 safetensors shards of at most
12 MB, config.json, tokenizer.json, tokenizer_config.json with a ChatML chat template that renders tools,
generation_config.json) and golden data for memtile's tests (HF token ids and last-position logits for fixed
prompts). See README.md beside this file for the model card.

Corpus: `bible -m 8192 gen1:1-rev22:21` (Debian package bible-kjv), the whole KJV (4.3 MB, public domain).
Every 20th chapter (5 %) is held out for validation.
"""
import argparse
import json
import math
import os
import random
import re
import shutil
import tarfile
import time

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
GOLDEN_PROMPTS = [
    "In the beginning God created",
    "And the LORD said unto Moses,",
    "<|im_start|>user\nRead Psalms 23.<|im_end|>\n<|im_start|>assistant\n",
    "Blessed are the meek: for they",
]


def parse_chapters(raw):
    """Splits `bible -m` output into (heading, [verse, ...]) chapters; verse lines wrap and are joined."""
    chapters, heading, verses = [], None, []
    for line in raw.splitlines():
        if not line.strip():
            continue
        m = re.match(r"^\s+(\d+)\s+(.*)$", line)
        if m:
            verses.append(m.group(2).strip())
        elif line.startswith(" ") or (verses and not re.match(r"^[1-3]?\s?[A-Z][A-Za-z ]+ \d+$", line.strip())):
            verses[-1] += " " + line.strip()
        else:
            if heading is not None:
                chapters.append((heading, verses))
            heading, verses = line.strip(), []
    if heading is not None:
        chapters.append((heading, verses))
    return chapters


def chapter_text(heading, verses):
    return heading + "\n\n" + "\n".join(verses) + "\n"


def chat_sample(heading, verses, rng):
    """A ChatML exchange asking for (part of) a chapter, so the model learns to end turns with <|im_end|>."""
    asks = ["Read {}.", "Recite {}.", "What does {} say?", "Show me {}."]
    n = min(len(verses), rng.randint(2, 8))
    sys = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n" if rng.random() < 0.5 else ""
    return (sys + "<|im_start|>user\n" + rng.choice(asks).format(heading) + "<|im_end|>\n<|im_start|>assistant\n"
            + "\n".join(verses[:n]) + "<|im_end|>\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=6144)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--time-budget", type=float, default=330.0, help="seconds of training at most")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--eval-every", type=int, default=50)
    args = ap.parse_args()
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    os.makedirs(args.out, exist_ok=True)
    hf_dir = os.path.join(args.out, "hf")
    os.makedirs(hf_dir, exist_ok=True)

    raw = open(args.corpus, encoding="utf-8").read()
    chapters = parse_chapters(raw)
    train_ch = [c for i, c in enumerate(chapters) if i % 20 != 19]
    val_ch = [c for i, c in enumerate(chapters) if i % 20 == 19]
    rng = random.Random(args.seed)
    # Every document starts with a chapter, so text generated from BOS alone is scripture; half of them go on
    # with a ChatML exchange about another chapter, which teaches the chat format and <|im_end|>.
    train_docs = []
    for h, v in train_ch:
        doc = chapter_text(h, v)
        if rng.random() < 0.5:
            doc += "\n" + chat_sample(*rng.choice(train_ch), rng)
        train_docs.append(doc)
    rng.shuffle(train_docs)
    val_text = "".join(chapter_text(*c) + "<|endoftext|>" for c in val_ch)
    print(f"chapters {len(chapters)} (train {len(train_ch)}, validation {len(val_ch)}), "
          f"train docs {len(train_docs)}", flush=True)

    # Tokenizer: byte-level BPE with GPT-2's pre-tokenizer regex, specials never merged.
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.vocab, min_frequency=2, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(train_docs, trainer)
    template = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "chat_template.jinja")).read()
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|im_end|>",
                                     pad_token="<|endoftext|>", unk_token=None)
    hf_tok.chat_template = template
    hf_tok.model_max_length = 32768
    eot = tok.token_to_id("<|endoftext|>")
    im_end = tok.token_to_id("<|im_end|>")

    def encode_doc(d):
        return tok.encode(d).ids + [eot]

    train_ids = torch.tensor([t for d in train_docs for t in encode_doc(d)], dtype=torch.long)
    val_ids = torch.tensor(tok.encode(val_text).ids, dtype=torch.long)
    print(f"tokens: train {len(train_ids)}, validation {len(val_ids)}, vocab {tok.get_vocab_size()}", flush=True)

    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=384, intermediate_size=1024,
                      num_hidden_layers=8, num_attention_heads=6, num_key_value_heads=2, head_dim=64, attention_dropout=0.1,
                      max_position_embeddings=32768, rope_theta=10000.0, rms_norm_eps=1e-5,
                      tie_word_embeddings=True, bos_token_id=eot, eos_token_id=im_end, pad_token_id=eot)
    model = LlamaForCausalLM(cfg).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {n_params / 1e6:.2f} M", flush=True)

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = 100

    def lr_at(step):
        if step < warmup:
            return args.lr * (step + 1) / warmup
        frac = (step - warmup) / max(1, args.steps - warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))

    gen = torch.Generator().manual_seed(args.seed)

    def batch(ids, bs):
        ix = torch.randint(0, len(ids) - args.seq - 1, (bs,), generator=gen)
        x = torch.stack([ids[i:i + args.seq + 1] for i in ix]).to(dev)
        return x[:, :-1], x[:, 1:]

    @torch.no_grad()
    def val_loss():
        model.eval()
        total, count = 0.0, 0
        for i in range(0, len(val_ids) - args.seq - 1, args.seq):
            x = val_ids[i:i + args.seq + 1].to(dev)[None]
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(x[:, :-1]).logits.float()
            total += torch.nn.functional.cross_entropy(logits[0], x[0, 1:], reduction="sum").item()
            count += args.seq
        model.train()
        return total / count

    log = {"steps": [], "train_loss": [], "val": []}
    best, best_state = float("inf"), None
    t0 = time.time()
    step = 0
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        x, y = batch(train_ids, args.batch)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x).logits
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 25 == 0:
            log["steps"].append(step)
            log["train_loss"].append(round(loss.item(), 4))
        if (step % args.eval_every == args.eval_every - 1 or step == args.steps - 1
                or time.time() - t0 > args.time_budget):
            v = val_loss()
            log["val"].append({"step": step + 1, "loss": round(v, 4), "ppl": round(math.exp(v), 3)})
            print(f"step {step + 1} train {loss.item():.3f} val {v:.3f} ppl {math.exp(v):.2f} "
                  f"{time.time() - t0:.0f}s", flush=True)
            if v < best:
                best = v
                best_state = {k: t.detach().clone() for k, t in model.state_dict().items()}
        if time.time() - t0 > args.time_budget:
            break
    model.load_state_dict(best_state)
    log["best_val_loss"] = round(best, 4)
    log["best_val_ppl"] = round(math.exp(best), 3)
    log["trained_steps"] = step + 1
    log["train_seconds"] = round(time.time() - t0, 1)
    log["parameters"] = n_params
    log["tokens_train"] = len(train_ids)
    log["tokens_val"] = len(val_ids)
    log["hyperparameters"] = vars(args)

    # Export: BF16 weights in shards of at most 12 MB (files come back at most 16 MB each).
    model = model.to(torch.bfloat16)
    model.save_pretrained(hf_dir, max_shard_size="12MB")
    hf_tok.save_pretrained(hf_dir)
    # Whatever the transformers version writes, tokenizer_config.json carries the template and BOS policy.
    tc_path = os.path.join(hf_dir, "tokenizer_config.json")
    tc = json.load(open(tc_path)) if os.path.exists(tc_path) else {}
    tc.update({"chat_template": template, "bos_token": "<|endoftext|>", "eos_token": "<|im_end|>",
               "pad_token": "<|endoftext|>", "add_bos_token": False, "add_eos_token": False,
               "model_max_length": 32768})
    json.dump(tc, open(tc_path, "w"), indent=1, ensure_ascii=False)
    GenerationConfig(bos_token_id=eot, eos_token_id=[im_end, eot], pad_token_id=eot).save_pretrained(hf_dir)

    # Golden data from the exported (BF16-rounded) weights, computed in f32 without TF32.
    model = model.float().eval()
    golden = {"about": "HF tokenizer ids and last-position logits of the exported model (bf16 weights, f32 "
                       "compute, no TF32) for fixed prompts; top-50 for all, full vector for prompt 0",
              "prompts": []}
    with torch.no_grad():
        for i, p in enumerate(GOLDEN_PROMPTS):
            ids = hf_tok(p, add_special_tokens=False)["input_ids"]
            logits = model(torch.tensor([ids], device=dev)).logits[0, -1].float().cpu()
            top = torch.topk(logits, 50)
            entry = {"prompt": p, "ids": ids, "top50_indices": top.indices.tolist(),
                     "top50_values": [float(v) for v in top.values]}
            if i == 0:
                entry["logits"] = [float(v) for v in logits]
            golden["prompts"].append(entry)
        sample = model.generate(torch.tensor([hf_tok("In the beginning", add_special_tokens=False)["input_ids"]],
                                             device=dev), max_new_tokens=60, do_sample=False)
        golden["greedy_sample"] = hf_tok.decode(sample[0])
    print("greedy sample:", golden["greedy_sample"], flush=True)
    with open(os.path.join(args.out, "golden.json"), "w") as f:
        json.dump(golden, f)
    with open(os.path.join(hf_dir, "train_log.json"), "w") as f:
        json.dump(log, f, indent=1)
    with open(os.path.join(hf_dir, "kjv-validation.txt"), "w") as f:
        f.write(val_text)
    # Small files travel together; the weight shards come back one by one.
    with tarfile.open(os.path.join(args.out, "hf-small.tar"), "w") as tar:
        for name in os.listdir(hf_dir):
            if not name.endswith(".safetensors"):
                tar.add(os.path.join(hf_dir, name), arcname=name)
    for name in os.listdir(hf_dir):
        if name.endswith(".safetensors"):
            os.replace(os.path.join(hf_dir, name), os.path.join(args.out, name))
    shutil.rmtree(hf_dir)
    print(json.dumps({k: log[k] for k in ("best_val_loss", "best_val_ppl", "trained_steps", "train_seconds",
                                          "parameters")}), flush=True)


if __name__ == "__main__":
    main()
