"""Intent-classification and slot-filling data sets: a loader and a built-in generator.

Directory format (the JointBERT layout of ATIS and SNIPS, flattened, see
``/work/shared/data/README.md``):

``{train,dev,test}.seq.in``
    one sentence per line, words separated by whitespace;
``{train,dev,test}.seq.out``
    one BIO slot tag per word;
``{train,dev,test}.label``
    one intent per line, multi-intent lines join intents with ``#``;
``intent_label.txt``
    intent vocabulary, ``UNK`` first;
``slot_label.txt``
    slot-tag vocabulary, ``PAD`` and ``UNK`` first.

Encoding rules (one place, used by the loader and the generator alike):

* Tokenizer: :meth:`str.split` (whitespace).
* Word vocabulary: built from the **train** split only. Ids 0, 1, 2 are the special tokens
  ``[PAD]``, ``[UNK]``, ``[CLS]``; then the words by decreasing train count, ties broken by the
  word's code-point order, truncated so the vocabulary has at most ``vocab_size`` entries
  (the config's TTM row count). Words outside it map to ``[UNK]``.
* Each sentence becomes ``[CLS] w_1 … w_k [PAD] …`` of exactly ``seq_len`` tokens; sentences
  longer than ``seq_len - 1`` words are truncated (their slot tags too). Segments are all 0.
* Intent (the scoring rule): the **first** ``#``-listed intent, mapped through
  ``intent_label.txt``, unknown → ``UNK``. ``intent_exact`` maps the full label string instead
  (unknown → ``UNK``) for exact-string accuracy.
* Slots: one tag id per word (unknown tag → ``UNK``), ``-1`` on ``[CLS]`` and padding.
* Unknown labels are counted: :attr:`Dataset.warnings` has one line per split with unknown
  (first-listed) intents or unknown slot tags, with counts and examples. A split none of whose
  intents is known, or an empty split, is a ValueError (it could only score 0%).
* Files are UTF-8 (a byte-order mark is ignored); anything else is a ValueError naming the
  file and line.

A batch is a dict of NumPy arrays for ``n`` sentences: ``tokens`` int64 (n, S), ``segments``
int64 (n, S), ``mask`` bool (n, S) (True = real token incl. ``[CLS]``), ``intent`` int64 (n,),
``intent_exact`` int64 (n,), ``slots`` int64 (n, S).
"""

import os
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

__all__ = ["PAD", "UNK", "CLS", "SPECIAL_TOKENS", "SPLITS", "RawSplit", "Dataset",
           "load_dataset", "build_dataset", "generate_dataset", "build_vocab", "first_intent",
           "LABEL_NOISE"]

PAD, UNK, CLS = 0, 1, 2
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]")
SPLITS = ("train", "dev", "test")
INTENT_FILE = "intent_label.txt"
SLOT_FILE = "slot_label.txt"
BATCH_KEYS = ("tokens", "segments", "mask", "intent", "intent_exact", "slots")


@dataclass(frozen=True)
class RawSplit:
    """One split as text: ``words[i]`` and ``tags[i]`` are lists of equal length,
    ``labels[i]`` is the intent label string as written (``a#b`` for multi-intent lines)."""
    words: tuple
    tags: tuple
    labels: tuple

    def __len__(self):
        return len(self.labels)


def first_intent(label):
    """Return the first ``#``-listed intent of ``label`` (the scoring rule)."""
    return label.split("#", 1)[0]


def build_vocab(sentences, vocab_size):
    """Return the word list (index = id) built from ``sentences`` (lists of words).

    Specials first, then words by decreasing count with ties in code-point order, at most
    ``vocab_size`` entries in total.
    """
    if not isinstance(vocab_size, (int, np.integer)) or vocab_size < len(SPECIAL_TOKENS) + 1:
        raise ValueError(
            f"vocabulary size {vocab_size!r} is too small: it must hold the "
            f"{len(SPECIAL_TOKENS)} special tokens {list(SPECIAL_TOKENS)} and at least one word; "
            f"use a config whose TTM vocab_modes multiply to more")
    counts = Counter(w for s in sentences for w in s)
    for tok in SPECIAL_TOKENS:
        counts.pop(tok, None)
    words = sorted(counts, key=lambda w: (-counts[w], w))
    return list(SPECIAL_TOKENS) + words[:int(vocab_size) - len(SPECIAL_TOKENS)]


@dataclass
class Dataset:
    """An encoded data set with splits ``train``, ``dev`` and ``test``.

    Attributes
    ----------
    name : str
        Where it came from (directory path or ``generated(seed=…)``).
    splits : dict of str to dict of str to ndarray
        ``splits[split]`` is one batch dict holding the whole split (keys in the module doc).
    raw : dict of str to RawSplit
        The text the splits were encoded from (used by :meth:`save`).
    vocab : list of str
        Word list, index = token id (``[PAD]``, ``[UNK]``, ``[CLS]`` first).
    intent_labels, slot_labels : list of str
        Label vocabularies (``intent_labels[0] == "UNK"``, ``slot_labels[:2] == ["PAD", "UNK"]``).
    seq_len : int
        Tokens per sentence including ``[CLS]``.
    """
    name: str
    splits: dict
    raw: dict
    vocab: list
    intent_labels: list
    slot_labels: list
    seq_len: int
    warnings: list = field(default_factory=list, compare=False)
    directory: str = field(default=None, compare=False)
    _word_ids: dict = field(default=None, repr=False, compare=False)

    @property
    def n_intents(self):
        """Number of intent classes."""
        return len(self.intent_labels)

    @property
    def n_slots(self):
        """Number of slot-tag classes."""
        return len(self.slot_labels)

    @property
    def vocab_size(self):
        """Number of token ids in use (specials included)."""
        return len(self.vocab)

    def __len__(self):
        return sum(len(self.splits[s]["intent"]) for s in SPLITS)

    def size(self, split):
        """Number of sentences in ``split``."""
        return len(self._split(split)["intent"])

    def _split(self, split):
        if split not in self.splits:
            raise ValueError(f"unknown split {split!r}; choose one of {list(SPLITS)}")
        return self.splits[split]

    def batch(self, split, index=None):
        """Return the batch dict of ``split`` (rows ``index`` if given, else all of them)."""
        data = self._split(split)
        if index is None:
            return dict(data)
        return {k: v[index] for k, v in data.items()}

    def batches(self, split, batch_size, *, seed=None, shuffle=True, drop_last=False):
        """Iterate over mini-batches of ``split``.

        Parameters
        ----------
        split : str
            ``"train"``, ``"dev"`` or ``"test"``.
        batch_size : int
            Sentences per batch (the last batch may be smaller unless ``drop_last``).
        seed : int or numpy.random.Generator, optional
            Shuffling seed or generator; the same seed gives the same order.
        shuffle : bool
            Permute the sentences (otherwise file order).
        drop_last : bool
            Skip a final incomplete batch.
        """
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        n = self.size(split)
        if shuffle:
            rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
            order = rng.permutation(n)
        else:
            order = np.arange(n)
        stop = n - n % batch_size if drop_last else n
        for start in range(0, stop, batch_size):
            yield self.batch(split, order[start:start + batch_size])

    def encode(self, sentence):
        """Return the token ids (length ``seq_len``) of one sentence (a string or word list)."""
        words = sentence.split() if isinstance(sentence, str) else list(sentence)
        if self._word_ids is None:
            self._word_ids = {w: i for i, w in enumerate(self.vocab)}
        ids = [CLS] + [self._word_ids.get(w, UNK) for w in words[:self.seq_len - 1]]
        return np.array(ids + [PAD] * (self.seq_len - len(ids)), dtype=np.int64)

    def reencode(self, vocab, intent_labels, slot_labels, *, labels_from):
        """Return this data set's text encoded with a given vocabulary and label lists.

        Used to evaluate or fine-tune a checkpoint: token and label ids must mean what they
        meant in training. ``labels_from`` names where the lists came from (for messages).
        """
        if list(vocab[:len(SPECIAL_TOKENS)]) != list(SPECIAL_TOKENS):
            raise ValueError(f"{labels_from}: the vocabulary must start with "
                             f"{list(SPECIAL_TOKENS)}")
        return build_dataset(self.raw, intent_labels, slot_labels, seq_len=self.seq_len,
                             vocab=list(vocab), name=self.name, directory=self.directory,
                             labels_from=labels_from)

    def save(self, path):
        """Write the data set as text files in the directory format of the module doc.

        Loading the directory back with :func:`load_dataset` (same ``seq_len`` and a
        ``vocab_size`` at least :attr:`vocab_size`) gives an identical data set.
        """
        os.makedirs(path, exist_ok=True)
        for split in SPLITS:
            raw = self.raw[split]
            _write_lines(os.path.join(path, f"{split}.seq.in"), [" ".join(w) for w in raw.words])
            _write_lines(os.path.join(path, f"{split}.seq.out"), [" ".join(t) for t in raw.tags])
            _write_lines(os.path.join(path, f"{split}.label"), list(raw.labels))
        _write_lines(os.path.join(path, INTENT_FILE), list(self.intent_labels))
        _write_lines(os.path.join(path, SLOT_FILE), list(self.slot_labels))

    def summary(self):
        """Return a one-line description (sizes and label counts)."""
        sizes = "/".join(str(self.size(s)) for s in SPLITS)
        return (f"{self.name}: {sizes} train/dev/test sentences, {self.n_intents} intents, "
                f"{self.n_slots} slot tags, vocabulary {self.vocab_size}, seq_len {self.seq_len}")


def _write_lines(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def _read_lines(path):
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"missing data file {path}: a data directory needs {{train,dev,test}}.seq.in/.seq.out"
            f"/.label, {INTENT_FILE} and {SLOT_FILE}")
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ValueError(f"{path} line {line} is not UTF-8 (byte 0x{data[exc.start]:02x} at "
                         f"column {column}): save the file as UTF-8") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def _label_list(path, first):
    labels = [line.strip() for line in _read_lines(path)]
    labels = [label for label in labels if label]
    if labels[:len(first)] != list(first):
        raise ValueError(f"{path} must start with {', '.join(first)} (found {labels[:len(first)]})")
    if len(set(labels)) != len(labels):
        raise ValueError(f"{path} lists a label twice")
    return labels


def _read_split(path, split):
    base = os.path.join(path, split)
    sentences = _read_lines(base + ".seq.in")
    tag_lines = _read_lines(base + ".seq.out")
    labels = _read_lines(base + ".label")
    if not len(sentences) == len(tag_lines) == len(labels):
        raise ValueError(
            f"{base}.seq.in/.seq.out/.label have {len(sentences)}/{len(tag_lines)}/{len(labels)} "
            f"lines: they must have one line per sentence each")
    words, tags = [], []
    for i, (s, t) in enumerate(zip(sentences, tag_lines)):
        w, g = s.split(), t.split()
        if len(w) != len(g):
            raise ValueError(
                f"{base}.seq.out line {i + 1} has {len(g)} tags for {len(w)} words in "
                f"{base}.seq.in: give one BIO tag per word")
        if not w:
            raise ValueError(f"{base}.seq.in line {i + 1} is empty: remove it from all three files")
        words.append(tuple(w))
        tags.append(tuple(g))
    return RawSplit(tuple(words), tuple(tags), tuple(label.strip() for label in labels))


def _examples(counter, k=3):
    shown = ", ".join(f"{label!r} x{n}" for label, n in counter.most_common(k))
    return shown + (f", ... ({len(counter)} distinct)" if len(counter) > k else "")


def _label_report(split, raw, intent_labels, slot_labels, where, labels_from):
    """Return the warning lines for unknown labels of one split; raise if none is known."""
    known_intents, known_slots = set(intent_labels), set(slot_labels)
    bad_intents = Counter(x for x in map(first_intent, raw.labels) if x not in known_intents)
    bad_slots = Counter(t for tags in raw.tags for t in tags if t not in known_slots)
    intent_from, slot_from = labels_from
    lines = []
    n = len(raw)
    if n and sum(bad_intents.values()) == n:
        raise ValueError(
            f"{where(split, 'label')}: none of the {n} {split} intents is listed in "
            f"{intent_from} ({_examples(bad_intents)}): the split "
            f"could only score 0%; list its intents there or fix the labels")
    if bad_intents:
        lines.append(
            f"{where(split, 'label')}: {sum(bad_intents.values())} of {n} {split} sentences "
            f"have an intent not in {intent_from}, scored as UNK: {_examples(bad_intents)}")
    if bad_slots:
        lines.append(
            f"{where(split, 'seq.out')}: {sum(bad_slots.values())} {split} slot tag(s) not in "
            f"{slot_from}, scored as UNK: {_examples(bad_slots)}")
    return lines


def _encode_split(raw, vocab, intent_labels, slot_labels, seq_len):
    word_ids = {w: i for i, w in enumerate(vocab)}
    intent_ids = {label: i for i, label in enumerate(intent_labels)}
    slot_ids = {label: i for i, label in enumerate(slot_labels)}
    slot_unk = slot_ids.get("UNK", 1)
    n = len(raw)
    tokens = np.full((n, seq_len), PAD, dtype=np.int64)
    slots = np.full((n, seq_len), -1, dtype=np.int64)
    tokens[:, 0] = CLS
    for i, (w, t) in enumerate(zip(raw.words, raw.tags)):
        k = min(len(w), seq_len - 1)
        tokens[i, 1:k + 1] = [word_ids.get(x, UNK) for x in w[:k]]
        slots[i, 1:k + 1] = [slot_ids.get(x, slot_unk) for x in t[:k]]
    return {
        "tokens": tokens,
        "segments": np.zeros((n, seq_len), dtype=np.int64),
        "mask": tokens != PAD,
        "intent": np.array([intent_ids.get(first_intent(x), 0) for x in raw.labels], np.int64),
        "intent_exact": np.array([intent_ids.get(x, 0) for x in raw.labels], np.int64),
        "slots": slots,
    }


def build_dataset(raw, intent_labels, slot_labels, *, seq_len, vocab_size=None, name="dataset",
                  vocab=None, directory=None, labels_from=None):
    """Encode text splits into a :class:`Dataset` (vocabulary from ``raw["train"]``).

    Parameters
    ----------
    raw : dict of str to RawSplit
        Splits ``train``, ``dev``, ``test``.
    intent_labels, slot_labels : list of str
        Label vocabularies (``UNK`` first; slots ``PAD``, ``UNK`` first).
    seq_len : int
        Tokens per sentence including ``[CLS]`` (at least 2).
    vocab_size : int
        Maximum vocabulary size including the 3 special tokens.
    name : str
        Label for messages.
    vocab : list of str, optional
        Use this vocabulary instead of building one (``vocab_size`` is then ignored).
    directory : str, optional
        The directory the splits were read from (messages name its files).
    labels_from : str, optional
        Where the label lists came from, for messages (default: the directory's label files).
    """
    if not isinstance(seq_len, (int, np.integer)) or seq_len < 2:
        raise ValueError(f"seq_len must be an integer >= 2 ([CLS] and one word), got {seq_len!r}")
    missing = [s for s in SPLITS if s not in raw]
    if missing:
        raise ValueError(f"data set needs splits {list(SPLITS)}, missing {missing}")

    def where(split, ext):
        if directory is not None:
            return os.path.join(directory, f"{split}.{ext}")
        return f"{name} {split} split"
    if labels_from is None:
        labels_from = ((os.path.join(directory, INTENT_FILE), os.path.join(directory, SLOT_FILE))
                       if directory is not None else ("the intent labels", "the slot labels"))
    elif isinstance(labels_from, str):
        labels_from = (labels_from, labels_from)
    for split in SPLITS:
        if len(raw[split]) == 0:
            raise ValueError(f"{where(split, 'seq.in')}: the {split} split is empty"
                             + (": the vocabulary is built from it" if split == "train" else
                                ": it is evaluated every epoch; give it sentences"))
    warnings = []
    for split in SPLITS:
        warnings += _label_report(split, raw[split], intent_labels, slot_labels, where,
                                  labels_from)
    if vocab is None:
        vocab = build_vocab(raw["train"].words, vocab_size)
    splits = {s: _encode_split(raw[s], vocab, intent_labels, slot_labels, int(seq_len))
              for s in SPLITS}
    return Dataset(name=name, splits=splits, raw={s: raw[s] for s in SPLITS}, vocab=vocab,
                   intent_labels=list(intent_labels), slot_labels=list(slot_labels),
                   seq_len=int(seq_len), warnings=warnings, directory=directory)


def load_dataset(path, cfg=None, *, seq_len=None, vocab_size=None):
    """Load a data directory (format in the module doc) and encode it.

    Parameters
    ----------
    path : str or os.PathLike
        The directory (for example ``../shared/data/atis``).
    cfg : ModelConfig, optional
        Supplies ``seq_len`` (``cfg.seq_len``) and ``vocab_size`` (``cfg.vocab``, the TTM rows).
    seq_len, vocab_size : int, optional
        Override (or replace) the values taken from ``cfg``.

    Raises
    ------
    FileNotFoundError
        If the directory or one of its files is missing.
    ValueError
        On mismatched line counts, tag/word count mismatches or a vocabulary too small.
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"data directory {path} does not exist: pass a directory holding "
                                f"{{train,dev,test}}.seq.in/.seq.out/.label and the label files")
    if cfg is not None:
        seq_len = cfg.seq_len if seq_len is None else seq_len
        vocab_size = cfg.vocab if vocab_size is None else vocab_size
    if seq_len is None or vocab_size is None:
        raise ValueError("load_dataset needs a config or both seq_len and vocab_size")
    intent_labels = _label_list(os.path.join(path, INTENT_FILE), ("UNK",))
    slot_labels = _label_list(os.path.join(path, SLOT_FILE), ("PAD", "UNK"))
    raw = {s: _read_split(path, s) for s in SPLITS}
    return build_dataset(raw, intent_labels, slot_labels, seq_len=seq_len,
                         vocab_size=vocab_size, name=path, directory=path)


# --------------------------------------------------------------------------------------------
# Built-in generated data set (ATIS-like, sized for the ``tiny`` preset)

_CITIES = ("boston", "denver", "dallas", "atlanta", "seattle", "chicago", "miami", "phoenix",
           "houston", "detroit", "oakland", "memphis", "orlando", "tampa", "austin", "reno")
_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday",
         "today", "tomorrow")
_TIMES = ("morning", "afternoon", "evening", "night")
_AIRLINES = ("delta", "united", "american", "continental", "alaska", "southwest")

GEN_INTENTS = ("UNK", "flight", "airfare", "airline", "ground_service", "meal", "flight_time",
               "distance")
GEN_SLOTS = ("PAD", "UNK", "O", "B-fromloc", "B-toloc", "B-depart_date", "B-depart_time",
             "B-airline")
_FILLERS = {"F": ("B-fromloc", _CITIES), "T": ("B-toloc", _CITIES),
            "D": ("B-depart_date", _DAYS), "M": ("B-depart_time", _TIMES),
            "A": ("B-airline", _AIRLINES)}

# Templates: words, with {F} from-city, {T} to-city, {D} day, {M} time of day, {A} airline.
# Several intents share words and frames ("flights", "from {F} to {T}", "{A}") so that the
# intent depends on a few cue words; a fraction of labels is flipped to another intent.
_TEMPLATES = {
    "flight": ("flights from {F} to {T}", "show flights {F} to {T} {D}",
               "i want to fly to {T} {D}", "list {A} flights to {T} {M}",
               "flights to {T} on {D} {M}", "any flights from {F} {D}",
               "i need a flight to {T}", "show me {A} flights from {F}"),
    "airfare": ("fares from {F} to {T}", "how much is a ticket to {T}",
                "cheapest fare {F} to {T} {D}", "show {A} fares to {T}",
                "what does a flight to {T} cost", "price of flights from {F}",
                "round trip fare to {T} {D}"),
    "airline": ("which airlines fly to {T}", "what airline flies {F} to {T}",
                "airlines from {F} to {T} {D}", "which carrier serves {T}",
                "list airlines with flights to {T}", "what airlines leave {F} {M}"),
    "ground_service": ("ground transportation in {T}", "is there a taxi in {T}",
                       "car rental at {T} airport", "how do i get downtown in {T}",
                       "limousine service in {T} {D}", "bus from {T} airport"),
    "meal": ("meals on {A} flights to {T}", "is dinner served to {T}",
             "does the {M} flight serve food", "what meals are on flights from {F}",
             "breakfast on the flight to {T}", "snacks on {A} from {F}"),
    "flight_time": ("what time does the flight leave {F}", "when does {A} leave for {T}",
                    "departure times from {F} to {T}", "what time is the {M} flight",
                    "schedule of flights to {T} {D}", "arrival time in {T} {D}"),
    "distance": ("how far is {T} airport from downtown", "distance from {F} to {T}",
                 "how many miles from {F} to {T}", "how long is the drive to {T}",
                 "how far is it to {T}", "miles between {F} and {T}"),
}


def _render(template, rng):
    words, tags = [], []
    chosen = {}
    for token in template.split():
        if token.startswith("{") and token.endswith("}"):
            kind = token[1:-1]
            tag, pool = _FILLERS[kind]
            value = pool[rng.integers(len(pool))]
            # from/to cities differ, as in real queries
            while kind in "FT" and value in chosen.values():
                value = pool[rng.integers(len(pool))]
            chosen[kind] = value
            words.append(value)
            tags.append(tag)
        else:
            words.append(token)
            tags.append("O")
    return tuple(words), tuple(tags)


#: Default fraction of flipped intent labels of :func:`generate_dataset`.
LABEL_NOISE = 0.05


def generate_dataset(seed=0, *, n_train=1200, n_dev=200, n_test=200, label_noise=LABEL_NOISE,
                     seq_len=8, vocab_size=128):
    """Return a seeded, generated ATIS-like intent + slot data set.

    Sentences come from templates per intent (7 intents plus ``UNK``, 8 slot tags including
    ``PAD``/``UNK``) filled with cities, days, times of day and airlines; at most 7 words each,
    so they fit ``seq_len`` 8 with ``[CLS]``. With probability ``label_noise`` a sentence's
    intent is replaced by a different random intent (so accuracy is not trivially 100%: the
    expected ceiling is about ``1 - label_noise``). Sized for the ``tiny`` preset: 8 intent
    classes, 8 slot tags, fewer than 128 words including the specials.

    Parameters
    ----------
    seed : int
        Generator seed; the same seed gives the same data set.
    n_train, n_dev, n_test : int
        Split sizes.
    label_noise : float
        Fraction of flipped intent labels, in [0, 1).
    seq_len, vocab_size : int
        Encoding parameters (see :func:`build_dataset`).
    """
    for name, value in (("n_train", n_train), ("n_dev", n_dev), ("n_test", n_test)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not 0 <= label_noise < 1:
        raise ValueError(f"label_noise must be in [0, 1), got {label_noise!r}")
    rng = np.random.default_rng(seed)
    intents = GEN_INTENTS[1:]
    raw = {}
    for split, n in (("train", n_train), ("dev", n_dev), ("test", n_test)):
        words, tags, labels = [], [], []
        for _ in range(int(n)):
            intent = intents[rng.integers(len(intents))]
            templates = _TEMPLATES[intent]
            w, t = _render(templates[rng.integers(len(templates))], rng)
            # always draw both numbers, so label_noise changes labels only, not sentences
            flip, other = rng.random(), rng.integers(len(intents) - 1)
            if flip < label_noise:
                intent = [x for x in intents if x != intent][other]
            words.append(w)
            tags.append(t)
            labels.append(intent)
        raw[split] = RawSplit(tuple(words), tuple(tags), tuple(labels))
    return build_dataset(raw, GEN_INTENTS, GEN_SLOTS, seq_len=seq_len, vocab_size=vocab_size,
                         name=f"generated(seed={seed})")
