"""The text both programs' tiny models learn, and the byte-level BPE tokenizer trained on it
(``tokenizers``, which both LitGPT and TRL install): nothing downloaded. Imported by the
``make_*.py`` scripts, which run with each program's own interpreter (their folder is on
sys.path as the script's own)."""
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "seven", "small", "robots",
    "count", "numbers", "and", "sing"]


def corpus(lines: int, length: int) -> list[str]:
    return [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(length)) for i in range(lines)]


def bpe(lines: list[str], specials: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=300, special_tokens=specials))
    return tok
