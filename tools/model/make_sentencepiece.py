#!/usr/bin/python3
"""Train a tiny SentencePiece BPE model and write reference ids, for tests.

Writes tests/fixtures/tokenizer/sentencepiece/:
  tokenizer.model  a SentencePiece BPE model (vocabulary --vocab, byte
                   fallback, <unk>=0 <s>=1 </s>=2 as in LLaMA-2), trained on
                   the lines of tests/fixtures/tokenizer/corpus.jsonl
  vectors.jsonl    per corpus line (the first --lines): {"text", "ids", "decoded"} from the
                   sentencepiece Python package's encode and decode (no BOS)

mpcache reads tokenizer.model with Debian's libsentencepiece (the same
library under the Python package), so these pin how its wrapper maps
pieces to text: "▁" to spaces, <0xAB> byte pieces to bytes, control tokens
to nothing, and how it splits text around <s> and </s>.

Needs Debian's python3-sentencepiece. Usage:
  /usr/bin/python3 tools/model/make_sentencepiece.py [--out DIR]
"""
import argparse
import io
import json
import os

import sentencepiece as spm

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests/fixtures/tokenizer/sentencepiece"))
    ap.add_argument("--corpus", default=os.path.join(REPO, "tests/fixtures/tokenizer/corpus.jsonl"))
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--lines", type=int, default=300, help="corpus lines written to vectors.jsonl")
    args = ap.parse_args()
    with open(args.corpus, encoding="utf-8") as f:
        lines = [json.loads(l) for l in f if l.strip()]
    training = [l for l in lines if l.strip() and "\n" not in l and "<s>" not in l and "</s>" not in l]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(training), model_writer=model, vocab_size=args.vocab, model_type="bpe",
        byte_fallback=True, character_coverage=0.98, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        split_digits=True, num_threads=1, minloglevel=2,
        # as LLaMA-2's tokenizer.model: no normalisation, spaces kept, "▁" prepended
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "tokenizer.model"), "wb") as f:
        f.write(model.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    with open(os.path.join(args.out, "vectors.jsonl"), "w", encoding="utf-8") as f:
        for text in lines[:args.lines]:
            ids = sp.encode(text)
            f.write(json.dumps({"text": text, "ids": ids, "decoded": sp.decode(ids)}, ensure_ascii=False) + "\n")
    print(f"{len(model.getvalue())} bytes of model, {sp.get_piece_size()} pieces, {min(len(lines), args.lines)} lines")


if __name__ == "__main__":
    main()
