#!/usr/bin/env python3
"""Word count as a mapagg program: register it on the workers with
    worker run --program 'pywordcount=python3 /path/to/wordcount.py'
and submit it with {"container": "corpus"}. Try it locally: python3 wordcount.py FILE...
"""
from collections import Counter

import mapagg


def map_blocks(blocks):  # the task's input, in blocks of whole lines (about 64 KiB each)
    counts = Counter()
    for text in blocks:
        counts.update(text.split())
    return counts


def combiner(word, counts):  # a task's counts of a word, combined before they are written
    return sum(counts)


def reducer(word, counts):
    return sum(counts)


if __name__ == "__main__":
    mapagg.run()
