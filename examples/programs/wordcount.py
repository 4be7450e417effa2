#!/usr/bin/env python3
"""Word count as a mapagg program: register it on the workers with
    worker run --program 'pywordcount=python3 /path/to/wordcount.py'
and submit it with {"container": "corpus"}. Try it locally: python3 wordcount.py FILE...
"""
import mapagg


def mapper(line):
    for word in line.split():
        yield word, 1


def combiner(word, counts):
    return sum(counts)


def reducer(word, counts):
    return sum(counts)


if __name__ == "__main__":
    mapagg.run()
