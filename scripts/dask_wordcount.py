#!/usr/bin/env python3
"""Dask word count, the peer baseline of `make bench`'s keyed scenario.

Counts the words (runs of non-space) of every file in SRC with dask.bag on a local
distributed cluster of --workers single-threaded processes, and writes every word's count
as word<TAB>count lines into part files under OUT. Prints one JSON line:
{"seconds": time from the first read to the last count written, "bytes": input bytes, ...}.

    apt-get install -y python3-dask python3-distributed
    python3 scripts/dask_wordcount.py --workers 2 CORPUS_DIR OUT_DIR
"""
import argparse
import glob
import json
import os
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--blocksize", default="8MiB")
    args = ap.parse_args()

    import dask.bag as db
    from dask.distributed import Client, LocalCluster

    files = sorted(f for f in glob.glob(os.path.join(args.src, "*")) if os.path.isfile(f))
    if not files:
        raise SystemExit(f"no files in {args.src}")
    os.makedirs(args.out, exist_ok=True)
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster):
        start = time.monotonic()
        words = db.read_text(files, blocksize=args.blocksize).map(str.split).flatten()
        counts = words.frequencies()  # a tree reduction of per-partition counts
        counts.map(lambda kv: f"{kv[0]}\t{kv[1]}").to_textfiles(os.path.join(args.out, "part-*.tsv"))
        seconds = time.monotonic() - start
    print(json.dumps({"seconds": round(seconds, 3), "bytes": sum(os.path.getsize(f) for f in files),
                      "files": len(files), "workers": args.workers}))


if __name__ == "__main__":
    main()
