"""python3 reports/same_fingerprints.py CONFORM.json --suffix=-gfp32 [--what TEXT]

Are two spellings of the same training bit-identical? Takes one `tripod conform --json` file and
pairs every layout NAME with its twin that adds the option SUFFIX where both ran (say, the bf16
operand gathers of ZeRO 1-3 and `-gfp32`, which must give the same bits). The twin's canonical name
may place the option before later ones (tp1-pp1-dp2-z2-mb1-pad16 and tp1-pp1-dp2-z2-mb1-gfp32-pad16
are a pair). Prints one line, and each pair whose fingerprints differ,
and exits 0 when every pair agrees, 1 when one differs or none was found (a check that compared
nothing passes nothing), 2 on an unreadable file. Conform's fingerprint is a hash of every loss,
gradient norm and parameter bit (reference/conform/conformance.h).
"""
import argparse
import json
import sys


def fingerprint_pairs(record, suffix):
    """[(layout, twin, same)] for every layout of the conform record whose twin (the layout with the
    option `suffix`, wherever its name places it) ran too; a layout that ran more than once (tied and
    untied heads) is paired per head."""
    option = suffix.lstrip("-")
    rows = {(r["layout"], r.get("head")): r["fingerprint"] for r in record["layouts"]}
    twins = {}  # (the name's other parts, head) -> the twin's name
    for name, head in rows:
        parts = name.split("-")
        if option in parts:
            twins[("-".join(p for p in parts if p != option), head)] = name
    return [(name, twins[(name, head)], fp == rows[(twins[(name, head)], head)])
            for (name, head), fp in sorted(rows.items(), key=lambda kv: (kv[0][0], str(kv[0][1])))
            if (name, head) in twins]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[2])
    parser.add_argument("conform_json")
    parser.add_argument("--suffix", required=True, help="the option the twin's layout name adds, e.g. --suffix=-gfp32")
    parser.add_argument("--what", default="layouts", help="what the pairs compare, for the printed line")
    args = parser.parse_args(argv)
    try:
        with open(args.conform_json) as f:
            record = json.load(f)
        pairs = fingerprint_pairs(record, args.suffix)
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"same_fingerprints: cannot read {args.conform_json} as tripod conform's JSON: {error}",
              file=sys.stderr)
        return 2
    differ = [(a, b) for a, b, same in pairs if not same]
    print(f"{args.what}: {len(pairs) - len(differ)}/{len(pairs)} pairs with the same fingerprint")
    for a, b in differ:
        print(f"  {a} and {b} differ", file=sys.stderr)
    if not pairs:
        print(f"  no layout of {args.conform_json} ran with its '{args.suffix}' twin", file=sys.stderr)
    return 0 if pairs and not differ else 1


if __name__ == "__main__":
    sys.exit(main())
