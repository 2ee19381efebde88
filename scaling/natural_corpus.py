#!/usr/bin/python3
"""A natural-text corpus from Debian's packages, for scaling sweeps that must not repeat data.

    /usr/bin/python3 -m scaling.natural_corpus --out data/natural-text [--val-fraction 0.02] [--seed 0]

Sources (each split into documents, so that the held-out split is drawn by document at random
rather than being the last pages of one book):
  kjv     the King James Bible (bible-kjv; public domain), one document per chapter
  gcide   the GNU Collaborative International Dictionary of English (dict-gcide; GPL-2+): the
          1913 Webster and its additions, one document per entry, pronunciation markup and source
          tags ("[1913 Webster]") removed
  jargon  the Jargon File 4.4.7 (jargon-text; public domain), one document per entry
Documents are deduplicated (whitespace-normalised, case-folded text), shuffled with the seed, and
`--val-fraction` of them (by count) become val.txt; the rest train.txt, in their original order.
OUT/corpus.json records documents, bytes and duplicates per source; `tripod data prepare --input
OUT/train.txt --val-input OUT/val.txt` tokenizes it (ci/prepare-natural-corpus.sh does both).
"""

import argparse
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys

import numpy as np

GCIDE = "/usr/share/dictd/gcide.dict.dz"
JARGON = "/usr/share/doc/jargon-text/jargon.txt.gz"
LICENCES = {"kjv": "public domain (Debian bible-kjv-text)",
            "gcide": "GPL-2+ (Debian dict-gcide)",
            "jargon": "public domain (Debian jargon-text)"}


def kjv_documents():
    """One document per chapter: `bible` prints "Book N" headings, then numbered verses."""
    text = subprocess.run(["bible", "-l10000", "gen1:1-rev22:21"], capture_output=True, text=True,
                          check=True).stdout
    documents, current = [], []
    for line in text.splitlines():
        verse = re.match(r"^\s+\d+ (.*)$", line)
        if verse:
            current.append(verse.group(1).strip())
        elif line.strip():  # a chapter heading
            if current:
                documents.append("\n".join(current))
            current = []
    if current:
        documents.append("\n".join(current))
    return documents


# Where an entry's text came from ("[1913 Webster]", "[WordNet 1.5]", "[PJC]", ...), wherever it
# stands; bracketed accent codes ("[=a]") and usage labels ("[Obs.]") are the entry's own text.
SOURCE_TAG = re.compile(r"\[(?:1913 Webster|Webster 1913|WordNet|PJC|Century Dict|Chambers)[^\]]{0,30}\]")
PRONUNCIATION = re.compile(r"\\[^\\\n]{1,80}\\")      # \Ab*di"ca*tion\


def gcide_documents():
    """One document per entry: an entry starts at column 0, its continuation lines are indented."""
    with gzip.open(GCIDE, "rt", encoding="utf-8", errors="replace") as f:
        text = f.read()
    documents, current = [], []
    for line in text.splitlines():
        if line and not line[0].isspace() and current:
            documents.append(current)
            current = []
        line = SOURCE_TAG.sub("", PRONUNCIATION.sub("", line)).strip()
        if line:
            current.append(line)
    if current:
        documents.append(current)
    # The database's own header entries (00-database-*) are not dictionary text.
    return ["\n".join(d) for d in documents if not d[0].startswith("00-database") and len(d) > 1]


def jargon_documents():
    """One document per entry: entries begin with an indented ":headword:" line."""
    with gzip.open(JARGON, "rt", encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    documents, current, started = [], [], False
    for line in lines:
        if re.match(r"^\s+:[^:]+:", line):
            started = True
            if current:
                documents.append("\n".join(current))
            current = []
        if started and line.strip():
            current.append(line.strip())
    if current:
        documents.append("\n".join(current))
    return documents


READERS = {"kjv": kjv_documents, "gcide": gcide_documents, "jargon": jargon_documents}


def build(sources, val_fraction, seed):
    """(train documents, val documents, statistics per source), deduplicated and split by document."""
    seen, documents, stats = set(), [], {}
    for source in sources:
        raw = READERS[source]()
        kept = 0
        for doc in raw:
            key = hashlib.sha1(" ".join(doc.lower().split()).encode()).hexdigest()
            if key in seen:
                continue
            seen.add(key)
            documents.append((source, doc))
            kept += 1
        stats[source] = {"documents": kept, "duplicates_dropped": len(raw) - kept,
                         "bytes": sum(len(d.encode()) + 1 for s, d in documents if s == source),
                         "licence": LICENCES[source]}
    rng = np.random.default_rng(seed)
    n_val = int(round(val_fraction * len(documents)))
    val_index = set(rng.permutation(len(documents))[:n_val].tolist())
    train = [d for i, d in enumerate(documents) if i not in val_index]
    val = [d for i, d in enumerate(documents) if i in val_index]
    for source in sources:
        stats[source]["val_documents"] = sum(1 for s, _ in val if s == source)
    return train, val, stats


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory for train.txt, val.txt and corpus.json")
    parser.add_argument("--sources", default="kjv,gcide,jargon", help="comma-separated: " + ", ".join(READERS))
    parser.add_argument("--val-fraction", type=float, default=0.02, help="documents held out, drawn at random")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    sources = [s for s in args.sources.split(",") if s]
    unknown = [s for s in sources if s not in READERS]
    if unknown:
        raise SystemExit(f"natural_corpus: unknown source(s) {', '.join(unknown)} (known: {', '.join(READERS)})")
    if not 0 < args.val_fraction < 0.5:
        raise SystemExit(f"natural_corpus: --val-fraction must be in (0, 0.5) (got {args.val_fraction})")
    missing = [p for s, p in (("gcide", GCIDE), ("jargon", JARGON)) if s in sources and not os.path.exists(p)]
    if missing:
        raise SystemExit(f"natural_corpus: {', '.join(missing)} missing: install Debian's dict-gcide and jargon-text "
                         "(ci/setup.sh does)")
    train, val, stats = build(sources, args.val_fraction, args.seed)
    os.makedirs(args.out, exist_ok=True)
    for name, docs in (("train.txt", train), ("val.txt", val)):
        with open(os.path.join(args.out, name), "w") as f:
            for _, doc in docs:
                f.write(doc + "\n\n")
    summary = {"sources": stats, "train_documents": len(train), "val_documents": len(val),
               "val_fraction": args.val_fraction, "seed": args.seed,
               "split": "by document, at random", "deduplication": "whitespace-normalised, case-folded text"}
    with open(os.path.join(args.out, "corpus.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    for source, s in stats.items():
        print(f"{source:7s} {s['documents']:7d} documents ({s['duplicates_dropped']} duplicates dropped), "
              f"{s['bytes'] / 1e6:6.2f} MB, {s['val_documents']} held out; {s['licence']}", file=sys.stderr)


if __name__ == "__main__":
    main()
