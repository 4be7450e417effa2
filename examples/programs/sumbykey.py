#!/usr/bin/env python3
"""Sums a value per key over CSV rows key,value (a header row is skipped), with a parameter:
{"container": "sales", "column": 1} sums the column'th field (0-based, default 1).
"""
import mapagg

COLUMN = mapagg.params().get("column", 1)


def mapper(line):
    fields = line.split(",")
    if fields[0] == "key":
        return  # the header
    yield fields[0], int(fields[COLUMN])


def combiner(key, values):
    return sum(values)


def reducer(key, values):
    return sum(values)


if __name__ == "__main__":
    mapagg.run()
