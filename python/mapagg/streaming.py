"""The streaming contract of mapagg programs, spoken for a mapper, a reducer and a combiner.

The worker starts the program with MAPAGG_ROLE set:

* ``map``: the input records (lines) on stdin; ``mapper(record)`` yields (key, value) pairs.
* ``combine``: key<TAB>value lines sorted by key; ``combiner(key, values)`` returns one value.
* ``reduce``: key<TAB>value lines sorted by key; ``reducer(key, values)`` returns a value (the
  record key<TAB>value), or yields (key, value) records, or returns None (no record).
* ``describe``: prints what the program can do, as JSON.
* ``session``: the tasks of one job, one after another, each framed: a line
  ``mapagg:task {"seq": N, "role": ..., "shard"/"partition": ...}``, its input in frames
  (``<length>\n<bytes>``, ended by ``0\n``); its output ends with the line ``mapagg:end N``.
  The process ends when its stdin does.

Keys are strings. Values are any JSON value: they travel as JSON text, so a reducer gets back
the ints, lists and dicts its mapper emitted. In a field, tab, newline, CR and backslash are
written \\t \\n \\r \\\\.
"""

import json
import os
import sys
from types import GeneratorType
from collections.abc import Mapping
from itertools import chain, groupby, islice
from operator import itemgetter

__all__ = ["run", "params", "task", "escape", "unescape", "ProtocolError"]


class ProtocolError(Exception):
    """Input that does not follow the contract: a line without a TAB, say."""


_ESC = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\\": "\\\\"}
_UNESC = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}


def escape(s):
    """Escapes tab, newline, CR and backslash in a field."""
    if "\\" in s or "\t" in s or "\n" in s or "\r" in s:
        return "".join(_ESC.get(c, c) for c in s)
    return s


def unescape(s):
    """Decodes \\t \\n \\r \\\\ in a field; any other backslash stays as it is."""
    if "\\" not in s:
        return s
    out, i, n = [], 0, len(s)
    while i < n:
        c = s[i]
        if c == "\\" and i + 1 < n and s[i + 1] in _UNESC:
            out.append(_UNESC[s[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def params():
    """The job's parameters (MAPAGG_PARAMS), as a dict."""
    return json.loads(os.environ.get("MAPAGG_PARAMS") or "{}")


def task():
    """What runs: role, job id, and the shard (map, combine) or partition (reduce) index."""
    e = os.environ
    idx = e.get("MAPAGG_SHARD", e.get("MAPAGG_PARTITION", ""))
    return {"role": e.get("MAPAGG_ROLE", ""), "job": e.get("MAPAGG_JOB_ID", ""), "index": int(idx) if idx else None}


def _key_text(key):
    return key if isinstance(key, str) else json.dumps(key, separators=(",", ":"))


def _value_text(value):
    if type(value) is int:  # the common case, as json.dumps writes it
        return str(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


_loads = json.loads


def _value(text):
    """A value from its text: JSON if it is JSON (as the Python side writes), else the string."""
    if text.isdigit() and text.isascii() and (text[0] != "0" or len(text) == 1):
        return int(text)  # what json.loads would return, without its cost
    try:
        return _loads(text)
    except ValueError:
        return text


def _line(key, value):
    """The key<TAB>value line of a pair."""
    k = key if type(key) is str else _key_text(key)
    if "\\" in k or "\t" in k or "\n" in k or "\r" in k:
        k = escape(k)
    if type(value) is int:
        return k + "\t" + str(value) + "\n"
    return k + "\t" + escape(_value_text(value)) + "\n"


class _Out:
    """key<TAB>value lines on stdout, written in blocks."""

    def __init__(self, stream):
        self.stream = stream
        self.lines = []

    def write(self, key, value):
        self.lines.append(_line(key, value))
        if len(self.lines) >= 8192:
            self.flush()

    def write_pairs(self, pairs):
        """Writes many (key, value) pairs, a block at a time."""
        it = iter(pairs)
        while True:
            block = [_line(k, v) for k, v in islice(it, 16384)]
            if not block:
                return
            self.lines.extend(block)
            self.flush()

    def end_task(self, seq):
        """Writes the lines held and a session task's end line, and sends them."""
        self.lines.append(f"mapagg:end {seq}\n")
        self.flush()

    def flush(self):
        if self.lines:
            self.stream.write("".join(self.lines).encode("utf-8", "surrogateescape"))
            self.lines = []
        self.stream.flush()


# The size of the blocks read from stdin: whole lines of about this many bytes. Text splits and
# counts fastest in blocks of this order (the CPU's caches); a map_chunk gets one at a time.
_BLOCK_BYTES = 1 << 20


# map_blocks gets smaller blocks: the strings split from a block of this size and counted
# stay in the CPU's caches (a word count: 10% less CPU than with 1 MiB blocks, 16 MB of words).
_SMALL_BLOCK_BYTES = 64 << 10


def _blocks(stream, size=_BLOCK_BYTES):
    """The input as text blocks of whole lines (the last one may lack its newline)."""
    rest = b""
    while True:
        data = stream.read(size)
        if not data:
            break
        i = data.rfind(b"\n")
        if i < 0:
            rest += data
            continue
        block, rest = rest + data[: i + 1], data[i + 1 :]
        yield block.decode("utf-8", "surrogateescape")
    if rest:
        yield rest.decode("utf-8", "surrogateescape")


def _records(stream):
    """The input's lines (records), without their newlines."""
    for text in _blocks(stream):
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        yield from lines


def _pairs(stream):
    """(key, value text) of each key<TAB>value line."""
    n = 0
    for line in _records(stream):
        n += 1
        k, sep, v = line.partition("\t")
        if not sep:
            raise ProtocolError(f"input line {n} has no TAB between key and value: {line[:80]!r}")
        if v.endswith("\r"):
            v = v.rstrip("\r")
        if "\\" in k:
            k = unescape(k)
        if "\\" in v:
            v = unescape(v)
        yield k, v


class _Values(dict):
    """Values by their text, decoded once: a reduce's input repeats the same few (counts). Only
    immutable ones are kept (a reducer may change a list it gets), at most 1 << 16."""

    def __missing__(self, text):
        v = _value(text)
        if (type(v) is int or type(v) is str) and len(self) < 1 << 16:
            self[text] = v
        return v


def _groups(stream):
    """(key, values iterator) for each run of equal keys; the values decoded as they are read."""
    decode = _Values().__getitem__
    for key, group in groupby(_pairs(stream), itemgetter(0)):
        yield key, map(decode, map(itemgetter(1), group))


# In-mapper combining: values are buffered per key; when about _COMBINE_ITEMS values are held,
# each key's values are combined into one, and when the keys alone number half of that, they
# are written out.
_COMBINE_ITEMS = 1 << 20
_BATCH = 1 << 16


def _mapped(mapper, map_chunk, stream, map_blocks=None):
    """The mapper's output for the input, one iterable of pairs per block of records."""
    if map_blocks is not None:
        result = map_blocks(_blocks(stream, _SMALL_BLOCK_BYTES))
        if result is not None:
            yield result.items() if isinstance(result, Mapping) else result
        return
    if map_chunk is not None:
        for text in _blocks(stream):
            result = map_chunk(text)
            if result is None:
                continue
            yield result.items() if isinstance(result, Mapping) else result
        return
    for text in _blocks(stream):
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        yield chain.from_iterable(filter(None, map(mapper, lines)))


def _map(mapper, map_chunk, combiner, out, stream, map_blocks=None):
    if map_blocks is not None:
        result = map_blocks(_blocks(stream, _SMALL_BLOCK_BYTES))
        if isinstance(result, Mapping):  # one value a key already: nothing to combine
            out.write_pairs(result.items())
            return
        pairs = [] if result is None else [result]
        combiner_input = pairs
    else:
        combiner_input = None
    if combiner is None:
        if combiner_input is not None:
            for pairs in combiner_input:
                out.write_pairs(pairs)
            return
        for pairs in _mapped(mapper, map_chunk, stream, map_blocks):
            out.write_pairs(pairs)
        return
    buf = {}
    get = buf.get
    held = 0
    mapped = combiner_input if combiner_input is not None else _mapped(mapper, map_chunk, stream, map_blocks)
    for n, pairs in _batches(mapped):
        held += n
        for k, v in pairs:
            values = get(k)
            if values is None:
                buf[k] = [v]
            else:
                values.append(v)
        if held >= _COMBINE_ITEMS:
            _compact(buf, combiner)
            held = len(buf)
            if held >= _COMBINE_ITEMS // 2:
                out.write_pairs(_combined(buf, combiner))
                buf.clear()
                held = 0
    out.write_pairs(_combined(buf, combiner))


def _batches(iterables):
    """(length, pairs) for each iterable of pairs, one with a length whole, any other in lists of
    at most _BATCH pairs (so a generator's values are counted as they are held)."""
    for pairs in iterables:
        if hasattr(pairs, "__len__"):
            yield len(pairs), pairs
            continue
        it = iter(pairs)
        while True:
            batch = list(islice(it, _BATCH))
            if not batch:
                break
            yield len(batch), batch


def _compact(buf, combiner):
    """Combines each key's values into one."""
    for k, values in buf.items():
        if len(values) > 1:
            buf[k] = [combiner(k, values)]


def _combined(buf, combiner):
    for k, values in buf.items():
        yield k, values[0] if len(values) == 1 else combiner(k, values)


def _combine(combiner, out, stream):
    out.write_pairs((key, combiner(key, list(values))) for key, values in _groups(stream))


def _reduce(reducer, out, stream):
    for key, values in _groups(stream):
        result = reducer(key, values)
        if isinstance(result, GeneratorType):
            for k, v in result:
                out.write(k, v)
        elif result is not None:
            out.write(key, result)


class _Frames:
    """A session task's input: frames of ``<length>\n<bytes>``, ended by ``0\n``. read() returns
    at most one frame's bytes, and b"" at the end of the task's input."""

    def __init__(self, stream):
        self.stream = stream
        self.left = 0
        self.done = False

    def read(self, size=-1):
        if self.done:
            return b""
        if self.left == 0:
            line = self.stream.readline()
            try:
                n = int(line)
            except ValueError:
                raise ProtocolError(f"want a frame's length, got {line[:40]!r}") from None
            if n < 0:
                raise ProtocolError(f"a frame's length is negative: {n}")
            if n == 0:
                self.done = True
                return b""
            self.left = n
        data = self.stream.read(self.left if size is None or size < 0 else min(size, self.left))
        if not data:
            raise ProtocolError("the input ended in the middle of a frame")
        self.left -= len(data)
        return data

    def drain(self):
        while self.read(_BLOCK_BYTES):
            pass


_TASK = b"mapagg:task "
_current = ""  # the role of the task being served, for the error summary


def _serve(mapper, map_chunk, map_blocks, combiner, reducer, out, stdin, environ):
    """Serves a session's tasks until stdin ends."""
    global _current
    while True:
        line = stdin.readline()
        if not line:
            return
        if not line.startswith(_TASK):
            raise ProtocolError(f"want a task line ({_TASK.decode()}{{...}}), got {line[:80]!r}")
        t = json.loads(line[len(_TASK):])
        role = t.get("role", "")
        _current = role
        environ["MAPAGG_ROLE"] = role
        for name, field in (("MAPAGG_SHARD", "shard"), ("MAPAGG_PARTITION", "partition"), ("MAPAGG_ATTEMPT", "attempt")):
            if field in t:
                environ[name] = str(t[field])
            else:
                environ.pop(name, None)
        inp = _Frames(stdin)
        if not _task(role, mapper, map_chunk, map_blocks, combiner, reducer, out, inp):
            raise ProtocolError(f"a task of role {role!r}: want map, combine or reduce")
        inp.drain()  # a reducer may stop early: the rest of its input is read all the same
        out.end_task(t.get("seq"))


def _task(role, mapper, map_chunk, map_blocks, combiner, reducer, out, inp):
    """Runs one task of role (map, combine or reduce) over inp; False for another role."""
    if role == "map":
        _need(mapper or map_chunk or map_blocks, "mapper (nor map_chunk, map_blocks)", role)
        _map(mapper, map_chunk, combiner, out, inp, map_blocks)
    elif role == "combine":
        _need(combiner, "combiner", role)
        _combine(combiner, out, inp)
    elif role == "reduce":
        _need(reducer, "reducer", role)
        _reduce(reducer, out, inp)
    else:
        return False
    return True


def _caller_functions(depth=2):
    g = sys._getframe(depth).f_globals
    return g.get("mapper"), g.get("combiner"), g.get("reducer"), g.get("map_chunk"), g.get("map_blocks")


def run(mapper=None, reducer=None, combiner=None, argv=None, stdin=None, stdout=None, environ=None, map_chunk=None, map_blocks=None):
    """Speaks the contract with the functions given, or those named mapper, reducer, combiner,
    map_chunk and map_blocks in the calling module. Exits the process: 0 on success, 1 when a function
    raised (its traceback and a one-line summary on stderr, which the job's error quotes), 2 on
    misuse.

    map_chunk(text), if given, is used instead of mapper: it gets a block of whole lines (about
    1 MiB, the newlines kept) and returns a mapping (a collections.Counter, say) or an iterable
    of (key, value) pairs. map_blocks(blocks), if given, is used instead of both: it gets an
    iterator over all the task's blocks and returns the same (a Counter it updated with each
    block, say: the fastest word count). With a combiner, a task's pairs are combined in this process before
    they are written, whichever of the two produced them.

    Without MAPAGG_ROLE it runs the whole job locally over the files in argv (or stdin) and
    prints the output records sorted by key: a way to try a job before a cluster runs it.
    """
    if mapper is None and reducer is None and combiner is None and map_chunk is None and map_blocks is None:
        mapper, combiner, reducer, map_chunk, map_blocks = _caller_functions()
    environ = os.environ if environ is None else environ
    stdin = sys.stdin.buffer if stdin is None else stdin
    stdout = sys.stdout.buffer if stdout is None else stdout
    argv = sys.argv[1:] if argv is None else argv
    role = environ.get("MAPAGG_ROLE", "")
    out = _Out(stdout)
    try:
        if role == "describe":
            # In-mapper combining replaces a combine pass: the worker need not run one. A session
            # serves a job's tasks in one process: no start per task.
            out.stream.write(json.dumps({"combine": False, "session": True, "language": "python"}).encode() + b"\n")
        elif role == "session":
            _serve(mapper, map_chunk, map_blocks, combiner, reducer, out, stdin, environ)
        elif _task(role, mapper, map_chunk, map_blocks, combiner, reducer, out, stdin):
            pass
        elif role == "":
            _local(mapper, map_chunk, map_blocks, combiner, reducer, argv, stdin, out)
        else:
            raise _Usage(f"MAPAGG_ROLE={role!r}: want map, combine, reduce, session or describe")
        out.flush()
    except _Usage as e:
        print(f"mapagg: {e}", file=sys.stderr)
        sys.exit(2)
    except BrokenPipeError:
        sys.exit(0)  # the worker stopped reading: it says why
    except Exception as e:  # noqa: BLE001 - the job's code: report and fail the task
        import traceback  # only when it fails: a start costs less without it

        traceback.print_exc()
        print(f"mapagg: {_current or role or 'local run'} failed: {type(e).__name__}: {e}", file=sys.stderr)
        sys.stderr.flush()
        sys.exit(1)
    sys.exit(0)


class _Usage(Exception):
    pass


def _need(fn, name, role):
    if fn is None:
        raise _Usage(f"MAPAGG_ROLE={role}: this program defines no {name}")


def _local(mapper, map_chunk, map_blocks, combiner, reducer, argv, stdin, out):
    """A whole job in this process: map every line of the files, group, reduce in key order."""
    _need(mapper or map_chunk or map_blocks, "mapper (nor map_chunk, map_blocks)", "map")
    _need(reducer, "reducer", "reduce")
    streams = [open(path, "rb") for path in argv] if argv else [stdin]
    groups = {}
    for s in streams:
        for pairs in _mapped(mapper, map_chunk, s, map_blocks):
            for k, v in pairs:
                groups.setdefault(_key_text(k), []).append(json.loads(_value_text(v)))
    for key in sorted(groups, key=lambda k: k.encode("utf-8", "surrogateescape")):
        values = groups[key]
        if combiner is not None and len(values) > 1:
            values = [combiner(key, values)]
        result = reducer(key, iter(values))
        if isinstance(result, GeneratorType):
            for k, v in result:
                out.write(k, v)
        elif result is not None:
            out.write(key, result)
